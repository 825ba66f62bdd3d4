"""The cache autopilot's per-process state: volatile probes per tenant pattern set, each
session's last call for the breakpoint planner (cachekeys/planner.py), and the places it learnt
(gateway/core/cache_learning.py).

Owns memory and the clock only; every decision is in cachekeys. Keeps prompt text only as the
learner's bounded in-memory head texts (tools, system), never in the session records.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import orjson

from cachekeys.keys import session_root
from cachekeys.layout import PromptLayout
from cachekeys.planner import ReuseRecord, SessionReuseMemo, Steering, advise
from cachekeys.tenant_table import TenantTable
from cachekeys.volatile_learn import learn_place
from cachekeys.volatile_probe import VolatileProbe
from gateway.core.cache_learning import HeadTexts, LearnedPlaces
from policies.cache import CachePolicy

# (tenant, (number of tools, digests of the first message's blocks)): links a session's calls
ThreadKey = tuple[str, tuple[int, tuple[bytes, ...]]]

MAX_PROBES = 256  # distinct tenant pattern sets kept compiled


class CacheAutopilot:
    """Per-process memos behind the planner; `steer` at prepare, `remember` once admitted.

    `remember` only notes the call (with the time it was admitted); `flush` writes what was
    noted, in order, after the reply (the port's `reconcile`), and every read of the memos
    (`steer`, `sessions`) flushes first: a read sees each call admitted before it, as if it
    had been written at once, also while that call is still in flight."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_sessions: int = 100_000
    ) -> None:
        self._clock = clock
        self._probes: dict[tuple[str, ...], VolatileProbe] = {}
        self._sessions = SessionReuseMemo(max_sessions)
        # calls admitted and not written yet: (tenant, steering, layout, when admitted)
        self._pending: list[tuple[str, Steering, PromptLayout, float]] = []
        self.learned = LearnedPlaces()
        # (pattern, the value it had on the call before) of the latest place learnt
        self.discovered: tuple[str, str] | None = None
        self._texts = HeadTexts()
        # (tenant, number of tools + first message) -> the root of its latest call: a head that
        # changes by a value of no known shape would otherwise start a new session every call;
        # bounded per tenant, as the sessions are
        self._threads: TenantTable[tuple[int, tuple[bytes, ...]], str] = TenantTable(max_sessions)

    @property
    def sessions(self) -> SessionReuseMemo:
        """Each session's last call, with every call admitted so far."""
        if self._pending:
            self.flush()
        return self._sessions

    def steer(
        self,
        policy: CachePolicy,
        tenant: str,
        layout: PromptLayout,
        salt: str,
        known_root: str | None,
    ) -> Steering:
        """`known_root`: the root the conversation's previous call had (its head is equal)."""
        if self._pending:
            self.flush()
        probes = self._probe_for(policy).probes(layout.blocks)
        root = known_root or session_root(layout, salt, [p.masked for p in probes])
        previous = self._sessions.get(tenant, root)
        if previous is None and known_root is None:  # a head that changed: the same thread?
            linked = self._threads.get(_thread_key(tenant, layout))
            found = None if linked is None else self._sessions.get(tenant, linked)
            if linked is not None and found is not None:
                root, previous = linked, found
        advice = advise(previous, layout, probes, policy.ttl, self._clock())
        if previous is not None and policy.normalise.relocate_volatile == "auto":
            self._learn(tenant, previous, layout)
        return Steering(root, advice, probes)

    def remember(self, tenant: str, steering: Steering, layout: PromptLayout) -> None:
        """Note an admitted call; `flush` (or the next read) writes it."""
        self._pending.append((tenant, steering, layout, self._clock()))

    def flush(self) -> None:
        """Write the calls noted since the last flush, in the order they were admitted."""
        pending, self._pending = self._pending, []
        for tenant, steering, layout, now_s in pending:
            self._write(tenant, steering, layout, now_s)

    def _write(self, tenant: str, steering: Steering, layout: PromptLayout, now_s: float) -> None:
        self._sessions.remember(tenant, steering.root, layout, steering.probes, now_s)
        self._threads[_thread_key(tenant, layout)] = steering.root  # now the tenant's newest
        self._texts.put_head(tenant, layout.blocks)

    def _learn(self, tenant: str, previous: ReuseRecord, layout: PromptLayout) -> None:
        """The first head block that changed, when it is a system block or a tool whose
        previous text is known: the place where only a value differs (in a tool, in its
        description or in one in its parameters' schema) is relocated from the tenant's next
        call."""
        for i in range(min(len(previous.digests), len(layout.blocks))):
            block = layout.blocks[i]
            if block.level == "messages" or block.digest != previous.digests[i]:
                break
        else:
            return
        if block.level == "messages" or block.digest == previous.digests[i]:
            return
        old = self._texts.get(tenant, previous.digests[i])
        if old is None:
            return
        pair = (old, block.text) if block.level == "system" else _descriptions(old, block.text)
        if pair is None:
            return
        pattern = learn_place(*pair, repeated=previous.broke_at == i)
        found = None if pattern is None else re.search(pattern, pair[0])
        if pattern is not None and found is not None and self.learned.add(tenant, pattern):
            self.discovered = (pattern, found.group(0))

    def _probe_for(self, policy: CachePolicy) -> VolatileProbe:
        n = policy.normalise
        key = (str(n.default_patterns), *n.volatile_patterns)
        probe = self._probes.get(key)
        if probe is None:
            if len(self._probes) >= MAX_PROBES:
                self._probes.clear()
            probe = self._probes[key] = VolatileProbe(n.volatile_patterns, n.default_patterns)
        return probe


