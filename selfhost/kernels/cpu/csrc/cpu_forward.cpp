// All decoder layers of one forward in one call (both builds): the six kernel calls of a layer
// (selfhost/kernels/layers.py holds the same sequence in torch ops) without a return to Python
// between layers; a batch-1 decode step is ~180 kernel calls, and their Python glue cost about a
// tenth of it.
#include "cpu_kernels.h"

namespace lantern {

namespace {

// One layer's weights, in CpuLayerWeights.as_list() order.
enum LayerWeight { kInputNorm, kPostNorm, kQkv, kOProj, kGateUp, kDown, kNumLayerWeights };

// The attention part of AttentionMetadata (selfhost/kernels/metadata.py) the kernels read.
struct AttentionBatch {
  int64_t num_decodes;
  const torch::Tensor& decode_tables;  // [num_decodes, max_blocks] long
  const torch::Tensor& decode_lens;    // [num_decodes] long
  const torch::Tensor& shared;         // blocks every decode starts with (empty: none)
  const std::vector<int64_t>& prefill_starts;  // per prefill chunk: first q row, rows, context
  const std::vector<int64_t>& prefill_lens;
  const std::vector<int64_t>& prefill_contexts;
  const std::vector<torch::Tensor>& prefill_blocks;  // [num_blocks] long each
};

torch::Tensor prefill_gathered(const torch::Tensor& q, const torch::Tensor& k_pool,
                               const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                               int64_t context_len, double scale);

// q [T, H, D]: decodes (the first num_decodes rows) and prefill chunks (q rows [start, start+len)
// over their blocks) read K/V in place; k_pool, v_pool [num_blocks, block_size, KV, D].
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k_pool, const torch::Tensor& v_pool,
                     const AttentionBatch& batch, double scale) {
  const int64_t num_decodes = batch.num_decodes;
  if (num_decodes == q.size(0))
    return paged_decode(q, k_pool, v_pool, batch.decode_tables, batch.decode_lens, batch.shared, scale);
  torch::Tensor out = torch::empty_like(q);
  if (num_decodes > 0)
    out.narrow(0, 0, num_decodes)
        .copy_(paged_decode(q.narrow(0, 0, num_decodes), k_pool, v_pool, batch.decode_tables,
                            batch.decode_lens, batch.shared, scale));
  for (size_t i = 0; i < batch.prefill_blocks.size(); ++i) {
    const int64_t start = batch.prefill_starts[i], len = batch.prefill_lens[i];
    out.narrow(0, start, len)
        .copy_(prefill_attention(q.narrow(0, start, len).contiguous(), k_pool, v_pool,
                                 batch.prefill_blocks[i], batch.prefill_contexts[i], scale));
  }
  return out;
}

// One prefill chunk through torch's SDPA over its blocks gathered into [1, KV, context, D], causal
// with the cached prefix's offset (query i sees keys up to context - n + i).
torch::Tensor prefill_gathered(const torch::Tensor& q, const torch::Tensor& k_pool,
                               const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                               int64_t context_len, double scale) {
  const int64_t n = q.size(0), kv = k_pool.size(2), dim = k_pool.size(3);
  auto gather = [&](const torch::Tensor& pool) {
    return pool.index_select(0, block_ids).view({-1, kv, dim}).narrow(0, 0, context_len)
        .transpose(0, 1).unsqueeze(0);
  };
  const bool causal = n == context_len;  // SDPA's is_causal: query i sees keys 0..i
  c10::optional<torch::Tensor> mask;
  if (!causal)
    mask = torch::ones({n, context_len}, q.options().dtype(torch::kBool)).tril(context_len - n);
  torch::Tensor out = at::scaled_dot_product_attention(
      q.transpose(0, 1).unsqueeze(0), gather(k_pool), gather(v_pool), mask, 0.0, causal, scale,
      /*enable_gqa=*/true);
  return out.squeeze(0).transpose(0, 1).contiguous();  // [n, H, D]
}

}  // namespace

