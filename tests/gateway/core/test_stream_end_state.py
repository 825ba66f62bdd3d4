"""A stream's ledger row says how it ended: a consumer that closes the stream once it has the
end event (an SDK reads `[DONE]` and hangs up) completed it, so the row is `ok`, not
`client_disconnect`; one that closes it earlier did disconnect."""

from __future__ import annotations

import asyncio

from adapters.types import StreamEnd
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from quotas.memory import MemoryQuotaStore
from tests.gateway.core.pipeline_harness import OUTPUT_TOKENS, build

TENANT = TenantPolicy(
    tenant="t-end",
    limits=LimitsPolicy(tokens_per_minute=10**9, concurrent_requests=10**6, max_output_tokens=10),
)


async def _stream_until(close_after_end: bool) -> tuple[str, int]:
    h = build(MemoryQuotaStore())
    adm = await h.pipeline.admit(h.call(TENANT, "call one kind:ok", stream=True))
    events = h.pipeline.stream(adm)
    async for event in events:
        if close_after_end and isinstance(event, StreamEnd):
            break  # the whole reply is here; the consumer stops reading
        if not close_after_end:
            break  # closed after the first event
    await events.aclose()
    [row] = h.parts.rows
    return row.status, row.usage.output_tokens


def test_a_stream_closed_after_its_end_event_is_ok() -> None:
    assert asyncio.run(_stream_until(close_after_end=True)) == ("ok", OUTPUT_TOKENS)


def test_a_stream_closed_before_its_end_is_a_disconnect() -> None:
    status, _ = asyncio.run(_stream_until(close_after_end=False))
    assert status == "client_disconnect"
