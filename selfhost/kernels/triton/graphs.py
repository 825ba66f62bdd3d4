"""CUDA graphs for decode batches of common sizes (CUDA only; the one GPU-only switch).

A pure-decode batch of up to the largest captured size replays the graph of the next size up:
its rows are copied into static buffers, padding rows get slot -1 (no KV write) and context 0.
The cascade prefix is folded back into each row's block table, so one graph serves any batch.
Everything else (prefill chunks, wider tables) runs the wrapped backend eagerly.
"""

from __future__ import annotations

import torch

from selfhost.kernels.backend import ForwardArgs
from selfhost.kernels.layers import LayeredBackend
from selfhost.kernels.metadata import AttentionMetadata

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


class DecodeGraphs:
    """A DecoderBackend: `inner` eagerly, or a captured graph for pure-decode batches."""

    def __init__(self, inner: LayeredBackend, max_blocks_per_seq: int, block_size: int) -> None:
        self.inner = inner
        self.name = f"{inner.name}+cuda-graphs"
        self.argmax_rows = inner.argmax_rows
        self.block_size = block_size
        self.max_blocks = max_blocks_per_seq
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, ForwardArgs, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if torch.cuda.is_available() else None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.inner.logits(hidden)

    def forward(self, args: ForwardArgs) -> torch.Tensor:
        meta, batch = args.meta, args.x.shape[0]
        size = next((n for n in GRAPH_BATCH_SIZES if n >= batch), None)
        if meta.prefills or meta.num_decodes != batch or size is None:
            return self.inner.forward(args)
        tables, lens = full_decode_tables(meta, self.block_size)
        if tables.shape[1] > self.max_blocks:
            return self.inner.forward(args)
        captured = self.graphs.get(size)
        if captured is None or captured[1].kv_cache is not args.kv_cache:  # a new engine's pool
            captured = self._capture(size, args)
        graph, static, out = captured
        smeta = static.meta
        static.x[:batch].copy_(args.x)
        static.positions[:batch].copy_(args.positions)
        smeta.slot_mapping[:batch].copy_(meta.slot_mapping)
        smeta.slot_mapping[batch:].fill_(-1)
        smeta.decode_block_tables[:batch, : tables.shape[1]].copy_(tables)
        smeta.decode_context_lens[:batch].copy_(lens)
        smeta.decode_context_lens[batch:].zero_()
        graph.replay()
        return out[:batch].clone()

    def _capture(
        self, size: int, args: ForwardArgs
    ) -> tuple[torch.cuda.CUDAGraph, ForwardArgs, torch.Tensor]:
        device, long = args.x.device, torch.long
        meta = AttentionMetadata(
            slot_mapping=torch.full((size,), -1, dtype=long, device=device),
            num_decodes=size,
            decode_block_tables=torch.zeros(size, self.max_blocks, dtype=long, device=device),
            decode_mask=torch.zeros(size, 1, 1, 1, dtype=torch.bool, device=device),
            decode_context_lens=torch.zeros(size, dtype=long, device=device),
            prefills=(),
        )
        x = torch.zeros(size, args.x.shape[1], dtype=args.x.dtype, device=device)
        positions = torch.zeros(size, dtype=long, device=device)
        static = ForwardArgs(x, positions, args.kv_cache, meta)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # compile the kernels before capture: every slot is -1
            self.inner.forward(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.inner.forward(static)
        self.graphs[size] = (graph, static, out)
        return graph, static, out


def full_decode_tables(
    meta: AttentionMetadata, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each decode's whole block table and context length: the shared prefix put back in front."""
    shared = meta.decode_shared_blocks
    if shared is None:
        return meta.decode_block_tables, meta.decode_context_lens
    batch = meta.decode_block_tables.shape[0]
    tables = torch.cat([shared.expand(batch, -1), meta.decode_block_tables], dim=1)
    return tables, meta.decode_context_lens + shared.numel() * block_size
