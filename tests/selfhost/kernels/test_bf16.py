"""The bf16 CPU paths: oneDNN-packed linears give F.linear's exact results (where oneDNN packs
bf16 at all); both the reference path and the CPU kernels answer sanely."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from selfhost.config import ModelConfig
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.sequence import SamplingParams
from selfhost.kernels.cpu.loader import load_cpu_kernels
from selfhost.kernels.reference.ops import TorchOps, pack_linear_weight
from selfhost.model.rope import rope_tables

ONEDNN_BF16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


TINY = ModelConfig(
    vocab_size=32,
    hidden_size=64,
    intermediate_size=96,
    num_layers=1,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_reference_linear_equals_f_linear_in_bf16(rows: int) -> None:
    # Where oneDNN packs bf16 the reference path runs the packed weight through oneDNN; elsewhere
    # it keeps the plain weight. Either way its result is F.linear's, bit for bit.
    torch.manual_seed(rows)
    weight = torch.randn(96, 64).to(torch.bfloat16)
    x = torch.randn(rows, 64).to(torch.bfloat16)
    packed = pack_linear_weight(weight)
    ops = TorchOps(TINY, rope_tables(TINY, 8), torch.bfloat16)
    ops.onednn = packed is not None
    got = ops.linear(x, weight if packed is None else packed)
    assert torch.equal(got, F.linear(x, weight))


def test_no_packing_outside_cpu_bf16() -> None:
    assert pack_linear_weight(torch.randn(4, 4)) is None


def test_no_packing_where_onednn_has_no_bf16() -> None:
    # On such a CPU oneDNN's reorder raises; the layer keeps its plain weights for F.linear.
    packed = pack_linear_weight(torch.randn(64, 64).to(torch.bfloat16))
    assert (packed is not None) == ONEDNN_BF16


@pytest.mark.parametrize("use_kernels", [False, True])
def test_bf16_engine_answers_the_capital_question(
    make_engine: Callable[..., LLMEngine],
    chat_prompts: list[list[int]],
    use_kernels: bool,
) -> None:
    if use_kernels and load_cpu_kernels() is None:
        pytest.skip("the CPU kernels cannot be built here")
    engine = make_engine(dtype="bfloat16", cpu_kernels=use_kernels)
    model = engine.runner.model
    assert engine.runner.kv_cache.dtype == torch.bfloat16
    reference = "reference-onednn" if ONEDNN_BF16 else "reference"
    assert model.backend.name == ("cpu-kernels" if use_kernels else reference)
    tokens = engine.generate([chat_prompts[0]], SamplingParams(temperature=0.0, max_tokens=16))[0]
    assert engine.tokenizer.decode(tokens) == "The capital of France is Paris."
