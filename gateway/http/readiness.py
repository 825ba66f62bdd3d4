"""Whether this process should be sent new calls: `starting` until the lifespan's start-up is
done, `ready` while serving, `draining` from the first SIGTERM on. Liveness is another question
(`/health`: the process answers at all).

Owns the state and its transitions; the routes and the server read and set it.
"""

from __future__ import annotations

import logging
from typing import Literal

log = logging.getLogger("lantern.ready")
ReadyState = Literal["starting", "ready", "draining"]


class Readiness:
    def __init__(self) -> None:
        self.state: ReadyState = "starting"

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
