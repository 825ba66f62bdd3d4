"""Each replica's prefill rate, learned from what the fleet observes (no engine reports it):
a token-weighted moving ratio of prefilled tokens to prefill seconds, clamped to a sane range.
Plain arithmetic, O(1) per sample; the fleet decides which observations are samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIN_TOK_S = 50.0  # below this a "prefill" is a stalled engine, not a rate
MAX_TOK_S = 200_000.0
MIN_SAMPLE_TOKENS = 32  # shorter prefills are dominated by the fixed cost (base_ttft_s)


@dataclass(slots=True)
class PrefillRate:
    """`tok_s` starts at the configured (or default) rate, held as `prior_tokens` worth of
    evidence; each sample of `tokens` prefilled in `seconds` decays both sums by `decay` and adds
    itself, so long prefills weigh more than short ones and old samples fade geometrically.
    `pinned`: the operator's figure is final and samples are ignored."""

    start_tok_s: float
    pinned: bool = False
    decay: float = 0.8
    prior_tokens: float = 2000.0
    tokens: float = 0.0
    seconds: float = 0.0
    num_samples: int = 0

    def __post_init__(self) -> None:
        self.tokens = self.prior_tokens
        self.seconds = self.prior_tokens / self.start_tok_s

    @property
    def tok_s(self) -> float:
        if self.pinned:
            return self.start_tok_s
        return min(max(self.tokens / self.seconds, MIN_TOK_S), MAX_TOK_S)

    def capped(self, pending: Iterable[tuple[int, float]], sibling: float | None = None) -> float:
        """The rate, capped by prefills still unfinished: `tokens` of queued prefill (a call's
        own and what was ahead of it) dispatched `seconds` ago (less the fixed cost) with no
        first token yet mean the replica computes fewer than tokens/seconds. Before the first
        sample arrives this is the only evidence a burst of calls gives; a pinned rate is final. `sibling`: the rate another replica of the same backend
        has learned, which replaces the configured start while this one has no sample."""
        rate = self.tok_s
        if self.pinned:
            return rate
        if sibling is not None and not self.num_samples:  # no sample: a sibling's learned rate
            rate = sibling
        for tokens, seconds in pending:
            if tokens >= MIN_SAMPLE_TOKENS and seconds > 0:
                rate = min(rate, max(tokens / seconds, MIN_TOK_S))
        return rate

    def observe(self, tokens: int, seconds: float) -> bool:
        """One prefill of `tokens` that took `seconds`; False where it is no usable sample."""
        if self.pinned or tokens < MIN_SAMPLE_TOKENS or seconds <= 0:
            return False
        # clamp the sample too, so one stalled call cannot drag the ratio past the range
        seconds = min(max(seconds, tokens / MAX_TOK_S), tokens / MIN_TOK_S)
        self.tokens = self.decay * self.tokens + tokens
        self.seconds = self.decay * self.seconds + seconds
        self.num_samples += 1
        return True
