"""Typed configuration of the engine: the model's shape and the engine's knobs.

Plain frozen dataclasses; nothing here reads the environment or touches torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-family decoder (HF `config.json` names in comments)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int  # num_hidden_layers
    num_heads: int  # num_attention_heads
    num_kv_heads: int  # num_key_value_heads
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def to_hf_dict(self) -> dict[str, object]:
        """The equivalent HF `LlamaConfig` keyword arguments (used by tests and export)."""
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids),
        }


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of one engine instance (see docs/engine.md)."""

    model: str = "default"
    device: str = "cpu"
    dtype: str = "float32"
    block_size: int = 16
    num_blocks: int = 2048
    max_num_batched_tokens: int = 512
    chunk_size: int = 512
    max_num_seqs: int = 64
    max_model_len: int = 8192
    num_threads: int = 0  # 0 = torch default (all cores)
    cpu_kernels: bool = True  # CPU + bf16: compiled kernels (fast path) when they build
    cuda_graphs: bool = True  # CUDA: decode batches replay captured graphs (Triton backend)
    seed: int = 0
    served_model_name: str = ""
