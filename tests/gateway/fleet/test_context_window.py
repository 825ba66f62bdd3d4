"""A call that cannot fit a replica's context window is caught before dispatch: a max_tokens the
gateway filled in is lowered to fit, one the client asked for is a 400 naming the field, and a
prompt alone over the window is a 400 naming `messages`; nothing is reserved for either. The
window comes from configuration or the replica's /models card (vLLM, the bundled engine)."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from adapters.types import ChatRequest
from gateway.core.pipeline import IncomingCall
from gateway.errors import RequestRejected
from gateway.fleet.routing_port import Fleet
from gateway.fleet.window import ContextWindows, HttpModelCards
from gateway.http.errors import to_http
from gateway.ports import Candidate, ModelRoute, PreparedPrompt
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from quotas.limits import Limits
from quotas.memory import MemoryQuotaStore
from tests.fakes.upstream import FakeUpstream
from tests.gateway.core.pipeline_harness import Harness, build

WINDOW = 100
TENANT = TenantPolicy(tenant="acme", limits=LimitsPolicy(max_output_tokens=500))
PROMPT = "call 1 kind:ok"  # 3 tokens (one a word in the harness)


async def _concurrent(h: Harness) -> tuple[int, int]:
    limits = Limits(concurrent_requests=10)
    use = await h.admission.store.usage("acme", limits, now_ms=int(time.time() * 1000))
    return use.concurrent, use.requests_used


def test_a_filled_in_max_tokens_is_lowered_to_fit() -> None:
    async def main() -> None:
        h = build(MemoryQuotaStore(), window=WINDOW)
        adm = await h.pipeline.admit(h.call(TENANT, PROMPT, max_tokens=None))
        assert adm.max_tokens == WINDOW - 3  # the tenant cap (500) would not fit
        await h.pipeline.complete(adm)
        assert await _concurrent(h) == (0, 1)

    asyncio.run(main())


def test_an_explicit_max_tokens_that_fits_is_kept() -> None:
    async def main() -> None:
        h = build(MemoryQuotaStore(), window=WINDOW)
        adm = await h.pipeline.admit(h.call(TENANT, PROMPT, max_tokens=WINDOW - 3))
        assert adm.max_tokens == WINDOW - 3

    asyncio.run(main())


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_an_explicit_max_tokens_that_does_not_fit_is_a_400_before_reserving(wire: str) -> None:
    async def main() -> RequestRejected:
        h = build(MemoryQuotaStore(), window=WINDOW)
        with pytest.raises(RequestRejected) as caught:
            await h.pipeline.admit(h.call(TENANT, PROMPT, max_tokens=98, wire=wire))  # type: ignore[arg-type]
        assert await _concurrent(h) == (0, 0)  # nothing was reserved
        assert h.backend.started == 0
        return caught.value

    exc = asyncio.run(main())
    assert (exc.rule, exc.field) == ("context_window", "max_tokens")
    err = to_http(exc, wire)  # type: ignore[arg-type]
    message = (
        "prompt (3 tokens) + max_tokens (98) is more than the context window of model 'm' "
        "(100 tokens); at most 97 fits"
    )
    assert err.status_code == 400
    if wire == "openai":
        assert err.body == {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "context_window",
            }
        }
    else:
        assert err.body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }


def test_the_field_is_the_one_the_client_sent() -> None:
    h = build(MemoryQuotaStore(), window=WINDOW)
    call = h.call(TENANT, PROMPT, max_tokens=200)
    body = {"model": "m", "messages": [], "max_completion_tokens": 200}
    call = IncomingCall("openai", TENANT, "k1", call.request, body)
    with pytest.raises(RequestRejected) as caught:
        asyncio.run(h.pipeline.admit(call))
    assert caught.value.field == "max_completion_tokens"


def test_a_prompt_over_the_window_is_a_400_naming_messages() -> None:
    h = build(MemoryQuotaStore(), window=WINDOW)
    text = " ".join(["word"] * WINDOW) + " kind:ok"
    with pytest.raises(RequestRejected) as caught:
        asyncio.run(h.pipeline.admit(h.call(TENANT, text, max_tokens=None)))
    assert (caught.value.rule, caught.value.field) == ("context_window", "messages")
    assert str(caught.value) == (
        "prompt has 101 tokens; the context window of model 'm' is 100 tokens"
    )


def test_without_a_known_window_nothing_is_clamped() -> None:
    h = build(MemoryQuotaStore())
    adm = asyncio.run(h.pipeline.admit(h.call(TENANT, PROMPT, max_tokens=None)))
    assert adm.max_tokens == 500


class _Cards:
    def __init__(self, windows: dict[str, int | None]) -> None:
        self.windows, self.asked = windows, 0

    async def max_model_len(self, base_url: str) -> int | None:
        self.asked += 1
        return self.windows[base_url]


class _Replica:
    name, kind, wire = "engine", "selfhost", "openai"


def _two_replicas(cards: _Cards) -> tuple[Fleet, ModelRoute]:
    c1 = Candidate(_Replica(), "engine", "selfhost", "http://r1/v1")  # type: ignore[arg-type]
    c2 = Candidate(_Replica(), "engine", "selfhost", "http://r2/v1")  # type: ignore[arg-type]
    route = ModelRoute("m", (c1, c2))
    windows = ContextWindows({}, cards)
    return Fleet([route], clock=lambda: 0.0, rng=random.Random(3), windows=windows), route


def test_the_fleet_learns_windows_and_plans_only_replicas_that_fit() -> None:
    cards = _Cards({"http://r1/v1": 64, "http://r2/v1": 256})
    fleet, route = _two_replicas(cards)
    assert fleet.context_window(route, TENANT) is None  # not read yet: no check
    asyncio.run(fleet.windows.learn(route.candidates))
    asyncio.run(fleet.windows.learn(route.candidates))  # known ones are not asked again
    assert cards.asked == 2
    assert fleet.context_window(route, TENANT) == 256
    prepared = PreparedPrompt({}, ChatRequest("m", ()), "root", "salt")
    for n in range(10):
        plan = fleet.plan(route, TENANT, f"s{n}", prepared, 50, 100)
        assert [a.candidate.replica for a in plan.attempts] == ["http://r2/v1"]
    # a replica that does not report its window leaves the route's unknown
    fleet2, route2 = _two_replicas(_Cards({"http://r1/v1": 64, "http://r2/v1": None}))
    asyncio.run(fleet2.windows.learn(route2.candidates))
    assert fleet2.context_window(route2, TENANT) is None


def test_a_configured_window_wins_over_the_card() -> None:
    cards = _Cards({"http://r1/v1": 64, "http://r2/v1": 256})
    c1 = Candidate(_Replica(), "engine", "selfhost", "http://r1/v1")  # type: ignore[arg-type]
    windows = ContextWindows({"engine": 32}, cards)
    asyncio.run(windows.learn([c1]))
    assert (windows.of(c1), cards.asked) == (32, 0)


def test_model_cards_read_over_http() -> None:
    async def read(url: str) -> int | None:
        cards = HttpModelCards(timeout_s=2.0)
        try:
            return await cards.max_model_len(url)
        finally:
            await cards.aclose()

    with FakeUpstream(max_model_len=4096) as fake:
        assert asyncio.run(read(fake.openai_base_url)) == 4096
    with FakeUpstream() as fake:  # a card without the field
        assert asyncio.run(read(fake.openai_base_url)) is None
    assert asyncio.run(read("http://127.0.0.1:9/v1")) is None  # nothing listening


def test_the_fake_refuses_like_vllm() -> None:
    """prompt + max_tokens over the fake's window is a 400, as vLLM answers it."""
    with FakeUpstream(max_model_len=50) as fake:
        body = {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 60,
        }
        reply = httpx.post(fake.openai_base_url + "/chat/completions", json=body, timeout=5)
        assert reply.status_code == 400
        assert "maximum context length is 50 tokens" in reply.json()["error"]["message"]
        body["max_tokens"] = 10
        reply = httpx.post(fake.openai_base_url + "/chat/completions", json=body, timeout=5)
        assert reply.status_code == 200


def test_the_route_window_is_the_largest_the_tenant_may_use_or_none() -> None:
    def replica(name: str) -> Candidate:
        return Candidate(None, name, "selfhost", f"http://{name}/v1")  # type: ignore[arg-type]

    windows = ContextWindows({"a": 100, "b": 300, "c": None})
    api = Candidate(None, "api", "api")  # type: ignore[arg-type]
    route = ModelRoute("m", (replica("a"), replica("b"), replica("c"), api))
    assert windows.route_window(route, None) is None  # c and the API have no known window
    assert windows.route_window(route, ["a", "b"]) == 300
    assert windows.route_window(route, ("a",)) == 100
    assert windows.route_window(route, ["b", "api"]) is None
    assert windows.route_window(route, []) is None  # nothing the tenant may use
    assert windows.route_window(ModelRoute("m", (replica("b"), replica("a"))), None) == 300
