"""The decoder layer's ops on Triton kernels (CUDA; the tests run them under TRITON_INTERPRET=1).

RMSNorm, RoPE + KV write, paged attention and SiLU*mul are Triton kernels; the GEMMs are
F.linear (cuBLAS), which no hand-written kernel here beats.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from selfhost.config import ModelConfig
from selfhost.kernels.backend import RopeRows
from selfhost.kernels.metadata import AttentionMetadata
from selfhost.kernels.triton import attention, fused


class TritonOps:
    """LayerOps on Triton kernels. RopeRows carry the fp32 [P, D] tables: the kernel gathers."""

    def __init__(self, cfg: ModelConfig, rope_tables: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.cfg = cfg
        self.cos, self.sin = rope_tables  # [P, D] fp32

    def rope(self, positions: torch.Tensor) -> RopeRows:
        return RopeRows(positions, self.cos, self.sin)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return fused.rms_norm(x, weight, self.cfg.rms_norm_eps)

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

    def rope_write_kv(
        self, qkv: torch.Tensor, rope: RopeRows, cache: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        return fused.rope_write_kv(
            qkv, rope.positions, rope.cos, rope.sin, slots, cache, self.cfg.num_heads
        )

    def attention(
        self, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        return attention.paged_attention(q, cache, meta, scale)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return fused.silu_mul(gate_up)
