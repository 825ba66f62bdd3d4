"""Which OpenAI-compatible servers are sent `cache_salt`: those declared to accept it (vLLM,
SGLang, the bundled engine), or as the backend says; calls to any other carry the tenant's
cache-scope line, so tenants stay isolated either way."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from adapters.backend import BackendCall
from adapters.backends import BackendSpec, build_backend
from adapters.http.upstream import HttpxPool
from adapters.wire import openai as openai_wire
from gateway.backend_settings import OpenAICompatibleBackend
from gateway.core.models_table import build_model_table, shares_provider_cache
from gateway.fleet.probe import probe
from gateway.ports import Candidate
from gateway.settings import Settings
from tests.fakes.upstream import FakeUpstream

URL = "http://127.0.0.1:9/v1"


def backend(**kw: object) -> OpenAICompatibleBackend:
    base = {"kind": "openai_compatible", "name": "b", "base_url": URL, "model": "m"}
    return OpenAICompatibleBackend.model_validate({**base, **kw})


@pytest.mark.parametrize(
    ("kw", "sends"),
    [
        ({}, False),  # undeclared: `engine: other`
        ({"engine": "other"}, False),
        ({"engine": "vllm"}, True),
        ({"engine": "sglang"}, True),
        ({"engine": "lantern"}, True),
        ({"engine": "vllm", "cache_salt": False}, False),  # explicit wins
        ({"engine": "other", "cache_salt": True}, True),
    ],
)
def test_the_salt_follows_the_declared_engine_unless_set(
    kw: dict[str, object], sends: bool
) -> None:
    b = backend(**kw)
    assert b.sends_cache_salt is sends
    assert shares_provider_cache(b) is not sends  # not sent the salt: the scope line instead
    assert shares_provider_cache(backend(dedicated_credentials=True, **kw)) is False


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="engine"):
        backend(engine="tgi")


def test_the_model_table_hands_the_declaration_to_the_backend() -> None:
    """Built from settings, each backend sends the salt (or not) as declared."""
    with FakeUpstream() as upstream:
        url = upstream.openai_base_url
        settings = Settings.model_validate(
            {
                "models": [
                    {
                        "name": "m",
                        "backends": [
                            {
                                "kind": "openai_compatible",
                                "name": "a",
                                "base_url": url,
                                "model": "m",
                            },
                            {
                                "kind": "openai_compatible",
                                "name": "v",
                                "base_url": url,
                                "model": "m",
                                "engine": "vllm",
                            },
                            {"kind": "selfhost", "name": "s", "base_url": url},
                        ],
                    }
                ]
            }
        )
        request = openai_wire.decode_request(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "cache_salt": "t-a"}
        )

        async def main() -> None:
            async with httpx.AsyncClient() as http:
                table, _ = build_model_table(settings, HttpxPool(http))
                route = table.get("m")
                assert route is not None
                for candidate in route.candidates:
                    await candidate.backend.complete(BackendCall(request, "anthropic"))

        asyncio.run(main())
        sent = ["cache_salt" in r.json() for r in upstream.requests]
    assert sent == [False, True, True]


def test_the_health_probe_carries_no_cache_field() -> None:
    """A server that rejects `cache_salt` with a 400 fails only the calls that carry it (the
    request's fault, never a drain: tests/gateway/fleet/test_backend_health_faults.py); the
    probe that judges its health carries none."""
    with FakeUpstream() as upstream:
        spec = BackendSpec(
            "v", "openai_compatible", upstream.openai_base_url, model="m", extra={"engine": "vllm"}
        )

        async def main() -> bool:
            async with httpx.AsyncClient() as http:
                backend = build_backend(spec, http=HttpxPool(http))
                return await probe(Candidate(backend, "v", "selfhost", "r1"), "m", 10.0)

        assert asyncio.run(main()) is True
        (sent,) = [r.json() for r in upstream.requests]
    assert "cache_salt" not in sent and "lantern_public" not in sent
