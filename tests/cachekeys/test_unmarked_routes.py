"""Lantern's cache markers are planned only where a backend of the call's route sends them on
(`gateway.core.models_table.marked_models`): an OpenAI-compatible server is sent none."""

from __future__ import annotations

from adapters.types import ChatRequest
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from gateway.core.models_table import marked_models
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.core.prompt_prepare import PromptFacts
from gateway.settings import Settings
from policies.model import TenantPolicy

SECRET = b"secret"
ENCODER = TiktokenEncoder()
POLICY = TenantPolicy.model_validate({"tenant": "a"})
SYSTEM = "You are a careful coding agent. " * 300  # past every provider's cacheable minimum


def _markers(request: ChatRequest) -> int:
    parts = [*request.system, *(p for m in request.messages for p in m.content)]
    return sum(p.cache_control is not None for p in [*parts, *request.tools])


def _body(turn: int) -> dict[str, object]:
    return {
        "model": "m",
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "step " * 400},
            {"role": "user", "content": f"turn {turn}"},
        ],
    }


def test_the_marked_routes_are_those_with_a_backend_that_takes_markers() -> None:
    def route(name: str, *kinds: str) -> dict[str, object]:
        backends: list[dict[str, object]] = []
        for i, kind in enumerate(kinds):
            b: dict[str, object] = {"kind": kind, "name": f"{name}-{i}", "model": "x"}
            if kind == "openai_compatible":
                b["base_url"] = "http://127.0.0.1:9/v1"
            if kind == "anthropic":
                b["api_key_env"] = "ANTHROPIC_API_KEY"
            backends.append(b)
        return {"name": name, "backends": backends}

    settings = Settings.model_validate(
        {
            "models": [
                route("vllm", "openai_compatible"),
                route("claude", "anthropic"),
                route("both", "openai_compatible", "litellm"),
                route("proxy", "litellm"),
            ]
        }
    )
    assert marked_models(settings) == frozenset({"claude", "both", "proxy"})


def test_an_openai_call_to_an_unmarked_route_gets_no_markers_and_the_same_diagnosis() -> None:
    """Unmarked: no Lantern marker on the request, the same cache key, body, session root and
    prediction as where markers are planned (OpenAI's cache reads no breakpoints)."""
    unmarked = PromptCachePort(SECRET, encoder=ENCODER, marked_models=frozenset({"other"}))
    marked = PromptCachePort(SECRET, encoder=ENCODER)
    for turn in range(3):
        body = _body(turn)
        got = unmarked.prepare("openai", body, openai_wire.decode_request(body), POLICY, "m")
        want = marked.prepare("openai", body, openai_wire.decode_request(body), POLICY, "m")
        assert _markers(got.request) == 0 < _markers(want.request)
        assert got.request.prompt_cache_key == want.request.prompt_cache_key is not None
        assert got.body == want.body
        assert (got.session_root, got.write_ttl) == (want.session_root, want.write_ttl)
        verdicts = [p.observe(POLICY, "s", x) for p, x in ((unmarked, got), (marked, want))]
        assert verdicts[0].header == verdicts[1].header
        facts = got.diagnosis
        assert isinstance(facts, PromptFacts) and facts.fingerprint.breakpoints == ()


def test_a_marked_route_and_the_anthropic_wire_keep_their_markers() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER, marked_models=frozenset({"claude"}))
    fresh = PromptCachePort(SECRET, encoder=ENCODER)
    body = _body(0)
    got = port.prepare("openai", body, openai_wire.decode_request(body), POLICY, "claude")
    want = fresh.prepare("openai", body, openai_wire.decode_request(body), POLICY, "claude")
    assert got.request == want.request and _markers(got.request) > 0
    raw = {
        "model": "m",
        "max_tokens": 16,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "step " * 400}],
    }
    request = anthropic_wire.decode_request(raw)
    got = port.prepare("anthropic", raw, request, POLICY, "m")  # translated to an OpenAI server
    want = fresh.prepare("anthropic", raw, request, POLICY, "m")
    assert (got.body, got.request) == (want.body, want.request) and _markers(got.request) > 0
