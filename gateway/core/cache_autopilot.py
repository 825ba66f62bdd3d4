"""The cache autopilot's per-process state: volatile probes per tenant pattern set, and each
session's last call for the breakpoint planner (cachekeys/planner.py).

Owns memory and the clock only; every decision is in cachekeys. Must not keep prompt text.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from cachekeys.keys import session_root
from cachekeys.layout import PromptLayout
from cachekeys.planner import SessionReuseMemo, Steering, advise
from cachekeys.volatile_probe import VolatileProbe
from policies.cache import CachePolicy

MAX_PROBES = 256  # distinct tenant pattern sets kept compiled


class CacheAutopilot:
    """Per-process memos behind the planner; `steer` at prepare, `remember` once admitted."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_sessions: int = 100_000
    ) -> None:
        self._clock = clock
        self._probes: dict[tuple[str, ...], VolatileProbe] = {}
        self.sessions = SessionReuseMemo(max_sessions)

    def steer(
        self,
        policy: CachePolicy,
        tenant: str,
        layout: PromptLayout,
        salt: str,
        known_root: str | None,
    ) -> Steering:
        """`known_root`: the root the conversation's previous call had (its head is equal)."""
        probes = self._probe_for(policy).probes(layout.blocks)
        root = known_root or session_root(layout, salt, [p.masked for p in probes])
        previous = self.sessions.get(tenant, root)
        advice = advise(previous, layout, probes, policy.ttl, self._clock())
        return Steering(root, advice, probes)

    def remember(self, tenant: str, steering: Steering, layout: PromptLayout) -> None:
        self.sessions.remember(tenant, steering.root, layout, steering.probes, self._clock())

    def _probe_for(self, policy: CachePolicy) -> VolatileProbe:
        n = policy.normalise
        key = (str(n.default_patterns), *n.volatile_patterns)
        probe = self._probes.get(key)
        if probe is None:
            if len(self._probes) >= MAX_PROBES:
                self._probes.clear()
            probe = self._probes[key] = VolatileProbe(n.volatile_patterns, n.default_patterns)
        return probe


def with_steering(diagnosis_json: str, steering: Steering) -> str:
    """The diagnosis JSON with the autopilot's choices: the lifetime (and why), the volatile
    block it stopped writing past."""
    body = orjson.loads(diagnosis_json)
    body["ttl_choice"] = steering.advice.choice.as_dict()
    found = steering.advice.volatile
    if found is not None:
        body["volatile"] = {"block": found.name, "pattern": found.pattern}
    return orjson.dumps(body).decode()
