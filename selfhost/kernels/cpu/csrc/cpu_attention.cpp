// Paged attention that reads K/V in place through the block tables: decodes (with a shared-prefix
// pass, the cascade) and causal prefill chunks. bf16 (AVX512-BF16 dot products) or fp32 storage,
// fp32 math; the torch reference is selfhost/kernels/reference/attention.py.
#include "cpu_kernels.h"
#include "paged_dispatch.h"

namespace lantern {
namespace {

constexpr int64_t kBlock = 16;  // tokens per KV block = fp32 lanes per zmm

// Partial dot products of two D-vectors, 16 fp32 lanes (reduce to finish).
template <int D>
inline __m512 dot_lanes(const uint16_t* q, const uint16_t* k) {
  __m512 acc = _mm512_setzero_ps();
  for (int c = 0; c < D; c += 32)
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(q + c),
                           (__m512bh)_mm512_loadu_si512(k + c));
  return acc;
}
template <int D>
inline __m512 dot_lanes(const float* q, const float* k) {
  __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
  for (int c = 16; c < D; c += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c), acc);
  return acc;
}

// lane t of the result = sum of the 16 lanes of v[t] (a transpose-and-add tree: 45 shuffles and
// adds for 16 sums instead of 16 horizontal reductions).
inline __m512 sum_lanes16(const __m512* v) {
  __m512 a[8], b[4];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int j = 0; j < 4; ++j)
    b[j] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * j], a[2 * j + 1], 0x44),
                         _mm512_shuffle_ps(a[2 * j], a[2 * j + 1], 0xEE));
  // b[j], 128-bit lane c: the partial sums of tokens 4j..4j+3 over lanes 4c..4c+3 of each v.
  const __m512 c0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x44),
                                  _mm512_shuffle_f32x4(b[0], b[1], 0xEE));
  const __m512 c1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x44),
                                  _mm512_shuffle_f32x4(b[2], b[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
}

struct RowState {
  float max = -INFINITY;
  float sum = 0.0f;
};

// Every lane = the max (sum) of the 16 lanes of v: a butterfly, so the result stays in a register
// (no scalar round trip in the softmax chain).
inline __m512 max_all(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));
}
inline __m512 sum_all(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
}

