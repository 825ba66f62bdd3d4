"""The health of the fleet's link to its shared store (Redis): while it is down the fleet decides
on its own process's view, on purpose, and says so once in the log and in two metrics.

Owns the down/up bookkeeping and the back-off between tries; no Redis commands here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger("lantern.fleet.shared")


class SharedLink:
    """After a failure the store is skipped for `retry_s` (of `clock`), so an outage costs one
    timeout per interval, not one per call. The first failure of an outage is logged, then every
    100th fallback; the return is logged too."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        retry_s: float = 1.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._clock, self._retry_s = clock, retry_s
        self._down_since: float | None = None
        self._last_try = 0.0
        self.num_fallbacks = 0
        self._down = Gauge(
            "lantern_fleet_shared_store_down",
            "1 while the fleet's shared store (Redis) is unreachable and it routes on the local view",
            registry=registry,
        )
        self._fallbacks = Counter(
            "lantern_fleet_shared_fallbacks",
            "Fleet operations done on the local view because the shared store was down",
            ["op"],
            registry=registry,
        )
        self._recalls = Counter(
            "lantern_fleet_shared_recalls",
            "Session lookups in the shared store, by whether the session had a shared entry",
            ["found"],
            registry=registry,
        )

    def recalled(self, found: bool) -> None:
        self._recalls.labels("true" if found else "false").inc()

    @property
    def is_down(self) -> bool:
        return self._down_since is not None

    def should_try(self) -> bool:
        """False while down and the retry interval has not passed since the last try."""
        if self._down_since is None:
            return True
        now = self._clock()
        if now - self._last_try >= self._retry_s:
            self._last_try = now
            return True
        return False

    def failed(self, op: str, exc: BaseException) -> None:
        self.num_fallbacks += 1
        self._fallbacks.labels(op).inc()
        if self._down_since is None:
            self._down_since = self._last_try = self._clock()
            self._down.set(1)
            log.warning(
                "shared fleet store unreachable (%s: %r): routing on this process's view", op, exc
            )
        elif self.num_fallbacks % 100 == 0:
            log.warning("shared fleet store still down: %d fallbacks", self.num_fallbacks)

    def skipped(self, op: str) -> None:
        """An operation not tried because the store is down (inside the retry interval)."""
        self.num_fallbacks += 1
        self._fallbacks.labels(op).inc()

    def succeeded(self) -> None:
        if self._down_since is not None:
            log.warning(
                "shared fleet store back after %.1f s: affinity and index shared again",
                self._clock() - self._down_since,
            )
            self._down_since = None
            self._down.set(0)
