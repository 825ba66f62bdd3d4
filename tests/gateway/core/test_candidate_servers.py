"""Each candidate of the model table knows, once, the server its calls go to (the attempt
spans' `server.address` and `server.port`): the backend's URL, the provider's default, Bedrock's
regional endpoint; none where the SDK alone picks it."""

from __future__ import annotations

import asyncio

import httpx

from adapters.http.upstream import HttpxPool
from gateway.core.models_table import build_model_table
from gateway.ports import ServerAddress
from gateway.settings import Settings


def test_each_candidate_names_its_server_once() -> None:
    backends = [
        {"kind": "openai_compatible", "name": "o", "base_url": "http://vllm:8000/v1", "model": "m"},
        {"kind": "anthropic", "name": "a", "model": "claude-1", "api_key_env": None},
        {"kind": "bedrock", "name": "b", "model": "amazon.nova", "region": "eu-west-1"},
        {"kind": "bedrock", "name": "e", "model": "nova", "endpoint_url": "https://vpce.example"},
        {"kind": "litellm", "name": "l", "model": "anthropic/claude-1"},
        {"kind": "litellm", "name": "p", "model": "x/y", "api_base": "http://proxy:4000"},
    ]
    settings = Settings.model_validate({"models": [{"name": "m", "backends": backends}]})

    async def main() -> dict[str, ServerAddress | None]:
        async with httpx.AsyncClient() as http:
            table, _ = build_model_table(settings, HttpxPool(http))
        route = table.get("m")
        assert route is not None
        return {c.backend_name: c.server for c in route.candidates}

    assert asyncio.run(main()) == {
        "o": ServerAddress("vllm", 8000),
        "a": ServerAddress("api.anthropic.com", 443),
        "b": ServerAddress("bedrock-runtime.eu-west-1.amazonaws.com", 443),
        "e": ServerAddress("vpce.example", 443),
        "l": None,  # LiteLLM's provider default: the SDK knows it, the gateway does not
        "p": ServerAddress("proxy", 4000),
    }
