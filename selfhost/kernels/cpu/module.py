"""The typed face of the compiled CPU kernels (csrc/cpu_module.cpp binds these entry points).

`CpuKernelModule` is what `load_cpu_kernels` returns; `Prologue` names what a GEMM fuses before
its dot products; `ForwardLayersArgs` is one `forward_layers` call, field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import torch

from selfhost.config import ModelConfig
from selfhost.kernels.metadata import AttentionMetadata


class Prologue(StrEnum):
    """What `linear` applies to its input rows before the GEMM (fused, one bf16 rounding)."""

    NONE = "none"
    RMS_NORM = "rms_norm"  # x * rsqrt(mean(x^2) + eps) * norm_weight
    SILU_MUL = "silu_mul"  # x = [gate | up] -> silu(gate) * up


@dataclass(frozen=True)
class ForwardLayersArgs:
    """Every decoder layer of one forward in one kernel call (csrc/cpu_forward.cpp)."""

    x: torch.Tensor  # [T, hidden] bf16 residual stream
    layers: list[list[torch.Tensor]]  # per layer: CpuLayerWeights.as_list()
    kv_cache: torch.Tensor  # [L, 2, num_blocks, block_size, KV, D]
    positions: torch.Tensor  # [T] long
    cos: torch.Tensor  # [P, D] fp32
    sin: torch.Tensor
    meta: AttentionMetadata
    cfg: ModelConfig

    def call(self, kernels: CpuKernelModule) -> torch.Tensor:
        meta, cfg, spans = self.meta, self.cfg, self.meta.prefills
        shared = meta.decode_shared_blocks
        return kernels.forward_layers(
            self.x,
            self.layers,
            self.kv_cache,
            self.positions,
            self.cos,
            self.sin,
            meta.slot_mapping,
            meta.num_decodes,
            meta.decode_block_tables,
            meta.decode_context_lens,
            shared if shared is not None else torch.empty(0, dtype=torch.long),
            [span.q_start for span in spans],
            [span.q_len for span in spans],
            [span.context_len for span in spans],
            [span.block_ids for span in spans],
            [cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size, cfg.intermediate_size],
            cfg.rms_norm_eps,
        )


class CpuKernelModule(Protocol):
    """The compiled extension's entry points (both builds define all of them)."""

    def linear(
        self,
        x: torch.Tensor,
        packed: torch.Tensor,
        n_out: int,
        prologue: str,
        norm_weight: torch.Tensor | None,
        eps: float,
        residual: torch.Tensor | None,
    ) -> torch.Tensor: ...

    def linear_logits(
        self,
        x: torch.Tensor,
        packed: torch.Tensor,
        n_out: int,
        prologue: str,
        norm_weight: torch.Tensor | None,
        eps: float,
    ) -> torch.Tensor: ...

    def rope_write_kv(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        num_heads: int,
    ) -> torch.Tensor: ...

    def paged_attention_supports(self, group: int, dim: int) -> bool: ...

    def paged_decode(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        tables: torch.Tensor,
        lens: torch.Tensor,
        shared: torch.Tensor,
        scale: float,
    ) -> torch.Tensor: ...

    def paged_prefill(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        block_ids: torch.Tensor,
        context_len: int,
        scale: float,
    ) -> torch.Tensor: ...

    def prefill_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        block_ids: torch.Tensor,
        context_len: int,
        scale: float,
    ) -> torch.Tensor: ...

    def argmax_rows(self, logits: torch.Tensor) -> torch.Tensor: ...

    def forward_layers(self, *args: object) -> torch.Tensor:
        """ForwardLayersArgs.call passes its fields in cpu_forward.cpp's order."""
        ...
