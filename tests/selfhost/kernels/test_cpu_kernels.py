"""The CPU kernels (fast path) against fp32 torch references built from the same bf16 inputs:
every output within one bf16 rounding of the reference; and the fallback when they cannot build."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from bench.engine_layers import PerLayerCpuBackend
from selfhost.builder import build_model
from selfhost.kernels.cpu import loader as cpu_kernels_module
from selfhost.kernels.cpu.backend import CpuKernelBackend
from selfhost.kernels.cpu.loader import pack_weight
from selfhost.kernels.metadata import AttentionMetadata, PrefillSpan, causal_mask, decode_mask
from selfhost.kernels.reference.attention import paged_attention
from selfhost.model.rope import rope_tables, rotate

BF16_ULP = 2.0**-7  # relative spacing of bf16 values (8 significant bits)


def assert_within_bf16_rounding(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=BF16_ULP, atol=1e-3)


def assert_within_rounding(got: torch.Tensor, want: torch.Tensor) -> None:
    """bf16: one bf16 rounding; fp32: summation order and the kernels' exp (rel. error < 1e-6)."""
    if got.dtype == torch.bfloat16:
        assert_within_bf16_rounding(got, want)
    else:
        torch.testing.assert_close(got, want.float(), rtol=2e-6, atol=2e-6)


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("rows", [1, 3, 16, 70])
@pytest.mark.parametrize(("out_rows", "in_cols"), [(100, 37), (192, 64), (80, 24), (2112, 40)])
def test_linear_with_residual_equals_fp32_matmul(
    cpu_kernels: ModuleType, rows: int, out_rows: int, in_cols: int
) -> None:
    torch.manual_seed(rows * out_rows)
    x, weight, residual = bf16(rows, in_cols), bf16(out_rows, in_cols), bf16(rows, out_rows)
    packed = pack_weight(weight)
    assert packed.shape == (-(-out_rows // 64), -(-in_cols // 2), 64, 2)
    got = cpu_kernels.linear(x, packed, out_rows, "none", None, 0.0, None)
    assert_within_bf16_rounding(got, x.float() @ weight.float().T)
    got = cpu_kernels.linear(x, packed, out_rows, "none", None, 0.0, residual)
    assert_within_bf16_rounding(got, x.float() @ weight.float().T + residual.float())


def cpu_has_amx_bf16() -> bool:
    flags = Path("/proc/cpuinfo").read_text().split()
    return "amx_bf16" in flags and "amx_tile" in flags


@pytest.mark.parametrize("rows", [8, 17, 40, 130])
@pytest.mark.parametrize(
    ("out_rows", "in_cols", "prologue"),
    [(576, 576, "rms_norm"), (100, 37, "none"), (192, 1536, "silu_mul")],
)
def test_linear_on_amx_tiles_and_on_dpbf16_equals_fp32_matmul(
    cpu_kernels: ModuleType, rows: int, out_rows: int, in_cols: int, prologue: str
) -> None:
    """Batches of 8+ rows run on AMX tiles where the CPU has them (K tails of fewer than 32
    columns on dpbf16): the same result as the dpbf16 path within one bf16 rounding, and both
    within one bf16 rounding of fp32 plus what the prologue's own bf16 rounding may move (its
    norm / SiLU round each input once; one that lands on the neighbouring bf16 value moves the sum
    by at most 2^-8 of its term)."""
    torch.manual_seed(rows + in_cols)
    width = 2 * in_cols if prologue == "silu_mul" else in_cols
    x, weight, residual = bf16(rows, width), bf16(out_rows, in_cols), bf16(rows, out_rows)
    norm, packed = bf16(in_cols), pack_weight(weight)
    if prologue == "rms_norm":
        act = F.rms_norm(x.float(), (in_cols,), norm.float(), 1e-5).to(torch.bfloat16)
    elif prologue == "silu_mul":
        act = (F.silu(x[:, :in_cols].float()) * x[:, in_cols:].float()).to(torch.bfloat16)
    else:
        act = x
    got = cpu_kernels.linear(x, packed, out_rows, prologue, norm, 1e-5, residual)
    want = act.float() @ weight.float().T + residual.float()
    moved = 0.0 if prologue == "none" else 2.0**-8 * (act.float().abs() @ weight.float().abs().T)
    assert ((got.float() - want).abs() <= BF16_ULP * want.abs() + 1e-3 + moved).all()


@pytest.mark.parametrize("rows", [1, 5, 33])
@pytest.mark.parametrize("cols", [96, 37])  # 37: the prologues' masked 16-lane tails
def test_rms_norm_and_silu_mul_prologues(cpu_kernels: ModuleType, rows: int, cols: int) -> None:
    torch.manual_seed(rows + cols)
    x, norm, weight = bf16(rows, cols), bf16(cols), bf16(128, cols)
    normed = F.rms_norm(x.float(), (cols,), norm.float(), 1e-5).to(torch.bfloat16)
    got = cpu_kernels.linear(x, pack_weight(weight), 128, "rms_norm", norm, 1e-5, None)
    assert_within_bf16_rounding(got, normed.float() @ weight.float().T)
    inner = cols // 2
    gate_up = bf16(rows, 2 * inner)
    act = (F.silu(gate_up[:, :inner].float()) * gate_up[:, inner:].float()).to(torch.bfloat16)
    got = cpu_kernels.linear(
        gate_up, pack_weight(weight[:, :inner]), 128, "silu_mul", None, 0.0, None
    )
    assert_within_bf16_rounding(got, act.float() @ weight[:, :inner].float().T)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rope_and_kv_write_equal_the_reference(cpu_kernels: ModuleType, dtype: torch.dtype) -> None:
    from selfhost.config import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=8,
        hidden_size=9 * 64,
        intermediate_size=8,
        num_layers=1,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
    )
    cos, sin = rope_tables(cfg, 512)
    tokens, pool_slots = 5, 8 * 16
    qkv = bf16(tokens, 15, 64).to(dtype)
    positions = torch.tensor([0, 7, 100, 101, 511])
    slots = torch.tensor([3, 17, 40, 41, 127])
    k_pool, v_pool = (
        torch.zeros(pool_slots, 3, 64, dtype=dtype),
        torch.zeros(pool_slots, 3, 64, dtype=dtype),
    )
    q = cpu_kernels.rope_write_kv(qkv, positions, cos, sin, slots, k_pool, v_pool, 9)
    rotated = rotate(qkv[:, :12].float(), cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))
    assert_within_rounding(q, rotated[:, :9])
    assert_within_rounding(k_pool[slots], rotated[:, 9:])
    assert torch.equal(v_pool[slots], qkv[:, 12:])
    untouched = torch.ones(pool_slots, dtype=torch.bool)
    untouched[slots] = False
    assert not k_pool[untouched].any() and not v_pool[untouched].any()


