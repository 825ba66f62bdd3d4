"""Two tenants and four upstream servers (healthy, slow, garbage, down) behind one real
`lantern serve`: each fault stays with its server, sessions stay with their key, a retry
replays, a policy change is announced and appended (to the tenant's listeners on the 2026 wire,
and only to them), limits answer with a retry hint."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from bench._procs import free_port
from gateway.mcp.errors import LIMITED, UPSTREAM_FAILED
from tests.e2e.harness import write_policy
from tests.mcp.clients import mcp_client
from tests.mcp.harness import (
    ACME_KEY,
    GLOBEX_KEY,
    INITIALIZE,
    RUN_PYTHON,
    Gateway,
    lantern_serve,
    upstream_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
ACME_SECOND_KEY = "lt-acme-mcp-key-000000000000000000000009"
ECHO = {"name": "echo", "command": ["/bin/echo", "{text}"], "limits": {"wall_s": 20}}
GRANTS = ["orders", "slow", "garbage", "down", "flaky"]
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LISTENS = 2  # listen streams per tenant


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    var_dir = tmp_path_factory.mktemp("mcp-adversarial")
    (var_dir / "policies").mkdir()
    acme_policy(var_dir, tools=[RUN_PYTHON], mcp_servers=GRANTS)
    write_policy(
        var_dir / "policies",
        "globex",
        GLOBEX_KEY,
        tools=[ECHO],
        mcp_servers=[{"name": "orders", "deny": ["cancel_order"]}],
        limits={"tool_calls_per_minute": 2},
    )
    with ExitStack() as stack:
        orders = stack.enter_context(upstream_server(var_dir, "orders"))
        slow = stack.enter_context(upstream_server(var_dir, "slow", "slow"))
        garbage = stack.enter_context(upstream_server(var_dir, "garbage", "garbage"))
        flaky = stack.enter_context(upstream_server(var_dir, "flaky"))
        servers = [
            {"name": "orders", "url": orders.url, "timeout_s": 10},
            {"name": "slow", "url": slow.url, "timeout_s": 2},
            {"name": "garbage", "url": garbage.url, "timeout_s": 5},
            {"name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5},
            {"name": "flaky", "url": flaky.url, "timeout_s": 5},
        ]
        mcp = {"max_listens_per_tenant": LISTENS}
        gateway = stack.enter_context(lantern_serve(var_dir, mcp_servers=servers, mcp=mcp))
        gateway.upstreams = {"flaky": flaky}
        yield gateway


def acme_policy(var_dir: Path, **fields: Any) -> None:
    """acme with two keys (the second for the session-binding check)."""
    path = write_policy(var_dir / "policies", "acme", ACME_KEY, **fields)
    doc = yaml.safe_load(path.read_text())
    second = hashlib.sha256(ACME_SECOND_KEY.encode()).hexdigest()
    doc["api_keys"].append({"id": "k2", "sha256": second})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.rename(path)


def test_each_upstream_fault_names_its_server_and_stays_there(gateway: Gateway) -> None:
    async def check() -> None:
        async with mcp_client(gateway.mcp_url, ACME_KEY) as acme:
            names = [t.name for t in (await acme.list_tools()).tools]
            assert names == [
                "run_python",
                *(
                    f"{server}__{tool}"
                    for server in ("orders", "slow", "garbage", "flaky")
                    for tool in ("lookup_order", "cancel_order")
                ),
            ]  # `down` never answered its listing: nothing of it is served
            gateway.upstreams["flaky"].proc.kill()
            gateway.upstreams["flaky"].proc.wait()
            faults = {}
            for server in ("slow", "garbage", "flaky"):
                with pytest.raises(MCPError) as failed:
                    await acme.call_tool(f"{server}__lookup_order", {"order_id": "1"})
                assert failed.value.code == UPSTREAM_FAILED
                assert f"'{server}'" in failed.value.message
                faults[server] = failed.value.data
            assert faults == {
                "slow": {"server": "slow", "reason": "timed_out"},
                "garbage": {"server": "garbage", "reason": "invalid_reply"},
                "flaky": {"server": "flaky", "reason": "unreachable"},
            }
            ok = await acme.call_tool("orders__lookup_order", {"order_id": "2"})
            assert ok.content[0].text == "order 2: shipped, 2 items"
            cancelled = await acme.call_tool("slow__cancel_order", {"order_id": "3"})
            assert cancelled.content[0].text == "order 3: cancelled"  # reconnected after it

    asyncio.run(check())


def test_another_key_cannot_use_a_session(gateway: Gateway) -> None:
    session = _initialize(gateway, ACME_KEY)
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for key, status in ((GLOBEX_KEY, 404), (ACME_SECOND_KEY, 404), (ACME_KEY, 200)):
        reply = _post(gateway, key, body, session)
        assert reply.status_code == status, (key, reply.text)
    assert "run_python" in reply.text


def test_a_retried_call_replays_the_first_run(gateway: Gateway) -> None:
    session = _initialize(gateway, ACME_KEY)
    code = "import random; print(random.random())"
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": code}},
    }
    first, again = (_post(gateway, ACME_KEY, call, session) for _ in range(2))
    assert first.status_code == again.status_code == 200
    assert _result(first) == _result(again)  # the same run, not a second one
    other = _post(gateway, ACME_KEY, {**call, "id": 8}, session)
    assert _result(other)["structuredContent"]["id"] != _result(first)["structuredContent"]["id"]


def test_globex_sees_its_own_tools_and_limits(gateway: Gateway) -> None:
    async def check() -> None:
        async with mcp_client(gateway.mcp_url, GLOBEX_KEY) as globex:
            names = [t.name for t in (await globex.list_tools()).tools]
            assert names == ["echo", "orders__lookup_order"]  # cancel_order denied
            with pytest.raises(MCPError):
                await globex.call_tool("orders__cancel_order", {"order_id": "1"})
            with pytest.raises(MCPError):
                await globex.call_tool("run_python", {"code": "print(1)"})
            answers = [await globex.call_tool("echo", {"text": "hi"}) for _ in range(2)]
            assert [a.content[0].text for a in answers] == ["hi\n", "hi\n"]
            with pytest.raises(MCPError) as limited:
                await globex.call_tool("echo", {"text": "third"})
            assert limited.value.code == LIMITED
            assert limited.value.data["rule"] == "limits.tool_calls_per_minute"
            assert 1 <= limited.value.data["retry_after_s"] <= 60

    asyncio.run(check())


def test_a_new_tool_is_announced_and_appended(gateway: Gateway) -> None:
    async def check() -> None:
        told = asyncio.Event()

        async def on_message(message: Any) -> None:
            method = getattr(getattr(message, "root", message), "method", None)
            if method == "notifications/tools/list_changed":
                told.set()

        async with mcp_client(gateway.mcp_url, ACME_KEY, "legacy", on_message) as acme:
            before = [t.name for t in (await acme.list_tools()).tools]
            tools = [RUN_PYTHON, {**ECHO, "name": "a_first_by_name"}]
            acme_policy(gateway.var_dir, tools=tools, mcp_servers=GRANTS)
            await asyncio.wait_for(told.wait(), 10)
            after = [t.name for t in (await acme.list_tools()).tools]
        assert after == [*before, "a_first_by_name"]

    asyncio.run(check())


def test_listeners_on_the_2026_wire_hear_their_own_tenants_changes_only(gateway: Gateway) -> None:
    """`subscriptions/listen`: acme's listener is told when acme's list changes and relists the
    new tool; globex's, open all along, hears nothing of it. A tenant holds at most `LISTENS`
    streams (the next is refused before its acknowledgement, another tenant's is not), and a
    stream that ends gives its slot back."""
    policy = gateway.var_dir / "policies" / "acme.yaml"
    saved = policy.read_text()

    async def first_event(sub: Any, timeout_s: float) -> object:
        return await asyncio.wait_for(anext(aiter(sub)), timeout_s)

    async def check() -> None:
        url = gateway.mcp_url
        async with (
            mcp_client(url, ACME_KEY) as acme,
            mcp_client(url, GLOBEX_KEY) as globex,
            acme.listen(tools_list_changed=True) as heard,
            globex.listen(tools_list_changed=True) as other,
        ):
            assert heard.honored.tools_list_changed and other.honored.tools_list_changed
            before = [t.name for t in (await acme.list_tools()).tools]
            doc = yaml.safe_load(saved)
            doc["tools"] = [*doc["tools"], {**ECHO, "name": "b_heard_by_listeners"}]
            tmp = policy.with_suffix(".tmp")
            tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
            tmp.rename(policy)
            assert await first_event(heard, 10) == ToolsListChanged()
            after = [t.name for t in (await acme.list_tools()).tools]
            assert after == [*before, "b_heard_by_listeners"]
            with pytest.raises(TimeoutError):  # two more checks of the lists: nothing for globex
                await first_event(other, 2.5)
        async with mcp_client(url, ACME_KEY) as acme, mcp_client(url, GLOBEX_KEY) as globex:
            async with AsyncExitStack() as held:
                for _ in range(LISTENS):
                    await listen_when_free(held, acme)  # the first block's stream may linger
                with pytest.raises(MCPError, match="listen streams"):
                    async with acme.listen(tools_list_changed=True):
                        pass
                async with globex.listen(tools_list_changed=True) as neighbour:
                    assert neighbour.honored.tools_list_changed
            async with AsyncExitStack() as again:  # the slots come back
                assert (await listen_when_free(again, acme)).honored.tools_list_changed

    try:
        asyncio.run(check())
    finally:
        tmp = policy.with_suffix(".tmp")
        tmp.write_text(saved)
        tmp.rename(policy)


def test_a_revoked_keys_streams_end_and_its_tenants_other_key_goes_on(gateway: Gateway) -> None:
    """acme's second key is taken out of its policy while it holds a handshake-era session (its
    GET stream open) and a listen stream on the 2026 wire: both end within a few checks (the
    session's GET stream closes, the listen ends with its result, the spec's graceful close),
    the key's next request is 401, and acme's first key's listen stream, open all along, goes
    on."""
    policy = gateway.var_dir / "policies" / "acme.yaml"
    saved = policy.read_text()
    second = {"authorization": f"Bearer {ACME_SECOND_KEY}", "mcp-protocol-version": "2025-11-25"}

    async def ended(stream: httpx.Response) -> bytes:
        return b"".join([chunk async for chunk in stream.aiter_bytes()])

    async def check() -> None:
        url = gateway.mcp_url
        session = await asyncio.to_thread(_initialize, gateway, ACME_SECOND_KEY)
        get = {**second, "accept": "text/event-stream", "mcp-session-id": session}
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("GET", url, headers=get) as get_stream,
            mcp_client(url, ACME_KEY) as first,
            mcp_client(url, ACME_SECOND_KEY) as revoked_client,
            AsyncExitStack() as held,
        ):
            assert get_stream.status_code == 200
            kept = await listen_when_free(held, first)
            revoked = await listen_when_free(held, revoked_client)
            doc = yaml.safe_load(saved)  # the same tools: only k2 is gone from it
            doc["api_keys"] = [k for k in doc["api_keys"] if k["id"] != "k2"]
            tmp = policy.with_suffix(".tmp")
            tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
            tmp.rename(policy)

            async def rest(sub: Any) -> list[object]:
                return [event async for event in sub]

            assert await asyncio.wait_for(rest(revoked), 10) == []  # ended gracefully
            await asyncio.wait_for(ended(get_stream), 10)
            # the tenant's other key still listens two checks later (it may hear a change: the
            # policy the test before restored can reach this process after this stream opened)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2.5):
                    async for _ in kept:
                        pass
            listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
            refused = await http.post(url, json=listing, headers={**HEADERS, **get})
            assert refused.status_code == 401

    try:
        asyncio.run(asyncio.wait_for(check(), 60))
    finally:
        tmp = policy.with_suffix(".tmp")
        tmp.write_text(saved)
        tmp.rename(policy)


async def listen_when_free(stack: AsyncExitStack, client: Any) -> Any:
    """A listen entered on `stack`, tried again while the tenant's slots are full: the gateway
    learns that a client closed a stream only when its request is torn down, a moment after."""
    for _ in range(50):
        try:
            return await stack.enter_async_context(client.listen(tools_list_changed=True))
        except MCPError as exc:
            if "listen streams" not in str(exc):
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("a closed listen stream never gave its slot back")


def _initialize(gateway: Gateway, key: str) -> str:
    reply = _post(gateway, key, INITIALIZE, None)
    session = reply.headers["mcp-session-id"]
    _post(gateway, key, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return session


def _post(gateway: Gateway, key: str, body: dict[str, Any], session: str | None) -> httpx.Response:
    headers = {**HEADERS, "authorization": f"Bearer {key}", "mcp-protocol-version": "2025-11-25"}
    if session:
        headers["mcp-session-id"] = session
    return httpx.post(gateway.mcp_url, json=body, headers=headers, timeout=60)


def _result(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of an SSE reply (one `message` event, after the priming event a
    2025-11-25 session's reply opens with: an id and no data)."""
    lines = reply.text.splitlines()
    data = next(line[6:] for line in lines if line.startswith("data: ") and line[6:])
    return dict(yaml.safe_load(data)["result"])
