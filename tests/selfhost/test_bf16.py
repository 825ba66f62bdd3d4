"""The bf16 CPU paths: oneDNN-packed linears give F.linear's exact results; both the reference
path and the CPU kernels answer sanely."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from selfhost.engine import LLMEngine
from selfhost.model import pack_linear_weight
from selfhost.sequence import SamplingParams


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_packed_linear_equals_f_linear_in_bf16(rows: int) -> None:
    torch.manual_seed(rows)
    weight = torch.randn(96, 64).to(torch.bfloat16)
    x = torch.randn(rows, 64).to(torch.bfloat16)
    packed = pack_linear_weight(weight)
    assert packed is not None
    got = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    assert torch.equal(got, F.linear(x, weight))


def test_no_packing_outside_cpu_bf16() -> None:
    assert pack_linear_weight(torch.randn(4, 4)) is None


@pytest.mark.parametrize("use_kernels", [False, True])
def test_bf16_engine_answers_the_capital_question(
    make_engine: Callable[..., LLMEngine],
    chat_prompts: list[list[int]],
    request: pytest.FixtureRequest,
    use_kernels: bool,
) -> None:
    if use_kernels:
        request.getfixturevalue("cpu_kernels")  # skips where they cannot be built
    engine = make_engine(dtype="bfloat16", cpu_kernels=use_kernels)
    model = engine.runner.model
    assert engine.runner.kv_cache.dtype == torch.bfloat16
    assert (model.kernels is not None) == use_kernels
    expected_packed = set() if use_kernels else {"qkv", "o_proj", "gate_up", "down"}
    assert set(model.decoder_layers()[0].packed) == expected_packed
    assert len(model.kernel_layers) == (30 if use_kernels else 0)
    tokens = engine.generate([chat_prompts[0]], SamplingParams(temperature=0.0, max_tokens=16))[0]
    assert engine.tokenizer.decode(tokens) == "The capital of France is Paris."
