"""The fleet's two reads of a replica off the request path, each bounded by its timeout: the
health probe (a free GET where the backend has one, else a one-token generation) and the
engine-load scrape. No state here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import httpx

from adapters.backend import BackendCall, HealthCheck
from adapters.types import ChatRequest, Message, TextPart
from gateway.fleet.engine_metrics import EngineLoad, MetricsError, MetricsUnavailable
from gateway.fleet.signals import LoadSignals, MetricsSource
from gateway.ports import Candidate

log = logging.getLogger("lantern.fleet")


async def free_probe(
    check: HealthCheck, client: httpx.AsyncClient, timeout_s: float
) -> bool | None:
    """A 200 from the first of the check's URLs the upstream has; None when it has none of them
    (every one a 404 or 405: only a generation can tell)."""
    for url in check.urls:
        try:
            reply = await client.get(url, headers=dict(check.headers), timeout=timeout_s)
        except httpx.HTTPError:
            return False
        if reply.status_code not in (404, 405):
            return reply.status_code == 200
    return None


async def probe(candidate: Candidate, model: str, timeout_s: float) -> bool:
    """The paid probe: True when the replica generates a token (or any content) within `timeout_s`."""
    request = ChatRequest(
        model=model,
        messages=(Message("user", (TextPart("ping"),)),),
        max_tokens=1,
        temperature=0.0,
    )
    call = BackendCall(request, "openai", timeout_s=timeout_s)
    try:
        response = await asyncio.wait_for(candidate.backend.complete(call), timeout_s)
    except Exception:  # any failure of the probe means not serving
        return False
    return response.usage.output_tokens >= 1 or bool(response.content)


async def scrape(source: MetricsSource, url: str, timeout_s: float) -> EngineLoad | MetricsError:
    """One engine-load sample, or why there is none (never raises a metrics error)."""
    try:
        return await asyncio.wait_for(source.scrape(url), timeout_s)
    except TimeoutError:
        return MetricsUnavailable(f"{url}: no answer in {timeout_s:g} s")
    except MetricsError as exc:
        return exc


async def scrape_due(
    source: MetricsSource,
    due: Sequence[tuple[str, str]],
    timeout_s: float,
    signals: LoadSignals,
    observe: Callable[[str, EngineLoad], None],
    clock: Callable[[], float],
) -> dict[str, bool]:
    """Scrape each (replica key, metrics URL) once, concurrently; True where a sample arrived
    (handed to `observe`). A failure keeps the last sample (it ages out) and backs the
    replica's scrapes off."""
    results = await asyncio.gather(*(scrape(source, url, timeout_s) for _, url in due))
    for (key, url), got in zip(due, results, strict=True):
        if isinstance(got, EngineLoad):
            if signals.last(key) is None:
                log.info("engine load metrics from %s (KV size %s)", url, got.kv_capacity_tokens)
            observe(key, got)
            continue
        failures = signals.failed(key, clock())
        if failures == 1 or failures % 100 == 0:
            log.warning("metrics of %s unreadable (%d in a row): %s", url, failures, got)
    return {key: isinstance(got, EngineLoad) for (key, _), got in zip(due, results, strict=True)}
