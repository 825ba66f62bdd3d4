"""The bf16 CPU path: oneDNN-packed linears give F.linear's exact results; the engine stays sane."""

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


def test_bf16_engine_answers_the_capital_question(
    make_engine: Callable[..., LLMEngine], chat_prompts: list[list[int]]
) -> None:
    engine = make_engine(dtype="bfloat16")
    assert engine.runner.kv_cache.dtype == torch.bfloat16
    assert set(engine.runner.model.decoder_layers()[0].packed) == {
        "qkv",
        "o_proj",
        "gate_up",
        "down",
    }
    tokens = engine.generate([chat_prompts[0]], SamplingParams(temperature=0.0, max_tokens=16))[0]
    assert engine.tokenizer.decode(tokens) == "The capital of France is Paris."
