"""One prepared GPU check of the bundled engine (selfhost) for a session that draws a CUDA device.

SmolLM2-135M shape with seeded random weights (the 98 MB GGUF cannot travel to the device):
1. correctness: greedy tokens of the engine equal HF transformers' LlamaForCausalLM on the same
   weights, in fp32 (TF32 off), for a continuous batch of mixed lengths, two chunk sizes and a tiny
   KV pool that forces preemption; in bf16 the first-step logits are compared and the greedy
   agreement is reported;
2. throughput (bf16): 1 and 32 concurrent requests, 512-token prompts, 256 new tokens, ignore_eos;
   plus a capped-KV run with preemption.
Writes $OUT/device_check.json (or ./device_check.json) and prints a summary. Needs torch (CUDA),
transformers and tokenizers only: no gguf, no FastAPI, no jinja2 on the engine's import path.

    python bench/device_check.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selfhost.builder import build_model  # noqa: E402
from selfhost.config import ModelConfig  # noqa: E402
from selfhost.engine.block_manager import BlockManager  # noqa: E402
from selfhost.engine.llm_engine import LLMEngine  # noqa: E402
from selfhost.engine.model_runner import ModelRunner  # noqa: E402
from selfhost.engine.sampler import Sampler  # noqa: E402
from selfhost.engine.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from selfhost.engine.sequence import SamplingParams  # noqa: E402
from selfhost.model.loader import LoadedWeights  # noqa: E402

DEVICE = "cuda"  # --device cpu --layers 2 --quick is a dry run of this script's logic on a CPU
SMOLLM2 = ModelConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
CONFIG = SMOLLM2


@dataclass(frozen=True)
class IdTokenizer:
    """Just enough of TextTokenizer for the engine: ids are rendered as text `<id>`."""

    eos_token_ids: tuple[int, ...] = (2,)

    def decode(self, token_ids: list[int]) -> str:
        return "".join(f"<{t}>" for t in token_ids)


def random_state_dict(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """HF-named weights. A wide embedding (std 1) makes the tied LM head's logits peaked, so greedy
    argmax is not decided by rounding noise; projections use std 0.02 as in HF init."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    def norm() -> torch.Tensor:
        return 1.0 + normal(config.hidden_size, std=0.1)

    hidden, inter, d = config.hidden_size, config.intermediate_size, config.head_dim
    state = {
        "model.embed_tokens.weight": normal(config.vocab_size, hidden, std=1.0),
        "model.norm.weight": norm(),
    }
    for i in range(config.num_layers):
        p = f"model.layers.{i}"
        state[f"{p}.input_layernorm.weight"] = norm()
        state[f"{p}.post_attention_layernorm.weight"] = norm()
        state[f"{p}.self_attn.q_proj.weight"] = normal(config.num_heads * d, hidden)
        state[f"{p}.self_attn.k_proj.weight"] = normal(config.num_kv_heads * d, hidden)
        state[f"{p}.self_attn.v_proj.weight"] = normal(config.num_kv_heads * d, hidden)
        state[f"{p}.self_attn.o_proj.weight"] = normal(hidden, config.num_heads * d)
        state[f"{p}.mlp.gate_proj.weight"] = normal(inter, hidden)
        state[f"{p}.mlp.up_proj.weight"] = normal(inter, hidden)
        state[f"{p}.mlp.down_proj.weight"] = normal(hidden, inter)
    return state


def build_engine(
    state: dict[str, torch.Tensor], dtype: torch.dtype, num_blocks: int, budget: int, chunk: int
) -> LLMEngine:
    dtype_name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    model = build_model(LoadedWeights(CONFIG, state, "random"), 4096, DEVICE, dtype_name)
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, chunk_size=chunk, max_num_seqs=256),
        BlockManager(num_blocks, 16),
    )
    return LLMEngine(ModelRunner(model, num_blocks, 16), IdTokenizer(), scheduler, Sampler(0), 4096)  # type: ignore[arg-type]


def build_hf(state: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**CONFIG.to_hf_dict()))
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model.to(device=DEVICE, dtype=dtype).eval()


@torch.inference_mode()
def hf_greedy(model: torch.nn.Module, prompt: list[int], num_tokens: int) -> list[int]:
    """Argmax without a KV cache (portable across transformers versions; cheap at this size)."""
    ids = torch.tensor([prompt], device=DEVICE)
    out: list[int] = []
    for _ in range(num_tokens):
        token = int(model(ids).logits[0, -1].float().argmax())
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]], device=DEVICE)], dim=1)
    return out


