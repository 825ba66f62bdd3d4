"""LangChain's MCP adapters (`langchain-mcp-adapters` 0.3.2, unmodified) against a real
`lantern serve`: `MultiServerMCPClient` lists the tenant's tools and calls a sandboxed one and an
upstream one, through `/mcp` with the tenant's key.

The adapters need mcp<2 and the project runs mcp 2.x, so they run as users run them: in their
own environment, `.venv-langchain` (`make install`), with `langchain_client.py` in a subprocess.
Without that environment its tests skip, or fail under CI=true (as tests/conftest.py does for
missing services).

mcp 1.x clients offer the handshake revision 2025-11-25 and accept 2024-11-05 to 2025-11-25;
Lantern (the mcp 2.x server) agrees to any of those a client asks for, checked here on the wire.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import _is_ci
from tests.e2e.harness import write_policy
from tests.mcp.harness import (
    ACME_KEY,
    GLOBEX_KEY,
    REPO,
    RUN_PYTHON,
    Gateway,
    lantern_serve,
    upstream_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
LC_PYTHON = REPO / ".venv-langchain" / "bin" / "python"
CLIENT = Path(__file__).with_name("langchain_client.py")


@pytest.fixture(scope="module")
def langchain_python() -> Path:
    if LC_PYTHON.exists():
        return LC_PYTHON
    message = f"{LC_PYTHON} is missing: `make install` builds it"
    if _is_ci():
        pytest.fail(message + " (CI=true: the LangChain client is required)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    var_dir = tmp_path_factory.mktemp("langchain")
    (var_dir / "policies").mkdir()
    write_policy(var_dir / "policies", "acme", ACME_KEY, tools=[RUN_PYTHON], mcp_servers=["orders"])
    write_policy(var_dir / "policies", "globex", GLOBEX_KEY)
    with upstream_server(var_dir, "orders") as orders:
        servers = [{"name": "orders", "url": orders.url, "timeout_s": 10}]
        with lantern_serve(var_dir, mcp_servers=servers) as gw:
            yield gw


def run_client(python: Path, url: str, key: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [str(python), str(CLIENT), url, key],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},  # nothing of the project's environment leaks in
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return proc.returncode, json.loads(lines[-1])


def test_langchain_lists_and_calls_the_tenants_tools(
    gateway: Gateway, langchain_python: Path
) -> None:
    rc, out = run_client(langchain_python, gateway.mcp_url, ACME_KEY)
    assert rc == 0, out
    assert out == {
        "tools": ["run_python", "orders__lookup_order", "orders__cancel_order"],
        "results": {
            "run_python": "42\n",
            "orders__lookup_order": "order A-17: shipped, 2 items",
        },
        "protocol_version": "2025-11-25",  # mcp 1.x's newest revision, which Lantern serves
    }


def test_langchain_with_a_wrong_key_is_refused(gateway: Gateway, langchain_python: Path) -> None:
    rc, out = run_client(langchain_python, gateway.mcp_url, "lt-wrong-key")
    assert rc == 1
    assert out["message"].startswith("HTTPStatusError: Client error '401 Unauthorized'"), out


def test_langchain_sees_only_its_tenants_tools(gateway: Gateway, langchain_python: Path) -> None:
    """globex has neither the sandboxed tool nor the upstream server."""
    rc, out = run_client(langchain_python, gateway.mcp_url, GLOBEX_KEY)
    assert (rc, out["tools"], out["results"]) == (0, [], {}), out


@pytest.mark.parametrize("revision", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_older_handshake_revisions_are_served(gateway: Gateway, revision: str) -> None:
    """Every revision an mcp 1.x client may ask for is agreed to, and then served."""
    reply = _post(gateway, _init(revision), None, None)
    assert _result(reply)["protocolVersion"] == revision
    session = reply.headers["mcp-session-id"]
    _post(gateway, {"jsonrpc": "2.0", "method": "notifications/initialized"}, revision, session)
    listed = _post(gateway, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, revision, session)
    assert [t["name"] for t in _result(listed)["tools"]] == [
        "run_python",
        "orders__lookup_order",
        "orders__cancel_order",
    ]


def test_an_unknown_revision_gets_the_newest_handshake_one(gateway: Gateway) -> None:
    """The spec's counter-offer: a revision the server does not know is answered with its own."""
    reply = _post(gateway, _init("2024-01-01"), None, None)
    assert _result(reply)["protocolVersion"] == "2025-11-25"


def _init(revision: str) -> dict[str, Any]:
    params = {
        "protocolVersion": revision,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def _post(
    gateway: Gateway, body: dict[str, Any], revision: str | None, session: str | None
) -> httpx.Response:
    headers = {
        "accept": "application/json, text/event-stream",
        "authorization": f"Bearer {ACME_KEY}",
    }
    if revision and revision >= "2025-06-18":  # the header came with that revision
        headers["mcp-protocol-version"] = revision
    if session:
        headers["mcp-session-id"] = session
    reply = httpx.post(gateway.mcp_url, json=body, headers=headers, timeout=60)
    assert reply.status_code in (200, 202), reply.text
    return reply


def _result(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of an SSE reply (one `message` event, after the priming event a
    2025-11-25 session's reply opens with: an id and no data)."""
    lines = reply.text.splitlines()
    data = next(line[6:] for line in lines if line.startswith("data: ") and line[6:])
    return dict(json.loads(data)["result"])
