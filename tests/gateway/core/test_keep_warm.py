"""Keep-warm reads end to end on the pipeline: real admission, quotas, prompt-cache port and
autopilot, an Anthropic backend answered by the provider prompt-cache fake, an injected clock."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from redis.asyncio import Redis

from adapters.backend import BackendCall
from adapters.types import ChatRequest, ChatResponse, StreamEvent, TextPart, Usage
from adapters.wire import anthropic as anthropic_wire
from gateway.core.admission import Admission
from gateway.core.keep_warm import DOOR, KeepWarm
from gateway.core.keep_warm_latest import RedisLatestCalls
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.core.prompt_cache import PromptCachePort
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.ports import Candidate, ModelRoute
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from quotas.limits import Limits
from quotas.memory import MemoryQuotaStore
from tests.fakes.prompt_cache import Accounting, PromptCacheFake, anthropic_blocks
from tests.gateway.core.pipeline_harness import Parts

MODEL = "claude-sonnet-4-5"
PROVIDER_KEY = "sk-one-key-for-every-tenant"
SYSTEM = "You fix failing tests in a large repository." + " rule" * 1500


class Clock:
    now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class AnthropicFake:
    """An Anthropic backend whose usage is what the provider's prompt cache says."""

    name, kind, wire = "claude-api", "anthropic", "anthropic"

    def __init__(self, cache: PromptCacheFake) -> None:
        self.cache = cache
        self.max_tokens: list[int | None] = []

    async def complete(self, call: BackendCall) -> ChatResponse:
        body: dict[str, Any] = dict(call.raw_body or {})
        self.max_tokens.append(body.get("max_tokens"))
        blocks = anthropic_blocks(body, lambda t: self.cache.counter.count_text(MODEL, t))
        uncached, read, write = self.cache.account("anthropic", body, blocks[-1].end, PROVIDER_KEY)
        usage = Usage(uncached, 1, read, write)
        return ChatResponse("r1", MODEL, (TextPart("ok"),), "stop", usage)

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        raise AssertionError("this test does not stream")
        yield  # pragma: no cover

    async def aclose(self) -> None:
        return None


class WordParts(Parts):
    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        words = [p.text for m in request.messages for p in m.content if isinstance(p, TextPart)]
        return len(" ".join([*(p.text for p in request.system), *words]).split())


class World:
    """One gateway process; `of` another: a second process before the same provider."""

    def __init__(self, store: MemoryQuotaStore | None = None, of: World | None = None) -> None:
        self.clock = of.clock if of is not None else Clock()
        self.cache = of.cache if of is not None else PromptCacheFake(self.clock)
        self.backend = AnthropicFake(self.cache)
        route = ModelRoute(MODEL, (Candidate(self.backend, "claude-api", "api"),))  # type: ignore[arg-type]
        self.parts = WordParts(route)
        self.store = store or MemoryQuotaStore()
        self.prompts = PromptCachePort(
            b"secret", clock=self.clock, shared_cache_models=frozenset({MODEL})
        )
        services = PipelineParts(
            models=self.parts,
            counter=self.parts,
            pricing=self.parts,
            admission=Admission(self.store),
            prompts=self.prompts,
            routing=Fleet([route], FleetConfig(), clock=self.clock, rng=random.Random(7)),
            ledger=self.parts,
            telemetry=Telemetry(TracerProvider(), Metrics()),
            clock=self.clock,
            defer_bookkeeping=False,
        )
        self.pipeline = Pipeline(services)
        self.warm = KeepWarm(self.pipeline, self.prompts.autopilot, self.clock)
        self.thinking: dict[str, Any] | None = None
        self.pipeline.observers.append(self.warm)

    async def call(self, tenant: TenantPolicy, turns: int) -> Accounting:
        messages: list[dict[str, Any]] = []
        for t in range(turns):
            if t:
                messages.append({"role": "assistant", "content": f"Step {t} done." + " a" * 60})
            messages.append({"role": "user", "content": f"Go on with step {t}." + " b" * 80})
        body = {"model": MODEL, "max_tokens": 2048, "system": SYSTEM, "messages": messages}
        if self.thinking is not None:
            body["thinking"] = self.thinking
        request = anthropic_wire.decode_request(body)
        call = IncomingCall("anthropic", tenant, "k1", request, body, session_header="s1")
        await self.pipeline.complete(await self.pipeline.admit(call))
        return self.cache.calls[-1]

    async def paused_session(self, tenant: TenantPolicy) -> None:
        """Three calls 7 and 8 minutes apart (a session that pauses past 5 minutes)."""
        await self.call(tenant, 1)
        self.clock.now_s += 420
        await self.call(tenant, 2)
        self.clock.now_s += 480
        await self.call(tenant, 3)

    def rows(self, door: str) -> list[Any]:
        return [r for r in self.parts.rows if r.door == door]


