"""Builds the Triton backend where it can run: a CUDA device, `triton` importable, and a head
dim the kernels tile (a power of two). Imports Triton only here, when the engine is built."""

from __future__ import annotations

import logging

import torch

from selfhost.config import ModelConfig
from selfhost.kernels.backend import DecoderBackend, DecoderWeights
from selfhost.kernels.layers import LayeredBackend

log = logging.getLogger(__name__)


def load_triton_backend(
    cfg: ModelConfig,
    weights: DecoderWeights,
    rope_tables: tuple[torch.Tensor, torch.Tensor],
    graphs: tuple[int, int] | None,
) -> DecoderBackend | None:
    """The Triton backend, or None (with one log line) where it cannot run. `graphs`: (max blocks
    per sequence, block size) to capture decode batches as CUDA graphs; None: eager only."""
    if cfg.head_dim & (cfg.head_dim - 1):
        log.warning("Triton kernels off: head_dim %d is not a power of two", cfg.head_dim)
        return None
    try:
        from selfhost.kernels.triton.ops import TritonOps
    except ImportError as exc:
        log.warning("Triton kernels off (%s); torch reference path", exc)
        return None
    backend = LayeredBackend("triton", TritonOps(cfg, rope_tables), cfg, weights)
    if graphs is None or weights.norm.device.type != "cuda":
        return backend
    from selfhost.kernels.triton.graphs import DecodeGraphs

    return DecodeGraphs(backend, *graphs)
