"""Timing stages of bench/device_check.py (bf16, one device, one process): the HBM bandwidth probe,
batch-1 decode against the weight-streaming roofline, 64 concurrent requests against HF
transformers' generate on the same weights, and TTFT with a cached 4,000-token prefix."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from bench.device_correctness import random_prompts
from bench.device_models import build_engine, build_hf, model_bytes
from selfhost.config import ModelConfig
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.sequence import SamplingParams
from selfhost.kernels.backend import DecoderBackend

Backend = tuple[torch.Tensor, DecoderBackend]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bandwidth_probe(device: str, num_bytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth (read + write bytes per second), best of 5."""
    src = torch.empty(num_bytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        sync(device)
        started = time.perf_counter()
        dst.copy_(src)
        sync(device)
        best = min(best, time.perf_counter() - started)
    return 2 * num_bytes / best


def run_requests(engine: LLMEngine, prompts: list[list[int]], new: int) -> dict[str, float]:
    """Add every prompt at once, step to completion; wall time, first-token time, steps."""
    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        engine.add_request(f"r{index}-{started}", prompt, params)
    first: float | None = None
    steps = 0
    while engine.has_unfinished():
        outputs = engine.step()
        steps += 1
        if outputs and first is None:
            first = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    return {"elapsed_s": elapsed, "first_token_s": first or 0.0, "steps": steps}


def batch1_decode(
    cfg: ModelConfig, backend: Backend, device: str, hbm_bytes_s: float, new: int
) -> dict[str, object]:
    """One request, 128-token prompt: decode tokens/s against weights bytes / HBM bandwidth."""
    engine = build_engine(cfg, backend, 1024, 4096, 2048)
    run_requests(engine, random_prompts(cfg.vocab_size, 1, 128, 128, seed=20), 8)  # warm-up
    prompt = random_prompts(cfg.vocab_size, 1, 128, 128, seed=21)
    timing = run_requests(engine, prompt, new)
    decode_s = (timing["elapsed_s"] - timing["first_token_s"]) / (new - 1)
    step_bytes = model_bytes(cfg, torch.bfloat16)
    roofline_s = step_bytes / hbm_bytes_s
    return {
        "decode_ms_per_token": round(decode_s * 1000, 3),
        "decode_tok_s": round(1 / decode_s, 1),
        "weight_bytes_per_step": step_bytes,
        "roofline_ms_per_token": round(roofline_s * 1000, 3),
        "fraction_of_roofline": round(roofline_s / decode_s, 3),
        "target": ">= 0.7",
    }


def concurrent_vs_hf(
    cfg: ModelConfig,
    backend: Backend,
    state: dict[str, torch.Tensor],
    device: str,
    sizes: tuple[int, int, int],
) -> dict[str, object]:
    """`concurrency` requests of `prompt_len` tokens, `new` output tokens each: the engine's
    output tokens/s against HF generate over the same batch (equal lengths, no padding)."""
    concurrency, prompt_len, new = sizes
    prompts = random_prompts(cfg.vocab_size, concurrency, prompt_len, prompt_len, seed=30)
    engine = build_engine(cfg, backend, 4096, 8192, 2048)
    run_requests(engine, random_prompts(cfg.vocab_size, concurrency, 64, 64, seed=31), 4)
    timing = run_requests(engine, prompts, new)
    engine_tok_s = concurrency * new / timing["elapsed_s"]
    hf = build_hf(cfg, state, device, torch.bfloat16)
    ids = torch.tensor(prompts, device=device)
    generate = _hf_generate(hf, ids, new)
    generate(4)  # warm-up
    sync(device)
    started = time.perf_counter()
    generate(new)
    sync(device)
    hf_s = time.perf_counter() - started
    del hf
    hf_tok_s = concurrency * new / hf_s
    return {
        "concurrency": concurrency,
        "prompt_tokens": prompt_len,
        "new_tokens": new,
        "engine_output_tok_s": round(engine_tok_s, 1),
        "engine_ms_per_step": round(1000 * timing["elapsed_s"] / timing["steps"], 2),
        "hf_generate_output_tok_s": round(hf_tok_s, 1),
        "speedup_vs_hf": round(engine_tok_s / hf_tok_s, 2),
        "target": ">= 10x",
    }


def _hf_generate(model: torch.nn.Module, ids: torch.Tensor, new: int) -> Callable[[int], None]:
    def generate(num_new: int) -> None:
        with torch.inference_mode():
            model.generate(  # type: ignore[operator]
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=num_new,
                min_new_tokens=num_new,
                do_sample=False,
                pad_token_id=0,
            )

    return generate


def cached_prefix_ttft(cfg: ModelConfig, backend: Backend, prefix_len: int) -> dict[str, object]:
    """TTFT of a `prefix_len`-token prompt cold, then of the same prefix + 32 new tokens (all
    full blocks of the prefix hit the cache); each shape run once before for compilation."""
    engine = build_engine(cfg, backend, 4096, 8192, 8192)
    warm, cold = random_prompts(cfg.vocab_size, 2, prefix_len, prefix_len, seed=40)
    tail = random_prompts(cfg.vocab_size, 2, 32, 32, seed=41)
    run_requests(engine, [warm], 1)
    run_requests(engine, [warm + tail[0]], 1)
    cold_s = run_requests(engine, [cold], 1)["first_token_s"]
    hits_before = engine.stats().prefix_hit_tokens
    cached_s = run_requests(engine, [cold + tail[1]], 1)["first_token_s"]
    return {
        "prefix_tokens": prefix_len,
        "ttft_cold_ms": round(cold_s * 1000, 2),
        "ttft_cached_ms": round(cached_s * 1000, 2),
        "prefix_hit_tokens": engine.stats().prefix_hit_tokens - hits_before,
        "ttft_ratio": round(cold_s / cached_s, 2),
        "target": ">= 10x",
    }
