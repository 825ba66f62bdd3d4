"""What one forward's attention needs to know about the packed batch: slots, block tables, spans.

Built by the engine's model runner, read by every kernel backend; plain data, no kernels here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrefillSpan:
    """One prefill chunk: q rows [q_start, q_start + q_len) attend to `context_len` cached slots."""

    q_start: int
    q_len: int
    context_len: int
    block_ids: torch.Tensor  # [num_blocks] long
    mask: torch.Tensor | None  # [q_len, context_len] bool, None when plain causal (no prefix)


@dataclass(frozen=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] long: flat slot (block * block_size + offset) of each token
    num_decodes: int  # the first num_decodes rows are single-token sequences
    decode_block_tables: torch.Tensor  # [num_decodes, max_blocks] long, padded with block 0
    decode_mask: torch.Tensor  # [num_decodes, 1, 1, max_blocks * block_size] bool
    decode_context_lens: torch.Tensor  # [num_decodes] long: tokens each decode reads via its table
    prefills: tuple[PrefillSpan, ...]
    # Blocks every decode's table starts with; the decode tables/mask then cover the rest only.
    decode_shared_blocks: torch.Tensor | None = None


def causal_mask(q_len: int, context_len: int, device: torch.device) -> torch.Tensor:
    """[q_len, context_len] bool: query i (at position context_len - q_len + i) sees keys <= it."""
    offset = context_len - q_len
    rows = torch.arange(q_len, device=device).unsqueeze(1) + offset
    return torch.arange(context_len, device=device).unsqueeze(0) <= rows


def decode_mask(context_lens: torch.Tensor, num_slots: int) -> torch.Tensor:
    """[B, 1, 1, num_slots] bool: slot j is valid for sequence b when j < context_lens[b]."""
    slots = torch.arange(num_slots, device=context_lens.device)
    return (slots.unsqueeze(0) < context_lens.unsqueeze(1)).view(-1, 1, 1, num_slots)
