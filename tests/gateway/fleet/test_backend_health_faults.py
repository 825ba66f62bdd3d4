"""A backend's health is judged only on faults of the backend: connect errors, timeouts, 5xx
drain a replica (and cool an API down); a 4xx the request caused, an error on the gateway's own
side and a client that goes away never do, however many of them come."""

from __future__ import annotations

import asyncio
import random

import pytest

from adapters.errors import UpstreamError
from adapters.http.upstream import status_error, transport_error
from adapters.types import Usage
from gateway.fleet.routing_port import Fleet
from gateway.ports import Attempt, Candidate, Fault, ModelRoute, PreparedPrompt
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from quotas.memory import MemoryQuotaStore
from tests.gateway.core.pipeline_harness import build

TENANT = TenantPolicy(tenant="acme", limits=LimitsPolicy(max_output_tokens=10))
NOW = 1000.0


@pytest.mark.parametrize(
    ("status", "is_backend_fault"),
    [
        (400, False),  # e.g. vLLM's "maximum context length" for a too-long prompt
        (413, False),
        (422, False),
        (401, True),  # a bad key: every call fails the same way
        (403, True),
        (404, True),  # a model the backend does not serve
        (408, True),
        (429, True),
        (500, True),
        (503, True),
        (529, True),
    ],
)
def test_status_errors_say_whose_fault_they_are(status: int, is_backend_fault: bool) -> None:
    assert status_error("b", status, {}, b"{}").backend_fault is is_backend_fault


def test_transport_errors_are_backend_faults() -> None:
    import httpx

    assert transport_error("b", httpx.ConnectError("refused")).backend_fault is True
    assert transport_error("b", httpx.ReadTimeout("slow")).backend_fault is True


async def _run(kind: str, stream: bool, times: int) -> tuple[bool, float]:
    h = build(MemoryQuotaStore())
    for n in range(times):
        call = h.call(TENANT, f"call {n} kind:{kind}", stream=stream)
        adm = await h.pipeline.admit(call)
        try:
            if stream:
                events = h.pipeline.stream(adm)
                seen = 0
                async for _ in events:
                    seen += 1
                    if kind == "disconnect" and seen == 2:
                        await events.aclose()  # the user pressed stop
                        break
            else:
                task = asyncio.ensure_future(h.pipeline.complete(adm))
                if kind == "disconnect":
                    await h.backend.hanging[f"call {n} kind:{kind}"].wait()
                    task.cancel()
                await task
        except (UpstreamError, ValueError, asyncio.CancelledError):
            pass
    replica = h.replica()
    assert replica.inflight_requests == 0
    return replica.healthy, replica.drained_until


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["upstream_400", "gateway", "disconnect"])
def test_faults_of_the_request_the_gateway_or_the_client_never_drain(
    kind: str, stream: bool
) -> None:
    assert asyncio.run(_run(kind, stream, times=5)) == (True, 0.0)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["upstream_5xx", "connect", "timeout", "mid_stream_5xx"])
def test_faults_of_the_backend_drain_after_two(kind: str, stream: bool) -> None:
    assert asyncio.run(_run(kind, stream, times=1)) == (True, 0.0)
    assert asyncio.run(_run(kind, stream, times=2)) == (False, NOW + 30.0)  # the cooldown


class _Api:
    name, kind, wire = "api", "litellm", None


@pytest.mark.parametrize(
    ("fault", "cooldown_until"),
    [("backend", NOW + 5.0), ("request", 0.0), ("gateway", 0.0), ("client", 0.0)],
)
def test_an_api_cools_down_only_on_its_own_faults(fault: Fault, cooldown_until: float) -> None:
    candidate = Candidate(_Api(), "api", "api")  # type: ignore[arg-type]
    fleet = Fleet([ModelRoute("m", (candidate,))], clock=lambda: NOW, rng=random.Random(1))
    attempt = Attempt(candidate, "only")
    fleet.on_dispatch(attempt, "s1", PreparedPrompt({}, None, "root", "salt"))  # type: ignore[arg-type]
    fleet.on_complete(attempt, Usage(), ok=False, fault=fault)
    (api,) = fleet.snapshot(NOW).apis
    assert api.cooldown_until == cooldown_until
