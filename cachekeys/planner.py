"""Session-aware breakpoint planning: where a marker is worth its write, and for how long.

Pure apart from a per-process memo of each session's last call (digests, token counts and
times; never text), bounded per tenant. Three rules on top of `cachekeys.markers.plan_breakpoints`:
- do no harm: no marker at or past a tools/system block that keeps changing (or that holds a
  timestamp or id on a session's first call), so a volatile prefix stops paying write premiums;
- stepping stones: spare breakpoints every 20 blocks back from the conversation marker, so an
  edit of an old block (a truncated tool result) still reads the entry before it;
- the lifetime per session from its gaps (`cachekeys.ttl`) when the policy says `auto`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from adapters.records import slot_init
from cachekeys.layout import PromptLayout
from cachekeys.markers import (
    LOOKBACK_BLOCKS,
    MAX_BREAKPOINTS,
    BreakpointPlan,
    _breaks_ttl_order,
    client_markers,
    plan_breakpoints,
)
from cachekeys.tenant_table import TenantTable
from cachekeys.ttl import (
    MAX_GAPS,
    TTL_S,
    TtlChoice,
    choose_ttl,
    choose_ttl_for,
    fixed_ttl,
    long_gap_weight,
    p_long_of,
)
from cachekeys.volatile_probe import BlockProbe

MAX_SESSIONS = 100_000


@dataclass(frozen=True, slots=True)
class VolatileFinding:
    """A tools/system block whose value changes per call."""

    index: int  # into the layout
    name: str  # e.g. "system[0]"
    pattern: str  # the volatile pattern seen in it ("" when none matched: it just keeps changing)


@slot_init
@dataclass(frozen=True, slots=True)
class Advice:
    """How this call's markers are planned."""

    choice: TtlChoice
    limit: int | None = None  # markers only on blocks before this index
    volatile: VolatileFinding | None = None

    @property
    def ttl(self) -> str:
        return self.choice.ttl


def default_advice(policy_ttl: str) -> Advice:
    """No session memory: the policy's lifetime (`auto` starts at 5 minutes), no limit."""
    return Advice(fixed_ttl("1h" if policy_ttl == "1h" else "5m"))


@slot_init
@dataclass(frozen=True, slots=True)
class Steering:
    """What the autopilot decided for one call: the session root (volatile values masked),
    the advice, and the probes of its blocks."""

    root: str
    advice: Advice
    probes: tuple[BlockProbe, ...]


@slot_init
@dataclass(frozen=True, slots=True)
class ReuseRecord:
    """What the planner remembers of a session's last call."""

    digests: tuple[bytes, ...]  # stable blocks
    masked: tuple[bytes, ...]  # their volatile-masked digests
    ends: tuple[int, ...]  # cumulative token end per block
    at_s: float
    gaps_s: tuple[float, ...] = ()
    broke_at: int | None = None  # the head block where the last call's prefix changed
    long_weights: tuple[float, ...] = ()  # `long_gap_weight` of each of `gaps_s`

    @classmethod
    def of(
        cls,
        layout: PromptLayout,
        probes: tuple[BlockProbe, ...],
        now_s: float,
        previous: ReuseRecord | None,
    ) -> ReuseRecord:
        n = layout.last_stable() + 1
        ends, total = [], 0
        for tokens in layout.tokens[:n]:
            total += tokens
            ends.append(total)
        digests = tuple([b.digest for b in layout.blocks[:n]])
        masked = tuple([p.masked for p in probes[:n]])
        if previous is None:
            return cls(digests, masked, tuple(ends), now_s)
        gap = now_s - previous.at_s
        gaps = (*previous.gaps_s, gap)[-MAX_GAPS:]
        weights = (*previous.long_weights, long_gap_weight(gap))[-MAX_GAPS:]
        broke = _head_change(previous.digests, layout, n)
        return cls(digests, masked, tuple(ends), now_s, gaps, broke, weights)

    def common_tokens(self, layout: PromptLayout) -> int:
        """Tokens of the prefix this call shares with the remembered one."""
        blocks = layout.blocks
        for i, (digest, block) in enumerate(zip(self.digests, blocks, strict=False)):
            if block.digest != digest:
                return self.ends[i - 1] if i else 0
        shared = min(len(self.digests), len(blocks))
        return self.ends[shared - 1] if shared else 0


def _head_change(previous: tuple[bytes, ...], layout: PromptLayout, n: int) -> int | None:
    """The first tools/system block that differs from the previous call's (None: head kept)."""
    for i in range(min(len(previous), n)):
        block = layout.blocks[i]
        if block.level == "messages":
            return None
        if block.digest != previous[i]:
            return i
    return None


