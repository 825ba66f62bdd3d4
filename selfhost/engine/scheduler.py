"""Continuous-batching scheduler: one token budget per step, chunked prefill, preempt-by-recompute.

Torch-free. Running requests are served first (oldest first), then waiting ones (FCFS).
When blocks run out the newest running request is preempted; its hashes survive for re-hits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from selfhost.engine.block_manager import BlockManager
from selfhost.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512
    chunk_size: int = 512
    max_num_seqs: int = 64
    watermark_blocks: int = 0


@dataclass(frozen=True)
class ScheduledSequence:
    seq: Sequence
    start: int  # position of the first scheduled token = tokens already in the KV cache
    num_new_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.num_new_tokens


@dataclass(frozen=True)
class SchedulerOutput:
    scheduled: tuple[ScheduledSequence, ...]
    preempted: tuple[str, ...]

    @property
    def num_batched_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.scheduled)


@dataclass
class SchedulerStats:
    num_preemptions: int = 0
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0


class Scheduler:
    def __init__(self, config: SchedulerConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSequence] = []
        preempted: list[str] = []
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(seq.num_tokens - seq.num_computed_tokens, self.config.chunk_size, budget)
            if not self._make_room(seq, seq.num_computed_tokens + num_new, preempted):
                break  # `seq` itself was the newest and got preempted
            self.block_manager.allocate(seq, seq.num_computed_tokens + num_new)
            scheduled.append(ScheduledSequence(seq, seq.num_computed_tokens, num_new))
            budget -= num_new
            index += 1
        if not preempted:
            scheduled += self._admit_waiting(budget)
        return SchedulerOutput(tuple(scheduled), tuple(preempted))

    def _make_room(self, seq: Sequence, num_tokens: int, preempted: list[str]) -> bool:
        """Preempt newest requests until `seq` can grow to `num_tokens`; False if `seq` went."""
        while not self.block_manager.can_allocate(seq, num_tokens):
            victim = self.running.pop()
            self._preempt(victim)
            preempted.append(victim.request_id)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.stats.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _admit_waiting(self, budget: int) -> list[ScheduledSequence]:
        admitted: list[ScheduledSequence] = []
        pending = self._pending_hashes()
        skipped: list[Sequence] = []
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached = self.block_manager.match_prefix(seq)
            if self._is_pending(seq, len(cached), pending):
                skipped.append(self.waiting.popleft())  # its next block is being computed now
                continue
            num_computed = len(cached) * self.block_manager.block_size
            num_new = min(seq.num_tokens - num_computed, self.config.chunk_size, budget)
            reserve = self.config.watermark_blocks
            if not self.block_manager.can_allocate(seq, num_computed + num_new, cached, reserve):
                break  # never admit a request whose next chunk cannot be allocated
            self.waiting.popleft()
            self.block_manager.allocate(seq, num_computed + num_new, cached)
            self._record_admission(seq, num_computed)
            self.running.append(seq)
            pending.update(seq.block_hashes(self.block_manager.block_size)[len(cached) :])
            admitted.append(ScheduledSequence(seq, num_computed, num_new))
            budget -= num_new
        self.waiting.extendleft(reversed(skipped))
        return admitted

    def _record_admission(self, seq: Sequence, num_cached_tokens: int) -> None:
        seq.status = SequenceStatus.RUNNING
        if seq.was_admitted:
            return  # re-hits after preemption are not prefix-cache hits
        seq.was_admitted = True
        seq.num_cached_tokens = num_cached_tokens
        self.stats.prefix_query_tokens += seq.num_prompt_tokens
        self.stats.prefix_hit_tokens += num_cached_tokens

    def _pending_hashes(self) -> set[bytes]:
        """Hashes of full blocks that running prefills hold but have not computed yet."""
        size = self.block_manager.block_size
        pending: set[bytes] = set()
        for seq in self.running:
            if seq.num_computed_tokens < seq.num_prompt_tokens:
                first = seq.num_computed_tokens // size
                pending.update(seq.block_hashes(size)[first:])
        return pending

    def _is_pending(self, seq: Sequence, num_hit_blocks: int, pending: set[bytes]) -> bool:
        hashes = seq.block_hashes(self.block_manager.block_size)
        return num_hit_blocks < len(hashes) and hashes[num_hit_blocks] in pending

    def update_after_step(self, output: SchedulerOutput) -> None:
        """Advance each scheduled request by the tokens just computed and publish full blocks."""
        for item in output.scheduled:
            item.seq.num_computed_tokens = item.end
            self.block_manager.commit(item.seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        if seq in self.running:
            self.running.remove(seq)
        self.block_manager.free(seq)

    def abort(self, request_id: str) -> Sequence | None:
        for queue in (self.running, self.waiting):
            for seq in queue:
                if seq.request_id == request_id:
                    queue.remove(seq)
                    self.finish(seq, "abort")
                    return seq
        return None
