"""One tenant filling a shared table leaves another tenant's entries alone: stored responses
(in process and in Redis, real gateway, `responses.max_entries: 50`, and by bytes,
`responses.max_bytes`), the keep-warm sessions
(the pipeline with the provider prompt-cache fake), the cache diagnosis's and the autopilot's
session records, thread links and head texts (the prompt port), the token ids memo and the
fleet's shared-affinity reads."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.wire import anthropic as anthropic_wire
from gateway.core.cache_learning import HeadTexts
from gateway.core.keep_warm import KeepWarm
from gateway.core.pipeline import IncomingCall
from gateway.core.prompt_cache import PromptCachePort
from gateway.core.prompt_prepare import TiktokenEncoder
from gateway.core.token_count import TiktokenCounting
from gateway.fleet.affinity_store import Placement, RedisAffinity
from gateway.fleet.affinity_sync import SharedAffinity
from gateway.fleet.shared_link import SharedLink
from gateway.ports import CacheVerdict
from tests.cachekeys.test_gateway_prompt_cache import ENCODER, SECRET, Clock, anthropic_body
from tests.cachekeys.test_gateway_prompt_cache import prepare as prepare_prompt
from tests.cachekeys.test_gateway_prompt_cache import tenant as cache_tenant
from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream
from tests.gateway.core.test_keep_warm import MODEL, SYSTEM, World, tenant
from tests.quotas.conftest import delete_prefix

MAX_ENTRIES = 50


@contextmanager
def two_tenants(
    request: pytest.FixtureRequest, tmp_path: Path, responses: dict[str, int], tag: str
) -> Iterator[tuple[RunningGateway, dict[str, str]]]:
    """Two tenants (names unique to the run: the Redis store is the machine's) of a gateway
    whose Responses store is `responses`, in process or in Redis (the fixture's param)."""
    run = uuid.uuid4().hex[:8]
    keys = {f"acme-{run}": f"lt-acme-{run}-{tag}-01", f"globex-{run}": f"lt-globex-{run}-{tag}"}
    (tmp_path / "policies").mkdir()
    for name, key in keys.items():
        write_policy(tmp_path / "policies", name, key, models=["gpt-4o-mini"])
    extra: dict[str, Any] = {"responses": responses}
    if request.param == "redis":
        request.getfixturevalue("redis_url")  # skips without a Redis server
        extra["redis_url"] = "redis://127.0.0.1:6379/0"
    with FakeUpstream() as upstream:
        config = write_config(
            tmp_path / "lantern.yaml", tmp_path, models_for(upstream)[:1], **extra
        )
        running = start_gateway(config)
        try:
            yield running, keys
        finally:
            running.stop()


@pytest.fixture(params=["memory", "redis"])
def gateway(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RunningGateway, dict[str, str]]]:
    """Two tenants; stores of 50 entries."""
    with two_tenants(request, tmp_path, {"max_entries": MAX_ENTRIES}, "key") as running:
        yield running


def store(client: httpx.Client, key: str, text: str) -> str:
    body = {"model": "gpt-4o-mini", "input": text, "max_output_tokens": 8}
    reply = client.post("/v1/responses", json=body, headers={"authorization": f"Bearer {key}"})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["id"])


def test_one_tenant_storing_past_the_bound_keeps_the_others_responses(
    gateway: tuple[RunningGateway, dict[str, str]],
) -> None:
    running, keys = gateway
    acme, globex = keys.values()
    with httpx.Client(base_url=running.url, timeout=30) as client:
        kept = store(client, acme, "remember me")
        burst = [store(client, globex, f"filler {n}") for n in range(MAX_ENTRIES + 10)]

        def found(key: str, response_id: str) -> int:
            auth = {"authorization": f"Bearer {key}"}
            return client.get(f"/v1/responses/{response_id}", headers=auth).status_code

        assert found(acme, kept) == 200  # globex's 60 evicted none of acme's
        assert [found(globex, r) for r in burst[:10]] == [404] * 10  # its own oldest went
        # its newest 49 stay (in process acme's one counts against the 50 in all; Redis: 50)
        assert [found(globex, r) for r in burst[11:]] == [200] * (MAX_ENTRIES - 1)
        for response_id in burst[10:]:  # the machine's Redis is shared: leave nothing
            client.delete(
                f"/v1/responses/{response_id}", headers={"authorization": f"Bearer {globex}"}
            )
        client.delete(f"/v1/responses/{kept}", headers={"authorization": f"Bearer {acme}"})


