"""Triton kernels for the elementwise parts of a layer: RMSNorm, RoPE fused with the KV write,
SiLU*mul. Each computes in fp32 and rounds once to the storage dtype.

Only the torch tensors' data pointers cross into the kernels; shapes are checked here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32) * w  # HF: round, then scale
    tl.store(out_ptr + row * hidden + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, hidden] -> x / rms(x) * weight, as HF's LlamaRMSNorm."""
    x = x.contiguous()
    out = torch.empty_like(x)
    hidden = x.shape[-1]
    if x.shape[0]:
        _rms_norm_kernel[(x.shape[0],)](
            x, weight, out, hidden, eps, BLOCK=triton.next_power_of_2(hidden)
        )
    return out


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, inner, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    gate = tl.load(x_ptr + row * 2 * inner + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * inner + inner + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * inner + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2 I] = [gate | up] -> silu(gate) * up [T, I]."""
    gate_up = gate_up.contiguous()
    rows, inner = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inner, dtype=gate_up.dtype, device=gate_up.device)
    block = min(1024, triton.next_power_of_2(inner))
    if rows:
        _silu_mul_kernel[(rows, triton.cdiv(inner, block))](gate_up, out, inner, BLOCK=block)
    return out


@triton.jit
def _rope_write_kv_kernel(
    qkv_ptr,  # [T, H + 2 KV, D]
    pos_ptr,  # [T] long
    cos_ptr,  # [P, D] fp32
    sin_ptr,
    slot_ptr,  # [T] long; a negative slot writes nothing (padding rows of a CUDA graph)
    q_ptr,  # [T, H, D] out
    k_pool_ptr,  # [num_slots, KV, D]
    v_pool_ptr,
    H: tl.constexpr,
    KV: tl.constexpr,
    D: tl.constexpr,
    HEADS_POW2: tl.constexpr,
    KV_POW2: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    half = tl.arange(0, D // 2)
    heads = tl.arange(0, HEADS_POW2)
    pos = tl.load(pos_ptr + t)
    cos_lo = tl.load(cos_ptr + pos * D + half)[None, :]
    cos_hi = tl.load(cos_ptr + pos * D + D // 2 + half)[None, :]
    sin_lo = tl.load(sin_ptr + pos * D + half)[None, :]
    sin_hi = tl.load(sin_ptr + pos * D + D // 2 + half)[None, :]
    is_qk = heads < H + KV
    row = qkv_ptr + t * (H + 2 * KV) * D + heads[:, None] * D
    lo = tl.load(row + half[None, :], mask=is_qk[:, None], other=0.0).to(tl.float32)
    hi = tl.load(row + D // 2 + half[None, :], mask=is_qk[:, None], other=0.0).to(tl.float32)
    out_lo = (lo * cos_lo - hi * sin_lo).to(q_ptr.dtype.element_ty)
    out_hi = (hi * cos_hi + lo * sin_hi).to(q_ptr.dtype.element_ty)
    is_q = heads < H
    q_row = q_ptr + t * H * D + heads[:, None] * D
    tl.store(q_row + half[None, :], out_lo, mask=is_q[:, None])
    tl.store(q_row + D // 2 + half[None, :], out_hi, mask=is_q[:, None])
    slot = tl.load(slot_ptr + t)
    is_k = is_qk & (heads >= H) & (slot >= 0)
    kv_row = (slot * KV + (heads - H))[:, None] * D
    tl.store(k_pool_ptr + kv_row + half[None, :], out_lo, mask=is_k[:, None])
    tl.store(k_pool_ptr + kv_row + D // 2 + half[None, :], out_hi, mask=is_k[:, None])
    kv_heads = tl.arange(0, KV_POW2)
    v_src = qkv_ptr + t * (H + 2 * KV) * D + (H + KV + kv_heads)[:, None] * D
    full = tl.arange(0, D)[None, :]
    v = tl.load(v_src + full, mask=(kv_heads < KV)[:, None], other=0.0)
    is_v = (kv_heads < KV) & (slot >= 0)
    tl.store(v_pool_ptr + (slot * KV + kv_heads)[:, None] * D + full, v, mask=is_v[:, None])


def rope_write_kv(
    qkv: torch.Tensor,  # [T, H + 2 KV, D]
    positions: torch.Tensor,  # [T]
    cos: torch.Tensor,  # [P, D] fp32
    sin: torch.Tensor,
    slots: torch.Tensor,  # [T]
    cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
    num_heads: int,
) -> torch.Tensor:
    """Rotate q and k (rotate-half, fp32), write k and v at their slots; return q [T, H, D]."""
    tokens, rows, dim = qkv.shape
    num_kv_heads = cache.shape[3]
    assert rows == num_heads + 2 * num_kv_heads and qkv.is_contiguous()
    q = torch.empty(tokens, num_heads, dim, dtype=qkv.dtype, device=qkv.device)
    if tokens:
        _rope_write_kv_kernel[(tokens,)](
            qkv,
            positions,
            cos,
            sin,
            slots,
            q,
            cache[0],
            cache[1],
            H=num_heads,
            KV=num_kv_heads,
            D=dim,
            HEADS_POW2=triton.next_power_of_2(num_heads + num_kv_heads),
            KV_POW2=triton.next_power_of_2(num_kv_heads),
        )
    return q
