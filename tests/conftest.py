"""Shared fixtures: the real Redis and PostgreSQL of this machine.

With CI=true (set by `.ci/run`) a missing service fails the test instead of skipping it,
so a green CI always means the real service was exercised.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_URL = os.environ.get("LANTERN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "LANTERN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _is_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _require_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if _is_ci():
        pytest.fail(message + " (CI=true: services are required)")
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _sse_not_exiting() -> None:
    """sse_starlette (the MCP SDK's SSE replies) keeps one process-wide "the server is exiting"
    flag, which any uvicorn `Server.handle_exit` in the process sets (tests that drive a
    server's shutdown do) and nothing resets: every later in-process SSE reply would end at
    once, empty. Each test starts without it, as each process of a real gateway does."""
    sse = sys.modules.get("sse_starlette.sse")
    if sse is not None:
        sse.AppStatus.should_exit = False


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis URL plus a unique key prefix is the test's own namespace (see `redis_prefix`)."""
    _require_service("Redis", "127.0.0.1", 6379)
    yield REDIS_URL


@pytest.fixture
def redis_prefix() -> str:
    return f"lantern-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema per test, dropped afterwards."""
    _require_service("PostgreSQL", "127.0.0.1", 5432)
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


# The whole-system suites: every test in these folders starts processes (the gateway, engines,
# fakes), a browser or an agent framework. `make test-fast` (`-m "not slow"`) skips them.
SLOW_FOLDERS = ("e2e", "browser", "clients", "bench", "adversarial", "deploy")
# Modules and tests of the unit folders that start processes or run long.
SLOW_TESTS = (
    "adapters/test_fake_upstream.py",
    "adapters/test_litellm_backend.py",
    "adapters/test_pricing.py::test_the_cost_map_is_litellms_own_without_importing_litellm",
    "adapters/test_tokens.py::test_bundled_files_work_without_a_cache_dir_set",
    "cachekeys/test_gateway_e2e.py",
    "cachekeys/test_relocation_e2e.py",
    "cachekeys/test_learning_e2e.py",
    "gateway/cli/test_cli.py::test_policy_check_as_a_subprocess",
    "gateway/core/test_translation.py::test_litellm_refuses_what_its_provider_does_not_take",
    "gateway/core/test_translation.py::test_litellm_passes_what_its_provider_takes_and_what_only_describes_the_call",
    "gateway/core/test_translation.py::test_an_anthropic_client_through_litellm_keeps_no_field_silently",
    "gateway/core/test_translation.py::test_litellm_takes_an_anthropic_output_format_only_where_its_provider_takes_one",
    "gateway/core/test_translation.py::test_litellm_refuses_the_anthropic_fields_its_provider_cannot_take",
    "gateway/ledger/test_ledger_recorder.py::test_spool_survives_a_killed_process",
    "gateway/ledger/test_ledger_spool.py::test_a_failed_append_leaves_no_half_line_behind",
    "mcp/test_framework_clients.py",
    "mcp/test_langchain_client.py",
    "mcp/test_mcp_adversarial.py",
    "mcp/test_mcp_door_e2e.py",
    "mcp/test_stream_resume_e2e.py",
    "quotas/test_quota_http.py",
    "quotas/test_quota_processes.py",
    "sandbox/test_gateway_tools_e2e.py",
    "sandbox/test_idempotency_processes.py",
    "sandbox/test_local_runner.py",
    "sandbox/test_run_limits.py",
    "selfhost/engine/test_engine_vs_hf.py",
    "selfhost/engine/test_step_failures.py",
    "selfhost/engine/test_tenants.py",
    "selfhost/model/test_loader.py",
    "selfhost/model/test_tokenizer.py",
    "selfhost/model/test_tokenizer_card.py::test_local_count_equals_the_engine_count",
    "selfhost/kernels",
    "selfhost/serve/test_server.py",
    "selfhost/structured/test_grammar_fuzz.py",
    "selfhost/structured/test_mixed_batch.py",
    "selfhost/structured/test_structured.py",
)
_TESTS = Path(__file__).parent


def _is_slow(nodeid_in_tests: str) -> bool:
    if nodeid_in_tests.split("/", 1)[0] in SLOW_FOLDERS:
        return True
    return any(
        nodeid_in_tests == slow or nodeid_in_tests.startswith((slow + "/", slow + "::"))
        for slow in SLOW_TESTS
    )


def _skips_slow(config: pytest.Config) -> bool:
    return str(config.getoption("markexpr", "")).replace(" ", "") == "notslow"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast lane does not even import the slow modules (their imports alone take seconds)."""
    if not _skips_slow(config) or not collection_path.is_relative_to(_TESTS):
        return None
    return True if _is_slow(collection_path.relative_to(_TESTS).as_posix()) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_TESTS):
            where = item.path.relative_to(_TESTS).as_posix()
            test = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else ""
            if _is_slow(where) or _is_slow(f"{where}::{test.split('[')[0]}"):
                item.add_marker(pytest.mark.slow)
