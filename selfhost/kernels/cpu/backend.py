"""The decoder on the CPU kernels (csrc/*.cpp).

bf16: every layer in one C++ call (`forward_layers`): RMSNorm fused into the QKV and gate/up
GEMMs, RoPE fused with the KV write, paged attention in place, SiLU*mul fused into the down GEMM,
residual adds fused into the o_proj and down GEMMs; the head writes fp32 logits itself.
fp32: the torch reference ops with attention on the kernels (linears stay F.linear, so fp32 keeps
HF transformers' tokens exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from selfhost.config import ModelConfig
from selfhost.kernels.backend import DecoderWeights, ForwardArgs, LayerWeights
from selfhost.kernels.cpu.loader import pack_weight
from selfhost.kernels.cpu.module import CpuKernelModule, ForwardLayersArgs, Prologue
from selfhost.kernels.layers import LayeredBackend
from selfhost.kernels.metadata import AttentionMetadata
from selfhost.kernels.reference.ops import TorchOps


@dataclass(frozen=True)
class CpuLayerWeights:
    input_norm: torch.Tensor  # [hidden] bf16
    post_norm: torch.Tensor
    qkv: torch.Tensor  # packed [groups, K/2, 64, 2] (loader.pack_weight)
    o_proj: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def pack(cls, layer: LayerWeights) -> CpuLayerWeights:
        return cls(
            layer.input_norm,
            layer.post_norm,
            pack_weight(layer.qkv),
            pack_weight(layer.o_proj),
            pack_weight(layer.gate_up),
            pack_weight(layer.down),
        )

    def as_list(self) -> list[torch.Tensor]:
        """The order cpu_forward.cpp reads a layer's weights in."""
        return [self.input_norm, self.post_norm, self.qkv, self.o_proj, self.gate_up, self.down]


class CpuKernelBackend:
    """bf16: all layers in one kernel call, the head on the kernels too."""

    name = "cpu-kernels"

    def __init__(
        self,
        kernels: CpuKernelModule,
        cfg: ModelConfig,
        weights: DecoderWeights,
        rope_tables: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        self.kernels = kernels
        self.cfg = cfg
        self.layers = [CpuLayerWeights.pack(layer) for layer in weights.layers]
        self.layer_lists = [layer.as_list() for layer in self.layers]
        self.norm = weights.norm
        self.head = pack_weight(weights.head)
        self.cos, self.sin = rope_tables  # [P, D] fp32
        self.argmax_rows: Callable[[torch.Tensor], torch.Tensor] | None = kernels.argmax_rows

    def forward(self, args: ForwardArgs) -> torch.Tensor:
        call = ForwardLayersArgs(
            args.x,
            self.layer_lists,
            args.kv_cache,
            args.positions,
            self.cos,
            self.sin,
            args.meta,
            self.cfg,
        )
        return call.call(self.kernels)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        return self.kernels.linear_logits(
            hidden, self.head, cfg.vocab_size, Prologue.RMS_NORM, self.norm, cfg.rms_norm_eps
        )


class CpuAttentionOps(TorchOps):
    """The torch reference ops with attention read in place through the block tables."""

    def __init__(
        self,
        kernels: CpuKernelModule,
        cfg: ModelConfig,
        rope_tables: tuple[torch.Tensor, torch.Tensor],
        dtype: torch.dtype,
    ) -> None:
        super().__init__(cfg, rope_tables, dtype)
        self.kernels = kernels

    def attention(
        self, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        return kernel_attention(self.kernels, q.contiguous(), cache, meta, scale)


def cpu_attention_backend(
    kernels: CpuKernelModule,
    cfg: ModelConfig,
    weights: DecoderWeights,
    rope_tables: tuple[torch.Tensor, torch.Tensor],
) -> LayeredBackend:
    ops = CpuAttentionOps(kernels, cfg, rope_tables, weights.norm.dtype)
    backend = LayeredBackend("cpu-attention", ops, cfg, weights)
    backend.argmax_rows = kernels.argmax_rows
    return backend


def kernel_attention(
    kernels: CpuKernelModule,
    q: torch.Tensor,
    cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q [T, H, D]: decodes and prefill chunks read K/V in place through their block tables."""
    num_decodes = meta.num_decodes
    decoded = None
    if num_decodes:
        shared = meta.decode_shared_blocks
        decoded = kernels.paged_decode(
            q[:num_decodes],
            cache[0],
            cache[1],
            meta.decode_block_tables,
            meta.decode_context_lens,
            shared if shared is not None else torch.empty(0, dtype=torch.long),
            scale,
        )
        if num_decodes == q.shape[0]:
            return decoded
    out = torch.empty_like(q)
    if decoded is not None:
        out[:num_decodes] = decoded
    for span in meta.prefills:
        rows = slice(span.q_start, span.q_start + span.q_len)
        out[rows] = kernels.prefill_attention(
            q[rows], cache[0], cache[1], span.block_ids, span.context_len, scale
        )
    return out
