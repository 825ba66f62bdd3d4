"""The engine on the Triton backend against the same engine on the torch reference: greedy tokens
equal in fp32 for continuous batches with chunked prefill, prefix-cache hits, a shared-prefix
burst and forced preemption (recompute on resume). Runs under Triton's interpreter without CUDA."""

from __future__ import annotations

import os
import random

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

from bench.random_llama import IdTokenizer, random_state_dict  # noqa: E402
from selfhost.config import ModelConfig  # noqa: E402
from selfhost.engine.block_manager import BlockManager  # noqa: E402
from selfhost.engine.llm_engine import LLMEngine  # noqa: E402
from selfhost.engine.model_runner import ModelRunner  # noqa: E402
from selfhost.engine.sampler import Sampler  # noqa: E402
from selfhost.engine.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from selfhost.engine.sequence import SamplingParams  # noqa: E402
from selfhost.kernels.reference.ops import reference_backend  # noqa: E402
from selfhost.kernels.triton.loader import load_triton_backend  # noqa: E402
from selfhost.model.llama import LlamaModel, load_decoder_weights  # noqa: E402
from selfhost.model.rope import rope_tables  # noqa: E402

CFG = ModelConfig(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    tie_word_embeddings=False,
    eos_token_ids=(2,),
)
STATE = random_state_dict(CFG, seed=0)
MAX_LEN = 256


def engine(kind: str, num_blocks: int, budget: int, chunk: int) -> LLMEngine:
    device = torch.device(DEVICE)
    embed, weights = load_decoder_weights(CFG, STATE, device, torch.float32)
    cos, sin = (t.to(device) for t in rope_tables(CFG, MAX_LEN))
    if kind == "triton":
        backend = load_triton_backend(CFG, weights, (cos, sin), graphs=None)
        assert backend is not None and backend.name == "triton"
    else:
        backend = reference_backend(CFG, weights, (cos, sin))
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, chunk_size=chunk, max_num_seqs=16),
        BlockManager(num_blocks, 16),
    )
    runner = ModelRunner(LlamaModel(CFG, embed, backend), num_blocks, 16)
    return LLMEngine(runner, IdTokenizer(), scheduler, Sampler(0), MAX_LEN)  # type: ignore[arg-type]


def prompts(count: int, low: int, high: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 96) for _ in range(rng.randint(low, high))] for _ in range(count)]


GREEDY = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)


@pytest.mark.parametrize(
    ("num_blocks", "budget", "chunk", "preempts"),
    [(64, 96, 32, False), (6, 48, 16, True)],  # chunked prefill; a pool too small: preemption
)
def test_triton_engine_equals_reference_engine(
    num_blocks: int, budget: int, chunk: int, preempts: bool
) -> None:
    batch = prompts(4, 10, 30, seed=1)
    want = engine("reference", num_blocks, budget, chunk).generate(batch, GREEDY)
    triton_engine = engine("triton", num_blocks, budget, chunk)
    assert triton_engine.generate(batch, GREEDY) == want
    assert (triton_engine.stats().num_preemptions > 0) == preempts


def test_shared_prefix_burst_hits_the_cache_and_decodes_over_it() -> None:
    """Three prompts on a 70-token common prefix: computed once, then 4+ shared blocks make the
    decodes' metadata a cascade, which the Triton decode kernel walks first."""
    common = prompts(1, 70, 70, seed=2)[0]
    batch = [common + own for own in prompts(3, 3, 12, seed=3)]
    want = engine("reference", 64, 128, 64).generate(batch, GREEDY)
    triton_engine = engine("triton", 64, 128, 64)
    assert triton_engine.generate(batch, GREEDY) == want
    assert triton_engine.stats().prefix_hit_tokens == 2 * 64
