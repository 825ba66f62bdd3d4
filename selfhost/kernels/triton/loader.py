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

        _smoke_test(weights.norm)
    except Exception as exc:  # noqa: BLE001 - no triton, no compiler for this GPU: reference path
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("Triton kernels off (%s); torch reference path", first)
        return None
    backend = LayeredBackend("triton", TritonOps(cfg, rope_tables), cfg, weights)
    if graphs is None or weights.norm.device.type != "cuda":
        return backend
    from selfhost.kernels.triton.graphs import DecodeGraphs

    return DecodeGraphs(backend, *graphs)


def _smoke_test(like: torch.Tensor) -> None:
    """Compile and run one tiny kernel on the model's device and dtype, so a GPU Triton cannot
    compile for fails here, at build time, not in the first request."""
    from selfhost.kernels.triton.fused import rms_norm

    x = torch.ones(2, 16, dtype=like.dtype, device=like.device)
    out = rms_norm(x, torch.full((16,), 2.0, dtype=like.dtype, device=like.device), 0.0)
    if not torch.equal(out, torch.full_like(x, 2.0)):
        raise RuntimeError("Triton smoke test gave wrong results")
