"""Memory a large call used, given back to the system once its reply is sent. glibc keeps what
Python frees in its arenas for reuse: a 28 MiB body left ~200 MiB resident until the next large
call. `malloc_trim` returns it. Where the C library is not glibc this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from starlette.background import BackgroundTask


class HeapTrim:
    """Built once per app (loading the C library is not done per call, nor at import)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self._trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)

    def after_reply(self, body_bytes: int, min_body_bytes: int) -> BackgroundTask | None:
        """A task trimming the heap after the reply to a body of `body_bytes`, when it is large
        (Starlette runs a plain function in a worker thread: a trim takes a few ms)."""
        if self._trim is None or body_bytes < min_body_bytes:
            return None
        return BackgroundTask(self._trim, 0)
