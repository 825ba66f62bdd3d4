"""The torch reference of paged attention: write K/V through the slot mapping, read them back through block tables.

Device-neutral torch path (gather + scaled_dot_product_attention). Decodes (one query token)
are batched in one call; prefill chunks go one call each, causal with a cached-prefix offset.
Decodes that share prefix blocks attend to them once, as one GEMM (cascade), then merge.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from selfhost.kernels.metadata import AttentionMetadata, PrefillSpan


def write_kv(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
    """cache: [2, num_blocks, block_size, KV, D]; k, v: [T, KV, D]."""
    num_kv_heads, head_dim = k.shape[1], k.shape[2]
    cache[0].view(-1, num_kv_heads, head_dim).index_copy_(0, slots, k)
    cache[1].view(-1, num_kv_heads, head_dim).index_copy_(0, slots, v)


def paged_attention(
    q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """q: [T, H, D]; cache: [2, num_blocks, block_size, KV, D] already holding this step's K/V."""
    out = torch.empty_like(q)
    if meta.num_decodes and meta.decode_shared_blocks is not None:
        out[: meta.num_decodes] = _decode_cascade(q[: meta.num_decodes], cache, meta, scale)
    elif meta.num_decodes:
        out[: meta.num_decodes] = _decode(q[: meta.num_decodes], cache, meta, scale)
    prefill_attention(q, cache, meta, scale, out)
    return out


def prefill_attention(
    q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float, out: torch.Tensor
) -> None:
    """Fill the prefill rows of out [T, H, D], one SDPA call per chunk."""
    for span in meta.prefills:
        rows = slice(span.q_start, span.q_start + span.q_len)
        out[rows] = _prefill(q[rows], cache, span, scale)


def _decode(
    q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    batch, num_heads, head_dim = q.shape
    num_kv_heads = cache.shape[3]
    # The G query heads sharing a KV head act as G query rows, so K/V are never repeated.
    q = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    k = _gather(cache[0], meta.decode_block_tables).transpose(1, 2)  # [B, KV, S, D]
    v = _gather(cache[1], meta.decode_block_tables).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=meta.decode_mask, scale=scale)
    return out.reshape(batch, num_heads, head_dim)


def _decode_cascade(
    q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """Shared prefix once for all decodes (M = B * G rows per KV head), own blocks per sequence,
    merged by log-sum-exp. Computed in fp32."""
    assert meta.decode_shared_blocks is not None
    batch, num_heads, head_dim = q.shape
    num_kv_heads = cache.shape[3]
    q4 = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim).float()
    shared = meta.decode_shared_blocks.view(1, -1)
    k = _gather(cache[0], shared)[0].float()  # [P, KV, D]
    v = _gather(cache[1], shared)[0].float()
    rows = q4.transpose(0, 1).reshape(num_kv_heads, -1, head_dim)  # [KV, B * G, D]
    scores = torch.bmm(rows, k.permute(1, 2, 0)) * scale  # [KV, B * G, P]
    out_shared, lse_shared = _softmax_times_v(scores, v.transpose(0, 1))
    out_shared = out_shared.view(num_kv_heads, batch, -1, head_dim).transpose(0, 1)
    lse_shared = lse_shared.view(num_kv_heads, batch, -1, 1).transpose(0, 1)
    k = _gather(cache[0], meta.decode_block_tables).float()  # [B, S, KV, D]
    v = _gather(cache[1], meta.decode_block_tables).float()
    scores = torch.einsum("bkgd,bskd->bkgs", q4, k) * scale
    scores = scores.masked_fill(~meta.decode_mask, float("-inf"))
    out_own, lse_own = _softmax_times_v(scores, v.permute(0, 2, 1, 3))
    top = torch.maximum(lse_shared, lse_own)
    w_shared, w_own = (lse_shared - top).exp(), (lse_own - top).exp()
    out = (out_shared * w_shared + out_own * w_own) / (w_shared + w_own)
    return out.reshape(batch, num_heads, head_dim).to(q.dtype)


def _softmax_times_v(scores: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scores) @ v and the log-sum-exp of each row (scores [..., S], v [..., S, D])."""
    top = scores.amax(-1, keepdim=True)
    weights = (scores - top).exp()
    total = weights.sum(-1, keepdim=True)
    return torch.matmul(weights, v) / total, top + total.log()


def _prefill(q: torch.Tensor, cache: torch.Tensor, span: PrefillSpan, scale: float) -> torch.Tensor:
    k = _gather(cache[0], span.block_ids.view(1, -1))[0, : span.context_len]  # [ctx, KV, D]
    v = _gather(cache[1], span.block_ids.view(1, -1))[0, : span.context_len]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),  # [1, H, n, D]
        k.transpose(0, 1).unsqueeze(0),  # [1, KV, ctx, D]
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=span.mask,
        is_causal=span.mask is None,
        scale=scale,
        enable_gqa=True,
    )
    return out.squeeze(0).transpose(0, 1)


def _gather(pool: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """pool [num_blocks, block_size, KV, D], tables [B, n] -> [B, n * block_size, KV, D].

    index_select copies whole blocks (contiguous rows); it is several times faster on CPU than
    advanced indexing with a 2-D index."""
    batch, num_blocks = block_tables.shape
    rows = pool.view(pool.shape[0], -1).index_select(0, block_tables.reshape(-1))  # 2-D: fastest
    return rows.view(batch, num_blocks * pool.shape[1], pool.shape[2], pool.shape[3])