def advise(
    previous: ReuseRecord | None,
    layout: PromptLayout,
    probes: tuple[BlockProbe, ...],
    policy_ttl: str,
    now_s: float,
) -> Advice:
    volatile = _volatile(previous, layout, probes)
    limit = None if volatile is None else volatile.index
    if policy_ttl != "auto":
        return replace(default_advice(policy_ttl), limit=limit, volatile=volatile)
    if previous is None:
        return Advice(
            choose_ttl((), layout.stable_tokens(), layout.stable_tokens()), limit, volatile
        )
    gap = now_s - previous.at_s
    common = previous.common_tokens(layout) if gap <= TTL_S["1h"] else 0
    cached = layout.stable_tokens() if limit is None else layout.end(limit - 1)
    p_long = p_long_of((*previous.long_weights, long_gap_weight(gap)))
    choice = choose_ttl_for(p_long, cached, max(cached - common, 0))
    return Advice(choice, limit, volatile)


def _volatile(
    previous: ReuseRecord | None, layout: PromptLayout, probes: tuple[BlockProbe, ...]
) -> VolatileFinding | None:
    """A first call: the first head block holding a presumed-volatile value. A follow-up: the
    first changed head block when only volatile values changed, or when it changed last time
    too; a head that stayed put proves itself stable."""
    n = layout.last_stable() + 1
    if previous is None:
        for i in range(n):
            block = layout.blocks[i]
            if block.level != "messages" and probes[i].is_presumed_volatile:
                return VolatileFinding(i, block.name, probes[i].pattern)
        return None
    changed = _head_change(previous.digests, layout, n)
    if changed is None:
        return None
    block = layout.blocks[changed]
    if changed < len(previous.masked) and previous.masked[changed] == probes[changed].masked:
        return VolatileFinding(changed, block.name, probes[changed].pattern)
    if previous.broke_at == changed:
        return VolatileFinding(changed, block.name, probes[changed].pattern)
    return None


# --- planning --------------------------------------------------------------------------------


def plan_markers(
    layout: PromptLayout, advice: Advice, min_tokens: int, reserved: int = 0
) -> BreakpointPlan:
    """`plan_breakpoints` on the blocks before the advice's limit, then stepping stones."""
    client = in_view = client_markers(layout)
    view, limit = layout, advice.limit
    if limit is not None:
        view = PromptLayout(layout.blocks[:limit], layout.tokens[:limit])
        reserved += sum(1 for i in client if i >= limit)
        in_view = {i: ttl for i, ttl in client.items() if i < limit}
    plan = plan_breakpoints(view, advice.choice.ttl, min_tokens, reserved, in_view)
    budget = MAX_BREAKPOINTS - len(in_view) - reserved - len(plan.indices)
    stones = _with_stones(view, plan, budget, min_tokens, in_view)
    return BreakpointPlan(stones, plan.ttl, plan.min_tokens)


def _with_stones(
    layout: PromptLayout,
    plan: BreakpointPlan,
    budget: int,
    min_tokens: int,
    client: Mapping[int, str | None],
) -> tuple[int, ...]:
    """Spare breakpoints every 20 blocks back from the lowest conversation marker: each looks
    back over its own 20 blocks, so an entry an earlier call left anywhere in the conversation
    stays reachable after an edit behind it. A stone below the last read writes nothing.
    `client`: the client's markers on `layout` (`client_markers`)."""
    if budget <= 0:
        return plan.indices
    marked = set(plan.indices) | set(client)
    in_messages = [i for i in marked if layout.blocks[i].level == "messages"]
    if not in_messages:
        return plan.indices
    anchor, stones = min(in_messages), list[int]()
    while len(stones) < budget:
        stone = _markable_message_at_or_before(layout, anchor - LOOKBACK_BLOCKS)
        if stone < 0 or layout.end(stone) < min_tokens or stone in marked:
            break
        if _breaks_ttl_order(client, stone, plan.ttl):
            break
        stones.append(stone)
        anchor = stone
    return tuple(sorted((*plan.indices, *stones)))


def _markable_message_at_or_before(layout: PromptLayout, index: int) -> int:
    for i in range(min(index, len(layout.blocks) - 1), -1, -1):
        block = layout.blocks[i]
        if block.level != "messages":
            return -1
        if block.is_markable and not block.is_volatile:
            return i
    return -1


class SessionReuseMemo:
    """Each session's last call, by tenant and session root. Past `max_sessions` the tenant
    holding the most loses its oldest: one tenant's new sessions never change another's plan."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._records: TenantTable[str, ReuseRecord] = TenantTable(max_sessions)

    def get(self, tenant: str, root: str) -> ReuseRecord | None:
        return self._records.get((tenant, root))

    def remember(
        self,
        tenant: str,
        root: str,
        layout: PromptLayout,
        probes: tuple[BlockProbe, ...],
        now_s: float,
    ) -> None:
        key = (tenant, root)
        previous = self._records.get(key)
        self._records[key] = ReuseRecord.of(layout, probes, now_s, previous)

    def restore(self, tenant: str, root: str, record: ReuseRecord | None) -> None:
        """Put back a session's record (a keep-warm read is not one of the session's calls)."""
        if record is None:
            self._records.pop((tenant, root), None)
        else:
            self._records[(tenant, root)] = record

    def __len__(self) -> int:
        return len(self._records)

    def num_entries(self, tenant: str) -> int:
        return self._records.num_entries(tenant)
