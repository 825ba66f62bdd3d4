"""Where a call's prompt is prepared and counted: on the event loop, or for a large call in
the large-call lane's worker thread. Owns that choice and the lane's order between tenants;
preparing and counting are the prompt port's and the counter's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.core.tenant_gate import TenantThreads
from gateway.ports import PreparedPrompt, PromptPort, TokenCounting

if TYPE_CHECKING:
    from gateway.core.calls import IncomingCall


@dataclass(frozen=True, slots=True)
class MeasureLane:
    """Preparation and token counting of large calls, one at a time in a worker thread, over
    a prompt port and a counter of their own: the loop's memos are never touched from a
    thread, and the loop keeps serving other calls meanwhile. Results equal the loop's.
    Waiting calls are served a tenant at a time in turn, so a tenant sending many large calls
    queues behind its own, never another tenant's one call behind all of its."""

    prompts: PromptPort
    counter: TokenCounting
    min_body_bytes: int
    # one job at all: the lane's memos are used from one thread at a time
    threads: TenantThreads = field(default_factory=lambda: TenantThreads(1, 1))


async def measure(
    prompts: PromptPort,
    counter: TokenCounting,
    lane: MeasureLane | None,
    call: IncomingCall,
    model: str,
) -> tuple[PreparedPrompt, int]:
    """The call's prepared prompt and prompt tokens; in the lane when its body is large."""
    if lane is None or call.body_bytes < lane.min_body_bytes:
        return measure_now(prompts, counter, call, model)
    return await lane.threads.run(
        call.tenant.tenant, measure_now, lane.prompts, lane.counter, call, model
    )


def measure_now(
    prompts: PromptPort, counter: TokenCounting, call: IncomingCall, model: str
) -> tuple[PreparedPrompt, int]:
    prepared = prompts.prepare(call.wire, call.body, call.request, call.tenant, model)
    return prepared, counter.count_prompt(prepared.request, call.tenant.tenant)
