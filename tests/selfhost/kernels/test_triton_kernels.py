"""Each Triton kernel against the torch reference on small shapes. Without a CUDA device they run
under Triton's interpreter (TRITON_INTERPRET=1, set here before the kernels are defined), which
executes the same kernel code on CPU tensors; with one they run compiled."""

from __future__ import annotations

import os
import random

import pytest
import torch
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

from selfhost.config import ModelConfig  # noqa: E402
from selfhost.engine.model_runner import prepare_step  # noqa: E402
from selfhost.engine.scheduler import ScheduledSequence, SchedulerOutput  # noqa: E402
from selfhost.engine.sequence import Sequence  # noqa: E402
from selfhost.kernels.reference.attention import paged_attention  # noqa: E402
from selfhost.kernels.reference.ops import TorchOps  # noqa: E402
from selfhost.kernels.triton import attention, fused  # noqa: E402
from selfhost.kernels.triton.graphs import full_decode_tables  # noqa: E402
from selfhost.model.rope import rope_tables  # noqa: E402

BLOCK_SIZE, NUM_BLOCKS = 16, 48
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 16
CFG = ModelConfig(
    vocab_size=64,
    hidden_size=48,
    intermediate_size=40,
    num_layers=1,
    num_heads=HEADS,
    num_kv_heads=KV_HEADS,
    head_dim=HEAD_DIM,
)
FP32 = {"rtol": 1e-5, "atol": 1e-5}  # summation order and exp2 vs exp
# Two bf16 steps: the kernels round once more than the reference, and Triton's interpreter
# converts fp32 to bf16 by truncation (compiled kernels round to nearest even).
BF16 = {"rtol": 2**-6, "atol": 1e-3}


