"""Next-token choice per row: greedy, temperature, top-k, top-p, per-request seeded generators.

Each request with a seed owns its own torch.Generator, so its samples do not depend on batch mates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from selfhost.engine.sequence import SamplingParams
from selfhost.structured.masks import StepMasks, apply_masks


@dataclass(frozen=True)
class TokenLogprobs:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), best first


@dataclass(frozen=True)
class SampledToken:
    token_id: int
    logprobs: TokenLogprobs | None


class Sampler:
    """`argmax`: the greedy choice of contiguous fp32 CPU logits [B, V] -> long [B], as
    torch.argmax(dim=-1) (the CPU kernels' argmax_rows: torch's took ~2 % of a batch-16 step)."""

    def __init__(
        self, seed: int, argmax: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> None:
        self._default = torch.Generator().manual_seed(seed)
        self._generators: dict[str, torch.Generator] = {}
        self._argmax = argmax

    def release(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def sample(
        self,
        logits: torch.Tensor,
        request_ids: list[str],
        params: list[SamplingParams],
        masks: StepMasks | None = None,
        generated: Callable[[int], list[int]] | None = None,
    ) -> list[SampledToken]:
        """logits: [B, V] (any device). Only rows that draw or report logprobs leave the device.
        `masks`: the guided rows' allowed tokens; the others are applied -inf first (in place).
        `generated(row)`: the tokens row `row` has generated so far, for its penalties."""
        if masks is not None:
            apply_masks(logits, request_ids, masks)
        for row, p in enumerate(params):
            if p.adjusts_logits:
                adjust_row(logits[row], p, generated(row) if generated is not None else [])
        argmax = self._argmax
        on_kernel = logits.device.type == "cpu" and logits.dtype == torch.float32
        if argmax is None or not on_kernel or not logits.is_contiguous():
            greedy = logits.argmax(dim=-1).tolist()
        else:
            greedy = argmax(logits).tolist()
        need_row = [not p.is_greedy or p.logprobs is not None for p in params]
        rows = logits.float().cpu() if any(need_row) else None
        tokens: list[SampledToken] = []
        for row, (request_id, p) in enumerate(zip(request_ids, params, strict=True)):
            if rows is None or not need_row[row]:
                tokens.append(SampledToken(greedy[row], None))
                continue
            token_id = greedy[row] if p.is_greedy else self._draw(rows[row], request_id, p)
            tokens.append(SampledToken(token_id, _logprobs(rows[row], token_id, p.logprobs)))
        return tokens

    def _draw(self, logits: torch.Tensor, request_id: str, p: SamplingParams) -> int:
        probs = filtered_probs(logits, p.temperature, p.top_k, p.top_p)
        return int(torch.multinomial(probs, 1, generator=self._generator(request_id, p)).item())

    def _generator(self, request_id: str, p: SamplingParams) -> torch.Generator:
        if p.seed is None:
            return self._default
        if request_id not in self._generators:
            self._generators[request_id] = torch.Generator().manual_seed(p.seed)
        return self._generators[request_id]


@torch.inference_mode()  # logits come from an inference-mode forward
def adjust_row(logits: torch.Tensor, p: SamplingParams, generated: list[int]) -> None:
    """OpenAI's penalties and logit bias on one row of logits [V], in place."""
    if generated and (p.presence_penalty or p.frequency_penalty):
        counts = torch.bincount(
            torch.tensor(generated, device=logits.device), minlength=logits.shape[-1]
        ).to(logits.dtype)
        logits -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(logits.dtype)
    if p.logit_bias:
        ids = torch.tensor([i for i, _ in p.logit_bias], device=logits.device)
        bias = torch.tensor([b for _, b in p.logit_bias], dtype=logits.dtype, device=logits.device)
        logits.index_add_(0, ids, bias)


def filtered_probs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """[V] probabilities after temperature, top-k and nucleus (top-p) filtering. Both filters
    rank the logits as given, ties to the lower token id as argmax breaks them, so top_k 1 (or a
    top_p that keeps one token) draws exactly the greedy token: bf16 logits tie often."""
    if 0 < top_k < logits.shape[-1]:
        logits = logits.masked_fill(~_top_k_mask(logits, top_k), float("-inf"))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        order = torch.sort(logits, descending=True, stable=True).indices
        sorted_probs = probs[order]
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def _top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """bool [V]: exactly the k largest logits; of those tied with the k-th, the lowest ids."""
    kth = torch.topk(logits, k).values[-1]
    keep = logits > kth
    tied = (logits == kth).nonzero().squeeze(-1)[: k - int(keep.sum())]
    return keep.index_fill_(0, tied, True)


def _logprobs(logits: torch.Tensor, token_id: int, num_top: int | None) -> TokenLogprobs | None:
    if num_top is None:
        return None
    logprobs = torch.log_softmax(logits, dim=-1)
    top = torch.topk(logprobs, num_top) if num_top > 0 else None
    pairs = (
        () if top is None else tuple(zip(top.indices.tolist(), top.values.tolist(), strict=True))
    )
    return TokenLogprobs(token_id, float(logprobs[token_id]), pairs)
