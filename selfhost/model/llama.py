"""Llama-family decoder over a packed (varlen) token batch with a paged KV cache.

The model is the embedding plus one kernel backend (kernels/backend.py) that runs the layers and
the head; the builder picks the backend once. Weights arrive in HF names and are fused once at
load (QKV, gate+up); no per-step copies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from selfhost.config import ModelConfig
from selfhost.kernels.backend import DecoderBackend, DecoderWeights, ForwardArgs, LayerWeights
from selfhost.kernels.metadata import AttentionMetadata


class LlamaModel:
    def __init__(self, config: ModelConfig, embed: torch.Tensor, backend: DecoderBackend) -> None:
        self.config = config
        self.embed = embed  # [V, hidden]
        self.backend = backend

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """input_ids, positions: [T]; kv_cache: [L, 2, num_blocks, block_size, KV, D] -> the residual
        stream [T, hidden] after the last layer (compute_logits applies the final norm)."""
        x = F.embedding(input_ids, self.embed)
        return self.backend.forward(ForwardArgs(x, positions, kv_cache, meta))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [S, hidden] rows of the residual stream -> fp32 logits [S, V] (final norm + head)."""
        return self.backend.logits(hidden)


def load_decoder_weights(
    config: ModelConfig, state: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, DecoderWeights]:
    """The embedding and the decoder's weights from an HF-named state dict, on device in dtype."""

    def get(name: str) -> torch.Tensor:
        return state[name].to(device=device, dtype=dtype)

    def fused(*names: str) -> torch.Tensor:
        return torch.cat([state[name] for name in names]).to(device=device, dtype=dtype)

    layers = []
    for index in range(config.num_layers):
        prefix = f"model.layers.{index}"
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        layers.append(
            LayerWeights(
                input_norm=get(f"{prefix}.input_layernorm.weight"),
                qkv=fused(
                    f"{attn}.q_proj.weight", f"{attn}.k_proj.weight", f"{attn}.v_proj.weight"
                ),
                o_proj=get(f"{attn}.o_proj.weight"),
                post_norm=get(f"{prefix}.post_attention_layernorm.weight"),
                gate_up=fused(f"{mlp}.gate_proj.weight", f"{mlp}.up_proj.weight"),
                down=get(f"{mlp}.down_proj.weight"),
            )
        )
    embed = get("model.embed_tokens.weight")
    head = embed if config.tie_word_embeddings else get("lm_head.weight")
    return embed, DecoderWeights(tuple(layers), get("model.norm.weight"), head)