@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_equals_hf_formula(rows: int, dtype: torch.dtype) -> None:
    torch.manual_seed(rows)
    x, weight = torch.randn(rows, 48).to(dtype), (1 + 0.1 * torch.randn(48)).to(dtype)
    got = fused.rms_norm(x.to(DEVICE), weight.to(DEVICE), 1e-5).cpu()
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    want = weight.float() * normed.to(dtype).float()  # HF's LlamaRMSNorm
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, **FP32)
    else:
        torch.testing.assert_close(got.float(), want, **BF16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_equals_torch(dtype: torch.dtype) -> None:
    torch.manual_seed(3)
    gate_up = torch.randn(5, 2 * 40).to(dtype)
    got = fused.silu_mul(gate_up.to(DEVICE)).cpu()
    gate, up = gate_up.float().chunk(2, dim=-1)
    want = F.silu(gate) * up
    tolerance = FP32 if dtype == torch.float32 else BF16
    torch.testing.assert_close(got.float(), want, **tolerance)


def test_rope_write_kv_equals_reference_and_skips_negative_slots() -> None:
    torch.manual_seed(4)
    tokens = 5
    qkv = torch.randn(tokens, HEADS + 2 * KV_HEADS, HEAD_DIM)
    positions = torch.tensor([0, 3, 17, 40, 63])
    slots = torch.tensor([5, 16, 300, -1, 47])
    cos, sin = rope_tables(CFG, 64)
    want_cache = torch.zeros(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    ops = TorchOps(CFG, (cos, sin), torch.float32)
    keep = slots >= 0
    want_q = ops.rope_write_kv(qkv, ops.rope(positions), want_cache, slots.clamp(min=0))
    want_cache.view(2, -1, KV_HEADS, HEAD_DIM)[:, 0] = 0  # slot 0 took the clamped -1 row
    cache = torch.zeros_like(want_cache).to(DEVICE)
    got_q = fused.rope_write_kv(
        qkv.to(DEVICE), positions.to(DEVICE), cos.to(DEVICE), sin.to(DEVICE),
        slots.to(DEVICE), cache, HEADS,
    )  # fmt: skip
    torch.testing.assert_close(got_q.cpu(), want_q, **FP32)
    flat = cache.cpu().view(2, -1, KV_HEADS, HEAD_DIM)
    torch.testing.assert_close(flat, want_cache.view(2, -1, KV_HEADS, HEAD_DIM), **FP32)
    assert keep.sum() == 4 and flat[:, 0].abs().sum() == 0  # the -1 row wrote nothing


def step_for(spans: list[tuple[int, int]], seed: int, shared_prefix: int = 0):  # noqa: ANN201
    """A packed step: sequences with (cached tokens, new tokens), scattered block tables, the
    first `shared_prefix` blocks common to every sequence; K/V of all their tokens in the pool."""
    rng = random.Random(seed)
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    common = [free.pop() for _ in range(shared_prefix)]
    items = []
    for index, (start, num_new) in enumerate(spans):
        own = -(-(start + num_new) // BLOCK_SIZE) - shared_prefix
        table = common + [free.pop() for _ in range(own)]
        seq = Sequence(f"s{index}", [1] * (start + num_new), block_table=table)
        items.append(ScheduledSequence(seq, start, num_new))
    step = prepare_step(SchedulerOutput(tuple(items), ()), BLOCK_SIZE, torch.device("cpu"))
    cache = torch.randn(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    q = torch.randn(sum(n for _, n in spans), HEADS, HEAD_DIM)
    return step.meta, cache, q


def on_device(meta):  # noqa: ANN001, ANN201
    """The metadata's tensors on DEVICE (the engine builds them there)."""
    from dataclasses import replace

    def move(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(DEVICE)

    spans = tuple(
        replace(s, block_ids=s.block_ids.to(DEVICE), mask=move(s.mask)) for s in meta.prefills
    )
    return replace(
        meta,
        slot_mapping=meta.slot_mapping.to(DEVICE),
        decode_block_tables=meta.decode_block_tables.to(DEVICE),
        decode_mask=meta.decode_mask.to(DEVICE),
        decode_context_lens=meta.decode_context_lens.to(DEVICE),
        prefills=spans,
        decode_shared_blocks=move(meta.decode_shared_blocks),
    )


def assert_attention_matches(spans: list[tuple[int, int]], seed: int, shared: int = 0) -> None:
    meta, cache, q = step_for(spans, seed, shared)
    assert (meta.decode_shared_blocks is not None) == (shared >= 4)
    want = paged_attention(q, cache, meta, HEAD_DIM**-0.5)
    got = attention.paged_attention(q.to(DEVICE), cache.to(DEVICE), on_device(meta), HEAD_DIM**-0.5)
    torch.testing.assert_close(got.cpu(), want, **FP32)


@pytest.mark.parametrize("splits", [2, 4])
@pytest.mark.parametrize("shared", [0, 4])
def test_decode_split_over_key_ranges_merges_to_the_reference(splits: int, shared: int) -> None:
    """Flash-decoding: each (sequence, KV head) walks one of `splits` 64-key-aligned ranges (at 4
    splits of 65-80 keys, two are empty), merged by log-sum-exp; with and without the cascade."""
    meta, cache, q = step_for([(66, 1), (70, 1), (64, 1), (79, 1)], 6, shared)
    assert (meta.decode_shared_blocks is not None) == (shared > 0)
    want = paged_attention(q, cache, meta, HEAD_DIM**-0.5)
    meta = on_device(meta)
    got = attention.paged_decode(
        q.to(DEVICE), cache.to(DEVICE), meta.decode_block_tables, meta.decode_context_lens,
        meta.decode_shared_blocks, HEAD_DIM**-0.5, splits=splits,
    )  # fmt: skip
    torch.testing.assert_close(got.cpu(), want, **FP32)


@pytest.mark.parametrize("seed", [0, 1])
def test_decode_with_ragged_block_tables(seed: int) -> None:
    """Decodes of 1 to 70 context tokens: tables of 1 to 5 scattered blocks, partial last blocks,
    more keys than one 64-key tile."""
    assert_attention_matches([(0, 1), (16, 1), (69, 1), (30, 1), (47, 1)], seed)


def test_decode_over_a_shared_prefix_walks_it_first() -> None:
    """Five decodes whose tables start with the same 4 blocks (the cascade metadata)."""
    assert_attention_matches([(70, 1), (64, 1), (79, 1), (66, 1), (75, 1)], 2, shared=4)


@pytest.mark.parametrize(
    "spans",
    [
        [(0, 37)],  # prefill from scratch: causal, a partial last block
        [(32, 20)],  # a chunk after a 2-block cached prefix
        [(5, 70)],  # a chunk after a partial cached block, past one 64-row tile
    ],
)
def test_prefill_with_and_without_cached_prefix(spans: list[tuple[int, int]]) -> None:
    assert_attention_matches(spans, 3)


def test_mixed_batch_of_decodes_and_chunks() -> None:
    assert_attention_matches([(9, 1), (0, 13), (40, 1), (16, 9), (3, 1)], 4)


def test_graph_batches_fold_the_shared_prefix_and_pad_rows() -> None:
    """What a CUDA-graph replay feeds the decode kernel: the cascade prefix folded back into each
    table, the batch padded with rows of context 0 (all zeros out) in a wider static table."""
    meta, cache, q = step_for([(70, 1), (64, 1), (79, 1), (66, 1), (75, 1)], 5, shared_prefix=4)
    want = paged_attention(q, cache, meta, HEAD_DIM**-0.5)
    tables, lens = full_decode_tables(meta, BLOCK_SIZE)
    static_tables = torch.zeros(8, 12, dtype=torch.long)
    static_tables[:5, : tables.shape[1]] = tables
    static_lens = torch.zeros(8, dtype=torch.long)
    static_lens[:5] = lens
    padded_q = torch.cat([q, torch.randn(3, HEADS, HEAD_DIM)])
    got = attention.paged_decode(
        padded_q.to(DEVICE), cache.to(DEVICE), static_tables.to(DEVICE), static_lens.to(DEVICE),
        None, HEAD_DIM**-0.5,
    ).cpu()  # fmt: skip
    torch.testing.assert_close(got[:5], want, **FP32)
    assert got[5:].abs().sum() == 0


def test_a_triton_that_cannot_run_leaves_the_reference_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The loader's smoke test runs one kernel at build time; where it fails (no compiler for the
    GPU, a broken install), the builder gets None and one log line, not a failing first request."""
    from selfhost.kernels.backend import DecoderWeights
    from selfhost.kernels.triton import loader

    def broken(*args: object) -> torch.Tensor:
        raise RuntimeError("PTX for this GPU unavailable\ndetails")

    monkeypatch.setattr(fused, "rms_norm", broken)
    weights = DecoderWeights((), torch.ones(48, device=DEVICE), torch.ones(64, 48, device=DEVICE))
    with caplog.at_level("WARNING", logger="selfhost.kernels.triton.loader"):
        assert loader.load_triton_backend(CFG, weights, rope_tables(CFG, 8), graphs=None) is None
    assert [r.getMessage() for r in caplog.records] == [
        "Triton kernels off (PTX for this GPU unavailable); torch reference path"
    ]
    monkeypatch.undo()
    backend = loader.load_triton_backend(CFG, weights, rope_tables(CFG, 8), graphs=None)
    assert backend is not None and backend.name == "triton"
