"""Per-sequence token masks for guided rows: filled by llguidance's thread pool while the forward
pass runs (the masks depend only on tokens already accepted), then applied to the logits rows.

A mask is int32 words [W] with bit j of word i allowing token 32*i + j (llguidance's layout).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import llguidance
import torch

from selfhost.structured.grammar import Guide

_BIT = torch.arange(32, dtype=torch.int32)


@dataclass(frozen=True)
class StepMasks:
    """The masks of one step: row `rows[request_id]` of `bits` [G, W] belongs to that request."""

    rows: dict[str, int]
    bits: torch.Tensor


class MaskFiller:
    """Computes the masks of a step's guided sequences off the engine thread."""

    def __init__(self, vocab_size: int, num_threads: int | None = None) -> None:
        self.num_words = (vocab_size + 31) // 32
        self._executor = llguidance.LLExecutor(num_threads)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="selfhost-masks")

    def start(self, guides: dict[str, Guide]) -> Future[StepMasks]:
        """Begin filling one mask per guide; the result is ready by the time sampling needs it."""
        return self._pool.submit(self.fill, dict(guides))

    def fill(self, guides: dict[str, Guide]) -> StepMasks:
        bits = torch.zeros((len(guides), self.num_words), dtype=torch.int32)
        rows = {request_id: row for row, request_id in enumerate(guides)}
        pairs = [(guide.matcher, rows[request_id]) for request_id, guide in guides.items()]
        self._executor.unsafe_compute_mask_ptr(pairs, bits.data_ptr(), self.num_words * 4, len(rows))
        return StepMasks(rows, bits)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def allowed_tokens(bits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bits [G, W] int32 -> bool [G, vocab_size]; tokens past the mask's words are disallowed."""
    unpacked = (bits.unsqueeze(-1) >> _BIT.to(bits.device)) & 1  # [G, W, 32]
    allowed = unpacked.reshape(bits.shape[0], -1).bool()
    width = allowed.shape[1]
    if width >= vocab_size:
        return allowed[:, :vocab_size]
    pad = torch.zeros((bits.shape[0], vocab_size - width), dtype=torch.bool, device=bits.device)
    return torch.cat([allowed, pad], dim=1)


def apply_masks(logits: torch.Tensor, request_ids: list[str], masks: StepMasks) -> None:
    """Set disallowed logits of the guided rows of logits [B, V] to -inf, in place."""
    rows = [row for row, request_id in enumerate(request_ids) if request_id in masks.rows]
    if not rows:
        return
    order = [masks.rows[request_ids[row]] for row in rows]
    with torch.inference_mode():  # logits come from an inference-mode forward
        bits = masks.bits[order].to(logits.device, non_blocking=True)
        index = torch.tensor(rows, device=logits.device)
        allowed = allowed_tokens(bits, logits.shape[1])
        logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
