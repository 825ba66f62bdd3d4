"""Paged attention in Triton over the engine's block tables (any block size, K/V read in place).

Decode: one program per (sequence, KV head); the G query heads of a KV head are the rows of one
tile, so each K/V tile is loaded once for all of them; the blocks every decode shares (the
metadata's cascade prefix) are walked first, then the sequence's own blocks. Prefill: one program
per (tile of query rows, query head) of a chunk, causal with the cached prefix's offset. Both keep
an online softmax in fp32; dots run in fp32 (bf16 inputs are exact in tf32, fp32 stays ieee).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from selfhost.kernels.metadata import AttentionMetadata, PrefillSpan

LOG2E = 1.4426950408889634


@triton.jit
def _softmax_step(s, m_i, l_i, acc, v, PRECISION: tl.constexpr):
    """Fold a tile of log2-domain scores s [M, N] and values v [N, D] into (m, l, acc)."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _decode_kernel(
    q_ptr,  # [B, H, D]
    k_pool_ptr,  # [num_slots, KV, D]
    v_pool_ptr,
    table_ptr,  # [B, W] long: each sequence's own blocks
    lens_ptr,  # [B] long: tokens each sequence reads through its own blocks
    shared_ptr,  # [P] long: blocks every sequence reads first
    out_ptr,  # [B, H, D]
    num_shared_tokens,
    table_width,
    scale_log2,
    KV: tl.constexpr,
    G: tl.constexpr,
    G_POW2: tl.constexpr,
    D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    rows = tl.arange(0, G_POW2)
    dims = tl.arange(0, D)
    head = kvh * G + rows
    q_off = (b * KV * G + head)[:, None] * D + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=(rows < G)[:, None], other=0.0).to(tl.float32)
    total = num_shared_tokens + tl.load(lens_ptr + b)
    m_i = tl.full([G_POW2], float("-inf"), tl.float32)
    l_i = tl.zeros([G_POW2], tl.float32)
    acc = tl.zeros([G_POW2, D], tl.float32)
    for start in range(0, total, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        valid = j < total
        shared = j < num_shared_tokens
        own = j - num_shared_tokens
        block_shared = tl.load(shared_ptr + j // BLOCK_SIZE, mask=valid & shared, other=0)
        block_own = tl.load(
            table_ptr + b * table_width + own // BLOCK_SIZE, mask=valid & ~shared, other=0
        )
        block = tl.where(shared, block_shared, block_own)
        slot = block * BLOCK_SIZE + tl.where(shared, j, own) % BLOCK_SIZE
        kv_off = (slot * KV + kvh)[None, :] * D + dims[:, None]  # [D, N]
        k = tl.load(k_pool_ptr + kv_off, mask=valid[None, :], other=0.0).to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2
        s = tl.where(valid[None, :], s, float("-inf"))
        v = tl.load(v_pool_ptr + tl.trans(kv_off), mask=valid[:, None], other=0.0)
        m_i, l_i, acc = _softmax_step(s, m_i, l_i, acc, v.to(tl.float32), PRECISION)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=(rows < G)[:, None])


@triton.jit
def _prefill_kernel(
    q_ptr,  # [n, H, D] rows of one chunk
    k_pool_ptr,  # [num_slots, KV, D]
    v_pool_ptr,
    blocks_ptr,  # [num_blocks] long: the chunk's sequence's blocks
    out_ptr,  # [n, H, D]
    q_len,
    context_len,
    scale_log2,
    H: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    kvh = head // G
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q_off = (rows.to(tl.int64) * H + head)[:, None] * D + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=(rows < q_len)[:, None], other=0.0).to(tl.float32)
    position = context_len - q_len + rows  # [M]: each row sees keys up to its position
    last = tl.minimum(context_len, context_len - q_len + tile * BLOCK_M + BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in range(0, last, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        valid = j < context_len
        block = tl.load(blocks_ptr + j // BLOCK_SIZE, mask=valid, other=0)
        slot = (block * BLOCK_SIZE + j % BLOCK_SIZE).to(tl.int64)
        kv_off = (slot * (H // G) + kvh)[None, :] * D + dims[:, None]  # [D, N]
        k = tl.load(k_pool_ptr + kv_off, mask=valid[None, :], other=0.0).to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2
        seen = valid[None, :] & (j[None, :] <= position[:, None])
        s = tl.where(seen, s, float("-inf"))
        v = tl.load(v_pool_ptr + tl.trans(kv_off), mask=valid[:, None], other=0.0)
        m_i, l_i, acc = _softmax_step(s, m_i, l_i, acc, v.to(tl.float32), PRECISION)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=(rows < q_len)[:, None])


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def paged_decode(
    q: torch.Tensor,  # [B, H, D]
    cache: torch.Tensor,  # [2, num_blocks, block_size, KV, D]
    tables: torch.Tensor,  # [B, W] long
    lens: torch.Tensor,  # [B] long
    shared: torch.Tensor | None,  # [P] long
    scale: float,
    block_n: int = 64,
) -> torch.Tensor:
    batch, heads, dim = q.shape
    _, _, block_size, kv_heads, _ = cache.shape
    group = heads // kv_heads
    out = torch.empty_like(q)
    shared_blocks = shared if shared is not None else tables.new_zeros(1)
    num_shared = shared.numel() * block_size if shared is not None else 0
    _decode_kernel[(batch, kv_heads)](
        q.contiguous(),
        cache[0],
        cache[1],
        tables,
        lens,
        shared_blocks,
        out,
        num_shared,
        tables.shape[1],
        scale * LOG2E,
        KV=kv_heads,
        G=group,
        G_POW2=max(16, triton.next_power_of_2(group)),
        D=dim,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        PRECISION=_precision(q.dtype),
    )
    return out


def paged_prefill(
    q: torch.Tensor,  # [n, H, D]: the chunk's rows, positions context_len - n .. context_len - 1
    cache: torch.Tensor,
    span: PrefillSpan,
    scale: float,
    block_m: int = 64,
    block_n: int = 64,
) -> torch.Tensor:
    rows, heads, dim = q.shape
    _, _, block_size, kv_heads, _ = cache.shape
    out = torch.empty_like(q)
    _prefill_kernel[(triton.cdiv(rows, block_m), heads)](
        q.contiguous(),
        cache[0],
        cache[1],
        span.block_ids,
        out,
        rows,
        span.context_len,
        scale * LOG2E,
        H=heads,
        G=heads // kv_heads,
        D=dim,
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        PRECISION=_precision(q.dtype),
    )
    return out


def paged_attention(
    q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """q [T, H, D] (decodes first, then prefill chunks) -> [T, H, D], as the torch reference."""
    num_decodes = meta.num_decodes
    if num_decodes == q.shape[0]:
        return paged_decode(
            q,
            cache,
            meta.decode_block_tables,
            meta.decode_context_lens,
            meta.decode_shared_blocks,
            scale,
        )
    out = torch.empty_like(q)
    if num_decodes:
        out[:num_decodes] = paged_decode(
            q[:num_decodes],
            cache,
            meta.decode_block_tables,
            meta.decode_context_lens,
            meta.decode_shared_blocks,
            scale,
        )
    for span in meta.prefills:
        rows = slice(span.q_start, span.q_start + span.q_len)
        out[rows] = paged_prefill(q[rows], cache, span, scale)
    return out
