"""The load book: every call in flight from dispatch to completion, the load it counts on its
replica (requests, prefill tokens, KV blocks, the index's pins), the prefill rates learned from
its timing, the index's accuracy, and the session each completion leaves. No decisions here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from adapters.types import Usage
from gateway.fleet.registry import FleetRegistry
from gateway.fleet.state import (
    NONSTREAM_SAMPLE_MAX_OUTPUT,
    InflightCall,
    pending_prefills,
    slowest_learned,
)
from gateway.ports import Attempt, Candidate, Fault, PreparedPrompt
from routing.decision import session_after
from routing.types import replica_key

log = logging.getLogger("lantern.fleet")


class LoadBook:
    """Calls in flight by attempt; `drain` takes a replica out after `failures_to_drain`
    faults of the backend in a row, an API's fault cools it down for `api_cooldown_s`."""

    def __init__(
        self,
        registry: FleetRegistry,
        *,
        clock: Callable[[], float],
        block_tokens: int,
        failures_to_drain: int,
        api_cooldown_s: float,
        drain: Callable[[str, float], None],
    ) -> None:
        self._reg, self._clock, self._block_tokens = registry, clock, block_tokens
        self._failures_to_drain, self._api_cooldown_s = failures_to_drain, api_cooldown_s
        self._drain = drain
        self._inflight: dict[int, tuple[Attempt, InflightCall]] = {}
        self.accuracy = [0, 0, 0]  # predicted, reported, |predicted - reported| cached tokens
        self.learned: dict[str, float] = {}  # backend -> its replicas' slowest learned rate

    def pending(self, now: float) -> dict[str, list[tuple[int, float]]]:
        """Per replica, the prefills in flight (`pending_prefills`)."""
        return pending_prefills(self._inflight.values(), self._reg.replicas, now)

    def on_dispatch(self, attempt: Attempt, session_id: str, prepared: PreparedPrompt) -> None:
        """Count the load before the call goes out, and pin the prompt in the index."""
        c, bt = attempt.candidate, self._block_tokens
        hashes = prepared.prefix_hashes
        prompt, max_tokens = self._reg.planned.get(session_id, (len(hashes) * bt, 0))
        if c.venue != "selfhost":
            self._inflight[id(attempt)] = (attempt, InflightCall(None, session_id, prompt, 0, 0))
            return
        key = replica_key(c.backend_name, c.replica)
        r = self._reg.replicas[key]
        # the lone replica (`Fleet._lone`) keeps no index: its load is counted, nothing is
        # matched or pinned, and its whole prompt counts as prefill still to do
        indexed = attempt.indexed
        matched = self._reg.index.matched_blocks(key, hashes) if indexed else 0
        cached = min(matched * bt, max(prompt - 1, 0))
        blocks = -(-(prompt + max_tokens) // bt)
        now = self._clock()
        record = InflightCall(
            key,
            session_id,
            prompt,
            prompt - cached,
            matched,
            blocks=blocks,
            started_at=now,
            dispatched_at=now,
            queued_tokens=r.inflight_tokens + prompt - cached,
            max_tokens=max_tokens,
            hashes=hashes if indexed else (),
            reserved_blocks=max(blocks - len(hashes), 0) if indexed else 0,
            indexed=indexed,
        )
        r.inflight_requests += 1
        r.dispatched += 1
        r.inflight_tokens += record.uncached_tokens
        r.inflight_blocks += blocks
        if indexed:
            # held outside the index's LRU until completion, with the answer's blocks reserved
            self._reg.index.pin(key, hashes, now, record.reserved_blocks)
        self._inflight[id(attempt)] = (attempt, record)

    def on_first_token(self, attempt: Attempt) -> None:
        """Optional: the prefill is done, so its tokens stop counting as queued work."""
        held = self._inflight.get(id(attempt))
        if held is not None and held[1].key is not None and not held[1].prefill_released:
            rec, now = held[1], self._clock()
            self._learn_prefill(rec, now - rec.dispatched_at)
            self._release_prefill(rec)
            rec.started_at = now

    def _learn_prefill(self, rec: InflightCall, seconds: float) -> None:
        """One rate sample: the replica's queued prefill at dispatch (ours included) took
        `seconds` less the fixed cost. Work from other clients of the engine is not counted,
        so a shared engine reads slower than it is (the router then spreads more, not less).
        A call without the index (the lone replica) is no sample: its cached share is unknown."""
        assert rec.key is not None
        if not rec.indexed:
            return
        r = self._reg.replicas[rec.key]
        n, b = r.prefill.num_samples, r.candidate.backend_name
        if not r.prefill.observe(rec.queued_tokens, seconds - r.spec.base_ttft_s):
            return
        self.learned[b] = slowest_learned(self._reg.replicas.values(), b)
        if n < 4 or n % 10 == 9:
            log.info(
                "prefill rate of %s: %.0f tok/s after %d samples (%d calls dispatched)",
                rec.key,
                r.prefill.tok_s,
                n + 1,
                r.dispatched,
            )

    def _release_prefill(self, rec: InflightCall) -> None:
        if rec.key is not None and not rec.prefill_released:
            self._reg.replicas[rec.key].inflight_tokens -= rec.uncached_tokens
            rec.prefill_released = True

    def on_complete(
        self, attempt: Attempt, usage: Usage, ok: bool, fault: Fault = "backend"
    ) -> None:
        """Release the load (completion, error or disconnect); idempotent per attempt. Only a
        fault of the backend counts towards draining it or cooling it down."""
        held = self._inflight.pop(id(attempt), None)
        if held is None:
            return
        now, rec, c = self._clock(), held[1], attempt.candidate
        if rec.key is None:
            self._api_done(c, rec, usage, ok, now, fault)
            return
        r = self._reg.replicas[rec.key]
        if ok and not rec.prefill_released and usage.output_tokens <= NONSTREAM_SAMPLE_MAX_OUTPUT:
            # no first token seen: the whole call bounds the prefill; with a short answer the
            # decode is a small part of it (biased slow, i.e. towards spreading the load)
            self._learn_prefill(rec, now - rec.dispatched_at)
        self._release_prefill(rec)
        if rec.indexed:
            self._reg.index.unpin(rec.key, rec.hashes, rec.reserved_blocks)
        r.inflight_requests -= 1
        r.completed += 1
        r.inflight_blocks -= rec.blocks
        if not ok:
            if fault == "backend":
                r.failures += 1
                if r.failures >= self._failures_to_drain:
                    self._drain(rec.key, now)
            return
        r.failures, r.served_at = 0, now
        if not r.healthy or r.drained_until > now:  # a good answer is the best probe
            log.info("replica %s answered well: back in service", rec.key)
            r.healthy, r.drained_until = True, 0.0
        took = now - rec.started_at
        r.service_s = took if r.service_s is None else 0.8 * r.service_s + 0.2 * took
        work_tokens = usage.input_tokens + usage.cache_write_tokens + usage.output_tokens
        r.done.append((now, work_tokens))
        r.done_tokens += work_tokens
        if rec.indexed:  # the index's accuracy: only calls it predicted
            self._correct(rec, usage)
        self._reg.sessions[rec.session_id] = session_after(
            rec.session_id,
            "selfhost",
            c.backend_name,
            rec.key,
            now,
            rec.prompt_tokens,
            usage.output_tokens,
        )

    def _api_done(
        self, c: Candidate, rec: InflightCall, usage: Usage, ok: bool, now: float, fault: Fault
    ) -> None:
        if not ok:
            if fault == "backend":
                self._reg.apis[c.backend_name].cooldown_until = now + self._api_cooldown_s
            return
        self._reg.sessions[rec.session_id] = session_after(
            rec.session_id,
            "api",
            c.backend_name,
            None,
            now,
            usage.prompt_tokens,
            usage.output_tokens,
        )

    def _correct(self, rec: InflightCall, usage: Usage) -> None:
        assert rec.key is not None
        bt, reported = self._block_tokens, usage.cache_read_tokens
        predicted = min(rec.predicted_blocks * bt, max(rec.prompt_tokens - 1, 0))
        self.accuracy[0] += predicted
        self.accuracy[1] += reported
        self.accuracy[2] += abs(predicted - reported)
        self._reg.index.correct(rec.key, rec.predicted_blocks, reported // bt)

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        """Record the answer: `chain_hashes` is the prompt's chain extended over the answer."""
        c = attempt.candidate
        if c.venue == "selfhost" and attempt.indexed:
            key = replica_key(c.backend_name, c.replica)
            self._reg.index.insert(key, chain_hashes, self._clock())
