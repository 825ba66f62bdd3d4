"""Every reservation is released or settled on every path: random batches of concurrent calls
that succeed or fail in every way (upstream 400, 5xx, connect error, timeout, no route, an
exception between reserve and dispatch, a gateway-side exception, a client that goes away
mid-call or mid-stream) leave the tenant's concurrency and held dollars at zero, its token
window at exactly what was billed, and the fleet's in-flight counters at zero. Run against the
memory quota store and the real Redis store."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.errors import UpstreamError
from gateway.core.pipeline import IncomingCall
from gateway.errors import RequestRejected
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from quotas.limits import Limits
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore
from routing.types import NoRouteAvailable
from tests.gateway.core.pipeline_harness import OUTPUT_TOKENS, Harness, build
from tests.quotas.conftest import delete_prefix

KINDS = (
    "ok",
    "upstream_400",
    "upstream_5xx",
    "connect",
    "timeout",
    "gateway",
    "disconnect",
    "mid_stream_5xx",
    "observe_error",
    "no_route",
    "bad_identifier",
)
LIMITS = LimitsPolicy(
    tokens_per_minute=10**9, concurrent_requests=10**6, max_output_tokens=10, lease_s=900
)


def tenants(tenant_id: str) -> tuple[TenantPolicy, TenantPolicy]:
    """The tenant, and the same tenant under a venue its only (self-hosted) model cannot
    serve: its calls are admitted, then find no route."""
    serving = TenantPolicy(tenant=tenant_id, limits=LIMITS)
    stranded = TenantPolicy(
        tenant=tenant_id,
        limits=LIMITS,
        routing=RoutingPolicy(venue="api_only"),  # type: ignore[arg-type]
    )
    return serving, stranded


PROMPT_TOKENS = 3  # "call <n> kind:<kind>", one token a word (Parts.count_prompt)


def billed(kind: str, stream: bool) -> int:
    """Tokens the tenant must end up charged for: what the backend produced before the end."""
    if kind == "ok":
        return PROMPT_TOKENS + OUTPUT_TOKENS
    if kind == "disconnect":  # a stream saw one text delta; a cut-short call paid its prompt
        return PROMPT_TOKENS + 1 if stream else PROMPT_TOKENS
    if kind == "mid_stream_5xx" and stream:
        return PROMPT_TOKENS + 1
    return 0


async def one_call(h: Harness, call: IncomingCall, kind: str) -> None:
    """Drive one call the way a client would."""
    adm = await h.pipeline.admit(call)
    if call.request.stream:
        events = h.pipeline.stream(adm)
        seen = 0
        async for _ in events:
            seen += 1
            if kind == "disconnect" and seen == 2:
                await events.aclose()  # the client pressed stop after the first text delta
                return
        return
    task = asyncio.ensure_future(h.pipeline.complete(adm))
    if kind == "disconnect":
        await h.backend.hanging[call.request.messages[-1].content[0].text].wait()  # type: ignore[union-attr]
        task.cancel()  # the client went away while the backend was working
    await task


async def drive(h: Harness, tenant_id: str, plan: list[tuple[str, bool]]) -> None:
    serving, stranded = tenants(tenant_id)

    async def run(n: int, kind: str, stream: bool) -> None:
        tenant = stranded if kind == "no_route" else serving
        try:
            call = h.call(tenant, f"call {n} kind:{kind}", stream=stream)
            if kind == "bad_identifier":
                call = IncomingCall(call.wire, tenant, "k1", call.request, call.body, "bad\nid")
            await one_call(h, call, kind)
        except (UpstreamError, NoRouteAvailable, RequestRejected, ValueError, RuntimeError):
            pass
        except asyncio.CancelledError:
            assert kind == "disconnect"

    await asyncio.gather(*(run(n, kind, stream) for n, (kind, stream) in enumerate(plan)))


async def check(store: QuotaStore, tenant_id: str, plan: list[tuple[str, bool]]) -> None:
    h = build(store, failures_to_drain=10**9)  # no drain: every call in the batch is served
    await drive(h, tenant_id, plan)
    limits = Limits(tokens_per_minute=10**9, concurrent_requests=10**6)
    use = await store.usage(tenant_id, limits, now_ms=int(time.time() * 1000))
    assert (use.concurrent, use.held_micro_usd) == (0, 0)
    assert use.tokens_used == sum(billed(kind, stream) for kind, stream in plan)
    replica = h.replica()
    assert (replica.inflight_requests, replica.inflight_tokens, replica.inflight_blocks) == (
        0,
        0,
        0,
    )
    # one ledger row per call that was dispatched, with the status of how it ended
    statuses = Counter(row.status for row in h.parts.rows)
    dispatched = [k for k, _ in plan if k not in ("no_route", "observe_error", "bad_identifier")]
    assert sum(statuses.values()) == len(dispatched)
    assert statuses["ok"] == dispatched.count("ok")
    assert statuses["client_disconnect"] == dispatched.count("disconnect")


PLANS = st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), min_size=1, max_size=24)


@settings(max_examples=60, deadline=None)
@given(plan=PLANS)
def test_memory_store_every_path_releases(plan: list[tuple[str, bool]]) -> None:
    asyncio.run(check(MemoryQuotaStore(), "acme", plan))


@pytest.mark.redis
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=PLANS)
def test_redis_store_every_path_releases(
    redis_url: str, redis_prefix: str, plan: list[tuple[str, bool]]
) -> None:
    prefix = f"{redis_prefix}{uuid.uuid4().hex[:8]}:"

    async def main() -> None:
        store = RedisQuotaStore.from_url(redis_url, key_prefix=prefix)
        try:
            await check(store, "acme", plan)
        finally:
            await store.close()

    try:
        asyncio.run(main())
    finally:
        delete_prefix(redis_url, prefix)


class SlowSettle(MemoryQuotaStore):
    """A store whose settle suspends (as a Redis round trip does) until `proceed` is set."""

    settles_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.settling = asyncio.Event()
        self.proceed = asyncio.Event()

    async def settle(self, *args: Any, **kwargs: Any) -> Any:
        self.settling.set()
        await self.proceed.wait()
        return await super().settle(*args, **kwargs)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_while_a_served_call_settles_still_gets_its_row(stream: bool) -> None:
    """The reply is out (a stream's end event sent; a reply read from the backend) and the
    client goes while the settle waits on its store: the call is settled, its ledger row
    written and its replica's load released all the same."""

    async def main() -> None:
        store = SlowSettle()
        h = build(store)
        serving, _ = tenants("acme")
        adm = await h.pipeline.admit(h.call(serving, "call 0 kind:ok", stream=stream))

        async def client() -> None:
            if stream:
                async for _ in h.pipeline.stream(adm):
                    pass
            else:
                await h.pipeline.complete(adm)

        task = asyncio.ensure_future(client())
        await store.settling.wait()
        task.cancel()  # the client went away while the settle was on its way
        with pytest.raises(asyncio.CancelledError):
            await task
        store.proceed.set()
        await asyncio.sleep(0)  # the shielded settle finishes in its own task
        h.pipeline.after_reply.flush()
        limits = Limits(tokens_per_minute=10**9, concurrent_requests=10**6)
        use = await store.usage("acme", limits, now_ms=int(time.time() * 1000))
        assert (use.concurrent, use.tokens_used) == (0, billed("ok", stream))
        assert [row.status for row in h.parts.rows] == ["ok"]
        assert h.replica().inflight_requests == 0

    asyncio.run(main())
