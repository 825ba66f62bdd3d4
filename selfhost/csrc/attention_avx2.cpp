// Paged attention of the AVX2 + FMA build, reading K/V in place through the block tables like
// cpu_attention.cpp: decodes (with the shared-prefix pass) and causal prefill chunks, bf16 or fp32
// storage, fp32 math, online softmax per 16-token block; torch reference: selfhost/attention.py.
#include "cpu_avx2.h"
#include "cpu_pool.h"

#include <memory>

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

struct DecodeTables {
  const int64_t *tables, *lens, *shared;
  int64_t width, num_shared;
};

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

template <typename T>
torch::Tensor decode_typed(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale) {
  const Pools<T> p = pools<T>(q, k_pool, v_pool, scale);
  const DecodeTables d{tables.data_ptr<int64_t>(), lens.data_ptr<int64_t>(),
                       shared.data_ptr<int64_t>(), tables.size(1), shared.size(0)};
  const int64_t batch = q.size(0), threads = at::get_num_threads();
  // As cpu_attention.cpp: a shared prefix, one chunk of sequences per thread; fewer sequences
  // than threads, one task per (sequence, KV head); otherwise one task per sequence.
  const int64_t chunk = d.num_shared ? std::max<int64_t>(1, (batch + threads - 1) / threads) : 1;
  const int64_t heads_split = (!d.num_shared && batch < threads) ? p.kv : 1;
  const int64_t chunks = (batch + chunk - 1) / chunk;
  torch::Tensor out = torch::empty_like(q);
  T* od = data_mut<T>(out);
  parallel_tasks(chunks * heads_split, [&](int64_t task) {
    const int64_t c = task / heads_split, h = task % heads_split, span = p.kv / heads_split;
    decode_chunk(p, d, c * chunk, std::min(batch, (c + 1) * chunk), h * span, (h + 1) * span, od);
  });
  return out;
}

template <typename T>
torch::Tensor prefill_typed(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale) {
  const Pools<T> p = pools<T>(q, k_pool, v_pool, scale);
  const int64_t n = q.size(0);
  const int64_t* ids = block_ids.data_ptr<int64_t>();
  torch::Tensor out = torch::empty_like(q);
  T* od = data_mut<T>(out);
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
  return out;
}

// bf16 prefill chunks of kTiledMinTokens+ tokens as register-tiled products: the per-token walk
// above converts each K/V row to fp32 once per query token and sums its dot products across
// lanes (hadd); here each KV head's keys are converted once per call, K transposed per block
// ([block][D][16 tokens] fp32: scores of 16 keys in two ymm, no lane sums) and V as [token][D]
// fp32. Then 6 query rows at a time (2 tokens x 3 heads of a group, say): their scores over every
// key they see into a row buffer, softmax over each row (max, exp, sum; fp32), O = P V with
// 3 rows x 32 dims of accumulators per pass.
constexpr int64_t kTiledMinTokens = 16;
constexpr int64_t kTileTokens = 8;  // query tokens per task
constexpr int kScoreRows = 6;       // rows per score tile: 6 x 2 ymm accumulators
constexpr int kWeighRows = 3;       // rows per P V pass: 3 x 4 ymm accumulators

struct TiledPrefill {
  const uint16_t *q, *k, *v;
  const int64_t* ids;
  int64_t n, context, heads, kv, dim, blocks;
  float scale;
  float *kt, *vf;  // [kv][blocks][dim][16], [kv][blocks * 16][dim] (zeros past the context)

  const uint16_t* row(int64_t token, int64_t h, const uint16_t* pool) const {
    return pool + ((ids[token / kBlock] * kBlock + token % kBlock) * kv + h) * dim;
  }

  void pack(int64_t h, int64_t b) const {
    float* kd = kt + (h * blocks + b) * dim * kBlock;
    float* vd = vf + (h * blocks + b) * kBlock * dim;
    const int64_t count = std::min(kBlock, context - b * kBlock);
    for (int64_t t = 0; t < kBlock; ++t) {
      if (t < count) {
        const uint16_t* kr = row(b * kBlock + t, h, k);
        const uint16_t* vr = row(b * kBlock + t, h, v);
        for (int64_t d = 0; d < dim; ++d) kd[d * kBlock + t] = to_float(kr[d]);
        for (int64_t d = 0; d < dim; d += 8) _mm256_storeu_ps(vd + t * dim + d, load8(vr + d));
      } else {
        for (int64_t d = 0; d < dim; ++d) kd[d * kBlock + t] = 0.0f;
        for (int64_t d = 0; d < dim; ++d) vd[t * dim + d] = 0.0f;
      }
    }
  }