MAX_BYTES = 1_800_000
TURN_TEXT = "lantern " * 25_000  # 200 KB a turn: a chain's stored conversations grow by it


@pytest.fixture(params=["memory", "redis"])
def byte_bound(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RunningGateway, dict[str, str]]]:
    """Two tenants; stores bounded to 1.8 MB, in all in process, per tenant in Redis (10,000
    entries: never the bound)."""
    with two_tenants(request, tmp_path, {"max_bytes": MAX_BYTES}, "bytes") as running:
        yield running


def test_a_chain_of_long_turns_is_held_to_the_stores_bytes(
    byte_bound: tuple[RunningGateway, dict[str, str]],
) -> None:
    """Each stored response holds its whole conversation: six turns of 200 KB are 4.2 MB kept
    (200 KB + 400 KB + ... + 1.2 MB) under six entries. Past the bytes, the tenant holding the
    most loses its oldest: globex keeps its newest turn (the one it continues from), and acme's
    response stays."""
    running, keys = byte_bound
    acme_key, globex_key = keys.values()
    with httpx.Client(base_url=running.url, timeout=60) as client:
        kept = store(client, acme_key, "remember me")
        auth = {"authorization": f"Bearer {globex_key}"}
        chain: list[str] = []
        for _ in range(6):
            body = {"model": "gpt-4o-mini", "input": TURN_TEXT, "max_output_tokens": 8}
            if chain:
                body["previous_response_id"] = chain[-1]
            reply = client.post("/v1/responses", json=body, headers=auth)
            assert reply.status_code == 200, reply.text
            chain.append(reply.json()["id"])
        found = [client.get(f"/v1/responses/{r}", headers=auth).status_code for r in chain]
        assert found == [404] * 5 + [200]
        acme = {"authorization": f"Bearer {acme_key}"}
        assert client.get(f"/v1/responses/{kept}", headers=acme).status_code == 200
        more = {"model": "gpt-4o-mini", "input": "go on", "previous_response_id": chain[-1]}
        went_on = client.post("/v1/responses", json=more, headers=auth)
        assert went_on.status_code == 200
        for response_id in (chain[-1], went_on.json()["id"]):  # the machine's Redis is shared
            client.delete(f"/v1/responses/{response_id}", headers=auth)
        client.delete(f"/v1/responses/{kept}", headers=acme)


async def session_call(world: World, name: str, first: str) -> None:
    """A session of its own (its root: the first user message) of tenant `name`."""
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": first + " b" * 80}],
    }
    call = IncomingCall(
        "anthropic",
        tenant(name, keep_warm=True),
        "k1",
        anthropic_wire.decode_request(body),
        body,
        session_header=first,
    )
    await world.pipeline.complete(await world.pipeline.admit(call))


def test_one_tenant_past_the_keep_warm_bound_keeps_the_others_sessions() -> None:
    async def main() -> None:
        world = World()
        world.warm = KeepWarm(
            world.pipeline, world.prompts.autopilot, world.clock, max_sessions=MAX_ENTRIES
        )
        world.pipeline.observers.append(world.warm)
        await session_call(world, "acme", "Fix the flaky login test.")
        for n in range(MAX_ENTRIES + 10):
            await session_call(world, "globex", f"Task {n}: rename the module.")
        tenants = [name for name, _ in world.warm.sessions]
        assert tenants.count("acme") == 1 and tenants.count("globex") == MAX_ENTRIES - 1

    asyncio.run(main())


