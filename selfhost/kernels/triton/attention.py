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
    out_ptr,  # [B, H, D]; with SPLITS > 1 the unnormalised partial sums [B, SPLITS, H, D]
    ml_ptr,  # SPLITS > 1: [B, SPLITS, H, 2] each split's running max (log2) and sum
    num_shared_tokens,
    table_width,
    scale_log2,
    KV: tl.constexpr,
    G: tl.constexpr,
    G_POW2: tl.constexpr,
    D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
    PRECISION: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    rows = tl.arange(0, G_POW2)
    dims = tl.arange(0, D)
    head = kvh * G + rows
    q_off = (b * KV * G + head)[:, None] * D + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=(rows < G)[:, None], other=0.0).to(tl.float32)
    total = num_shared_tokens + tl.load(lens_ptr + b)
    per_split = tl.cdiv(tl.cdiv(total, SPLITS), BLOCK_N) * BLOCK_N
    first = split * per_split
    m_i = tl.full([G_POW2], float("-inf"), tl.float32)
    l_i = tl.zeros([G_POW2], tl.float32)
    acc = tl.zeros([G_POW2, D], tl.float32)
    for start in range(first, tl.minimum(total, first + per_split), BLOCK_N):
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
    if SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=(rows < G)[:, None])
    else:
        part = (b * SPLITS + split) * KV * G + head  # [G_POW2] rows of [B, SPLITS, H]
        tl.store(out_ptr + part[:, None] * D + dims[None, :], acc, mask=(rows < G)[:, None])
        tl.store(ml_ptr + part * 2, m_i, mask=rows < G)
        tl.store(ml_ptr + part * 2 + 1, l_i, mask=rows < G)


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
    splits: int | None = None,
    block_n: int = 64,
) -> torch.Tensor:
    """Few (sequence, KV head) programs leave most SMs idle on a long context: then each walks one
    of `splits` key ranges (default: by the batch and the device's SM count) and a merge by
    log-sum-exp follows (flash-decoding)."""
    batch, heads, dim = q.shape
    _, _, block_size, kv_heads, _ = cache.shape
    group = heads // kv_heads
    if splits is None:
        splits = decode_splits(batch * kv_heads, q.device)
    partial = splits > 1
    out_shape = (batch, splits, heads, dim) if partial else (batch, heads, dim)
    out = torch.empty(out_shape, dtype=torch.float32 if partial else q.dtype, device=q.device)
    ml = torch.empty((batch, splits, heads, 2) if partial else (1,), device=q.device)
    shared_blocks = shared if shared is not None else tables.new_zeros(1)
    num_shared = shared.numel() * block_size if shared is not None else 0
    _decode_kernel[(batch, kv_heads, splits)](
        q.contiguous(),
        cache[0],
        cache[1],
        tables,
        lens,
        shared_blocks,
        out,
        ml,
        num_shared,
        tables.shape[1],
        scale * LOG2E,
        KV=kv_heads,
        G=group,
        G_POW2=max(16, triton.next_power_of_2(group)),
        D=dim,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        SPLITS=splits,
        PRECISION=_precision(q.dtype),
    )
    return merge_splits(out, ml).to(q.dtype) if partial else out


def decode_splits(programs: int, device: torch.device) -> int:
    """Key ranges per (sequence, KV head): a power of two up to 16 that fills the SMs, depending
    on the batch and the device only (a CUDA graph captures one count per batch size). 1 off CUDA
    (the interpreter has no SMs to fill)."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    splits = 1
    while splits < 16 and programs * splits * 2 <= sms:
        splits *= 2
    return splits


def merge_splits(partial: torch.Tensor, ml: torch.Tensor) -> torch.Tensor:
    """partial [B, S, H, D] unnormalised sums, ml [B, S, H, 2] (log2 max, sum) -> [B, H, D]."""
    top = ml[..., 0].amax(dim=1, keepdim=True)  # [B, 1, H]
    weight = torch.exp2(ml[..., 0] - top).nan_to_num(0.0)  # empty splits (max -inf) weigh 0
    total = (weight * ml[..., 1]).sum(dim=1)  # [B, H]
    merged = (weight.unsqueeze(-1) * partial).sum(dim=1)
    return merged / total.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1)


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