  // s[r][16 keys of block b] = qs_r . k_t for MR rows (qs scaled, fp32, [MR][dim]).
  template <int MR, int D>
  void scores(const float* qs, int64_t h, int64_t b, float* s, int64_t lds) const {
    __m256 acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float* kb = kt + (h * blocks + b) * D * kBlock;
    for (int d = 0; d < D; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kb + d * kBlock), k1 = _mm256_loadu_ps(kb + d * kBlock + 8);
      for (int r = 0; r < MR; ++r) {
        const __m256 qq = _mm256_broadcast_ss(qs + r * D + d);
        acc[r][0] = _mm256_fmadd_ps(qq, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qq, k1, acc[r][1]);
      }
    }
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_ps(s + r * lds + b * kBlock, acc[r][0]);
      _mm256_storeu_ps(s + r * lds + b * kBlock + 8, acc[r][1]);
    }
  }

  // out_r[c0, c0 + 32) (fp32) = sum over keys [0, keys) of p_r[t] v_t, MR rows.
  template <int MR>
  void weigh(const float* p, int64_t ldp, int64_t h, int64_t keys, int64_t c0, float* out,
             int64_t ldo) const {
    __m256 acc[MR][4];
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
    const float* vb = vf + h * blocks * kBlock * dim + c0;
    for (int64_t t = 0; t < keys; ++t) {
      __m256 vv[4];
      for (int c = 0; c < 4; ++c) vv[c] = _mm256_loadu_ps(vb + t * dim + 8 * c);
      for (int r = 0; r < MR; ++r) {
        const __m256 pp = _mm256_broadcast_ss(p + r * ldp + t);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_fmadd_ps(pp, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(out + r * ldo + 8 * c, acc[r][c]);
  }

  // MR rows; limit[r] = keys row r sees (ascending); outputs bf16 rows.
  template <int MR, int D>
  void rows_tile(const float* qs, const int64_t* limit, int64_t h, uint16_t* const* out, float* s,
                 float* o) const {
    const int64_t nblk = (limit[MR - 1] + kBlock - 1) / kBlock, width = nblk * kBlock;
    for (int64_t b = 0; b < nblk; ++b) scores<MR, D>(qs, h, b, s, width);
    float inv[MR];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < MR; ++r) {
      float* sr = s + r * width;
      const int64_t lim = limit[r];
      auto valid = [&](int64_t t) {
        return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lim - t)), lane));
      };
      __m256 top = _mm256_set1_ps(-INFINITY);
      for (int64_t t = 0; t < lim; t += 8)
        top = _mm256_max_ps(top, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(sr + t), valid(t)));
      const __m256 m = _mm256_set1_ps(hmax(top));
      __m256 sum = _mm256_setzero_ps();
      for (int64_t t = 0; t < width; t += 8) {
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(sr + t), m)), valid(t));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(sr + t, e);
      }
      inv[r] = 1.0f / hsum(sum);
    }
    for (int r0 = 0; r0 < MR; r0 += kWeighRows) {
      const int rows = std::min(kWeighRows, MR - r0);
      const int64_t keys = std::min(width, limit[r0 + rows - 1]);
      for (int64_t c0 = 0; c0 < D; c0 += 32) {
        float* ob = o + r0 * D + c0;
        const float* pb = s + r0 * width;
        if (rows == 3) weigh<3>(pb, width, h, keys, c0, ob, D);
        else if (rows == 2) weigh<2>(pb, width, h, keys, c0, ob, D);
        else weigh<1>(pb, width, h, keys, c0, ob, D);
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int64_t c = 0; c < D; c += 8)
        store8(out[r] + c, _mm256_mul_ps(_mm256_loadu_ps(o + r * D + c), _mm256_set1_ps(inv[r])));
  }

  // Tokens [i0, i1) of KV head h: rows (token, head of the group) in token order.
  template <int D>
  void tile(int64_t h, int64_t i0, int64_t i1, uint16_t* od) const {
    const int64_t group = heads / kv, total = (i1 - i0) * group;
    const int64_t width = blocks * kBlock;
    thread_local std::vector<float> s_buf;
    if (static_cast<int64_t>(s_buf.size()) < kScoreRows * (width + 2 * D))
      s_buf.resize(kScoreRows * (width + 2 * D));
    float* s = s_buf.data();
    float* qs = s + kScoreRows * width;
    float* o = qs + kScoreRows * D;
    for (int64_t r0 = 0; r0 < total; r0 += kScoreRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kScoreRows, total - r0));
      uint16_t* outs[kScoreRows];
      int64_t limit[kScoreRows];
      for (int r = 0; r < mr; ++r) {
        const int64_t token = i0 + (r0 + r) / group, head = h * group + (r0 + r) % group;
        const uint16_t* qr = q + (token * heads + head) * dim;
        for (int64_t d = 0; d < D; d += 8)
          _mm256_storeu_ps(qs + r * D + d, _mm256_mul_ps(load8(qr + d), _mm256_set1_ps(scale)));
        outs[r] = od + (token * heads + head) * dim;
        limit[r] = context - n + token + 1;
      }
      switch (mr) {
        case 6: rows_tile<6, D>(qs, limit, h, outs, s, o); break;
        case 5: rows_tile<5, D>(qs, limit, h, outs, s, o); break;
        case 4: rows_tile<4, D>(qs, limit, h, outs, s, o); break;
        case 3: rows_tile<3, D>(qs, limit, h, outs, s, o); break;
        case 2: rows_tile<2, D>(qs, limit, h, outs, s, o); break;
        default: rows_tile<1, D>(qs, limit, h, outs, s, o); break;
      }
    }
  }
};

