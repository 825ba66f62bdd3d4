"""Memory-bandwidth roofline for bench/engine.py: the machine's measured read bandwidth and the
bytes of weights one decode step reads at each system's precision. Measures, never asserts.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from selfhost.builder import DTYPES
from selfhost.model.loader import LoadedWeights

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"


def measure_read_bandwidth(num_bytes: int = 1 << 30, repeats: int = 7) -> float:
    """Best-of-`repeats` bytes/s of summing a float32 buffer far larger than the caches,
    with torch's current thread count (the same threads a decode step gets)."""
    buffer = torch.ones(num_bytes // 4, dtype=torch.float32)
    buffer.sum()  # fault the pages in before timing
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - started)
    return num_bytes / best


def torch_weight_bytes(weights: LoadedWeights, dtype: str) -> int:
    """Bytes of weights one batch-1 decode step reads: every matrix once; the embedding table is
    read whole only as the (tied) LM head, its per-token row lookup is negligible."""
    size = torch.empty((), dtype=DTYPES[dtype]).element_size()
    numel = sum(t.numel() for name, t in weights.state_dict.items())
    if LM_HEAD in weights.state_dict and EMBED in weights.state_dict:
        numel -= weights.state_dict[EMBED].numel()  # untied: the lookup table is not streamed
    return numel * size


def gguf_weight_bytes(path: Path) -> int:
    """The same count for llama.cpp, which reads the GGUF tensors at their quantised sizes."""
    from gguf import GGUFReader

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    return sum(tensors.values())


def gguf_precision(path: Path) -> str:
    """e.g. 'Q4_1 + Q8_0 (embeddings)': the tensor types, largest share first."""
    from gguf import GGUFReader

    shares: dict[str, int] = {}
    for tensor in GGUFReader(str(path)).tensors:
        shares[tensor.tensor_type.name] = shares.get(tensor.tensor_type.name, 0) + int(
            tensor.n_bytes
        )
    ranked = sorted(shares, key=lambda k: -shares[k])
    return " + ".join(k for k in ranked if k != "F32")
