"""The torch reference ops of a decoder layer (the oracle every other backend is tested against).

Device-neutral torch; on a CPU whose oneDNN packs bf16, the linears read oneDNN-packed weights
(results equal to F.linear's, ~1.7x faster). Builds the reference backend.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from selfhost.config import ModelConfig
from selfhost.kernels.backend import DecoderWeights, RopeRows
from selfhost.kernels.layers import LayeredBackend
from selfhost.kernels.metadata import AttentionMetadata
from selfhost.kernels.reference.attention import paged_attention, write_kv
from selfhost.model.rope import rotate


class TorchOps:
    """LayerOps in plain torch; `onednn`: linear weights are oneDNN-packed (pack_linear_weight)."""

    def __init__(
        self, cfg: ModelConfig, rope_tables: tuple[torch.Tensor, torch.Tensor], dtype: torch.dtype
    ) -> None:
        self.cfg = cfg
        self.cos, self.sin = rope_tables  # [P, D] fp32
        self.dtype = dtype
        self.onednn = False

    def rope(self, positions: torch.Tensor) -> RopeRows:
        return RopeRows(
            positions, self.cos[positions].to(self.dtype), self.sin[positions].to(self.dtype)
        )

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.cfg.hidden_size,), weight, self.cfg.rms_norm_eps)

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        return F.linear(x, weight)

    def rope_write_kv(
        self, qkv: torch.Tensor, rope: RopeRows, cache: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        heads, kv_heads = self.cfg.num_heads, self.cfg.num_kv_heads
        qk = rotate(qkv[:, : heads + kv_heads], rope.cos.unsqueeze(1), rope.sin.unsqueeze(1))
        write_kv(cache, qk[:, heads:], qkv[:, heads + kv_heads :], slots)
        return qk[:, :heads]

    def attention(
        self, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        return paged_attention(q, cache, meta, scale)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


def reference_backend(
    cfg: ModelConfig, weights: DecoderWeights, rope_tables: tuple[torch.Tensor, torch.Tensor]
) -> LayeredBackend:
    """The torch path; linears oneDNN-packed where the CPU's oneDNN packs bf16."""
    ops = TorchOps(cfg, rope_tables, weights.norm.dtype)
    packed = prepack_onednn(weights)
    if packed is None:
        return LayeredBackend("reference", ops, cfg, weights)
    ops.onednn = True
    return LayeredBackend("reference-onednn", ops, cfg, packed)


def prepack_onednn(weights: DecoderWeights) -> DecoderWeights | None:
    """The weights with every linear oneDNN-packed, or None where oneDNN does not pack them."""
    if pack_linear_weight(weights.head) is None:
        return None
    layers = tuple(
        replace(
            layer,
            qkv=_packed(layer.qkv),
            o_proj=_packed(layer.o_proj),
            gate_up=_packed(layer.gate_up),
            down=_packed(layer.down),
        )
        for layer in weights.layers
    )
    return DecoderWeights(layers, weights.norm, _packed(weights.head))


def _packed(weight: torch.Tensor) -> torch.Tensor:
    packed = pack_linear_weight(weight)
    assert packed is not None  # the same device, dtype and CPU as the head, which packed
    return packed


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's pre-packed layout for a bf16 CPU weight; None where it does not apply."""
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16:
        return None
    if not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None  # e.g. AVX2 only: oneDNN refuses to pack bf16 (F.linear still runs it)
    return torch.ops.mkldnn._reorder_linear_weight(weight, 16)