torch::Tensor prefill_tiled(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale) {
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv = k_pool.size(2);
  const int64_t blocks = (context_len + kBlock - 1) / kBlock;
  TORCH_CHECK(block_ids.size(0) >= blocks, "paged_prefill: fewer blocks than the context needs");
  std::unique_ptr<float[]> packed(new float[2 * kv * blocks * kBlock * dim]);
  torch::Tensor out = torch::empty_like(q);
  const TiledPrefill t{data<uint16_t>(q), data<uint16_t>(k_pool), data<uint16_t>(v_pool),
                       block_ids.data_ptr<int64_t>(), n, context_len, heads, kv, dim, blocks,
                       static_cast<float>(scale), packed.get(),
                       packed.get() + kv * blocks * kBlock * dim};
  constexpr int64_t kPackBlocks = 4;
  const int64_t pack_chunks = (blocks + kPackBlocks - 1) / kPackBlocks;
  parallel_tasks(kv * pack_chunks, [&](int64_t task) {
    const int64_t h = task / pack_chunks, b0 = (task % pack_chunks) * kPackBlocks;
    for (int64_t b = b0; b < std::min(blocks, b0 + kPackBlocks); ++b) t.pack(h, b);
  });
  uint16_t* od = data_mut<uint16_t>(out);
  const int64_t tiles = (n + kTileTokens - 1) / kTileTokens;
  parallel_tasks(kv * tiles, [&](int64_t task) {  // the last tiles see the most keys: first
    const int64_t tile = tiles - 1 - task / kv, h = task % kv;
    const int64_t i0 = tile * kTileTokens, i1 = std::min(n, i0 + kTileTokens);
    switch (dim) {
      case 32: t.tile<32>(h, i0, i1, od); break;
      case 64: t.tile<64>(h, i0, i1, od); break;
      default: t.tile<128>(h, i0, i1, od); break;
    }
  });
  return out;
}

}  // namespace

bool paged_attention_supports(int64_t group, int64_t dim) {
  return block_fn<float>(group, dim) != nullptr;
}

torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale) {
  if (q.scalar_type() == torch::kBFloat16)
    return decode_typed<uint16_t>(q, k_pool, v_pool, tables, lens, shared, scale);
  TORCH_CHECK(q.scalar_type() == torch::kFloat32, "paged_decode: bf16 or fp32");
  return decode_typed<float>(q, k_pool, v_pool, tables, lens, shared, scale);
}

torch::Tensor paged_prefill(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale) {
  if (q.scalar_type() == torch::kBFloat16) {
    if (q.size(0) >= kTiledMinTokens)
      return prefill_tiled(q, k_pool, v_pool, block_ids, context_len, scale);
    return prefill_typed<uint16_t>(q, k_pool, v_pool, block_ids, context_len, scale);
  }
  TORCH_CHECK(q.scalar_type() == torch::kFloat32, "paged_prefill: bf16 or fp32");
  return prefill_typed<float>(q, k_pool, v_pool, block_ids, context_len, scale);
}

}  // namespace lantern
