"""Paged attention (gather through block tables) equals dense causal attention, varlen batches."""

from __future__ import annotations

import random

import pytest
import torch

from selfhost.engine.model_runner import prepare_step
from selfhost.engine.scheduler import ScheduledSequence, SchedulerOutput
from selfhost.engine.sequence import Sequence
from selfhost.kernels.reference.attention import paged_attention, write_kv

BLOCK_SIZE = 4
NUM_BLOCKS = 40
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8


def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """q: [n, H, D] at positions start..start+n-1; k, v: [start + n, KV, D]. Plain math."""
    group = HEADS // KV_HEADS
    k = k.repeat_interleave(group, dim=1)  # [S, H, D]
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,shd->hns", q, k) * HEAD_DIM**-0.5
    positions = torch.arange(q.shape[0]).unsqueeze(1) + start
    scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > positions, float("-inf"))
    return torch.einsum("hns,shd->nhd", scores.softmax(-1), v)


def scattered_tables(lengths: list[int], rng: random.Random) -> list[list[int]]:
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    return [[free.pop() for _ in range(-(-n // BLOCK_SIZE))] for n in lengths]


@pytest.mark.parametrize(
    "spans",
    [
        [(0, 9)],  # one prefill from scratch
        [(12, 1), (5, 1), (0, 1)],  # decodes only, different context lengths
        [(7, 1), (0, 13), (8, 6), (3, 1), (16, 2)],  # decodes + fresh prefill + chunks on a prefix
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_paged_equals_dense(spans: list[tuple[int, int]], seed: int) -> None:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    ends = [start + n for start, n in spans]
    tables = scattered_tables(ends, rng)
    cache = torch.zeros(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    items, keys, values = [], [], []
    for index, ((start, n), table) in enumerate(zip(spans, tables, strict=True)):
        seq = Sequence(f"s{index}", [1] * (start + n), block_table=table)
        items.append(ScheduledSequence(seq, start, n))
        keys.append(torch.randn(start + n, KV_HEADS, HEAD_DIM))
        values.append(torch.randn(start + n, KV_HEADS, HEAD_DIM))
    step = prepare_step(SchedulerOutput(tuple(items), ()), BLOCK_SIZE, torch.device("cpu"))
    ordered = sorted(range(len(items)), key=lambda i: items[i].num_new_tokens > 1)  # decodes first
    for i in ordered:  # the cached prefix, as earlier steps would have written it
        prefix_slots = [
            tables[i][p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(spans[i][0])
        ]
        write_kv(
            cache,
            keys[i][: spans[i][0]],
            values[i][: spans[i][0]],
            torch.tensor(prefix_slots, dtype=torch.long),
        )
    new_k = torch.cat([keys[i][spans[i][0] :] for i in ordered])
    new_v = torch.cat([values[i][spans[i][0] :] for i in ordered])
    write_kv(cache, new_k, new_v, step.meta.slot_mapping)
    queries = [torch.randn(spans[i][1], HEADS, HEAD_DIM) for i in ordered]
    out = paged_attention(torch.cat(queries), cache, step.meta, HEAD_DIM**-0.5)
    row = 0
    for q, i in zip(queries, ordered, strict=True):
        expected = dense_reference(q, keys[i], values[i], spans[i][0])
        torch.testing.assert_close(out[row : row + len(q)], expected, atol=1e-5, rtol=1e-5)
        row += len(q)
    assert row == out.shape[0] == sum(n for _, n in spans)


def test_slot_mapping_follows_block_tables() -> None:
    seq = Sequence("s", list(range(10)), block_table=[7, 2, 5])
    step = prepare_step(
        SchedulerOutput((ScheduledSequence(seq, 3, 7),), ()), BLOCK_SIZE, torch.device("cpu")
    )
    assert step.meta.slot_mapping.tolist() == [31, 8, 9, 10, 11, 20, 21]
    assert step.positions.tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert step.input_ids.tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert step.sample_rows.tolist() == [6]


@pytest.mark.parametrize("own_lengths", [[1, 5, 9], [4, 1], [2, 3, 4, 13]])
def test_decodes_sharing_prefix_blocks_use_the_cascade_and_equal_dense(
    own_lengths: list[int],
) -> None:
    rng = random.Random(len(own_lengths))
    torch.manual_seed(len(own_lengths))
    shared_blocks = [11, 3, 27, 8, 19]  # 5 full blocks (20 tokens) held by every sequence
    prefix = len(shared_blocks) * BLOCK_SIZE
    free = [b for b in range(NUM_BLOCKS) if b not in shared_blocks]
    rng.shuffle(free)
    cache = torch.zeros(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    shared_k, shared_v = (
        torch.randn(prefix, KV_HEADS, HEAD_DIM),
        torch.randn(prefix, KV_HEADS, HEAD_DIM),
    )
    write_kv(
        cache,
        shared_k,
        shared_v,
        torch.tensor(
            [shared_blocks[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(prefix)]
        ),
    )
    items, keys, values = [], [], []
    for index, own in enumerate(own_lengths):
        total = prefix + own
        table = shared_blocks + [free.pop() for _ in range(-(-own // BLOCK_SIZE))]
        seq = Sequence(f"s{index}", [1] * total, block_table=table)
        items.append(ScheduledSequence(seq, total - 1, 1))
        own_k, own_v = torch.randn(own, KV_HEADS, HEAD_DIM), torch.randn(own, KV_HEADS, HEAD_DIM)
        slots = [table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(prefix, total)]
        write_kv(cache, own_k, own_v, torch.tensor(slots))
        keys.append(torch.cat([shared_k, own_k]))
        values.append(torch.cat([shared_v, own_v]))
    step = prepare_step(SchedulerOutput(tuple(items), ()), BLOCK_SIZE, torch.device("cpu"))
    assert step.meta.decode_shared_blocks is not None
    assert step.meta.decode_shared_blocks.tolist() == shared_blocks
    q = torch.randn(len(own_lengths), HEADS, HEAD_DIM)
    out = paged_attention(q, cache, step.meta, HEAD_DIM**-0.5)
    for row, (item, k, v) in enumerate(zip(items, keys, values, strict=True)):
        expected = dense_reference(q[row : row + 1], k, v, item.start)
        torch.testing.assert_close(out[row : row + 1], expected, atol=1e-5, rtol=1e-5)
