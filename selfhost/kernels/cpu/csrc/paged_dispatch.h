// What both builds' paged attention shares (cpu_attention.cpp, attention_avx2.cpp): the block
// tables a decode reads, the dtype dispatch of the entry points and the split of a decode batch
// into pool tasks. Each build brings its own block loops (the SIMD differs, the policy does not).
#pragma once

#include "cpu_kernels.h"
#include "cpu_pool.h"

namespace lantern {

// The decode batch's own blocks per sequence, and the blocks every sequence starts with.
struct DecodeTables {
  const int64_t *tables, *lens, *shared;
  int64_t width, num_shared;
};

// fn(T{}) with T = uint16_t (bf16 storage) or float (fp32 storage).
template <typename Fn>
torch::Tensor by_storage_dtype(const torch::Tensor& q, const char* entry, Fn&& fn) {
  if (q.scalar_type() == torch::kBFloat16) return fn(uint16_t{});
  TORCH_CHECK(q.scalar_type() == torch::kFloat32, entry, ": bf16 or fp32");
  return fn(float{});
}

// chunk(b0, b1, h0, h1) for every task of a decode batch. A shared prefix: one chunk of
// sequences per thread shares each pass over it. Fewer sequences than threads: one task per
// (sequence, KV head). Otherwise one task per sequence.
template <typename Chunk>
void decode_tasks(int64_t batch, int64_t kv_heads, bool has_shared, Chunk&& chunk) {
  const int64_t threads = at::get_num_threads();
  const int64_t per = has_shared ? std::max<int64_t>(1, (batch + threads - 1) / threads) : 1;
  const int64_t heads_split = (!has_shared && batch < threads) ? kv_heads : 1;
  const int64_t chunks = (batch + per - 1) / per;
  parallel_tasks(chunks * heads_split, [&](int64_t task) {
    const int64_t c = task / heads_split, h = task % heads_split, span = kv_heads / heads_split;
    chunk(c * per, std::min(batch, (c + 1) * per), h * span, (h + 1) * span);
  });
}

}  // namespace lantern
