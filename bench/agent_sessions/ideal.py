"""A trace's ideal cost, worked out without the gateway: an oracle that knows every future call.

It uses only the provider fake's own view of a body (chained block digests and token ends,
`tests.fakes.prompt_cache.anthropic_blocks`): unlimited breakpoints and look-back, each call
reads the longest live prefix it shares with an earlier entry, and writes what the next call
will re-read (5 min when the next call comes within 5 minutes, 1 h when within the hour, not at
all otherwise). A lower bound for any marker placement under the provider's rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adapters.tokens import TokenCounter
from bench.agent_sessions.session import Body
from tests.fakes.prompt_cache import PRICE_READ, PRICE_WRITE, TTL_S, Block, anthropic_blocks


@dataclass(frozen=True, slots=True)
class IdealCost:
    cost: float
    uncached: int

    @property
    def percent(self) -> float:
        return 100.0 * self.cost / self.uncached


def ideal_cost(
    bodies: Sequence[Body],
    times_s: Sequence[float],
    prompts: Sequence[int],
    min_tokens: int = 1024,
    fixed_ttl: str | None = None,
) -> IdealCost:
    """`fixed_ttl`: the oracle knows the next call's prefix but not when it comes: it always
    writes with this lifetime (the best an admin who knew the pause distribution could set)."""
    counter = TokenCounter()
    chains = [_chain(counter, b) for b in bodies]
    entries: dict[bytes, tuple[float, float]] = {}  # chained digest -> (expiry, lifetime)
    cost = 0.0
    for t, chain in enumerate(chains):
        now = times_s[t]
        read = _read(chain, entries, now)
        written, ttl = _oracle_write(chains, times_s, t, read, min_tokens, fixed_ttl)
        for block in chain:
            if read < block.end <= written:
                entries[block.digest] = (now + TTL_S[ttl], TTL_S[ttl])
        prompt = prompts[t]
        cost += PRICE_READ * read + PRICE_WRITE[ttl] * (written - read)
        cost += prompt - max(read, written)
    return IdealCost(cost, sum(prompts))


def _chain(counter: TokenCounter, body: Body) -> list[Block]:
    model = str(body["model"])
    return anthropic_blocks(body, lambda text: counter.count_text(model, text))


def _read(chain: list[Block], entries: dict[bytes, tuple[float, float]], now: float) -> int:
    """The longest live prefix; reading refreshes every entry along it for its lifetime."""
    read = 0
    for block in chain:
        found = entries.get(block.digest)
        if found is not None and found[0] > now:
            entries[block.digest] = (now + found[1], found[1])
            read = block.end
    return read


def _oracle_write(
    chains: list[list[Block]],
    times_s: Sequence[float],
    t: int,
    read: int,
    min_tokens: int,
    fixed_ttl: str | None,
) -> tuple[int, str]:
    """The prefix the next call re-reads, with the shortest lifetime that reaches it."""
    if t + 1 >= len(chains):
        return read, fixed_ttl or "5m"
    gap = times_s[t + 1] - times_s[t]
    if fixed_ttl is not None:
        ttl = fixed_ttl
    elif gap > TTL_S["1h"]:
        return read, "5m"
    else:
        ttl = "5m" if gap <= TTL_S["5m"] else "1h"
    shared = common_end(chains[t], chains[t + 1])
    if shared < min_tokens or shared <= read:
        return read, ttl
    return shared, ttl


def common_end(a: list[Block], b: list[Block]) -> int:
    """Where two chains of blocks stop agreeing: the end (in tokens) of their common prefix."""
    end = 0
    for x, y in zip(a, b, strict=False):
        if x.digest != y.digest:
            break
        end = x.end
    return end