def tenant(name: str, *, keep_warm: bool, **limits: object) -> TenantPolicy:
    cache = {"keep_warm": keep_warm, "ttl": "5m"}
    return TenantPolicy.model_validate({"tenant": name, "cache": cache, "limits": limits})


def test_a_paused_session_is_kept_warm_and_its_next_call_reads() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True)
        await w.paused_session(acme)
        w.clock.now_s += 200
        assert await w.warm.tick() == 0  # not due yet
        w.clock.now_s += 81  # 281 s: the entry expires at 300 s
        assert await w.warm.tick() == 1
        (row,) = w.rows(DOOR)
        assert row.tenant == "acme" and row.status == "ok" and row.usage.output_tokens == 1
        assert row.cost_usd > 0  # the tenant pays for it
        assert w.backend.max_tokens[-1] == 1
        assert w.cache.calls[-1].read > 0 and w.cache.calls[-1].write == 0
        prefix = w.cache.calls[-1].read
        w.clock.now_s += 170  # the next call 451 s after the last one: past 5 minutes
        after = await w.call(acme, 4)
        assert after.read == prefix
        (key,) = w.warm.sessions  # the session, noted again by its real call
        record = w.prompts.autopilot.sessions.get(*key)
        assert record is not None and record.gaps_s == (
            420.0,
            480.0,
            451.0,
        )  # the read is not one of its calls

    asyncio.run(main())


def test_with_the_switch_off_nothing_is_sent_and_the_entry_expires() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=False)
        await w.paused_session(acme)
        sent = len(w.cache.calls)
        w.clock.now_s += 281
        assert await w.warm.tick() == 0
        assert len(w.cache.calls) == sent and w.rows(DOOR) == [] and not w.warm.sessions
        w.clock.now_s += 170
        assert (await w.call(acme, 4)).read == 0

    asyncio.run(main())


def test_a_policy_reloaded_without_the_switch_stops_the_reads() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True)
        await w.paused_session(acme)
        policies = {("acme", "k1"): tenant("acme", keep_warm=False)}
        w.warm.policy_for = lambda tenant_id, key_id: policies.get((tenant_id, key_id))
        sent = len(w.cache.calls)
        w.clock.now_s += 281
        assert await w.warm.tick() == 0
        assert len(w.cache.calls) == sent and w.rows(DOOR) == []

    asyncio.run(main())


def test_sessions_with_extended_thinking_are_not_kept() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True)
        w.thinking = {"type": "enabled", "budget_tokens": 1024}
        await w.paused_session(acme)
        assert not w.warm.sessions
        w.clock.now_s += 281
        assert await w.warm.tick() == 0 and w.rows(DOOR) == []

    asyncio.run(main())


def test_a_backend_without_anthropics_cache_prices_is_not_kept() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True)
        w.backend.kind = "openai_compatible"  # no write premium: a rewrite is no dearer
        await w.paused_session(acme)
        assert not w.warm.sessions

    asyncio.run(main())