// The G query rows [G][D] of one KV head attend to `count` tokens of one block (online softmax).
// k, v point at token 0 of this head, `stride` elements between tokens; acc [G][D] fp32.
// Each stage runs for all G rows before the next, in vector registers only (no scalar exp or
// horizontal reduce): the rows' dependency chains (dots -> max -> exp -> sum) then overlap
// instead of running back to back, which is what bounded a block's time.
template <typename T, int G, int D>
void attend_block(const T* q, const T* k, const T* v, int64_t stride, int count, float scale,
                  RowState* state, float* acc, const T* next_k, const T* next_v) {
  constexpr int NC = D / 16;
  const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 s[G], top[G], alpha[G];
  for (int g = 0; g < G; ++g) {  // s[g] lane t = scale * q_g . k_t (-inf past count)
    __m512 dots[16];
    for (int t = 0; t < 16; ++t)
      dots[t] = t < count ? dot_lanes<D>(q + g * D, k + t * stride) : _mm512_setzero_ps();
    s[g] = _mm512_mask_mul_ps(neg_inf, valid, sum_lanes16(dots), _mm512_set1_ps(scale));
  }
  for (int g = 0; g < G; ++g) {
    const __m512 old = _mm512_set1_ps(state[g].max);
    top[g] = _mm512_max_ps(old, max_all(s[g]));
    alpha[g] = exp_ps(_mm512_sub_ps(old, top[g]));  // old = -inf: clamped to exp(-87), times 0
  }
  alignas(64) float p[G][16];
  for (int g = 0; g < G; ++g) {
    const __m512 e = _mm512_maskz_mov_ps(valid, exp_ps(_mm512_sub_ps(s[g], top[g])));
    const __m512 sum = _mm512_fmadd_ps(_mm512_set1_ps(state[g].sum), alpha[g], sum_all(e));
    state[g].sum = _mm512_cvtss_f32(sum);
    state[g].max = _mm512_cvtss_f32(top[g]);
    _mm512_store_ps(p[g], e);
  }
  __m512 acc_v[G][NC];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c)
      acc_v[g][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + g * D + c * 16), alpha[g]);
  for (int t = 0; t < count; ++t) {
    if (next_k != nullptr) {  // this head's rows of the next block, a token per token
      for (int byte = 0; byte < D * static_cast<int>(sizeof(T)); byte += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next_k + t * stride) + byte, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next_v + t * stride) + byte, _MM_HINT_T0);
      }
    }
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = load16(v + t * stride + c * 16);
    for (int g = 0; g < G; ++g) {
      const __m512 pt = _mm512_set1_ps(p[g][t]);
      for (int c = 0; c < NC; ++c) acc_v[g][c] = _mm512_fmadd_ps(pt, vv[c], acc_v[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(acc + g * D + c * 16, acc_v[g][c]);
}

template <typename T>
using BlockFn = void (*)(const T*, const T*, const T*, int64_t, int, float, RowState*, float*,
                         const T*, const T*);

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

// Shape of one attention call: q rows laid out [tokens, heads, dim], pools [blocks, 16, kv, dim].
template <typename T>
struct Pools {
  const T *q, *k, *v;
  int64_t heads, kv, dim;
  float scale;
  BlockFn<T> attend;

  // The rows of q_token for KV heads [h0, h1) attend to one block; state/acc start at head 0.
  // next_block (-1: none) is loaded into cache meanwhile, a token's rows per token of this block:
  // a block table jumps around the pool (the hardware prefetcher cannot follow it), and the
  // whole next block prefetched at once (192 lines) stalled on the few line-fill buffers until
  // most of it had arrived, so loads and compute ran one after the other (batch-16 decode, 30
  // layers from memory: 7.6 -> 5.1 ms; cpu_attention.cpp history in docs/bench/engine.md).
  void attend_heads(int64_t q_token, int64_t h0, int64_t h1, int64_t block_id, int count,
                    RowState* state, float* acc, int64_t next_block = -1) const {
    const int64_t group = heads / kv, stride = kv * dim, base = block_id * kBlock * stride;
    const int64_t next = next_block * kBlock * stride;
    for (int64_t h = h0; h < h1; ++h)
      attend(q + (q_token * heads + h * group) * dim, k + base + h * dim, v + base + h * dim,
             stride, count, scale, state + h * group, acc + h * group * dim,
             next_block < 0 ? nullptr : k + next + h * dim,
             next_block < 0 ? nullptr : v + next + h * dim);
  }
};

template <typename T>
void write_rows(const RowState* state, const float* acc, int64_t rows, int64_t dim, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / state[r].sum;
    for (int64_t c = 0; c < dim; ++c) out[r * dim + c] = from_float<T>(acc[r * dim + c] * inv);
  }
}

// Block tables of a decode batch: own blocks [B, width] and lengths, and the shared blocks.
// Decodes [b0, b1), KV heads [h0, h1), as one task: the shared blocks (every sequence's first
// ones) once per block for all of them while the block is in cache, then each one's own blocks.
template <typename T>
void decode_chunk(const Pools<T>& p, const DecodeTables& d, int64_t b0, int64_t b1, int64_t h0,
                  int64_t h1, T* out) {
  const int64_t rows = (b1 - b0) * p.heads, group = p.heads / p.kv;
  std::vector<RowState> state(rows);
  std::vector<float> acc(rows * p.dim, 0.0f);
  auto row = [&](int64_t b) { return (b - b0) * p.heads; };
  for (int64_t i = 0; i < d.num_shared; ++i) {
    const int64_t next = i + 1 < d.num_shared ? d.shared[i + 1] : -1;
    for (int64_t b = b0; b < b1; ++b)
      p.attend_heads(b, h0, h1, d.shared[i], kBlock, &state[row(b)], &acc[row(b) * p.dim],
                     b == b0 ? next : -1);
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t blocks = std::min(d.width, (d.lens[b] + kBlock - 1) / kBlock);
    for (int64_t i = 0; i < blocks; ++i) {
      const int64_t next = i + 1 < blocks ? d.tables[b * d.width + i + 1]
                           : b + 1 < b1 && d.lens[b + 1] > 0 ? d.tables[(b + 1) * d.width]
                                                              : -1;
      const int count = static_cast<int>(std::min(kBlock, d.lens[b] - i * kBlock));
      p.attend_heads(b, h0, h1, d.tables[b * d.width + i], count, &state[row(b)],
                     &acc[row(b) * p.dim], next);
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
    std::vector<float> acc(p.heads * p.dim);
    for (int64_t i = task * kTokensPerTask; i < std::min(n, (task + 1) * kTokensPerTask); ++i) {
      const int64_t seen = context_len - n + i + 1;  // causal: keys up to this token's position
      std::fill(state.begin(), state.end(), RowState{});
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j * kBlock < seen; ++j)
        p.attend_heads(i, 0, p.kv, ids[j], static_cast<int>(std::min(kBlock, seen - j * kBlock)),
                       state.data(), acc.data());
      write_rows(state.data(), acc.data(), p.heads, p.dim, od + i * p.heads * p.dim);
    }
  });
}

}  // namespace

#include "paged_entries.h"  // paged_attention_supports, paged_decode, paged_prefill

}  // namespace lantern