def acme_session(flood: int) -> list[CacheVerdict]:
    """acme's session of two calls a minute apart, with `flood` new globex sessions between
    them; the prompt port holds 50 sessions."""
    clock = Clock()
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock, max_sessions=MAX_ENTRIES)
    acme, globex = cache_tenant("acme"), cache_tenant("globex")

    def call(policy: Any, session: str, body: dict[str, Any]) -> CacheVerdict:
        return port.observe(policy, session, prepare_prompt(port, body, policy))

    verdicts = [call(acme, "acme-1", anthropic_body(2))]
    for n in range(flood):
        # a new conversation each: the autopilot links calls sharing tools and first message
        body = anthropic_body(1, system=f"Task {n}." + " rule" * 1200)
        body["messages"][0]["content"] = f"Task {n}: fix the failing test." + " a" * 100
        call(globex, f"globex-{n}", body)
    clock.now_s += 60
    verdicts.append(call(acme, "acme-1", anthropic_body(3)))
    assert port.tracker.num_entries("globex") == min(flood, MAX_ENTRIES - 1)
    assert port.autopilot.sessions.num_entries("globex") == min(flood, MAX_ENTRIES - 1)
    return verdicts


def test_one_tenant_past_the_session_bound_keeps_the_others_diagnosis_and_plan() -> None:
    alone, flooded = acme_session(0), acme_session(MAX_ENTRIES + 10)
    assert flooded[1].header.startswith("kept; prefix=")  # not first_call: the record stayed
    # the same diagnosis and lifetime choice (the planner's gaps) as with no other tenant
    assert [v.header for v in flooded] == [v.header for v in alone]
    assert [v.diagnosis_json for v in flooded] == [v.diagnosis_json for v in alone]


def test_one_tenant_past_the_tracked_reads_keeps_the_others_commit(
    redis_url: str, redis_prefix: str
) -> None:
    """acme's call recalls its session, globex recalls 60 new ones while acme's call is planned
    (50 reads tracked), then acme's placement is still committed, fenced by acme's own read."""

    async def main() -> tuple[object, object]:
        store = RedisAffinity.from_url(redis_url, key_prefix=redis_prefix, ttl_s=60.0)
        affinity = SharedAffinity(
            store, {}, SharedLink(float), clock=float, wall_ms=lambda: 1000, max_tracked=MAX_ENTRIES
        )
        placement = Placement("selfhost", "local", "local@http://a")
        try:
            await affinity.recall("acme", "acme-1")
            for n in range(MAX_ENTRIES + 10):
                await affinity.recall("globex", f"globex-{n}")
            affinity.publish("acme-1", placement, 480)
            await affinity.flush()
            acme = await store.fetch("acme", "acme-1")
            globex = await store.fetch("globex", "acme-1")
            return (acme.placement, acme.version, acme.cached_tokens) if acme else None, globex
        finally:
            await store.aclose()

    try:
        kept, other = asyncio.run(main())
        assert kept == (Placement("selfhost", "local", "local@http://a"), 1, 480)
        assert other is None  # committed under acme's own key, nothing under globex's
    finally:
        delete_prefix(redis_url, redis_prefix)


def acme_thread(flood: int) -> list[CacheVerdict]:
    """acme's session whose system prompt changes by a value of no known shape between its two
    calls (only the autopilot's thread link ties them), `flood` new globex conversations
    between them; the prompt port holds 50 sessions."""
    clock = Clock()
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock, max_sessions=MAX_ENTRIES)
    acme, globex = cache_tenant("acme"), cache_tenant("globex")

    def call(policy: Any, session: str, body: dict[str, Any]) -> CacheVerdict:
        return port.observe(policy, session, prepare_prompt(port, body, policy))

    rules = " rule" * 1200
    verdicts = [call(acme, "", anthropic_body(2, system="Codename Falcon." + rules))]
    for n in range(flood):
        body = anthropic_body(1, system=f"Task {n}." + rules)
        body["messages"][0]["content"] = f"Task {n}: fix the failing test." + " a" * 100
        call(globex, "", body)
    clock.now_s += 60
    verdicts.append(call(acme, "", anthropic_body(3, system="Codename Heron." + rules)))
    return verdicts


