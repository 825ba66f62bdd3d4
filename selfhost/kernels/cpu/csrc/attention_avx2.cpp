// Paged attention of the AVX2 + FMA build, reading K/V in place through the block tables like
// cpu_attention.cpp: decodes (with the shared-prefix pass) and causal prefill chunks, bf16 or fp32
// storage, fp32 math, online softmax per 16-token block; the torch reference is
// selfhost/kernels/reference/attention.py.
#include "cpu_avx2.h"
#include "paged_dispatch.h"

namespace lantern {
namespace {

using namespace avx2;

constexpr int64_t kBlock = 16;  // tokens per KV block

struct RowState {
  float max = -INFINITY;
  float sum = 0.0f;
};

// One 16-element chunk of a K row as two 8-lane halves. bf16: the even and odd elements (one load,
// two shifts); fp32: elements 0-7 and 8-15. split_q lays q out the same way.
inline void k_chunk(const uint16_t* k, __m256& a, __m256& b) {
  const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k));
  a = low_halves(pairs);
  b = high_halves(pairs);
}
inline void k_chunk(const float* k, __m256& a, __m256& b) {
  a = _mm256_loadu_ps(k);
  b = _mm256_loadu_ps(k + 8);
}
template <typename T>
void split_q(const T* q, int64_t dim, float scale, float* out) {
  for (int64_t c = 0; c < dim; c += 16)
    for (int i = 0; i < 8; ++i) {
      const bool pairs = sizeof(T) == 2;
      out[c + i] = to_float(q[c + (pairs ? 2 * i : i)]) * scale;
      out[c + 8 + i] = to_float(q[c + (pairs ? 2 * i + 1 : 8 + i)]) * scale;
    }
}

// The G query rows of one KV head (qs [G][D], scaled, in split_q's layout) attend to `count`
// tokens of one block: k, v at token 0 of this head, `stride` elements between tokens;
// acc [G][D] fp32 (natural order).
template <typename T, int G, int D>
void attend_block(const float* qs, const T* k, const T* v, int64_t stride, int count,
                  RowState* state, float* acc) {
  __m256 dots[G][kBlock];
  for (int t = 0; t < kBlock; ++t) {
    __m256 d[G];
    for (int g = 0; g < G; ++g) d[g] = _mm256_setzero_ps();
    if (t < count)
      for (int c = 0; c < D; c += 16) {
        __m256 a, b;
        k_chunk(k + t * stride + c, a, b);
        for (int g = 0; g < G; ++g) {
          d[g] = _mm256_fmadd_ps(a, _mm256_loadu_ps(qs + g * D + c), d[g]);
          d[g] = _mm256_fmadd_ps(b, _mm256_loadu_ps(qs + g * D + c + 8), d[g]);
        }
      }
    for (int g = 0; g < G; ++g) dots[g][t] = d[g];
  }
  alignas(32) float p[G][kBlock];
  float alpha[G];
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 valid0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane));
  const __m256 valid1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count - 8), lane));
  for (int g = 0; g < G; ++g) {
    const __m256 s0 = _mm256_blendv_ps(neg_inf, sum_lanes8(dots[g]), valid0);
    const __m256 s1 = _mm256_blendv_ps(neg_inf, sum_lanes8(dots[g] + 8), valid1);
    const float top = std::max(state[g].max, hmax(_mm256_max_ps(s0, s1)));
    alpha[g] = std::exp(state[g].max - top);  // old max -inf: 0
    const __m256 m = _mm256_set1_ps(top);
    const __m256 e0 = _mm256_and_ps(exp8(_mm256_sub_ps(s0, m)), valid0);
    const __m256 e1 = _mm256_and_ps(exp8(_mm256_sub_ps(s1, m)), valid1);
    state[g].sum = state[g].sum * alpha[g] + hsum(_mm256_add_ps(e0, e1));
    state[g].max = top;
    _mm256_store_ps(p[g], e0);
    _mm256_store_ps(p[g] + 8, e1);
  }
  for (int c = 0; c < D; c += 16) {  // 16 dims of every row per pass: 2G accumulators
    __m256 out[G][2];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h)
        out[g][h] = _mm256_mul_ps(_mm256_loadu_ps(acc + g * D + c + 8 * h), _mm256_set1_ps(alpha[g]));
    for (int t = 0; t < count; ++t) {
      const __m256 v0 = load8(v + t * stride + c), v1 = load8(v + t * stride + c + 8);
      for (int g = 0; g < G; ++g) {
        const __m256 pt = _mm256_broadcast_ss(&p[g][t]);
        out[g][0] = _mm256_fmadd_ps(pt, v0, out[g][0]);
        out[g][1] = _mm256_fmadd_ps(pt, v1, out[g][1]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc + g * D + c + 8 * h, out[g][h]);
  }
}

template <typename T>
using BlockFn = void (*)(const float*, const T*, const T*, int64_t, int, RowState*, float*);

template <typename T, int D>
BlockFn<T> block_fn_for_group(int64_t group) {
  switch (group) {
    case 1: return attend_block<T, 1, D>;
    case 2: return attend_block<T, 2, D>;
    case 3: return attend_block<T, 3, D>;
    case 4: return attend_block<T, 4, D>;
    case 8: return attend_block<T, 8, D>;
    default: return nullptr;
  }
}

template <typename T>
BlockFn<T> block_fn(int64_t group, int64_t dim) {
  switch (dim) {
    case 32: return block_fn_for_group<T, 32>(group);
    case 64: return block_fn_for_group<T, 64>(group);
    case 128: return block_fn_for_group<T, 128>(group);
    default: return nullptr;
  }
}