def random_prompts(count: int, low: int, high: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [
        [rng.randrange(3, SMOLLM2.vocab_size) for _ in range(rng.randint(low, high))]
        for _ in range(count)
    ]


def check_fp32(state: dict[str, torch.Tensor], num_new: int) -> dict[str, object]:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf = build_hf(state, torch.float32)
    prompts = random_prompts(6, 17, 300, seed=1)
    expected = [hf_greedy(hf, p, num_new) for p in prompts]
    common = random_prompts(1, 100, 100, seed=3)[0]
    shared = [common + own for own in random_prompts(4, 5, 40, seed=4)]
    expected_shared = [hf_greedy(hf, p, num_new) for p in shared]
    del hf
    greedy = SamplingParams(temperature=0.0, max_tokens=num_new, ignore_eos=True)
    cases = {"chunk512": (4096, 512, 512), "chunk64": (4096, 128, 64), "preempt": (22, 96, 48)}
    results: dict[str, object] = {}
    for name, (num_blocks, budget, chunk) in cases.items():
        engine = build_engine(state, torch.float32, num_blocks, budget, chunk)
        outputs = engine.generate(prompts, greedy)
        results[name] = {
            "equal": outputs == expected,
            "mismatched_prompts": [
                i for i, (a, b) in enumerate(zip(outputs, expected, strict=True)) if a != b
            ],
            "preemptions": engine.stats().num_preemptions,
        }
    engine = build_engine(state, torch.float32, 4096, 512, 512)
    outputs = engine.generate(shared, greedy)  # prefix computed once, decoded by the cascade path
    results["shared_prefix_cascade"] = {
        "equal": outputs == expected_shared,
        "prefix_hit_tokens": engine.stats().prefix_hit_tokens,
    }
    return results


def check_bf16(state: dict[str, torch.Tensor], num_new: int) -> dict[str, object]:
    hf = build_hf(state, torch.bfloat16)
    prompts = random_prompts(4, 30, 200, seed=2)
    with torch.inference_mode():
        hf_logits = [hf(torch.tensor([p], device=DEVICE)).logits[0, -1].float() for p in prompts]
    expected = [hf_greedy(hf, p, num_new) for p in prompts]
    del hf
    engine = build_engine(state, torch.bfloat16, 4096, 512, 512)
    params = SamplingParams(temperature=0.0, max_tokens=num_new, ignore_eos=True, logprobs=0)
    outputs = engine.generate(prompts, params)
    same = sum(
        a == b for o, e in zip(outputs, expected, strict=True) for a, b in zip(o, e, strict=True)
    )
    first_equal = [o[0] == int(lg.argmax()) for o, lg in zip(outputs, hf_logits, strict=True)]
    return {
        "first_token_equal": first_equal,
        "greedy_token_agreement": same / (len(prompts) * num_new),
        "sequences_equal": sum(o == e for o, e in zip(outputs, expected, strict=True)),
    }


def throughput(
    state: dict[str, torch.Tensor], concurrency: int, num_blocks: int, new: int
) -> dict[str, float]:
    engine = build_engine(state, torch.bfloat16, num_blocks, 8192, 2048)
    engine.generate(
        random_prompts(2, 64, 64, seed=9), SamplingParams(temperature=0.0, max_tokens=4)
    )  # warm-up
    prompts = random_prompts(concurrency, 512, 512, seed=10 + concurrency)
    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for i, prompt in enumerate(prompts):
        engine.add_request(f"t{i}", prompt, params)
    first_token_s: float | None = None
    steps = 0
    while engine.has_unfinished():
        outputs = engine.step()
        steps += 1
        if outputs and first_token_s is None:
            first_token_s = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "num_blocks": num_blocks,
        "elapsed_s": round(elapsed, 3),
        "output_tok_s": round(concurrency * new / elapsed, 1),
        "total_tok_s": round(concurrency * (new + 512) / elapsed, 1),
        "first_token_s": round(first_token_s or 0.0, 3),
        "steps": steps,
        "ms_per_step": round(1000 * elapsed / steps, 2),
        "preemptions": engine.stats().num_preemptions,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer tokens (smoke run)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=SMOLLM2.num_layers)
    args = parser.parse_args()
    global DEVICE, CONFIG
    DEVICE, CONFIG = args.device, replace(SMOLLM2, num_layers=args.layers)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("device_check: no CUDA device", file=sys.stderr)
        return 2
    num_new = 8 if args.quick else 24
    new = 64 if args.quick else 256
    concurrency = 4 if DEVICE == "cpu" else 32
    state = random_state_dict(CONFIG, seed=0)
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE,
        "num_layers": CONFIG.num_layers,
        "torch": torch.__version__,
        "kernels_importable": {
            m: importlib.util.find_spec(m) is not None for m in ("flash_attn", "flashinfer")
        },
    }
    report["fp32_vs_hf"] = check_fp32(state, num_new)
    report["bf16_vs_hf"] = check_bf16(state, num_new)
    report["throughput"] = [
        throughput(state, 1, 4096, new),
        throughput(state, concurrency, 4096, new),
        throughput(
            state, concurrency, concurrency * 20, new
        ),  # capped: 32 x 768 tokens need 1536 blocks
    ]
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / "device_check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    fp32 = report["fp32_vs_hf"]
    ok = all(case["equal"] for case in fp32.values())  # type: ignore[union-attr]
    print("device_check:", "PASS" if ok else "FAIL (fp32 greedy differs from HF)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
