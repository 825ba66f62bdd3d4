"""The CPU kernels' six calls per decoder layer from Python: what `forward_layers` runs in C++.

Two users: bench.engine_profile (wall time per kernel, through a timing wrapper of the module)
and the test that `forward_layers` equals this sequence to the bit. The engine never runs it.
"""

from __future__ import annotations

import torch

from selfhost.config import ModelConfig
from selfhost.kernels.backend import ForwardArgs
from selfhost.kernels.cpu.backend import CpuKernelBackend, CpuLayerWeights, kernel_attention
from selfhost.kernels.cpu.module import CpuKernelModule, Prologue
from selfhost.kernels.metadata import AttentionMetadata


class PerLayerCpuBackend:
    """A DecoderBackend on `kernels` (any object with the module's entry points) and the packed
    weights of an engine's CpuKernelBackend, one kernel call at a time."""

    def __init__(self, packed: CpuKernelBackend, kernels: CpuKernelModule) -> None:
        self.name = "cpu-kernels-per-layer"
        self.packed = packed
        self.kernels = kernels
        self.argmax_rows = packed.argmax_rows

    def forward(self, args: ForwardArgs) -> torch.Tensor:
        p = self.packed
        rope = (args.positions, p.cos, p.sin)
        x = args.x
        for index, weights in enumerate(p.layers):
            x = kernel_layer_forward(
                self.kernels, p.cfg, weights, x, rope, args.kv_cache[index], args.meta
            )
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        cfg = self.packed.cfg
        return self.kernels.linear_logits(
            hidden,
            self.packed.head,
            cfg.vocab_size,
            Prologue.RMS_NORM,
            self.packed.norm,
            cfg.rms_norm_eps,
        )


def kernel_layer_forward(
    kernels: CpuKernelModule,
    cfg: ModelConfig,
    w: CpuLayerWeights,
    x: torch.Tensor,  # [T, hidden] residual stream, bf16
    rope: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # positions [T], cos/sin [P, D] fp32
    cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
    meta: AttentionMetadata,
) -> torch.Tensor:
    num_tokens, head_dim, eps = x.shape[0], cfg.head_dim, cfg.rms_norm_eps
    qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * head_dim
    qkv = kernels.linear(x, w.qkv, qkv_rows, Prologue.RMS_NORM, w.input_norm, eps, None)
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
    x = kernels.linear(
        attn.view(num_tokens, -1), w.o_proj, cfg.hidden_size, Prologue.NONE, None, 0.0, x
    )
    gate_up = kernels.linear(
        x, w.gate_up, 2 * cfg.intermediate_size, Prologue.RMS_NORM, w.post_norm, eps, None
    )
    return kernels.linear(gate_up, w.down, cfg.hidden_size, Prologue.SILU_MUL, None, 0.0, x)
