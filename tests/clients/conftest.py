"""The e2e fixtures (fake upstreams, tenants, a running gateway) for the client suites."""

from tests.e2e.conftest import gateway, upstream, var_dir

__all__ = ["gateway", "upstream", "var_dir"]