def decode_metadata(
    lens: list[int], tables: torch.Tensor, shared: torch.Tensor | None
) -> AttentionMetadata:
    context = torch.tensor(lens)
    return AttentionMetadata(
        slot_mapping=torch.zeros(len(lens), dtype=torch.long),
        num_decodes=len(lens),
        decode_block_tables=tables,
        decode_mask=decode_mask(context, tables.shape[1] * 16),
        decode_context_lens=context,
        prefills=(),
        decode_shared_blocks=shared,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_shared", [0, 5])
@pytest.mark.parametrize(
    "lens", [[1], [40], [130], [200], [250], [16, 17], [3, 200, 35, 64, 1, 90]]
)
def test_paged_decode_in_place_equals_gathered_reference(
    cpu_kernels: ModuleType, lens: list[int], num_shared: int, dtype: torch.dtype
) -> None:
    torch.manual_seed(len(lens) + num_shared)
    cache = bf16(2, 64, 16, 3, 64).to(dtype)  # [2, blocks, block size, KV, D]
    order = torch.randperm(64)
    shared = order[:num_shared] if num_shared else None
    width = max(-(-n // 16) for n in lens)
    tables = torch.stack(
        [order[num_shared:][torch.randperm(64 - num_shared)[:width]] for _ in lens]
    )
    meta = decode_metadata(lens, tables, shared)
    q = bf16(len(lens), 9, 64).to(dtype)
    want = paged_attention(q.float(), cache.float(), meta, 0.125)  # fp32 torch path, gathers
    no_blocks = torch.empty(0, dtype=torch.long)
    got = cpu_kernels.paged_decode(
        q,
        cache[0],
        cache[1],
        tables,
        meta.decode_context_lens,
        shared if shared is not None else no_blocks,
        0.125,
    )
    assert_within_rounding(got, want)


def test_engine_forward_on_kernels_stays_within_bf16_of_fp32(smollm_files) -> None:
    """One packed step (a decode and a prefill chunk) through each path: the bf16 kernel path's
    logits stay within bf16 noise of fp32's (the bf16 torch reference's mean error here is 0.06),
    with the same top token; fp32 with kernel attention stays within fp32 noise."""
    weights = smollm_files[0]
    logits = {}
    paths = [
        ("fp32", "float32", False, "reference"),
        ("fp32-kernels", "float32", True, "cpu-attention"),
        ("fast", "bfloat16", True, "cpu-kernels"),
    ]
    for name, dtype, kernels, backend in paths:
        model = build_model(weights, 512, "cpu", dtype, cpu_kernels=kernels)
        assert model.backend.name == backend
        logits[name] = _two_steps(model)
    err_fast = (logits["fast"] - logits["fp32"]).abs()
    assert err_fast.mean() < 0.25 and err_fast.max() < 1.0
    assert torch.equal(logits["fast"].argmax(-1), logits["fp32"].argmax(-1))
    torch.testing.assert_close(logits["fp32-kernels"], logits["fp32"], rtol=0, atol=2e-4)


def test_one_call_forward_equals_six_kernel_calls_per_layer(smollm_files) -> None:
    """cpu_forward.cpp runs bench.engine_layers' six calls per layer for every layer in one
    call: the same logits to the bit, for a prefill step and a mixed decode + prefill step."""
    model = build_model(smollm_files[0], 512, "cpu", "bfloat16", cpu_kernels=True)
    assert isinstance(model.backend, CpuKernelBackend)
    one_call = _two_steps(model)
    model.backend = PerLayerCpuBackend(model.backend, model.backend.kernels)
    assert torch.equal(one_call, _two_steps(model))


def _two_steps(model) -> torch.Tensor:  # noqa: ANN001
    """Prefill 40 tokens of sequence A, then one step: A decodes while B prefills 20 tokens."""
    from selfhost.engine.model_runner import ModelRunner, prepare_step
    from selfhost.engine.scheduler import ScheduledSequence, SchedulerOutput
    from selfhost.engine.sequence import SamplingParams, Sequence

    runner = ModelRunner(model, num_blocks=16, block_size=16)
    a = Sequence("a", [(7 * i) % 5000 + 100 for i in range(41)], SamplingParams())
    b = Sequence("b", [(13 * i) % 5000 + 100 for i in range(20)], SamplingParams())
    a.block_table, b.block_table = [3, 5, 9], [2, 4]
    first = SchedulerOutput((ScheduledSequence(a, 0, 40),), ())
    second = SchedulerOutput((ScheduledSequence(a, 40, 1), ScheduledSequence(b, 0, 20)), ())
    rows = []
    with torch.inference_mode():
        for output in (first, second):
            inputs = prepare_step(output, 16, torch.device("cpu"))
            hidden = model(inputs.input_ids, inputs.positions, runner.kv_cache, inputs.meta)
            rows.append(model.compute_logits(hidden[inputs.sample_rows]))
    return torch.cat(rows)


def test_without_a_compiler_the_engine_falls_back_to_the_reference(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cpu_kernels_module.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING, logger="selfhost.kernels.cpu.loader"):
        assert cpu_kernels_module.load_cpu_kernels() is None
    assert [r.getMessage() for r in caplog.records] == [
        "CPU fast path off: no ninja or C++ compiler on PATH (torch reference path)"
    ]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("q_len", "context_len"), [(1, 1), (20, 20), (37, 37), (16, 100), (5, 33)])
@pytest.mark.parametrize("entry", ["paged_prefill", "prefill_attention"])
def test_paged_prefill_in_place_equals_gathered_reference(
    cpu_kernels: ModuleType, q_len: int, context_len: int, dtype: torch.dtype, entry: str
) -> None:
    """A chunk of q_len tokens after context_len - q_len cached ones (causal with an offset):
    the in-place kernel, and the entry the engine calls (on AMX builds bf16 chunks of 16+ tokens
    go through torch's SDPA over the gathered blocks)."""
    torch.manual_seed(q_len + context_len)
    cache = bf16(2, 32, 16, 3, 64).to(dtype)
    block_ids = torch.randperm(32)[: -(-context_len // 16)]
    mask = None if q_len == context_len else causal_mask(q_len, context_len, torch.device("cpu"))
    span = PrefillSpan(0, q_len, context_len, block_ids, mask)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(q_len, dtype=torch.long),
        num_decodes=0,
        decode_block_tables=torch.zeros(0, 1, dtype=torch.long),
        decode_mask=torch.zeros(0, 1, 1, 16, dtype=torch.bool),
        decode_context_lens=torch.zeros(0, dtype=torch.long),
        prefills=(span,),
    )
    q = bf16(q_len, 9, 64).to(dtype)
    want = paged_attention(q.float(), cache.float(), meta, 0.125)
    got = getattr(cpu_kernels, entry)(q, cache[0], cache[1], block_ids, context_len, 0.125)
    if entry == "prefill_attention" and dtype == torch.bfloat16 and q_len >= 16:
        # SDPA in bf16 rounds the softmax weights to bf16 before P @ V: each moves by at most
        # 2^-8 of itself and they sum to 1, so the output by at most 2^-8 of the largest |v|.
        slack = 2.0**-8 * cache[1].float().abs().max().item()
        torch.testing.assert_close(got.float(), want, rtol=BF16_ULP, atol=1e-3 + slack)
    else:
        assert_within_rounding(got, want)


def test_fp32_engines_attend_through_the_kernels(cpu_kernels: ModuleType, make_engine) -> None:
    """The fp32 engine of the HF token-equality tests runs its attention on the kernels (linears
    stay F.linear); bf16 runs every layer on them."""
    fp32 = make_engine().runner.model
    assert fp32.backend.name == "cpu-attention"
    assert make_engine(cpu_kernels=False).runner.model.backend.name == "reference"


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 9, 16, 17, 64])
@pytest.mark.parametrize(("out_rows", "in_cols"), [(576, 1536), (1000, 37), (49_152, 576)])
def test_decode_sized_gemms_over_many_groups(
    cpu_kernels: ModuleType, rows: int, out_rows: int, in_cols: int
) -> None:
    """Decode-sized GEMMs (a batch-1 GEMV's spans of groups, the batches' next-group prefetch)
    over 9 to 768 groups, a partial last group, K not a multiple of anything: within one bf16
    rounding, and the same bits on a second call."""
    torch.manual_seed(rows + out_rows)
    x, weight, residual = bf16(rows, in_cols), bf16(out_rows, in_cols), bf16(rows, out_rows)
    packed = pack_weight(weight)
    got = cpu_kernels.linear(x, packed, out_rows, "none", None, 0.0, residual)
    assert torch.equal(cpu_kernels.linear(x, packed, out_rows, "none", None, 0.0, residual), got)
    assert_within_bf16_rounding(got, x.float() @ weight.float().T + residual.float())


def test_back_to_back_jobs_give_the_same_bits(cpu_kernels: ModuleType) -> None:
    """The pool's helpers watch for the next job, then sleep: jobs faster than a helper falls
    asleep and slower ones give the same bits; every task runs once (a lost or doubled task
    would show as a wrong or torn row)."""
    torch.manual_seed(5)
    x, weight = bf16(3, 576), bf16(960, 576)
    packed = pack_weight(weight)
    want = [cpu_kernels.linear(x[: r + 1], packed, 960, "none", None, 0.0, None) for r in range(3)]
    for index in range(50):
        if index % 10 == 9:
            time.sleep(0.01)  # past the helpers' watch: they sleep and are woken
        got = [
            cpu_kernels.linear(x[: r + 1], packed, 960, "none", None, 0.0, None) for r in range(3)
        ]
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_kernels_called_from_several_threads_at_once_give_the_serial_results(
    cpu_kernels: ModuleType,
) -> None:
    """The kernels release the GIL, so two Python threads can be inside them together; the task
    pool holds one job at a time and runs a second caller's job on that caller's thread alone."""
    torch.manual_seed(7)
    weights = [pack_weight(bf16(960, 576)) for _ in range(4)]
    inputs = [bf16(rows, 576) for rows in (1, 3, 16, 40)]
    want = [
        [cpu_kernels.linear(x, w, 960, "none", None, 0.0, None) for x in inputs] for w in weights
    ]
    failures: list[str] = []

    def hammer(index: int) -> None:
        for _ in range(40):
            for j, x in enumerate(inputs):
                got = cpu_kernels.linear(x, weights[index], 960, "none", None, 0.0, None)
                if not torch.equal(got, want[index][j]):
                    failures.append(f"thread {index}, input {j}")

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("width", [1, 15, 16, 17, 49_152, 49_153])
def test_argmax_rows_is_torch_argmax(cpu_kernels: ModuleType, width: int) -> None:
    """The sampler's greedy choice on the kernels equals torch.argmax(dim=-1) row by row: random
    rows, ties (the first maximum wins, in the vectorised body and in the tail), a row of -inf,
    rows with NaN (torch picks the first NaN) and +inf."""
    torch.manual_seed(width)
    logits = torch.randn(8, width)
    logits[1] = 0.5  # all tied
    logits[2, width // 3] = logits[2, width - 1] = 99.0  # tie between body and tail
    logits[3] = float("-inf")
    logits[4, width // 2] = float("nan")
    logits[4, width - 1] = float("nan")
    logits[5, width - 1] = float("inf")
    logits[6, 0] = float("nan")
    got = cpu_kernels.argmax_rows(logits)
    assert got.dtype == torch.long
    assert torch.equal(got, logits.argmax(dim=-1))


def test_argmax_rows_refuses_what_it_cannot_read(cpu_kernels: ModuleType) -> None:
    with pytest.raises(RuntimeError, match="argmax_rows"):
        cpu_kernels.argmax_rows(torch.randn(4, 10).bfloat16())
    with pytest.raises(RuntimeError, match="argmax_rows"):
        cpu_kernels.argmax_rows(torch.randn(10, 4).T)
    with pytest.raises(RuntimeError, match="argmax_rows"):
        cpu_kernels.argmax_rows(torch.randn(4, 0))


@pytest.mark.parametrize("rows", [1, 3, 16, 70])
@pytest.mark.parametrize("out_rows", [100, 49_152])
def test_linear_logits_are_linear_widened_to_fp32(
    cpu_kernels: ModuleType, rows: int, out_rows: int
) -> None:
    """The LM head's fp32 logits are the bf16 results of linear() (same prologue), widened: the
    sampler sees exactly the values the bf16 head gave before, with no conversion pass."""
    torch.manual_seed(rows + out_rows)
    x, weight, norm = bf16(rows, 576), bf16(out_rows, 576), bf16(576)
    packed = pack_weight(weight)
    logits = cpu_kernels.linear_logits(x, packed, out_rows, "rms_norm", norm, 1e-5)
    assert logits.dtype == torch.float32 and logits.shape == (rows, out_rows)
    bf16_out = cpu_kernels.linear(x, packed, out_rows, "rms_norm", norm, 1e-5, None)
    assert torch.equal(logits, bf16_out.float())
