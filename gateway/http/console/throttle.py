"""Login throttling per client address: after `max_failures` wrong admin tokens within
`window_s`, that address's logins are refused (429, Retry-After) until the window ends, the
right token included. Per process; the table holds at most `max_addresses` (oldest out).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_MAX_ADDRESSES = 4096


class LoginThrottle:
    def __init__(
        self,
        max_failures: int,
        window_s: float,
        clock: Callable[[], float],
        max_addresses: int = DEFAULT_MAX_ADDRESSES,
    ) -> None:
        self._max_failures = max_failures
        self._window_s = window_s
        self._clock = clock
        self._max_addresses = max_addresses
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()  # first at, count

    def retry_after_s(self, address: str) -> int | None:
        """Seconds until `address` may try again, or None when it may now."""
        found = self._current(address)
        if found is None or found[1] < self._max_failures:
            return None
        return max(math.ceil(found[0] + self._window_s - self._clock()), 1)

    def failed(self, address: str) -> None:
        first, count = self._current(address) or (self._clock(), 0)
        self._failures[address] = (first, count + 1)
        self._failures.move_to_end(address)
        while len(self._failures) > self._max_addresses:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def _current(self, address: str) -> tuple[float, int] | None:
        found = self._failures.get(address)
        if found is not None and self._clock() - found[0] >= self._window_s:
            del self._failures[address]
            return None
        return found