// bf16 chunks of 16+ tokens on an AMX build: gathered + SDPA, whose bf16 GEMMs (oneDNN) run on
// AMX tiles: 3.5 vs 8.6 ms for a 512-token chunk over 512 tokens (the in-place kernel walks each
// query token's blocks alone). Otherwise the in-place kernel (fp32 keeps its exact path).
torch::Tensor prefill_attention(const torch::Tensor& q, const torch::Tensor& k_pool,
                                const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                                int64_t context_len, double scale) {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  if (q.scalar_type() == torch::kBFloat16 && q.size(0) >= 16)
    return prefill_gathered(q, k_pool, v_pool, block_ids, context_len, scale);
#endif
  return paged_prefill(q, k_pool, v_pool, block_ids, context_len, scale);
}

torch::Tensor forward_layers(torch::Tensor x, const std::vector<std::vector<torch::Tensor>>& layers,
                             const torch::Tensor& kv_cache, const torch::Tensor& positions,
                             const torch::Tensor& cos, const torch::Tensor& sin,
                             const torch::Tensor& slots, int64_t num_decodes,
                             const torch::Tensor& decode_tables, const torch::Tensor& decode_lens,
                             const torch::Tensor& shared, const std::vector<int64_t>& prefill_starts,
                             const std::vector<int64_t>& prefill_lens,
                             const std::vector<int64_t>& prefill_contexts,
                             const std::vector<torch::Tensor>& prefill_blocks,
                             const std::vector<int64_t>& shape, double eps) {
  const AttentionBatch batch{num_decodes,    decode_tables, decode_lens,      shared,
                             prefill_starts, prefill_lens,  prefill_contexts, prefill_blocks};
  TORCH_CHECK(prefill_lens.size() == prefill_starts.size() &&
                  prefill_contexts.size() == prefill_starts.size() &&
                  prefill_blocks.size() == prefill_starts.size(),
              "forward_layers: one start, length, context and block list per prefill chunk");
  TORCH_CHECK(shape.size() == 5, "forward_layers: shape = heads, kv heads, head dim, hidden, inner");
  const int64_t heads = shape[0], kv_heads = shape[1], dim = shape[2], hidden = shape[3];
  const int64_t inner = shape[4], tokens = x.size(0);
  TORCH_CHECK(kv_cache.dim() == 6 && kv_cache.size(0) == static_cast<int64_t>(layers.size()),
              "forward_layers: kv_cache [L, 2, blocks, block size, KV, D], one per layer");
  const int64_t qkv_rows = (heads + 2 * kv_heads) * dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const c10::optional<torch::Tensor> none;
  for (size_t index = 0; index < layers.size(); ++index) {
    const std::vector<torch::Tensor>& w = layers[index];
    TORCH_CHECK(w.size() == kNumLayerWeights, "forward_layers: six weights per layer");
    const torch::Tensor cache = kv_cache[static_cast<int64_t>(index)];
    torch::Tensor k_pool = cache[0], v_pool = cache[1];
    torch::Tensor qkv = linear(x, w[kQkv], qkv_rows, "rms_norm", w[kInputNorm], eps, none);
    torch::Tensor q = rope_write_kv(qkv.view({tokens, -1, dim}), positions, cos, sin, slots,
                                    k_pool.view({-1, kv_heads, dim}),
                                    v_pool.view({-1, kv_heads, dim}), heads);  // [T, H, D]
    torch::Tensor attn = attend(q, k_pool, v_pool, batch, scale);
    x = linear(attn.view({tokens, -1}), w[kOProj], hidden, "none", none, 0.0, x);
    torch::Tensor gate_up = linear(x, w[kGateUp], 2 * inner, "rms_norm", w[kPostNorm], eps, none);
    x = linear(gate_up, w[kDown], hidden, "silu_mul", none, 0.0, x);
  }
  return x;
}

}  // namespace lantern
