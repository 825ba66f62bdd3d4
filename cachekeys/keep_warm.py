"""Keeping a paused session's cache entry warm: is one minimal read worth it? (`keep_warm`)

Pure. Just before a session's entry expires, resending its last prompt for one output token
reads the prefix (0.1x) and, at the provider, restarts the entry's lifetime. That pays when
the chance that the session's next call comes after the entry would have expired, yet within
the refreshed lifetime, times what that call would otherwise pay to rebuild the prefix
(write − read price on every cached token), exceeds the read itself. The chance is conditioned
on the pause having already lasted until now, and estimated from the session's gaps like the
lifetime choice (`cachekeys.ttl`): each gap spread log-normally around its value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cachekeys.ttl import GAP_SPREAD, PRICE_READ, PRICE_WRITE, TTL_S, Ttl

# A session is hot after this many observed gaps: a first pause says nothing about the next.
MIN_GAPS = 2
# Prior belief, as pseudo-pauses that never end: sessions do stop, and a session that usually
# calls again within seconds yet has been silent for minutes has most likely stopped.
ENDED_WEIGHT = 1.0
# How long before expiry the read is sent (it must land before the entry goes).
LEAD_S = 20.0
# Output price over input price, for the one token the read generates, when the route's prices
# do not say (Claude: 5x).
OUTPUT_RATIO = 5.0
# At most this many reads per pause: a session that stops for good stops costing.
MAX_REFRESHES = 3


@dataclass(frozen=True, slots=True)
class WarmChoice:
    """One keep-warm decision and the numbers behind it (in input-token prices)."""

    refresh: bool
    p_window: float  # chance the next call lands in (expiry, now + lifetime], given pause ≥ now
    saving: float  # expected rebuild cost avoided
    cost: float  # the read: prefix at the read price plus one output token

    def as_dict(self) -> dict[str, object]:
        return {
            "refresh": self.refresh,
            "p_window": round(self.p_window, 4),
            "saving": round(self.saving, 1),
            "cost": round(self.cost, 1),
        }


def _survival(gap_s: float, at_s: float) -> float:
    """P(a gap spread log-normally around `gap_s` exceeds `at_s`)."""
    z = (math.log(max(at_s, 1e-3)) - math.log(max(gap_s, 1e-3))) / GAP_SPREAD
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def p_next_in_window(gaps_s: Sequence[float], idle_s: float, low_s: float, high_s: float) -> float:
    """P(low < next gap ≤ high | next gap > idle), over the spread gaps and the ended prior."""
    alive = ENDED_WEIGHT + sum(_survival(g, idle_s) for g in gaps_s)
    inside = sum(_survival(g, low_s) - _survival(g, high_s) for g in gaps_s)
    return min(1.0, max(0.0, inside / alive))


def keep_warm_choice(
    gaps_s: Sequence[float],
    ttl: Ttl,
    expires_s: float,
    prefix_tokens: int,
    refreshes: int = 0,
    output_ratio: float = OUTPUT_RATIO,
) -> WarmChoice:
    """Decide at `expires_s − LEAD_S` seconds after the session's last call, when its entry
    (lifetime `ttl`) expires `expires_s` after that call; `refreshes`: reads already sent in
    this pause; `output_ratio`: the output price over the input price. A read moves the expiry
    to now + the lifetime."""
    idle_s = expires_s - LEAD_S
    p = p_next_in_window(gaps_s, idle_s, expires_s, idle_s + TTL_S[ttl])
    saving = p * (PRICE_WRITE[ttl] - PRICE_READ) * prefix_tokens
    cost = PRICE_READ * prefix_tokens + output_ratio
    hot = len(gaps_s) >= MIN_GAPS and refreshes < MAX_REFRESHES and prefix_tokens > 0
    return WarmChoice(hot and saving > cost, p, saving, cost)


def next_expiry(expires_s: float, ttl: Ttl) -> float:
    """The entry's expiry (seconds after the last call) once a read was sent before it."""
    return expires_s - LEAD_S + TTL_S[ttl]
