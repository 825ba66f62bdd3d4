"""Scheduler: token budget, chunked prefill, continuous batching, preemption without thrash."""

from __future__ import annotations

from selfhost.engine.block_manager import BlockManager
from selfhost.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from selfhost.engine.sequence import Sequence, SequenceStatus


def make(
    num_blocks: int, budget: int, chunk: int, block_size: int = 4, watermark: int = 0
) -> Scheduler:
    config = SchedulerConfig(
        max_num_batched_tokens=budget, chunk_size=chunk, max_num_seqs=8, watermark_blocks=watermark
    )
    return Scheduler(config, BlockManager(num_blocks, block_size))


def plan(output: SchedulerOutput) -> list[tuple[str, int, int]]:
    return [(item.seq.request_id, item.start, item.num_new_tokens) for item in output.scheduled]


def finish_step(scheduler: Scheduler, output: SchedulerOutput, next_token: int = 7) -> None:
    """What the engine does: advance, publish blocks, append a token where the sequence sampled."""
    scheduler.update_after_step(output)
    for item in output.scheduled:
        if item.seq.num_computed_tokens == item.seq.num_tokens:
            item.seq.token_ids.append(next_token)


def test_budget_and_chunks_pack_prefills_and_decodes() -> None:
    scheduler = make(num_blocks=16, budget=12, chunk=8)
    a, b = Sequence("a", list(range(10))), Sequence("b", list(range(20, 26)))
    scheduler.add(a)
    scheduler.add(b)
    first = scheduler.schedule()
    assert plan(first) == [("a", 0, 8), ("b", 0, 4)]
    finish_step(scheduler, first)
    second = scheduler.schedule()
    assert plan(second) == [("a", 8, 2), ("b", 4, 2)]
    finish_step(scheduler, second)
    assert a.num_tokens == 11 and b.num_tokens == 7
    third = scheduler.schedule()
    assert plan(third) == [("a", 10, 1), ("b", 6, 1)]  # both decoding in one batch
    assert a.block_table == [0, 1, 3] and b.block_table == [2, 4]


def test_new_request_joins_a_running_batch() -> None:
    scheduler = make(num_blocks=16, budget=16, chunk=16)
    a = Sequence("a", list(range(5)))
    scheduler.add(a)
    finish_step(scheduler, scheduler.schedule())
    scheduler.add(Sequence("b", list(range(30, 39))))
    assert plan(scheduler.schedule()) == [("a", 5, 1), ("b", 0, 9)]


def test_prefix_hit_is_counted_once_and_skips_cached_tokens() -> None:
    scheduler = make(num_blocks=16, budget=32, chunk=32)
    a = Sequence("a", list(range(10)))
    scheduler.add(a)
    finish_step(scheduler, scheduler.schedule())
    b = Sequence("b", [*range(10), 50])
    scheduler.add(b)
    out = scheduler.schedule()
    assert plan(out) == [("a", 10, 1), ("b", 8, 3)]
    assert b.num_cached_tokens == 8
    assert b.block_table[:2] == a.block_table[:2]
    assert (scheduler.stats.prefix_query_tokens, scheduler.stats.prefix_hit_tokens) == (21, 8)


def test_same_prefix_waits_for_the_running_prefill_instead_of_recomputing() -> None:
    scheduler = make(num_blocks=32, budget=8, chunk=8)
    a, b = Sequence("a", list(range(20))), Sequence("b", [*range(16), 90, 91])
    scheduler.add(a)
    scheduler.add(b)
    out = scheduler.schedule()
    assert plan(out) == [("a", 0, 8)]  # b's first block is being computed by a: b waits
    finish_step(scheduler, out)
    out = scheduler.schedule()
    assert plan(out) == [("a", 8, 8)]
    finish_step(scheduler, out)
    out = scheduler.schedule()
    assert plan(out) == [("a", 16, 4), ("b", 16, 2)]
    assert b.num_cached_tokens == 16