// Shape of one attention call: q rows [tokens, heads, dim], pools [blocks, 16, kv, dim].
template <typename T>
struct Pools {
  const T *q, *k, *v;
  int64_t heads, kv, dim;
  float scale;
  BlockFn<T> attend;

  // qs [heads][dim]: q_token's rows, scaled, in split_q's layout.
  void load_q(int64_t q_token, float* qs) const {
    for (int64_t h = 0; h < heads; ++h) split_q(q + (q_token * heads + h) * dim, dim, scale, qs + h * dim);
  }
  // The rows of KV heads [h0, h1) attend to one block; qs, state, acc start at head 0.
  void attend_heads(const float* qs, int64_t h0, int64_t h1, int64_t block_id, int count,
                    RowState* state, float* acc) const {
    const int64_t group = heads / kv, stride = kv * dim, base = block_id * kBlock * stride;
    for (int64_t h = h0; h < h1; ++h)
      attend(qs + h * group * dim, k + base + h * dim, v + base + h * dim, stride, count,
             state + h * group, acc + h * group * dim);
  }
};

// Starts loading one block's K and V (all KV heads): block tables jump around the pool.
template <typename T>
void prefetch_block(const Pools<T>& p, int64_t block_id) {
  const int64_t count = kBlock * p.kv * p.dim, offset = block_id * count;
  const char* k = reinterpret_cast<const char*>(p.k + offset);
  const char* v = reinterpret_cast<const char*>(p.v + offset);
  for (int64_t byte = 0; byte < count * static_cast<int64_t>(sizeof(T)); byte += 64) {
    _mm_prefetch(k + byte, _MM_HINT_T0);
    _mm_prefetch(v + byte, _MM_HINT_T0);
  }
}

template <typename T>
void write_rows(const RowState* state, const float* acc, int64_t rows, int64_t dim, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / state[r].sum;
    for (int64_t c = 0; c < dim; ++c) out[r * dim + c] = from_float<T>(acc[r * dim + c] * inv);
  }
}

// Decodes [b0, b1), KV heads [h0, h1), as one task: the shared blocks once per block for all of
// them while the block is in cache, then each one's own blocks.
template <typename T>
void decode_chunk(const Pools<T>& p, const DecodeTables& d, int64_t b0, int64_t b1, int64_t h0,
                  int64_t h1, T* out) {
  const int64_t rows = (b1 - b0) * p.heads, group = p.heads / p.kv;
  std::vector<RowState> state(rows);
  std::vector<float> acc(rows * p.dim, 0.0f), qs(rows * p.dim);
  auto row = [&](int64_t b) { return (b - b0) * p.heads; };
  for (int64_t b = b0; b < b1; ++b) p.load_q(b, &qs[row(b) * p.dim]);
  for (int64_t i = 0; i < d.num_shared; ++i) {
    if (i + 1 < d.num_shared) prefetch_block(p, d.shared[i + 1]);
    for (int64_t b = b0; b < b1; ++b)
      p.attend_heads(&qs[row(b) * p.dim], h0, h1, d.shared[i], kBlock, &state[row(b)],
                     &acc[row(b) * p.dim]);
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t blocks = std::min(d.width, (d.lens[b] + kBlock - 1) / kBlock);
    for (int64_t i = 0; i < blocks; ++i) {
      if (i + 1 < blocks) prefetch_block(p, d.tables[b * d.width + i + 1]);
      const int count = static_cast<int>(std::min(kBlock, d.lens[b] - i * kBlock));
      p.attend_heads(&qs[row(b) * p.dim], h0, h1, d.tables[b * d.width + i], count,
                     &state[row(b)], &acc[row(b) * p.dim]);
    }
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t r = row(b) + h0 * group;
    write_rows(&state[r], &acc[r * p.dim], (h1 - h0) * group, p.dim,
               out + (b * p.heads + h0 * group) * p.dim);
  }
}

// One prefill chunk's tokens (positions context_len - n .. context_len - 1), each over the
// blocks `ids` up to its own position (causal), into `od`.
template <typename T>
void prefill_tokens(const Pools<T>& p, const int64_t* ids, int64_t n, int64_t context_len,
                    T* od) {
  constexpr int64_t kTokensPerTask = 4;
  parallel_tasks((n + kTokensPerTask - 1) / kTokensPerTask, [&](int64_t task) {
    std::vector<RowState> state(p.heads);
    std::vector<float> acc(p.heads * p.dim), qs(p.heads * p.dim);
    for (int64_t i = task * kTokensPerTask; i < std::min(n, (task + 1) * kTokensPerTask); ++i) {
      const int64_t seen = context_len - n + i + 1;  // causal: keys up to this token's position
      std::fill(state.begin(), state.end(), RowState{});
      std::fill(acc.begin(), acc.end(), 0.0f);
      p.load_q(i, qs.data());
      for (int64_t j = 0; j * kBlock < seen; ++j)
        p.attend_heads(qs.data(), 0, p.kv, ids[j],
                       static_cast<int>(std::min(kBlock, seen - j * kBlock)), state.data(),
                       acc.data());
      write_rows(state.data(), acc.data(), p.heads, p.dim, od + i * p.heads * p.dim);
    }
  });
}

}  // namespace

#include "paged_entries.h"  // paged_attention_supports, paged_decode, paged_prefill

}  // namespace lantern
