"""Decoder layers on the CPU kernels (selfhost/csrc/*.cpp): bf16, any packed batch.

Six kernel calls per layer instead of ~40 torch ops: RMSNorm fused into the QKV and gate/up GEMMs,
RoPE fused with the KV write, paged attention in place for decodes, SiLU*mul fused into the down
GEMM, residual adds fused into the o_proj and down GEMMs; `kernel_forward` runs every layer in one
C++ call. model.py holds the torch reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from selfhost.attention import AttentionMetadata
from selfhost.config import ModelConfig
from selfhost.cpu_kernels import pack_weight


@dataclass(frozen=True)
class KernelLayerWeights:
    input_norm: torch.Tensor  # [hidden] bf16
    post_norm: torch.Tensor
    qkv: torch.Tensor  # packed [groups, K/2, 64, 2] (cpu_kernels.pack_weight)
    o_proj: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def pack(cls, norms: tuple[torch.Tensor, torch.Tensor], linears: dict[str, torch.Tensor]):  # noqa: ANN206
        packed = {name: pack_weight(weight) for name, weight in linears.items()}
        return cls(norms[0], norms[1], **packed)

    def as_list(self) -> list[torch.Tensor]:
        """The order cpu_forward.cpp reads a layer's weights in."""
        return [self.input_norm, self.post_norm, self.qkv, self.o_proj, self.gate_up, self.down]


def kernel_forward(
    kernels: ModuleType,
    cfg: ModelConfig,
    layers: list[list[torch.Tensor]],  # KernelLayerWeights.as_list() of every layer
    x: torch.Tensor,  # [T, hidden] residual stream, bf16
    rope: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # positions [T], cos/sin [P, D] fp32
    kv_cache: torch.Tensor,  # [L, 2, num_blocks, block_size, KV, D]
    meta: AttentionMetadata,
) -> torch.Tensor:
    """Every layer in one kernel call (cpu_forward.cpp): kernel_layer_forward's six calls per
    layer without returning to Python between them."""
    shared = meta.decode_shared_blocks
    spans = meta.prefills
    return kernels.forward_layers(
        x,
        layers,
        kv_cache,
        *rope,
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


def kernel_layer_forward(
    kernels: ModuleType,
    cfg: ModelConfig,
    w: KernelLayerWeights,
    x: torch.Tensor,  # [T, hidden] residual stream, bf16
    rope: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # positions [T], cos/sin [P, D] fp32
    cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
    meta: AttentionMetadata,
) -> torch.Tensor:
    num_tokens, head_dim, eps = x.shape[0], cfg.head_dim, cfg.rms_norm_eps
    qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * head_dim
    qkv = kernels.linear(x, w.qkv, qkv_rows, "rms_norm", w.input_norm, eps, None)
    k_pool = cache[0].view(-1, cfg.num_kv_heads, head_dim)
    v_pool = cache[1].view(-1, cfg.num_kv_heads, head_dim)
    positions, cos, sin = rope
    q = kernels.rope_write_kv(
        qkv.view(num_tokens, -1, head_dim),
        positions,
        cos,
        sin,
        meta.slot_mapping,
        k_pool,
        v_pool,
        cfg.num_heads,
    )  # [T, H, D]
    attn = kernel_attention(kernels, q, cache, meta, head_dim**-0.5)
    x = kernels.linear(attn.view(num_tokens, -1), w.o_proj, cfg.hidden_size, "none", None, 0.0, x)
    gate_up = kernels.linear(
        x, w.gate_up, 2 * cfg.intermediate_size, "rms_norm", w.post_norm, eps, None
    )
    return kernels.linear(gate_up, w.down, cfg.hidden_size, "silu_mul", None, 0.0, x)


def kernel_attention(
    kernels: ModuleType, q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
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
