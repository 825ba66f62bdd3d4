// The entry points both CPU builds share (cpu_attention.cpp, attention_avx2.cpp), over each
// build's own `Pools<T>`, `block_fn<T>`, `decode_chunk` and `prefill_tokens` (its SIMD): a build
// defines those in its anonymous namespace, then includes this file once, inside
// `namespace lantern`. Not a header to include anywhere else.

namespace {

template <typename T>
Pools<T> pools(const torch::Tensor& q, const torch::Tensor& k_pool, const torch::Tensor& v_pool,
               double scale) {
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t heads = q.size(1), dim = q.size(2), kv = k_pool.size(2);
  TORCH_CHECK(k_pool.size(1) == kBlock && paged_attention_supports(heads / kv, dim),
              "paged attention kernels: block size 16, head dim 32/64/128, group 1-4 or 8");
  return {data<T>(q), data<T>(k_pool), data<T>(v_pool), heads, kv, dim,
          static_cast<float>(scale), block_fn<T>(heads / kv, dim)};
}

}  // namespace

bool paged_attention_supports(int64_t group, int64_t dim) {
  return block_fn<float>(group, dim) != nullptr;
}

// q [B, H, D]; k_pool/v_pool [num_blocks, 16, KV, D]; tables [B, n] int64 (own blocks);
// lens [B] int64 (own tokens); shared [P] int64 blocks every sequence starts with (full blocks).
torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale) {
  return by_storage_dtype(q, "paged_decode", [&](auto storage) {
    using T = decltype(storage);
    const Pools<T> p = pools<T>(q, k_pool, v_pool, scale);
    const DecodeTables d{tables.data_ptr<int64_t>(), lens.data_ptr<int64_t>(),
                         shared.data_ptr<int64_t>(), tables.size(1), shared.size(0)};
    torch::Tensor out = torch::empty_like(q);
    T* od = data_mut<T>(out);
    decode_tasks(q.size(0), p.kv, d.num_shared > 0,
                 [&](int64_t b0, int64_t b1, int64_t h0, int64_t h1) {
                   decode_chunk(p, d, b0, b1, h0, h1, od);
                 });
    return out;
  });
}

// One prefill chunk: q [n, H, D], the tokens at positions context_len - n .. context_len - 1.
torch::Tensor paged_prefill(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale) {
  return by_storage_dtype(q, "paged_prefill", [&](auto storage) {
    using T = decltype(storage);
    const Pools<T> p = pools<T>(q, k_pool, v_pool, scale);
    torch::Tensor out = torch::empty_like(q);
    prefill_tokens(p, block_ids.data_ptr<int64_t>(), q.size(0), context_len, data_mut<T>(out));
    return out;
  });
}
