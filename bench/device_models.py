"""Models for bench/device_check.py: the shapes, seeded random weights made on the device, the
engine on a chosen kernel backend, and HF transformers' LlamaForCausalLM on the same weights."""

from __future__ import annotations

from dataclasses import replace

import torch

from bench.random_llama import IdTokenizer
from selfhost.config import ModelConfig
from selfhost.engine.block_manager import BlockManager
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.model_runner import ModelRunner
from selfhost.engine.sampler import Sampler
from selfhost.engine.scheduler import Scheduler, SchedulerConfig
from selfhost.kernels.backend import DecoderBackend
from selfhost.kernels.reference.ops import reference_backend
from selfhost.kernels.triton.loader import load_triton_backend
from selfhost.model.llama import LlamaModel, load_decoder_weights
from selfhost.model.rope import rope_tables

LLAMA3_8B = ModelConfig(
    vocab_size=128_256,
    hidden_size=4096,
    intermediate_size=14_336,
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    rope_theta=500_000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_ids=(2,),
)
TINY = replace(
    LLAMA3_8B,
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
)
SHAPES = {"llama3-8b": LLAMA3_8B, "tiny": TINY}
BLOCK_SIZE = 16
MAX_LEN = 8192


def random_weights(
    cfg: ModelConfig, seed: int, device: str, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """HF-named weights drawn on the device (an 8B model drawn on a CPU takes minutes). A wide
    embedding (std 1) and head (std 0.05) make greedy argmax decided by the model, not by noise."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        out = torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)
        return out.mul_(std).to(dtype)

    def norm() -> torch.Tensor:
        return normal(cfg.hidden_size, std=0.1).add_(1.0)

    hidden, inner, dim = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    state = {
        "model.embed_tokens.weight": normal(cfg.vocab_size, hidden, std=1.0),
        "model.norm.weight": norm(),
        "lm_head.weight": normal(cfg.vocab_size, hidden, std=0.05),
    }
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}"
        state[f"{p}.input_layernorm.weight"] = norm()
        state[f"{p}.post_attention_layernorm.weight"] = norm()
        state[f"{p}.self_attn.q_proj.weight"] = normal(cfg.num_heads * dim, hidden)
        state[f"{p}.self_attn.k_proj.weight"] = normal(cfg.num_kv_heads * dim, hidden)
        state[f"{p}.self_attn.v_proj.weight"] = normal(cfg.num_kv_heads * dim, hidden)
        state[f"{p}.self_attn.o_proj.weight"] = normal(hidden, cfg.num_heads * dim)
        state[f"{p}.mlp.gate_proj.weight"] = normal(inner, hidden)
        state[f"{p}.mlp.up_proj.weight"] = normal(inner, hidden)
        state[f"{p}.mlp.down_proj.weight"] = normal(hidden, inner)
    return state


def make_backend(
    cfg: ModelConfig, state: dict[str, torch.Tensor], kind: str, device: str, dtype: torch.dtype
) -> tuple[torch.Tensor, DecoderBackend]:
    """kind: triton (CUDA graphs on CUDA), triton-eager, or reference (the torch path)."""
    embed, weights = load_decoder_weights(cfg, state, torch.device(device), dtype)
    cos, sin = (t.to(device) for t in rope_tables(cfg, MAX_LEN))
    if kind == "reference":
        return embed, reference_backend(cfg, weights, (cos, sin))
    graphs = (MAX_LEN // BLOCK_SIZE, BLOCK_SIZE) if kind == "triton" else None
    backend = load_triton_backend(cfg, weights, (cos, sin), graphs)
    if backend is None:
        raise RuntimeError("the Triton backend cannot run here")
    return embed, backend


def build_engine(
    cfg: ModelConfig,
    backend: tuple[torch.Tensor, DecoderBackend],
    num_blocks: int,
    budget: int,
    chunk: int,
    max_num_seqs: int = 256,
) -> LLMEngine:
    embed, decoder = backend
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, chunk_size=chunk, max_num_seqs=max_num_seqs),
        BlockManager(num_blocks, BLOCK_SIZE),
    )
    runner = ModelRunner(LlamaModel(cfg, embed, decoder), num_blocks, BLOCK_SIZE)
    tokenizer = IdTokenizer(cfg.eos_token_ids)
    return LLMEngine(runner, tokenizer, scheduler, Sampler(0), MAX_LEN)  # type: ignore[arg-type]


def build_hf(
    cfg: ModelConfig, state: dict[str, torch.Tensor], device: str, dtype: torch.dtype
) -> torch.nn.Module:
    """HF's LlamaForCausalLM made on the device without random init, then given `state`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**cfg.to_hf_dict())  # type: ignore[arg-type]
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model.eval()


def model_bytes(cfg: ModelConfig, dtype: torch.dtype) -> int:
    """Bytes a decode step reads of the weights: every layer, the final norm, the LM head (the
    embedding only by rows, not counted)."""
    hidden, inner, dim = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * dim * hidden
    layer = qkv + cfg.num_heads * dim * hidden + 3 * inner * hidden + 2 * hidden
    elements = cfg.num_layers * layer + hidden + cfg.vocab_size * hidden
    return elements * torch.finfo(dtype).bits // 8
