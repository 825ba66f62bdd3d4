"""The e2e fixtures (a fresh fake upstream, tenant and gateway per test) for the Responses-door
clients, whose ledger checks count rows from an empty database."""

from tests.e2e.conftest import gateway, upstream, var_dir

__all__ = ["gateway", "upstream", "var_dir"]
