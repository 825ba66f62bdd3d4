"""Seeded random Llama weights in HF names, and a tokenizer stand-in, for engine checks where the
real weights cannot travel (bench/device_check.py on a lent GPU; the Triton engine tests)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfhost.config import ModelConfig


@dataclass(frozen=True)
class IdTokenizer:
    """Just enough of TextTokenizer for the engine: ids are rendered as text `<id>`."""

    eos_token_ids: tuple[int, ...] = (2,)

    def decode(self, token_ids: list[int]) -> str:
        return "".join(f"<{t}>" for t in token_ids)


def random_state_dict(
    config: ModelConfig, seed: int, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """HF-named weights. A wide embedding (std 1) makes the tied LM head's logits peaked, so greedy
    argmax is not decided by rounding noise; projections use std 0.02 as in HF init."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).to(dtype)

    def norm() -> torch.Tensor:
        return 1.0 + normal(config.hidden_size, std=0.1)

    hidden, inter, d = config.hidden_size, config.intermediate_size, config.head_dim
    state = {
        "model.embed_tokens.weight": normal(config.vocab_size, hidden, std=1.0),
        "model.norm.weight": norm(),
    }
    if not config.tie_word_embeddings:
        state["lm_head.weight"] = normal(config.vocab_size, hidden, std=0.05)
    for i in range(config.num_layers):
        p = f"model.layers.{i}"
        state[f"{p}.input_layernorm.weight"] = norm()
        state[f"{p}.post_attention_layernorm.weight"] = norm()
        state[f"{p}.self_attn.q_proj.weight"] = normal(config.num_heads * d, hidden)
        state[f"{p}.self_attn.k_proj.weight"] = normal(config.num_kv_heads * d, hidden)
        state[f"{p}.self_attn.v_proj.weight"] = normal(config.num_kv_heads * d, hidden)
        state[f"{p}.self_attn.o_proj.weight"] = normal(hidden, config.num_heads * d)
        state[f"{p}.mlp.gate_proj.weight"] = normal(inter, hidden)
        state[f"{p}.mlp.up_proj.weight"] = normal(inter, hidden)
        state[f"{p}.mlp.down_proj.weight"] = normal(hidden, inter)
    return state
