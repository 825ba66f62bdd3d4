"""The decoder layer as a sequence of `LayerOps`, and the backend that runs it over every layer.

The torch reference, the fp32 CPU path (attention on the C++ kernels) and the Triton backend are
this sequence with different ops; it must stay the same sequence HF transformers' Llama runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from selfhost.config import ModelConfig
from selfhost.kernels.backend import DecoderWeights, ForwardArgs, LayerOps, LayerWeights, RopeRows
from selfhost.kernels.metadata import AttentionMetadata


def layer_forward(
    ops: LayerOps,
    cfg: ModelConfig,
    w: LayerWeights,
    x: torch.Tensor,  # [T, hidden] residual stream
    rope: RopeRows,
    cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
    meta: AttentionMetadata,
) -> torch.Tensor:
    num_tokens, head_dim = x.shape[0], cfg.head_dim
    h = ops.rms_norm(x, w.input_norm)
    qkv = ops.linear(h, w.qkv).view(num_tokens, -1, head_dim)  # [T, H + 2 KV, D]
    q = ops.rope_write_kv(qkv, rope, cache, meta.slot_mapping)  # [T, H, D]
    attn = ops.attention(q, cache, meta, head_dim**-0.5)
    x = x + ops.linear(attn.reshape(num_tokens, -1), w.o_proj)
    h = ops.rms_norm(x, w.post_norm)
    return x + ops.linear(ops.silu_mul(ops.linear(h, w.gate_up)), w.down)


class LayeredBackend:
    """A DecoderBackend that runs `layer_forward` with one set of ops over every layer."""

    def __init__(self, name: str, ops: LayerOps, cfg: ModelConfig, weights: DecoderWeights) -> None:
        self.name = name
        self.ops = ops
        self.cfg = cfg
        self.weights = weights
        self.argmax_rows: Callable[[torch.Tensor], torch.Tensor] | None = None

    def forward(self, args: ForwardArgs) -> torch.Tensor:
        rope = self.ops.rope(args.positions)
        x = args.x
        for index, layer in enumerate(self.weights.layers):
            x = layer_forward(self.ops, self.cfg, layer, x, rope, args.kv_cache[index], args.meta)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.ops.rms_norm(hidden, self.weights.norm)
        return self.ops.linear(hidden, self.weights.head).float()
