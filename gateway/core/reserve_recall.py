"""The two round trips to the shared store a call makes before its plan, made at once: the quota
reservation and the recall of the session's shared affinity. Neither needs the other's answer,
so the recall adds only what it takes beyond the reservation instead of a round trip of its own.
"""

from __future__ import annotations

import asyncio

import anyio

from adapters.types import Usage
from gateway.ports import AdmissionPort, RoutingPort, Ticket
from policies.model import TenantPolicy


async def reserve_recalling(
    admission: AdmissionPort,
    routing: RoutingPort,
    tenant: TenantPolicy,
    session_key: str,
    *,
    budget_session: str | None,
    prompt_tokens: int,
    max_tokens: int,
    worst_case_usd: float,
) -> Ticket:
    """Reserve the call's quota while the router recalls the session (by its tenant-scoped
    `session_key`); return once both are done. A refused reservation cancels the recall (the
    call goes nowhere); a recall that fails once the quota is held gives the reservation back
    before the error goes on."""
    pending = routing.recall(tenant.tenant, session_key)
    reserve = admission.reserve(
        tenant,
        session_id=budget_session,
        prompt_tokens=prompt_tokens,
        max_output_tokens=max_tokens,
        worst_case_usd=worst_case_usd,
    )
    if pending is None:  # nothing shared: no task to run beside the reservation
        return await reserve
    recall = asyncio.ensure_future(pending)
    try:
        ticket = await reserve
    except BaseException:
        recall.cancel()
        raise
    try:
        await recall
    except BaseException:
        with anyio.CancelScope(shield=True):
            await admission.settle(ticket, usage=Usage(), cost_usd=0.0)
        raise
    return ticket