def test_preempts_newest_and_resumes_only_when_its_chunk_fits() -> None:
    scheduler = make(num_blocks=4, budget=64, chunk=64)
    a, b = Sequence("a", list(range(7))), Sequence("b", list(range(40, 47)))
    scheduler.add(a)
    scheduler.add(b)
    out = scheduler.schedule()
    assert plan(out) == [("a", 0, 7), ("b", 0, 7)]
    assert a.block_table == [0, 1] and b.block_table == [2, 3]
    finish_step(scheduler, out)
    out = scheduler.schedule()
    assert plan(out) == [("a", 7, 1), ("b", 7, 1)]  # 8 tokens each: the cache is exactly full
    finish_step(scheduler, out)
    out = scheduler.schedule()  # a's 9th token needs a third block: b, the newest, goes
    assert out.preempted == ("b",)
    assert plan(out) == [("a", 8, 1)]
    assert list(scheduler.waiting) == [b] and b.status is SequenceStatus.WAITING
    assert b.block_table == [] and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert a.block_table == [0, 1, 3]  # b's blocks were freed tail first; 3 was reused first
    assert list(scheduler.block_manager.free_queue) == [2]
    finish_step(scheduler, out)
    # b (9 tokens) re-hits its block 2 but still needs 2 new blocks; 1 is free: it stays out
    out = scheduler.schedule()
    assert plan(out) == [("a", 9, 1)]
    assert list(scheduler.waiting) == [b]
    scheduler.finish(a, "stop")
    out = scheduler.schedule()
    assert plan(out) == [("b", 4, 5)]  # resumed from its own surviving block
    assert b.block_table[0] == 2
    assert scheduler.stats.num_preemptions == 1
    assert scheduler.stats.prefix_hit_tokens == 0  # re-hits after preemption are not hits


def test_sequence_preempts_itself_when_it_is_the_newest() -> None:
    scheduler = make(num_blocks=3, budget=64, chunk=64)
    a, b = Sequence("a", list(range(8))), Sequence("b", list(range(20, 23)))
    scheduler.add(a)
    scheduler.add(b)
    out = scheduler.schedule()
    assert plan(out) == [("a", 0, 8), ("b", 0, 3)]
    finish_step(scheduler, out)
    out = scheduler.schedule()  # a (9 tokens) needs a 3rd block: b, the newest, goes
    assert out.preempted == ("b",)
    assert plan(out) == [("a", 8, 1)]


def test_abort_frees_blocks_at_once() -> None:
    scheduler = make(num_blocks=8, budget=64, chunk=64)
    a = Sequence("a", list(range(10)))
    scheduler.add(a)
    scheduler.schedule()
    assert scheduler.block_manager.num_free_blocks == 5
    assert scheduler.abort("a") is a
    assert scheduler.block_manager.num_free_blocks == 8
    assert a.finish_reason == "abort" and not scheduler.has_unfinished()
    assert scheduler.abort("missing") is None


def test_watermark_holds_back_admission() -> None:
    scheduler = make(num_blocks=4, budget=64, chunk=64, watermark=2)
    scheduler.add(Sequence("a", list(range(9))))
    assert plan(scheduler.schedule()) == []
    scheduler2 = make(num_blocks=5, budget=64, chunk=64, watermark=2)
    scheduler2.add(Sequence("a", list(range(9))))
    assert plan(scheduler2.schedule()) == [("a", 0, 9)]


def test_same_prefix_arriving_together_is_computed_once() -> None:
    scheduler = make(num_blocks=32, budget=64, chunk=64)
    a, b = Sequence("a", list(range(20))), Sequence("b", [*range(16), 90, 91])
    scheduler.add(a)
    scheduler.add(b)
    out = scheduler.schedule()
    assert plan(out) == [("a", 0, 20)]  # b waits although the budget would fit it
    finish_step(scheduler, out)
    out = scheduler.schedule()
    assert plan(out) == [("a", 20, 1), ("b", 16, 2)]
    assert b.block_table[:4] == a.block_table[:4]
