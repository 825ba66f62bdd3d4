"""Context windows of self-hosted replicas: what each one says it can hold (`max_model_len`, read
from its `/models` card as vLLM and the bundled engine report it, or configured), and whether a
call fits. A call that cannot fit must be answered before dispatch, never sent to fail upstream.

No routing here: the fleet asks, the pipeline clamps or rejects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

import httpx

from gateway.ports import Attempt, Candidate, ModelRoute
from routing.types import replica_key

log = logging.getLogger("lantern.fleet")


class ModelCards(Protocol):
    """Reads a replica's `max_model_len`; None when it does not say (never raises)."""

    async def max_model_len(self, base_url: str) -> int | None: ...


class HttpModelCards:
    """`GET {base_url}/models` with one shared client and a hard timeout. With several cards the
    smallest window is taken (the conservative bound)."""

    def __init__(self, *, timeout_s: float = 2.0, client: httpx.AsyncClient | None = None):
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s

    async def max_model_len(self, base_url: str) -> int | None:
        url = base_url.rstrip("/") + "/models"
        try:
            reply = await self._client.get(url, timeout=self._timeout_s)
            cards = reply.json().get("data", []) if reply.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        lens = [
            c["max_model_len"]
            for c in cards
            if isinstance(c, dict) and type(c.get("max_model_len")) is int
        ]
        return min(lens) if lens and min(lens) > 0 else None

    async def aclose(self) -> None:
        await self._client.aclose()


class ContextWindows:
    """Known windows per replica key (configured ones win over learned ones)."""

    def __init__(
        self, configured: Mapping[str, int | None] | None = None, cards: ModelCards | None = None
    ) -> None:
        self._configured = {b: n for b, n in (configured or {}).items() if n}  # backend -> tokens
        self._learned: dict[str, int] = {}  # replica key -> tokens
        self._cards = cards

    def of(self, c: Candidate) -> int | None:
        """The candidate's window in tokens; None when unknown (an API, or not reported)."""
        if c.venue != "selfhost":
            return None
        configured = self._configured.get(c.backend_name)
        return configured or self._learned.get(replica_key(c.backend_name, c.replica))

    def fits(self, c: Candidate, tokens: int) -> bool:
        window = self.of(c)
        return window is None or tokens <= window

    def fitting(self, attempts: Iterable[Attempt], tokens: int) -> tuple[Attempt, ...]:
        """The attempts whose replica can hold `tokens`: a plan never names one that cannot."""
        return tuple(a for a in attempts if self.fits(a.candidate, tokens))

    def route_window(self, route: ModelRoute, allowed: Iterable[str] | None) -> int | None:
        """The largest window among the route's candidates the tenant may use; None when any of
        them has no known window (it might take the call whatever its size)."""
        names = None if allowed is None else set(allowed)
        largest: int | None = None
        for c in route.candidates:
            if names is not None and c.backend_name not in names:
                continue
            window = self.of(c)
            if window is None:
                return None
            if largest is None or window > largest:
                largest = window
        return largest

    async def learn(self, candidates: Iterable[Candidate]) -> None:
        """Ask every replica whose window is not known yet (at start-up and with health checks)."""
        if self._cards is None:
            return
        todo = [c for c in candidates if c.replica is not None and self.of(c) is None]
        found = await asyncio.gather(*(self._cards.max_model_len(c.replica or "") for c in todo))
        for c, window in zip(todo, found, strict=True):
            if window is not None:
                key = replica_key(c.backend_name, c.replica)
                self._learned[key] = window
                log.info("context window of %s: %d tokens", key, window)
