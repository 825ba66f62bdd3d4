"""The kernel boundary: what the model hands a kernel backend and what a backend must do with it.

A backend runs every decoder layer of one packed forward and the final norm + LM head. The
builder chooses one per engine (torch reference, CPU C++ kernels, Triton) and never switches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from selfhost.kernels.metadata import AttentionMetadata


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer in HF layout, fused once at load: qkv = [q; k; v], gate_up = [gate; up]."""

    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(H + 2 KV) * D, hidden]
    o_proj: torch.Tensor  # [hidden, H * D]
    post_norm: torch.Tensor  # [hidden]
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor  # [hidden, intermediate]


@dataclass(frozen=True)
class DecoderWeights:
    """Everything after the embedding: the layers, the final norm and the LM head."""

    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor  # [hidden]
    head: torch.Tensor  # [V, hidden] (the embedding itself when tied)


@dataclass(frozen=True)
class ForwardArgs:
    """One packed forward over the paged KV cache."""

    x: torch.Tensor  # [T, hidden] the embedded tokens (the residual stream)
    positions: torch.Tensor  # [T] long
    kv_cache: torch.Tensor  # [L, 2, num_blocks, block_size, KV, D]
    meta: AttentionMetadata


class DecoderBackend(Protocol):
    """Runs the decoder layers and the head; chosen once when the engine is built."""

    name: str
    # A faster torch.argmax(logits, dim=-1) for the sampler's greedy rows, where the backend has one
    argmax_rows: Callable[[torch.Tensor], torch.Tensor] | None

    def forward(self, args: ForwardArgs) -> torch.Tensor:
        """The residual stream [T, hidden] after the last layer (before the final norm)."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [S, hidden] -> fp32 logits [S, V] (final RMSNorm, then the head)."""
        ...


@dataclass(frozen=True)
class RopeRows:
    """RoPE for one forward, in the ops' own form: the torch ops gather each token's cos/sin rows
    [T, D] in the model dtype; kernels that gather in place keep the fp32 tables [P, D]."""

    positions: torch.Tensor  # [T] long
    cos: torch.Tensor
    sin: torch.Tensor


class LayerOps(Protocol):
    """The operations one decoder layer is made of (kernels/layers.py runs them in order)."""

    def rope(self, positions: torch.Tensor) -> RopeRows: ...

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def rope_write_kv(
        self, qkv: torch.Tensor, rope: RopeRows, cache: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        """qkv [T, H + 2 KV, D]: rotate q and k, write k and v at their slots of cache
        [2, num_blocks, block_size, KV, D]; return q [T, H, D]."""
        ...

    def attention(
        self, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor: ...

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor: ...
