"""Turns one SchedulerOutput into one packed forward pass over the paged KV cache.

Owns the KV tensor [num_layers, 2, num_blocks, block_size, KV, D]; knows nothing of requests' text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfhost.engine.scheduler import ScheduledSequence, SchedulerOutput
from selfhost.kernels.metadata import AttentionMetadata, PrefillSpan, causal_mask, decode_mask
from selfhost.model.llama import LlamaModel


@dataclass(frozen=True)
class StepInputs:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [S] row of the last token of each sequence that samples
    sampled: tuple[ScheduledSequence, ...]


class ModelRunner:
    def __init__(self, model: LlamaModel, num_blocks: int, block_size: int) -> None:
        cfg = model.config
        self.model = model
        self.block_size = block_size
        self.device = model.embed.device
        shape = (cfg.num_layers, 2, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.kv_cache = torch.zeros(shape, dtype=model.embed.dtype, device=self.device)

    @torch.inference_mode()
    def execute(
        self, output: SchedulerOutput
    ) -> tuple[torch.Tensor, tuple[ScheduledSequence, ...]]:
        """Run the step; return logits [S, V] for the sequences that reached their last token."""
        inputs = prepare_step(output, self.block_size, self.device)
        hidden = self.model(inputs.input_ids, inputs.positions, self.kv_cache, inputs.meta)
        rows = inputs.sample_rows  # increasing: as many as the rows means every row, in order
        sampled = hidden if rows.numel() == hidden.shape[0] else hidden[rows]
        return self.model.compute_logits(sampled), inputs.sampled


def prepare_step(output: SchedulerOutput, block_size: int, device: torch.device) -> StepInputs:
    """Pack the scheduled tokens (single-token sequences first) and build the attention metadata."""
    decodes = [item for item in output.scheduled if item.num_new_tokens == 1]
    prefills = [item for item in output.scheduled if item.num_new_tokens > 1]
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    sample_rows: list[int] = []
    sampled: list[ScheduledSequence] = []
    for item in decodes + prefills:
        table = item.seq.block_table
        input_ids += item.seq.token_ids[item.start : item.end]
        positions += range(item.start, item.end)
        slots += [
            table[p // block_size] * block_size + p % block_size
            for p in range(item.start, item.end)
        ]
        if item.end == item.seq.num_tokens:
            sample_rows.append(len(input_ids) - 1)
            sampled.append(item)
    decode_tables, context_lens, shared_blocks = _decode_meta(decodes, block_size, device)
    meta = AttentionMetadata(
        slot_mapping=_tensor(slots, device),
        num_decodes=len(decodes),
        decode_block_tables=decode_tables,
        decode_mask=decode_mask(context_lens, decode_tables.shape[1] * block_size),
        decode_context_lens=context_lens,
        prefills=_prefill_spans(prefills, len(decodes), block_size, device),
        decode_shared_blocks=shared_blocks,
    )
    return StepInputs(
        _tensor(input_ids, device),
        _tensor(positions, device),
        meta,
        _tensor(sample_rows, device),
        tuple(sampled),
    )


CASCADE_MIN_SHARED_BLOCKS = 4


def _decode_meta(
    decodes: list[ScheduledSequence], block_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Block tables and context lengths of each decode's own blocks, plus the blocks all share."""
    tables = [item.seq.block_table[: -(-item.end // block_size)] for item in decodes]
    shared = _num_shared_blocks(tables)
    if shared < CASCADE_MIN_SHARED_BLOCKS:
        shared = 0
    own = [table[shared:] for table in tables]
    num_blocks = max((len(table) for table in own), default=1)
    padded = [table + [0] * (num_blocks - len(table)) for table in own]
    context_lens = _tensor([item.end - shared * block_size for item in decodes], device)
    return (
        _tensor(padded, device).view(len(decodes), num_blocks),
        context_lens,
        _tensor(tables[0][:shared], device) if shared else None,
    )


def _num_shared_blocks(tables: list[list[int]]) -> int:
    """Leading block ids common to every table, leaving each its last (still written) block."""
    if len(tables) < 2:
        return 0
    limit = min(len(table) for table in tables) - 1
    shared = 0
    while shared < limit and all(table[shared] == tables[0][shared] for table in tables):
        shared += 1
    return shared


def _prefill_spans(
    prefills: list[ScheduledSequence], start: int, block_size: int, device: torch.device
) -> tuple[PrefillSpan, ...]:
    spans = []
    for item in prefills:
        num_blocks = -(-item.end // block_size)
        mask = None if item.start == 0 else causal_mask(item.num_new_tokens, item.end, device)
        block_ids = _tensor(item.seq.block_table[:num_blocks], device)
        spans.append(PrefillSpan(start, item.num_new_tokens, item.end, block_ids, mask))
        start += item.num_new_tokens
    return tuple(spans)


def _tensor(values: list[int] | list[list[int]], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long).to(device, non_blocking=True)