def test_a_key_that_may_no_longer_call_stops_the_reads() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True)
        await w.paused_session(acme)
        w.warm.policy_for = lambda tenant_id, key_id: None  # revoked since
        sent = len(w.cache.calls)
        w.clock.now_s += 281
        assert await w.warm.tick() == 0
        assert len(w.cache.calls) == sent and w.rows(DOOR) == []

    asyncio.run(main())


def test_one_tenants_read_never_touches_another_tenants_quota_or_ledger() -> None:
    async def main() -> None:
        w = World()
        acme, beta = tenant("acme", keep_warm=True), tenant("beta", keep_warm=False)
        await w.paused_session(acme)
        w.clock.now_s -= 900
        await w.paused_session(beta)
        limits = Limits(tokens_per_minute=10**9, requests_per_minute=10**6)
        now_ms = int(time.time() * 1000)
        before = {t: await w.store.usage(t, limits, now_ms=now_ms) for t in ("acme", "beta")}
        w.clock.now_s += 281
        assert await w.warm.tick() == 1
        after = {t: await w.store.usage(t, limits, now_ms=now_ms) for t in ("acme", "beta")}
        assert after["beta"] == before["beta"]
        assert after["acme"].requests_used == before["acme"].requests_used + 1
        assert after["acme"].tokens_used > before["acme"].tokens_used
        assert [r.tenant for r in w.rows(DOOR)] == ["acme"]

    asyncio.run(main())


def test_a_quota_that_says_no_stops_the_read() -> None:
    async def main() -> None:
        w, acme = World(), tenant("acme", keep_warm=True, requests_per_minute=3)
        await w.paused_session(acme)  # three calls within one real minute: the quota is spent
        sent = len(w.cache.calls)
        w.clock.now_s += 281
        assert await w.warm.tick() == 0
        assert len(w.cache.calls) == sent and w.rows(DOOR) == [] and not w.warm.sessions

    asyncio.run(main())


def test_with_redis_only_the_process_that_served_the_latest_call_reads(redis_url: str) -> None:
    """Two processes serve one session in turn, each ticking every 5 s. Alone, each reads for
    the call it last served (two reads in the pause, one of them needless); sharing who served
    the latest call, only that process reads."""

    async def main(shared: bool) -> tuple[int, int]:
        a = World()
        b = World(of=a)
        prefix = f"lantern:test:kw:{uuid.uuid4().hex}:"
        clients = [Redis.from_url(redis_url) for _ in (a, b)] if shared else []
        for world, client in zip((a, b), clients, strict=False):
            world.warm.latest = RedisLatestCalls(client, prefix, wall_clock=a.clock)
        acme = tenant("acme", keep_warm=True)
        start = a.clock.now_s
        calls = {0: (a, 1), 30: (b, 1), 420: (a, 2), 450: (b, 2), 840: (a, 3), 870: (b, 3)}
        for at in range(0, 870 + 340, 5):
            a.clock.now_s = start + at
            if at in calls:
                world, turns = calls[at]
                await world.call(acme, turns)
            await a.warm.tick()
            await b.warm.tick()
        for client in clients:
            await client.aclose()
        return len(a.rows(DOOR)), len(b.rows(DOOR))

    assert asyncio.run(main(shared=False)) == (1, 1)
    assert asyncio.run(main(shared=True)) == (0, 1)


def test_with_redis_unreachable_each_process_decides_alone(caplog: Any) -> None:
    async def main() -> tuple[int, int]:
        a = World()
        down = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
        a.warm.latest = RedisLatestCalls(down, "lantern:test:kw:", wall_clock=a.clock)
        await a.paused_session(tenant("acme", keep_warm=True))
        a.clock.now_s += 281
        sent = await a.warm.tick()
        await down.aclose()
        return sent, len(a.rows(DOOR))

    assert asyncio.run(main()) == (1, 1)
    assert "each process decides alone" in caplog.text
