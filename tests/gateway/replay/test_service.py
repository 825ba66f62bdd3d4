"""The replay service over the in-process store: a reply over the size cap is served whole
and then refused on replay (never run twice); a retry that outwaits `wait_s` is 409; a run
whose client left still finishes and is stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.replay.errors import IdempotencyKeyInUse, ReplyNotStored
from gateway.replay.records import ReplayLimits, ReplyHead
from gateway.replay.service import Produced, ReplayService
from gateway.replay.store import MemoryReplayStore

SSE = ReplyHead(200, (("content-type", "text/event-stream"),))


class Upstream:
    """Counts runs; each yields `num_chunks` chunks, `gap_s` apart."""

    def __init__(self, num_chunks: int, gap_s: float = 0.0) -> None:
        self.num_runs = 0
        self.num_chunks, self.gap_s = num_chunks, gap_s

    async def produce(self) -> Produced:
        self.num_runs += 1
        return Produced(SSE, self._chunks(), is_kept=True)

    async def _chunks(self) -> AsyncIterator[bytes]:
        for n in range(self.num_chunks):
            await asyncio.sleep(self.gap_s)
            yield b"data: %d\n\n" % n


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


def _service(**limits: float) -> ReplayService:
    return ReplayService(MemoryReplayStore(time.monotonic), ReplayLimits(**limits))  # type: ignore[arg-type]


def test_a_reply_over_the_cap_is_served_whole_and_never_run_again() -> None:
    async def main() -> None:
        service, upstream = _service(max_reply_bytes=100), Upstream(num_chunks=20)
        first = await service.serve("acme:k", "fp", upstream.produce)
        assert await _read(first.chunks) == b"".join(b"data: %d\n\n" % n for n in range(20))
        await asyncio.sleep(0.01)  # the run's task stores its end
        with pytest.raises(ReplyNotStored):
            await service.serve("acme:k", "fp", upstream.produce)
        assert upstream.num_runs == 1

    asyncio.run(main())


def test_a_retry_outwaiting_a_json_reply_is_409() -> None:
    async def main() -> None:
        service = _service(wait_s=0.05)
        stalled = asyncio.Event()

        async def never() -> Produced:
            await stalled.wait()
            raise AssertionError("unreachable")

        first = asyncio.create_task(service.serve("acme:k", "fp", never))
        await asyncio.sleep(0.01)
        with pytest.raises(IdempotencyKeyInUse):
            await service.serve("acme:k", "fp", never)
        first.cancel()
        await service.stop()

    asyncio.run(main())


def test_a_run_whose_client_left_is_stored_for_the_retry() -> None:
    async def main() -> None:
        service, upstream = _service(), Upstream(num_chunks=5, gap_s=0.01)
        first = await service.serve("acme:k", "fp", upstream.produce)
        assert await anext(first.chunks) == b"data: 0\n\n"
        await first.chunks.aclose()  # type: ignore[attr-defined]  # the client went away
        retry = await service.serve("acme:k", "fp", upstream.produce)
        assert retry.is_replayed and await _read(retry.chunks) == b"".join(
            b"data: %d\n\n" % n for n in range(5)
        )
        assert upstream.num_runs == 1

    asyncio.run(main())
