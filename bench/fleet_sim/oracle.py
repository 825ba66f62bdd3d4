"""The oracle strategies: Lantern's routing policy fed the simulator's truth instead of the
router's own index and load signal.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from bench.fleet_sim.state import Replica
from routing.prefix_index import PrefixIndex

# Lantern's policy fed the truth: `oracle_cache` the true cache contents instead of the router's
# index (and no engine load signal); `oracle` also the true queue and KV usage at every decision.
ORACLES = ("oracle", "oracle_cache")


class OracleIndex(PrefixIndex):
    """The router's index replaced by the truth: each replica's cache contents, plus the
    prompts already queued there (they will be resident by the time a follower is admitted).
    Which blocks are in live use (`recent_blocks`) it estimates as the router does."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        super().__init__()
        self.replicas = {r.key: r for r in replicas}
        for r in replicas:
            self.add_replica(r.key, r.pool.capacity)

    def matched_blocks(self, replica: str, hashes: Sequence[Hashable]) -> int:
        r = self.replicas[replica]
        best = r.pool.match(hashes)
        for q in r.waiting:
            n = 0
            for a, b in zip(q.prompt, hashes, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def correct(self, replica: str, predicted_blocks: int, reported_blocks: int) -> None:
        return None