def test_one_tenant_past_the_thread_bound_keeps_the_others_link() -> None:
    alone, flooded = acme_thread(0), acme_thread(MAX_ENTRIES + 10)
    assert not alone[1].header.startswith("first_call")  # the link tied the two calls
    assert [v.header for v in flooded] == [v.header for v in alone]
    assert [v.diagnosis_json for v in flooded] == [v.diagnosis_json for v in alone]


def test_one_tenant_past_the_head_text_bound_keeps_the_others_texts() -> None:
    """The learner's head texts: globex's 60 new prompts (50 held in all) or its few long ones
    push out its own oldest, never acme's text while globex holds more."""
    texts = HeadTexts(max_entries=MAX_ENTRIES, max_chars=10_000)
    texts.put("acme", b"a" * 32, "Codename Falcon.")
    for n in range(MAX_ENTRIES + 10):
        texts.put("globex", n.to_bytes(32, "big"), f"Task {n}.")
    assert texts.get("acme", b"a" * 32) == "Codename Falcon."
    assert (texts.num_entries("acme"), texts.num_entries("globex")) == (1, MAX_ENTRIES - 1)
    assert texts.get("globex", (0).to_bytes(32, "big")) is None  # its own oldest went
    for n in range(3):
        texts.put("globex", b"long" + n.to_bytes(28, "big"), "x" * 4_000)
    assert texts.get("acme", b"a" * 32) == "Codename Falcon."
    assert texts.get("globex", b"long" + (2).to_bytes(28, "big")) == "x" * 4_000
    alone = HeadTexts(max_entries=2, max_chars=10_000)
    alone.put("acme", b"1" * 32, "one")
    alone.put("acme", b"2" * 32, "two")
    alone.put("acme", b"1" * 32, "one")  # used again: now the newest
    alone.put("acme", b"3" * 32, "three")  # one tenant alone still uses the whole bound
    assert [alone.get("acme", d * 32) for d in (b"1", b"2", b"3")] == ["one", None, "three"]


class CountingEncoding:
    """A tiktoken encoding that counts the characters it is asked to encode."""

    def __init__(self, real: Any) -> None:
        self.name, self._real, self.chars = real.name, real, 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.chars += len(text)
        return list(self._real.encode_ordinary(text))


def test_one_tenants_token_memo_entries_never_speed_up_anothers_call() -> None:
    """A memo hit skips milliseconds of tokenising (a 30 KB history ~5.6 ms), so a shared entry
    would tell a tenant, by its latency, that another sent that very text: globex's call with
    acme's exact prompt, counted as the gateway counts it, encodes all of it again."""
    counter = TokenCounter(TokenIdsMemo())
    encoding = CountingEncoding(counter.encoding("claude-sonnet-4-5"))
    counter._encodings[encoding.name] = encoding  # type: ignore[assignment]
    port = PromptCachePort(SECRET, encoder=TiktokenEncoder(counter=counter))
    counting = TiktokenCounting(counter)
    body = anthropic_body(3, system="Our unreleased plan: " + " rule" * 1200)

    def measured(policy: Any) -> int:
        """Characters tokenised to prepare and count `body` for `policy`'s tenant."""
        before = encoding.chars
        parsed = orjson.loads(orjson.dumps(body))  # new strings, as each request's parse makes
        prepared = prepare_prompt(port, parsed, policy)
        counting.count_prompt(prepared.request, policy.tenant)
        return encoding.chars - before

    first = measured(cache_tenant("acme"))
    again = measured(cache_tenant("acme"))  # what is never memoised (short texts) only
    assert first > 6_000 and again < 100
    assert measured(cache_tenant("globex")) == first  # none of acme's entries serve globex
    assert measured(cache_tenant("globex")) == again
