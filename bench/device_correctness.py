"""Correctness stages of bench/device_check.py: the engine on the Triton backend against HF
transformers (greedy tokens, fp32, TF32 off) and against the torch reference backend (bf16
logits of one mixed step)."""

from __future__ import annotations

import random

import torch

from bench.device_models import BLOCK_SIZE, build_engine, build_hf, make_backend, random_weights
from selfhost.config import ModelConfig
from selfhost.engine.model_runner import ModelRunner, prepare_step
from selfhost.engine.scheduler import ScheduledSequence, SchedulerOutput
from selfhost.engine.sequence import SamplingParams, Sequence
from selfhost.model.llama import LlamaModel


def random_prompts(vocab: int, count: int, low: int, high: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(low, high))] for _ in range(count)]


@torch.inference_mode()
def hf_greedy(model: torch.nn.Module, prompt: list[int], num_new: int, device: str) -> list[int]:
    ids = torch.tensor([prompt], device=device)
    out = model.generate(  # type: ignore[operator]
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=num_new,
        min_new_tokens=num_new,
        do_sample=False,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def fp32_vs_hf(cfg: ModelConfig, device: str, num_new: int) -> dict[str, object]:
    """Greedy tokens equal HF's for mixed lengths at two chunk sizes, a pool that forces
    preemption, and a shared-prefix burst (cascade decodes), on Triton with and without graphs."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    state = random_weights(cfg, 1, device, torch.float32)
    hf = build_hf(cfg, state, device, torch.float32)
    prompts = random_prompts(cfg.vocab_size, 6, 17, 300, seed=1)
    common = random_prompts(cfg.vocab_size, 1, 100, 100, seed=3)[0]
    shared = [common + own for own in random_prompts(cfg.vocab_size, 4, 5, 40, seed=4)]
    expected = {"mixed": [hf_greedy(hf, p, num_new, device) for p in prompts]}
    expected["shared"] = [hf_greedy(hf, p, num_new, device) for p in shared]
    del hf
    greedy = SamplingParams(temperature=0.0, max_tokens=num_new, ignore_eos=True)
    cases = {
        "chunk512": ("mixed", 4096, 512, 512),
        "chunk64": ("mixed", 4096, 128, 64),
        "preempt": ("mixed", 24, 96, 48),
        "shared_prefix": ("shared", 4096, 512, 512),
    }
    results: dict[str, object] = {}
    for kind in ("triton", "triton-eager"):
        backend = make_backend(cfg, state, kind, device, torch.float32)
        for name, (batch, num_blocks, budget, chunk) in cases.items():
            engine = build_engine(cfg, backend, num_blocks, budget, chunk)
            outputs = engine.generate(prompts if batch == "mixed" else shared, greedy)
            want = expected[batch]
            results[f"{kind}/{name}"] = {
                "equal": outputs == want,
                "mismatched": [
                    i for i, (a, b) in enumerate(zip(outputs, want, strict=True)) if a != b
                ],
                "preemptions": engine.stats().num_preemptions,
                "prefix_hit_tokens": engine.stats().prefix_hit_tokens,
            }
    return results


@torch.inference_mode()
def bf16_vs_reference(cfg: ModelConfig, device: str) -> dict[str, object]:
    """A prefill step, then a mixed step (3 decodes over 40-700 tokens, a chunk on a 64-token
    cached prefix, a fresh prefill) through both backends: the bf16 logits of every row, their
    gap and top-token agreement."""
    state = random_weights(cfg, 2, device, torch.bfloat16)
    logits = {}
    for kind in ("reference", "triton-eager"):
        embed, backend = make_backend(cfg, state, kind, device, torch.bfloat16)
        runner = ModelRunner(LlamaModel(cfg, embed, backend), 256, BLOCK_SIZE)
        rows = []
        for output in _mixed_steps(cfg):
            inputs = prepare_step(output, BLOCK_SIZE, torch.device(device))
            hidden = runner.model(inputs.input_ids, inputs.positions, runner.kv_cache, inputs.meta)
            rows.append(runner.model.compute_logits(hidden))  # every row, sampled or not
        logits[kind] = torch.cat(rows)
    gap = (logits["triton-eager"] - logits["reference"]).abs()
    top_equal = logits["triton-eager"].argmax(-1) == logits["reference"].argmax(-1)
    return {
        "max_abs_logit_gap": round(gap.max().item(), 4),
        "mean_abs_logit_gap": round(gap.mean().item(), 5),
        "logit_scale": round(logits["reference"].abs().mean().item(), 4),
        "top_token_equal": f"{int(top_equal.sum())}/{top_equal.numel()}",
    }


def _mixed_steps(cfg: ModelConfig) -> list[SchedulerOutput]:
    """Prefill four sequences, then one step mixing their decodes with two prefill chunks."""
    rng = random.Random(5)
    lengths = [40, 300, 700, 64]
    seqs, next_block = [], 0
    for index, length in enumerate(lengths + [90]):
        tokens = [rng.randrange(3, cfg.vocab_size) for _ in range(length + 20)]
        blocks = -(-len(tokens) // BLOCK_SIZE)
        table = list(range(next_block, next_block + blocks))
        next_block += blocks
        seqs.append(Sequence(f"s{index}", tokens, SamplingParams(), block_table=table))
    first = SchedulerOutput(
        tuple(ScheduledSequence(s, 0, n) for s, n in zip(seqs[:4], lengths, strict=True)), ()
    )
    mixed = (
        ScheduledSequence(seqs[0], 40, 1),
        ScheduledSequence(seqs[1], 300, 1),
        ScheduledSequence(seqs[2], 700, 1),
        ScheduledSequence(seqs[3], 64, 20),  # a chunk after a cached 64-token prefix
        ScheduledSequence(seqs[4], 0, 90),  # a fresh prefill
    )
    return [first, SchedulerOutput(mixed, ())]