def _descriptions(old: str, new: str) -> tuple[str, str] | None:
    """Two versions of a tool block's text (its JSON as sent): the one description that differs
    between them, the tool's own or one in its parameters' schema, when nothing else does."""
    a, b = json.loads(old), json.loads(new)
    found: list[tuple[str, str]] = []
    if not _differ_in_descriptions(a, b, None, found) or len(found) != 1:
        return None
    return found[0]


def _differ_in_descriptions(
    a: object, b: object, key: object, found: list[tuple[str, str]]
) -> bool:
    """Whether `a` and `b` (JSON values under `key`) differ only in `description` strings, each
    such pair added to `found`; False as soon as they differ otherwise, or in more than one."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            _differ_in_descriptions(a[k], b[k], k, found) for k in a
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            _differ_in_descriptions(x, y, None, found) for x, y in zip(a, b, strict=True)
        )
    if a == b:
        return True
    if key != "description" or not isinstance(a, str) or not isinstance(b, str) or found:
        return False
    found.append((a, b))
    return True


def _thread_key(tenant: str, layout: PromptLayout) -> ThreadKey:
    """The number of tools and the first message: not the system prompt nor the tools' text
    (a value of no known shape may change in either), not Lantern's volatile tail. A tuple of
    the blocks' digests, not a hash of them: a dict key, built without hashing again."""
    first = next((b.locator[1] for b in layout.blocks if b.level == "messages"), None)
    num_tools = 0
    digests = []
    for b in layout.blocks:
        if b.level == "tools":
            num_tools += 1
        elif b.level == "messages" and b.locator[1] == first and not b.is_volatile:
            digests.append(b.digest)
    return tenant, (num_tools, tuple(digests))


def with_steering(diagnosis_json: str, steering: Steering) -> str:
    """The diagnosis JSON with the autopilot's choices (`add_steering`)."""
    body = orjson.loads(diagnosis_json)
    add_steering(body, steering)
    return orjson.dumps(body).decode()


def add_steering(body: dict[str, object], steering: Steering) -> None:
    """Into the diagnosis JSON's object, the autopilot's choices: the lifetime (and why), the
    volatile block it stopped writing past."""
    body["ttl_choice"] = steering.advice.choice.as_dict()
    found = steering.advice.volatile
    if found is not None:
        body["volatile"] = {"block": found.name, "pattern": found.pattern}
