"""HF transformers baseline for bench/engine.py: `generate` on static batches, in this process.

The weights are the engine's own dequantised GGUF tensors (selfhost.model.loader), in HF layout, so
all three systems run the same model. Timestamps come from a logits processor called once per step.
"""

from __future__ import annotations

import copy
import inspect
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

from bench.engine_http import Batch, Completion
from selfhost.builder import DTYPES
from selfhost.model.loader import LoadedWeights


class StepClock(LogitsProcessor):
    """Records the time each step's logits are ready (the first call follows the prefill)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.stamps.append(time.perf_counter())
        return scores


@dataclass
class HFRunner:
    model: Any  # LlamaForCausalLM
    eos_id: int

    @property
    def cache_kwarg(self) -> str:
        """`cache` since transformers 5.x, `past_key_values` before."""
        params = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    @classmethod
    def build(cls, weights: LoadedWeights, dtype: str) -> HFRunner:
        fields: dict[str, Any] = weights.config.to_hf_dict()
        config = LlamaConfig(**fields)
        model = LlamaForCausalLM(config)
        missing, unexpected = model.load_state_dict(weights.state_dict, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"HF load: missing {missing}, unexpected {unexpected}")
        if missing:
            model.tie_weights()
        torch.nn.Module.to(model, dtype=DTYPES[dtype]).eval()  # (HF wraps .to; mypy trips)
        eos = weights.config.eos_token_ids
        return cls(model, eos[0] if eos else 0)

    @torch.inference_mode()
    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, past: Any = None
    ) -> tuple[float, StepClock]:
        """One static batch (prompts of equal length), forced to exactly max_new_tokens, greedy."""
        clock = StepClock()
        ids = torch.tensor(prompts, dtype=torch.long)
        reuse = {} if past is None else {self.cache_kwarg: past}
        started = time.perf_counter()
        self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.eos_id,
            logits_processor=LogitsProcessorList([clock]),
            **reuse,
        )
        return started, clock

    def run_batch(self, prompts: list[list[int]], max_new_tokens: int) -> Batch:
        started, clock = self.generate(prompts, max_new_tokens)
        wall = time.perf_counter() - started
        one = Completion(
            prompt_tokens=len(prompts[0]),
            output_tokens=len(clock.stamps),
            cached_tokens=0,
            ttft_s=clock.stamps[0] - started,
            total_s=wall,
            decode_s=clock.stamps[-1] - clock.stamps[0],
        )
        return Batch(wall, tuple(one for _ in prompts))

    def ttft(self, prompt: list[int]) -> float:
        started, clock = self.generate([prompt], 1)
        return clock.stamps[0] - started

    @torch.inference_mode()
    def prefix_cache(self, prefix: list[int]) -> Any:
        """KV of a shared prefix, computed once (HF's documented prompt-reuse pattern)."""
        out = self.model(input_ids=torch.tensor([prefix]), use_cache=True)
        return getattr(out, self.cache_kwarg)

    def ttft_cached(self, prompt: list[int], cache: Any) -> float:
        """First token of prefix + suffix, starting from a copy of the prefix's KV (copy timed)."""
        started = time.perf_counter()
        _, clock = self.generate([prompt], 1, past=copy.deepcopy(cache))
        return clock.stamps[0] - started
