"""Choosing a cache entry's lifetime by price: 5 minutes (write 1.25x) or 1 hour (write 2x).

Pure. From the gaps observed between a session's calls, the chance that the next gap outlives
5 minutes but not 1 hour; a 1 h entry pays when that chance times what a lost prefix costs to
rebuild exceeds the extra 0.75x on the tokens this call writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from adapters.records import slot_init

Ttl = Literal["5m", "1h"]
TTL_S: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
PRICE_READ = 0.1  # of the input price (C2)
PRICE_WRITE: dict[str, float] = {"5m": 1.25, "1h": 2.0}
# Prior belief before a session shows its rhythm: agents mostly call again within seconds.
PRIOR_LONG_GAPS = 0.05
PRIOR_GAPS = 1.0
MAX_GAPS = 32  # the most recent gaps a session keeps
# Each observed gap stands for nearby ones: a log-normal spread of a factor e around it, so a
# 4-minute pause already says that a 6-minute one is likely, and a 20-second one says it is not.
GAP_SPREAD = 1.0


@slot_init
@dataclass(frozen=True, slots=True)
class TtlChoice:
    """The lifetime chosen for this call's markers and the numbers behind it (for the ledger)."""

    ttl: Ttl
    p_long: float  # estimated chance that the next gap is over 5 min and within 1 h
    saving: float  # expected tokens-price saved by 1 h over 5 m on the next call
    premium: float  # extra tokens-price 1 h costs on this call's writes

    def as_dict(self) -> dict[str, object]:
        return {
            "ttl": self.ttl,
            "p_long": round(self.p_long, 4),
            "saving": round(self.saving, 1),
            "premium": round(self.premium, 1),
        }


def p_long_gap(gaps_s: Sequence[float]) -> float:
    """Chance that the next gap lies in (5 min, 1 h]: a smoothed count over the gaps seen,
    each spread log-normally around its value."""
    return p_long_of([long_gap_weight(g) for g in gaps_s])


def long_gap_weight(gap_s: float) -> float:
    """How much one observed gap counts towards the long ones: the part of its log-normal
    spread that lies in (5 min, 1 h]. A session keeps these beside its gaps (each computed
    once, when the gap is seen)."""
    centre = math.log(max(gap_s, 1e-3))
    return _phi((_LOG_HIGH - centre) / GAP_SPREAD) - _phi((_LOG_LOW - centre) / GAP_SPREAD)


def p_long_of(weights: Sequence[float]) -> float:
    """`p_long_gap` from the gaps' `long_gap_weight`s."""
    return (sum(weights) + PRIOR_LONG_GAPS) / (len(weights) + PRIOR_GAPS)


_LOG_LOW, _LOG_HIGH = math.log(TTL_S["5m"]), math.log(TTL_S["1h"])
_SQRT2 = math.sqrt(2.0)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / _SQRT2))


def choose_ttl(gaps_s: Sequence[float], cached_tokens: int, write_tokens: int) -> TtlChoice:
    """`cached_tokens`: the prefix this call leaves cached (what a lost entry makes the next
    call rebuild at the write price instead of reading); `write_tokens`: what this call writes.
    1 h only when the expected saving pays the 2x write (a call that writes nothing keeps 5 m)."""
    return choose_ttl_for(p_long_gap(gaps_s), cached_tokens, write_tokens)


def choose_ttl_for(p_long: float, cached_tokens: int, write_tokens: int) -> TtlChoice:
    """`choose_ttl` given the chance of a long gap (`p_long_of` the session's gap weights)."""
    saving = p_long * (PRICE_WRITE["5m"] - PRICE_READ) * cached_tokens
    premium = (PRICE_WRITE["1h"] - PRICE_WRITE["5m"]) * write_tokens
    is_long = write_tokens > 0 and saving > premium
    return TtlChoice("1h" if is_long else "5m", p_long, saving, premium)


def fixed_ttl(ttl: Ttl) -> TtlChoice:
    """A policy's fixed lifetime (no estimate made)."""
    return TtlChoice(ttl, 0.0, 0.0, 0.0)
