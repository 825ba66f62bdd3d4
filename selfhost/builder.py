"""Builds a ready LLMEngine from an EngineConfig: weights, tokenizer, model, KV cache, scheduler.

The only place that decides devices, dtypes and thread counts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from selfhost.config import EngineConfig, ModelConfig
from selfhost.engine.block_manager import BlockManager
from selfhost.engine.llm_engine import LLMEngine
from selfhost.engine.model_runner import ModelRunner
from selfhost.engine.sampler import Sampler
from selfhost.engine.scheduler import Scheduler, SchedulerConfig
from selfhost.kernels.backend import DecoderBackend, DecoderWeights
from selfhost.kernels.cpu.backend import CpuKernelBackend, cpu_attention_backend
from selfhost.kernels.cpu.loader import load_cpu_kernels
from selfhost.kernels.reference.ops import reference_backend
from selfhost.kernels.triton.loader import load_triton_backend
from selfhost.model.llama import LlamaModel, load_decoder_weights
from selfhost.model.loader import LoadedWeights, load_gguf, load_safetensors_dir, resolve_model_path
from selfhost.model.rope import rope_tables
from selfhost.model.tokenizer import TextTokenizer, tokenizer_from_dir, tokenizer_from_gguf
from selfhost.structured.budget import closing_tokens
from selfhost.structured.masks import MaskFiller

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model_files(path: Path) -> tuple[LoadedWeights, TextTokenizer]:
    if path.suffix == ".gguf":
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        return load_gguf(reader, path.stem), tokenizer_from_gguf(reader)
    weights = load_safetensors_dir(path)
    return weights, tokenizer_from_dir(path, weights.config.eos_token_ids)


def build_model(
    weights: LoadedWeights,
    max_positions: int,
    device: str,
    dtype: str,
    cpu_kernels: bool = True,
    cuda_graphs: bool = True,
    block_size: int = 16,
) -> LlamaModel:
    """The model on the one kernel backend this device and dtype run best (chosen here, once).
    `cuda_graphs`: on CUDA, capture decode batches (the switch for everything GPU-only)."""
    cfg = weights.config
    torch_dtype, torch_device = DTYPES[dtype], torch.device(device)
    embed, decoder = load_decoder_weights(cfg, weights.state_dict, torch_device, torch_dtype)
    cos, sin = (t.to(torch_device) for t in rope_tables(cfg, max_positions))
    graphs = (-(-max_positions // block_size), block_size) if cuda_graphs else None
    backend = choose_backend(cfg, decoder, (cos, sin), cpu_kernels, graphs)
    log.info("engine kernels: %s", backend.name)
    return LlamaModel(cfg, embed, backend)


def choose_backend(
    cfg: ModelConfig,
    weights: DecoderWeights,
    rope: tuple[torch.Tensor, torch.Tensor],
    cpu_kernels: bool,
    graphs: tuple[int, int] | None = None,
) -> DecoderBackend:
    """CPU: the C++ kernels where they build and fit the model (bf16: every layer; fp32: the
    attention); CUDA: the Triton kernels where Triton imports; otherwise the torch reference."""
    device, dtype = weights.norm.device, weights.norm.dtype
    if device.type == "cuda":
        triton_backend = load_triton_backend(cfg, weights, rope, graphs)
        if triton_backend is not None:
            return triton_backend
        return reference_backend(cfg, weights, rope)
    use = cpu_kernels and device.type == "cpu" and dtype in (torch.bfloat16, torch.float32)
    kernels = load_cpu_kernels() if use else None
    if kernels is not None and not kernels.paged_attention_supports(
        cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
    ):
        log.warning("CPU fast path off: no attention kernel for head_dim %d", cfg.head_dim)
        kernels = None
    if kernels is None:
        return reference_backend(cfg, weights, rope)
    if dtype == torch.bfloat16:
        return CpuKernelBackend(kernels, cfg, weights, rope)
    return cpu_attention_backend(kernels, cfg, weights, rope)


def build_engine(
    config: EngineConfig, files: tuple[LoadedWeights, TextTokenizer] | None = None
) -> LLMEngine:
    """`files` lets tests reuse weights already loaded; otherwise they are read from config.model."""
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    weights, tokenizer = files or load_model_files(resolve_model_path(config.model))
    max_model_len = min(config.max_model_len, weights.config.max_position_embeddings)
    model = build_model(
        weights,
        max_model_len,
        config.device,
        config.dtype,
        config.cpu_kernels,
        config.cuda_graphs,
        config.block_size,
    )
    block_manager = BlockManager(config.num_blocks, config.block_size)
    scheduler_config = SchedulerConfig(
        max_num_batched_tokens=config.max_num_batched_tokens,
        chunk_size=config.chunk_size,
        max_num_seqs=config.max_num_seqs,
        watermark_blocks=config.num_blocks // 100,
    )
    return LLMEngine(
        runner=ModelRunner(model, config.num_blocks, config.block_size),
        tokenizer=tokenizer,
        scheduler=Scheduler(scheduler_config, block_manager),
        sampler=Sampler(config.seed, argmax=model.backend.argmax_rows),
        max_model_len=max_model_len,
        masks=_mask_filler(tokenizer, weights.config.vocab_size),
    )


def _mask_filler(tokenizer: TextTokenizer, vocab_size: int) -> MaskFiller:
    closing = closing_tokens(
        lambda token_id: tokenizer.decode([token_id]), vocab_size, tokenizer.eos_token_ids
    )
    return MaskFiller(vocab_size, closing)


def default_dtype(device: str) -> str:
    """bf16 everywhere: on this CPU (AVX512-BF16) it measured 1.3-1.7x faster than fp32 for decode
    and prefill (docs/engine.md); tests pin float32 for token-exact comparison with HF."""
    return "bfloat16"


def served_name(config: EngineConfig) -> str:
    if config.served_model_name:
        return config.served_model_name
    if config.model == "default":
        return "SmolLM2-135M-Instruct"
    path = Path(config.model)
    return path.name.split(".")[0] if path.suffix == ".gguf" else path.name
