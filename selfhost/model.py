"""Llama-family decoder over a packed (varlen) token batch with a paged KV cache.

Weights arrive in HF names and are fused once at load (QKV, gate+up); no per-step copies.
On CPU in bf16 the linear weights are pre-packed once: for the CPU kernels (kernel_layer.py, the
fast path) or, where those cannot be built, for oneDNN (same results as F.linear, ~1.7x faster).
"""

from __future__ import annotations

from types import ModuleType
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from selfhost.attention import AttentionMetadata, paged_attention, write_kv
from selfhost.config import ModelConfig
from selfhost.cpu_kernels import pack_weight
from selfhost.kernel_layer import (
    KernelLayerWeights,
    kernel_attention,
    kernel_forward,
    kernel_layer_forward,
)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        hidden, head_dim = config.hidden_size, config.head_dim
        qkv_rows = (config.num_heads + 2 * config.num_kv_heads) * head_dim
        self.input_norm = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.qkv = nn.Parameter(torch.empty(qkv_rows, hidden), requires_grad=False)
        self.o_proj = nn.Parameter(
            torch.empty(hidden, config.num_heads * head_dim), requires_grad=False
        )
        self.post_norm = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.gate_up = nn.Parameter(
            torch.empty(2 * config.intermediate_size, hidden), requires_grad=False
        )
        self.packed: dict[str, torch.Tensor] = {}
        self.down = nn.Parameter(torch.empty(hidden, config.intermediate_size), requires_grad=False)

    def load(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        self.input_norm.copy_(state[f"{prefix}.input_layernorm.weight"])
        qkv = [state[f"{attn}.{name}_proj.weight"] for name in ("q", "k", "v")]
        self.qkv.copy_(torch.cat(qkv))
        self.o_proj.copy_(state[f"{attn}.o_proj.weight"])
        self.post_norm.copy_(state[f"{prefix}.post_attention_layernorm.weight"])
        self.gate_up.copy_(
            torch.cat([state[f"{mlp}.gate_proj.weight"], state[f"{mlp}.up_proj.weight"]])
        )
        self.down.copy_(state[f"{mlp}.down_proj.weight"])

    def prepack(self) -> None:
        """Replace the linear weights by oneDNN-packed copies (CPU bf16 only; frees the originals)."""
        for name in LINEAR_WEIGHTS:
            weight = getattr(self, name)
            packed = pack_linear_weight(weight)
            if packed is not None:
                self.packed[name] = packed
                weight.data = torch.empty(0, dtype=weight.dtype)

    def pack_for_kernels(self) -> KernelLayerWeights:
        """The CPU kernels' packed copies of this layer's weights (frees the originals)."""
        linears = {name: getattr(self, name).data for name in LINEAR_WEIGHTS}
        packed = KernelLayerWeights.pack((self.input_norm.data, self.post_norm.data), linears)
        for name in LINEAR_WEIGHTS:
            getattr(self, name).data = torch.empty(0, dtype=linears[name].dtype)
        return packed

    def linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        packed = self.packed.get(name)
        if packed is None:
            return F.linear(x, getattr(self, name))
        return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

    def forward(
        self,
        x: torch.Tensor,  # [T, hidden] residual stream
        cos: torch.Tensor,  # [T, 1, D]
        sin: torch.Tensor,
        cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
        meta: AttentionMetadata,
        kernels: ModuleType | None = None,  # set: attention reads the blocks in place (fp32 path)
    ) -> torch.Tensor:
        cfg = self.config
        num_tokens, head_dim = x.shape[0], cfg.head_dim
        h = F.rms_norm(x, (cfg.hidden_size,), self.input_norm, cfg.rms_norm_eps)
        qkv = self.linear(h, "qkv").view(num_tokens, -1, head_dim)  # [T, H + 2 KV, D]
        qk = rotate(qkv[:, : cfg.num_heads + cfg.num_kv_heads], cos, sin)
        q, k = qk[:, : cfg.num_heads], qk[:, cfg.num_heads :]
        v = qkv[:, cfg.num_heads + cfg.num_kv_heads :]
        write_kv(cache, k, v, meta.slot_mapping)
        if kernels is None:
            attn = paged_attention(q, cache, meta, head_dim**-0.5)
        else:
            attn = kernel_attention(kernels, q.contiguous(), cache, meta, head_dim**-0.5)
        x = x + self.linear(attn.view(num_tokens, -1), "o_proj")
        h = F.rms_norm(x, (cfg.hidden_size,), self.post_norm, cfg.rms_norm_eps)
        gate, up = self.linear(h, "gate_up").chunk(2, dim=-1)
        return x + self.linear(F.silu(gate) * up, "down")


LINEAR_WEIGHTS = ("qkv", "o_proj", "gate_up", "down")


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's pre-packed layout for a bf16 CPU weight; None where it does not apply."""
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16:
        return None
    if not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None  # e.g. AVX2 only: oneDNN refuses to pack bf16 (F.linear still runs it)
    return torch.ops.mkldnn._reorder_linear_weight(weight, 16)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (HF layout): x [T, heads, D]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaModel(nn.Module):
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, config: ModelConfig, max_positions: int) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Parameter(
            torch.empty(config.vocab_size, config.hidden_size), requires_grad=False
        )
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        head_rows = 0 if config.tie_word_embeddings else config.vocab_size
        self.lm_head = nn.Parameter(torch.empty(head_rows, config.hidden_size), requires_grad=False)
        self.packed_head: torch.Tensor | None = None
        self.kernels: ModuleType | None = None  # the CPU fast path (use_kernels)
        self.kernel_layers: list[KernelLayerWeights] = []
        self.kernel_layer_lists: list[list[torch.Tensor]] = []  # the same, for kernel_forward
        # One kernel call per forward (all layers) or six per layer (bench.engine_profile times them)
        self.one_call_forward = True
        self.kernel_head: torch.Tensor | None = None
        self.kernel_rope: tuple[torch.Tensor, torch.Tensor] | None = None  # fp32 cos, sin
        self.max_positions = max_positions
        cos, sin = rope_tables(config, max_positions)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.inference_mode()
    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.embed.copy_(state["model.embed_tokens.weight"])
        self.norm.copy_(state["model.norm.weight"])
        if not self.config.tie_word_embeddings:
            self.lm_head.copy_(state["lm_head.weight"])
        for index, layer in enumerate(self.decoder_layers()):
            layer.load(state, f"model.layers.{index}")

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """input_ids, positions: [T]; kv_cache: [L, 2, num_blocks, block_size, KV, D] -> the residual
        stream [T, hidden] after the last layer (compute_logits applies the final norm)."""
        x = F.embedding(input_ids, self.embed)
        if self.kernels is not None and self.kernel_layers:
            return self._forward_kernels(self.kernels, x, positions, kv_cache, meta)
        cos = self.rope_cos[positions].unsqueeze(1).to(x.dtype)
        sin = self.rope_sin[positions].unsqueeze(1).to(x.dtype)
        for index, layer in enumerate(self.decoder_layers()):
            x = layer(x, cos, sin, kv_cache[index], meta, self.kernels)
        return x

    def _forward_kernels(
        self,
        kernels: ModuleType,
        x: torch.Tensor,  # [T, hidden]
        positions: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        assert self.kernel_rope is not None
        rope = (positions, *self.kernel_rope)
        if self.one_call_forward:
            layers = self.kernel_layer_lists
            return kernel_forward(kernels, self.config, layers, x, rope, kv_cache, meta)
        for index, weights in enumerate(self.kernel_layers):
            x = kernel_layer_forward(kernels, self.config, weights, x, rope, kv_cache[index], meta)
        return x

    def use_kernels(self, kernels: ModuleType) -> None:
        """Switch to the CPU kernels: in bf16 every layer (weights packed for them once); in fp32
        the attention only (linears stay F.linear, so fp32 keeps HF's token-exact results)."""
        self.kernels = kernels
        if self.embed.dtype != torch.bfloat16:
            return
        self.kernel_layers = [layer.pack_for_kernels() for layer in self.decoder_layers()]
        self.kernel_layer_lists = [weights.as_list() for weights in self.kernel_layers]
        head = self.embed if self.config.tie_word_embeddings else self.lm_head
        self.kernel_head = pack_weight(head.data)
        if not self.config.tie_word_embeddings:
            self.lm_head.data = torch.empty(0, dtype=head.dtype)
        self.kernel_rope = rope_tables(self.config, self.max_positions)

    def prepack(self) -> None:
        for layer in self.decoder_layers():
            layer.prepack()
        head = self.embed if self.config.tie_word_embeddings else self.lm_head
        self.packed_head = pack_linear_weight(head)

    def decoder_layers(self) -> list[DecoderLayer]:
        return [cast(DecoderLayer, layer) for layer in self.layers]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [S, hidden] rows of the residual stream -> fp32 logits [S, V] (final norm + head)."""
        cfg = self.config
        if self.kernels is not None and self.kernel_head is not None:  # bf16 kernel path
            return self.kernels.linear_logits(
                hidden, self.kernel_head, cfg.vocab_size, "rms_norm", self.norm, cfg.rms_norm_eps
            )
        hidden = F.rms_norm(hidden, (cfg.hidden_size,), self.norm, cfg.rms_norm_eps)
        if self.packed_head is not None:
            logits = torch.ops.mkldnn._linear_pointwise(
                hidden, self.packed_head, None, "none", [], ""
            )
            return logits.float()
        head = self.embed if self.config.tie_word_embeddings else self.lm_head
        return F.linear(hidden, head).float()


def rope_tables(config: ModelConfig, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [max_positions, D] in fp32, computed as HF's default Llama rotary embedding."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float() / config.head_dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    freqs = torch.arange(max_positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()
