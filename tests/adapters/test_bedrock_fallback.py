"""Fallback from a failing self-hosted replica to Bedrock through the real pipeline, the real
fleet and the real backends: one ledger row per attempt, one reservation, one charge."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from adapters.backends.bedrock import BedrockBackend
from adapters.backends.openai_compatible import OpenAICompatibleBackend
from adapters.backends.spec import BackendSpec
from adapters.http.upstream import HttpxPool
from adapters.types import ChatRequest, Message, TextPart, Usage
from gateway.core.calls import session_key
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.fleet.routing_port import Fleet
from gateway.ports import CacheVerdict, CallRecord, Candidate, ModelRoute, PreparedPrompt
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from routing.types import Prices, TokenPrices
from tests.fakes.bedrock import FakeBedrock

MODEL_ID = "anthropic.claude-sonnet-4-5-v1:0"
USD_PER_TOKEN = {"input": 3e-6, "output": 15e-6, "cache_read": 0.3e-6, "cache_write": 3.75e-6}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Models:
    def __init__(self, route: ModelRoute) -> None:
        self.route = route

    def get(self, name: str) -> ModelRoute | None:
        return self.route if name == self.route.name else None

    def names(self) -> list[str]:
        return [self.route.name]


class Counter:
    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        return sum(
            len(p.text.split())
            for m in request.messages
            for p in m.content
            if isinstance(p, TextPart)
        )

    def count_text(self, model: str, text: str, scope: str = "") -> int:
        return len(text.split())


class Pricing:
    def cost_usd(self, model: str, usage: Usage) -> float:
        return (
            usage.input_tokens * USD_PER_TOKEN["input"]
            + usage.output_tokens * USD_PER_TOKEN["output"]
            + usage.cache_read_tokens * USD_PER_TOKEN["cache_read"]
            + usage.cache_write_tokens * USD_PER_TOKEN["cache_write"]
        )

    def uncached_cost_usd(self, model: str, usage: Usage) -> float:
        return (
            usage.prompt_tokens * USD_PER_TOKEN["input"]
            + usage.output_tokens * USD_PER_TOKEN["output"]
        )

    def worst_case_usd(self, model: str, prompt: int, max_output: int, write_ttl: str) -> float:
        heaviest = max(USD_PER_TOKEN["input"], USD_PER_TOKEN["cache_write"])
        return prompt * heaviest + max_output * USD_PER_TOKEN["output"]


class Admission:
    """Counts reservations and settlements; the pipeline must settle each ticket exactly once."""

    def __init__(self) -> None:
        self.reserved: list[int] = []
        self.settled: list[tuple[object, Usage, float]] = []

    async def reserve(
        self, tenant, *, session_id, prompt_tokens, max_output_tokens, worst_case_usd
    ):
        self.reserved.append(prompt_tokens + max_output_tokens)
        return object()

    async def settle(self, ticket, *, usage: Usage, cost_usd: float) -> None:
        self.settled.append((ticket, usage, cost_usd))

    def rate_headers(self, ticket) -> dict[str, str]:
        return {}


class Prompts:
    def ready(self, tenant: str) -> None:
        return None

    def prepare(self, wire, body, request, tenant, model) -> PreparedPrompt:
        return PreparedPrompt(body=body, request=request, session_root="root", cache_salt="salt")

    def observe(self, tenant, session_id, prepared) -> CacheVerdict:
        return CacheVerdict("miss", "{}")

    def reconcile(self, verdict, usage) -> None:
        return None


class Ledger:
    def __init__(self) -> None:
        self.rows: list[CallRecord] = []

    def record(self, row: CallRecord) -> None:
        self.rows.append(row)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[FakeBedrock]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLANTERNTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server = FakeBedrock(region="us-east-1").start()
    yield server
    server.stop()


async def serve_once(
    fake: FakeBedrock, ledger: Ledger, admission: Admission
) -> tuple[object, Fleet]:
    async with httpx.AsyncClient() as http:
        dead = f"http://127.0.0.1:{closed_port()}/v1"
        replica = OpenAICompatibleBackend(
            BackendSpec(name="local", kind="selfhost", base_url=dead, timeout_s=5),
            http=HttpxPool(http),
        )
        bedrock = BedrockBackend(
            "bedrock", MODEL_ID, "us-east-1", endpoint_url=fake.url, timeout_s=10
        )
        route = ModelRoute(
            "agent",
            (Candidate(replica, "local", "selfhost", dead), Candidate(bedrock, "bedrock", "api")),
        )
        prices = Prices(api={"bedrock": TokenPrices(3.0, 15.0, 0.3, 3.75)})
        fleet = Fleet([route], prices=prices, clock=lambda: 100.0, rng=random.Random(0))
        telemetry = Telemetry(TracerProvider(), Metrics())
        pipeline = Pipeline(
            PipelineParts(
                Models(route),
                Counter(),
                Pricing(),
                admission,
                Prompts(),
                fleet,
                ledger,
                telemetry,
                clock=lambda: 100.0,
            )
        )
        request = ChatRequest(
            model="agent",
            max_tokens=32,
            messages=(Message("user", (TextPart("summarise the quarterly report"),)),),
        )
        body = {
            "model": "agent",
            "messages": [{"role": "user", "content": "summarise the quarterly report"}],
        }
        call = IncomingCall("openai", TenantPolicy(tenant="acme"), "key-1", request, body, "sess-1")
        admitted = await pipeline.admit(call)
        response = await pipeline.complete(admitted)
        return response, fleet


def test_failing_replica_falls_back_to_bedrock_with_one_charge(fake: FakeBedrock) -> None:
    ledger, admission = Ledger(), Admission()
    response, fleet = asyncio.run(serve_once(fake, ledger, admission))
    assert response.content == (TextPart("hello from the fake"),)  # type: ignore[attr-defined]
    # one row per attempt: the refused replica (no usage, no cost), then Bedrock
    assert [(r.attempt, r.backend, r.status, r.error_kind) for r in ledger.rows] == [
        (0, "local", "error", "ProviderUnavailable"),
        (1, "bedrock", "ok", None),
    ]
    assert ledger.rows[0].usage == Usage() and ledger.rows[0].cost_usd == 0.0
    # Bedrock: 4 prompt words written at the cache point, 4 output words
    bedrock_usage = Usage(
        input_tokens=0, output_tokens=4, cache_read_tokens=0, cache_write_tokens=4
    )
    assert ledger.rows[1].usage == bedrock_usage
    # one reservation, carried over to the fallback, and exactly one settlement (one charge)
    assert admission.reserved == [4 + 32]
    assert len(admission.settled) == 1
    assert admission.settled[0][1] == bedrock_usage
    assert admission.settled[0][2] == pytest.approx(4 * 3.75e-6 + 4 * 15e-6)
    # the fleet released the replica's load and remembers the session on Bedrock
    state = fleet.stats().replicas[0]
    assert (state.inflight_requests, state.inflight_tokens, state.inflight_blocks) == (0, 0, 0)
    assert fleet.sessions().entries[session_key("acme", "sess-1")].backend == "bedrock"
    assert len(fake.requests) == 1
