"""`calls_per_session` counts what the client names as one session, never the conversation
root: two independent runs of one agent (the same tools, system and first message) each get
the whole budget, while calls that name one session share it. The clamp of an over-cap
max_tokens is the default and is named in a reply header."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gateway.core.calls import budget_session_for
from gateway.core.pipeline import IncomingCall
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from quotas.errors import QuotaExceeded
from quotas.memory import MemoryQuotaStore
from tests.gateway.core.pipeline_harness import Harness, build

TENANT = TenantPolicy(tenant="acme", limits=LimitsPolicy(calls_per_session=2))
PROMPT = "start the task kind:ok"


def _named(h: Harness, session: str) -> IncomingCall:
    return dataclasses.replace(h.call(TENANT, PROMPT), session_header=session)


async def _run(h: Harness, call: IncomingCall) -> None:
    await h.pipeline.complete(await h.pipeline.admit(call))


def test_runs_without_a_session_id_never_share_a_budget() -> None:
    async def main() -> None:
        h = build(MemoryQuotaStore())
        for _ in range(5):  # five runs, one root: none is refused
            await _run(h, h.call(TENANT, PROMPT))
        assert budget_session_for(h.call(TENANT, PROMPT)) is None

    asyncio.run(main())


def test_a_named_session_spends_its_budget() -> None:
    async def main() -> None:
        h = build(MemoryQuotaStore())
        await _run(h, _named(h, "run-1"))
        await _run(h, _named(h, "run-1"))
        with pytest.raises(QuotaExceeded) as caught:
            await h.pipeline.admit(_named(h, "run-1"))
        assert caught.value.limit == "calls_per_session"
        await _run(h, _named(h, "run-2"))  # another run has its own

    asyncio.run(main())


def test_an_over_cap_max_tokens_is_clamped_and_named() -> None:
    async def main() -> None:
        h = build(MemoryQuotaStore())
        tenant = TenantPolicy(tenant="acme", limits=LimitsPolicy(max_output_tokens=1000))
        adm = await h.pipeline.admit(h.call(tenant, PROMPT, max_tokens=64000))
        assert adm.max_tokens == 1000
        assert adm.headers(h.pipeline.s.admission)["x-lantern-max-tokens-clamped"] == "1000"
        await h.pipeline.complete(adm)
        fits = await h.pipeline.admit(h.call(tenant, PROMPT, max_tokens=10))
        assert "x-lantern-max-tokens-clamped" not in fits.headers(h.pipeline.s.admission)
        await h.pipeline.complete(fits)

    asyncio.run(main())
