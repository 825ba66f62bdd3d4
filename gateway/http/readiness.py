"""Whether this process should be sent new calls: `starting` until the lifespan's start-up is
done, `ready` while serving, `draining` from the first SIGTERM on; a ready process with a
problem (its ledger file deleted) is not sent calls either. Liveness is another question
(`/health`: the process answers at all).

Owns the state and its transitions; the routes and the server read and set it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal

log = logging.getLogger("lantern.ready")
ReadyState = Literal["starting", "ready", "draining"]
HealthCheck = Callable[[], tuple[str, ...]]  # codes of what is wrong; () when all is well


class Readiness:
    def __init__(self, checks: Sequence[HealthCheck] = ()) -> None:
        self.state: ReadyState = "starting"
        self._checks = tuple(checks)

    def problems(self) -> tuple[str, ...]:
        """What the checks find now (blocking: file system calls; run it in a thread)."""
        return tuple(code for check in self._checks for code in check())

    @property
    def is_ready(self) -> bool:
        return self.state == "ready"

    def started(self) -> None:
        if self.state == "starting":
            self.state = "ready"

    def drain(self) -> None:
        if self.state != "draining":
            log.info("draining: /ready answers 503 from now on")
        self.state = "draining"
