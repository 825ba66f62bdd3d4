// CPU fast path of the decode step (bf16, AVX512-BF16): a skinny GEMM over pre-packed weights with
// fused prologues (RMSNorm, SiLU*mul) and a fused residual; RoPE + KV write; paged decode attention
// that reads K/V in place through the block tables. Built at engine start by selfhost/cpu_kernels.py;
// selfhost/model.py and selfhost/attention.py hold the torch reference every kernel is tested against.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

namespace {

constexpr int kGroup = 64;  // output rows per packed weight group (4 zmm of 16 fp32 lanes)

inline float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline uint16_t float_to_bf16(float v) { return c10::BFloat16(v).x; }  // round to nearest even

inline const uint16_t* u16(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* u16_mut(torch::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

// exp on 16 fp32 lanes: 2^n * p(f), x = n ln2 + f, |f| <= ln2/2, degree-7 Taylor (rel. err < 1e-7).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), f);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  const float coeffs[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (float c : coeffs) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// ---------------------------------------------------------------------------------------------
// Skinny GEMM: out[M, N] = x[M, K] @ W[N, K]^T, W packed as [N/64][K/2][64][2] bf16 (pairs of K
// for one dpbf16 lane), fp32 accumulation. Each weight group is read from memory once for all M.

template <int MR>
void gemm_tile(const uint16_t* x, int64_t ldx, const uint16_t* group, int64_t kpairs, float* acc_out) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int32_t* xp = reinterpret_cast<const int32_t*>(x);
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const uint16_t* w = group + kp * 2 * kGroup;
    _mm_prefetch(reinterpret_cast<const char*>(w + 16 * 2 * kGroup), _MM_HINT_T0);
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(w);
    __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + 32);
    __m512bh w2 = (__m512bh)_mm512_loadu_si512(w + 64);
    __m512bh w3 = (__m512bh)_mm512_loadu_si512(w + 96);
    for (int r = 0; r < MR; ++r) {
      __m512bh xb = (__m512bh)_mm512_set1_epi32(xp[r * (ldx / 2) + kp]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, xb);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, xb);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], w2, xb);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], w3, xb);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc_out + r * kGroup + j * 16, acc[r][j]);
}

void gemm_rows(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* group, int64_t kpairs,
               float* acc) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) gemm_tile<4>(x + r * ldx, ldx, group, kpairs, acc + r * kGroup);
  switch (rows - r) {
    case 3: gemm_tile<3>(x + r * ldx, ldx, group, kpairs, acc + r * kGroup); break;
    case 2: gemm_tile<2>(x + r * ldx, ldx, group, kpairs, acc + r * kGroup); break;
    case 1: gemm_tile<1>(x + r * ldx, ldx, group, kpairs, acc + r * kGroup); break;
    default: break;
  }
}

// x [M, K] bf16 -> rms_norm(x) * weight, rounded once to bf16 (K padded with zeros to kp).
void rms_norm_rows(const torch::Tensor& x, const torch::Tensor& weight, double eps, uint16_t* out,
                   int64_t kp) {
  const int64_t rows = x.size(0), k = x.size(1);
  const uint16_t* src = u16(x);
  const uint16_t* w = u16(weight);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = src + r * k;
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += bf16_to_float(row[i]) * bf16_to_float(row[i]);
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(k) + static_cast<float>(eps));
    for (int64_t i = 0; i < k; ++i)
      out[r * kp + i] = float_to_bf16(bf16_to_float(row[i]) * inv * bf16_to_float(w[i]));
    for (int64_t i = k; i < kp; ++i) out[r * kp + i] = 0;
  }
}

// gate_up [M, 2I] bf16 -> silu(gate) * up [M, I], rounded once to bf16.
void silu_mul_rows(const torch::Tensor& gate_up, uint16_t* out, int64_t kp) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  const uint16_t* src = u16(gate_up);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* gate = src + r * 2 * inner;
    const uint16_t* up = gate + inner;
    int64_t i = 0;
    for (; i + 16 <= inner; i += 16) {
      __m512 g = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)(gate + i)));
      __m512 u = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)(up + i)));
      __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                 _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
      __m256bh res = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_mul_ps(g, sig), u));
      _mm256_storeu_si256((__m256i*)(out + r * kp + i), (__m256i)res);
    }
    for (; i < inner; ++i) {
      const float g = bf16_to_float(gate[i]);
      out[r * kp + i] = float_to_bf16(g / (1.0f + std::exp(-g)) * bf16_to_float(up[i]));
    }
    for (int64_t j = inner; j < kp; ++j) out[r * kp + j] = 0;
  }
}

// out[0:width] = bf16(acc + residual), 16 lanes at a time (residual may be null).
inline void store_row(const float* acc, int64_t width, const uint16_t* res, uint16_t* out) {
  for (int64_t j = 0; j < width; j += 16) {
    const __mmask16 lanes = width - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (width - j)) - 1);
    __m512 v = _mm512_loadu_ps(acc + j);
    if (res)
      v = _mm512_add_ps(v, _mm512_cvtpbh_ps((__m256bh)_mm256_maskz_loadu_epi16(lanes, res + j)));
    _mm256_mask_storeu_epi16(out + j, lanes, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// prologue: "none" (x used as is), "rms_norm" (norm_weight, eps) or "silu_mul" (x = [gate | up]).
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                     const std::string& prologue, const c10::optional<torch::Tensor>& norm_weight,
                     double eps, const c10::optional<torch::Tensor>& residual) {
  TORCH_CHECK(x.dtype() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), groups = packed.size(0), kpairs = packed.size(1);
  const int64_t kp = 2 * kpairs;
  torch::Tensor xin = x;
  if (prologue != "none" || x.size(1) != kp) {
    xin = torch::empty({rows, kp}, x.options());
    if (prologue == "rms_norm") {
      rms_norm_rows(x, *norm_weight, eps, u16_mut(xin), kp);
    } else if (prologue == "silu_mul") {
      silu_mul_rows(x, u16_mut(xin), kp);
    } else {
      xin.zero_();
      xin.narrow(1, 0, x.size(1)).copy_(x);
    }
  }
  TORCH_CHECK(!residual || (residual->is_contiguous() && residual->size(1) == n_out));
  torch::Tensor out = torch::empty({rows, n_out}, x.options());
  const uint16_t* xs = u16(xin);
  const uint16_t* w = u16(packed);
  const uint16_t* res = residual ? u16(*residual) : nullptr;
  uint16_t* dst = u16_mut(out);
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(rows * kGroup);
    for (int64_t g = begin; g < end; ++g) {
      gemm_rows(xs, kp, rows, w + g * kpairs * 2 * kGroup, kpairs, acc.data());
      const int64_t n0 = g * kGroup, width = std::min<int64_t>(kGroup, n_out - n0);
      for (int64_t r = 0; r < rows; ++r) store_row(acc.data() + r * kGroup, width,
                                                   res ? res + r * n_out + n0 : nullptr,
                                                   dst + r * n_out + n0);
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// RoPE (rotate-half, fp32 tables) on q and k, then k, v written into the pool at their slots.
// qkv [T, H + 2 KV, D]; cos/sin [max_pos, D] fp32; k_pool/v_pool [slots, KV, D]; returns q [T, H, D].
torch::Tensor rope_write_kv(const torch::Tensor& qkv, const torch::Tensor& positions,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const torch::Tensor& slots, torch::Tensor k_pool, torch::Tensor v_pool,
                            int64_t num_heads) {
  TORCH_CHECK(qkv.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t tokens = qkv.size(0), heads = qkv.size(1), dim = qkv.size(2), half = dim / 2;
  const int64_t kv = (heads - num_heads) / 2;
  torch::Tensor q = torch::empty({tokens, num_heads, dim}, qkv.options());
  const uint16_t* src = u16(qkv);
  const float* cs = cos.data_ptr<float>();
  const float* sn = sin.data_ptr<float>();
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  uint16_t* qd = u16_mut(q);
  uint16_t* kd = u16_mut(k_pool);
  uint16_t* vd = u16_mut(v_pool);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cs + pos[t] * dim;
    const float* s = sn + pos[t] * dim;
    for (int64_t h = 0; h < num_heads + kv; ++h) {
      const uint16_t* x = src + (t * heads + h) * dim;
      uint16_t* o = h < num_heads ? qd + (t * num_heads + h) * dim
                                  : kd + (slot[t] * kv + (h - num_heads)) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = bf16_to_float(x[i]), b = bf16_to_float(x[i + half]);
        o[i] = float_to_bf16(a * c[i] - b * s[i]);
        o[i + half] = float_to_bf16(b * c[i + half] + a * s[i + half]);
      }
    }
    std::memcpy(vd + slot[t] * kv * dim, src + (t * heads + num_heads + kv) * dim,
                kv * dim * sizeof(uint16_t));
  }
  return q;
}

// ---------------------------------------------------------------------------------------------
// Paged decode attention. Online softmax over 16-token blocks read in place from the pool; a
// block's K (or V) for all KV heads is 16 * KV * D contiguous values, read once per sequence.

struct RowState {
  float max = -INFINITY;
  float sum = 0.0f;
};

// The G query rows of one KV head attend to `count` tokens of one block. k, v point at token 0 of
// this head, `stride` values between tokens; acc [G][NC * 16] fp32 (kept in registers here).
template <int G, int NC>
void attend_block(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t stride,
                  int count, float scale, RowState* state, float* acc) {
  constexpr int D = NC * 16;
  const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
  alignas(64) float scores[G][16];
  __m512bh qv[G][NC / 2];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC / 2; ++c) qv[g][c] = (__m512bh)_mm512_loadu_si512(q + g * D + c * 32);
  for (int t = 0; t < count; ++t) {
    __m512bh kv[NC / 2];
    for (int c = 0; c < NC / 2; ++c) kv[c] = (__m512bh)_mm512_loadu_si512(k + t * stride + c * 32);
    for (int g = 0; g < G; ++g) {
      __m512 dot = _mm512_dpbf16_ps(_mm512_setzero_ps(), qv[g][0], kv[0]);
      for (int c = 1; c < NC / 2; ++c) dot = _mm512_dpbf16_ps(dot, qv[g][c], kv[c]);
      scores[g][t] = _mm512_reduce_add_ps(dot);
    }
  }
  __m512 acc_v[G][NC];
  alignas(64) float p[G][16];
  for (int g = 0; g < G; ++g) {
    __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(valid, scores[g]), _mm512_set1_ps(scale));
    const float top = std::max(state[g].max, _mm512_mask_reduce_max_ps(valid, s));
    const float alpha = std::exp(state[g].max - top);
    __m512 e = _mm512_maskz_mov_ps(valid, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(top))));
    state[g].sum = state[g].sum * alpha + _mm512_reduce_add_ps(e);
    state[g].max = top;
    _mm512_store_ps(p[g], e);
    for (int c = 0; c < NC; ++c)
      acc_v[g][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + g * D + c * 16), _mm512_set1_ps(alpha));
  }
  for (int t = 0; t < count; ++t) {
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c)
      vv[c] = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)(v + t * stride + c * 16)));
    for (int g = 0; g < G; ++g) {
      const __m512 pt = _mm512_set1_ps(p[g][t]);
      for (int c = 0; c < NC; ++c) acc_v[g][c] = _mm512_fmadd_ps(pt, vv[c], acc_v[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(acc + g * D + c * 16, acc_v[g][c]);
}

using BlockFn = void (*)(const uint16_t*, const uint16_t*, const uint16_t*, int64_t, int, float,
                         RowState*, float*);

template <int NC>
BlockFn block_fn_for_group(int64_t group) {
  switch (group) {
    case 1: return attend_block<1, NC>;
    case 2: return attend_block<2, NC>;
    case 3: return attend_block<3, NC>;
    case 4: return attend_block<4, NC>;
    case 8: return attend_block<8, NC>;
    default: return nullptr;
  }
}

BlockFn block_fn(int64_t group, int64_t dim) {
  switch (dim) {
    case 32: return block_fn_for_group<2>(group);
    case 64: return block_fn_for_group<4>(group);
    case 128: return block_fn_for_group<8>(group);
    default: return nullptr;
  }
}

bool paged_decode_supports(int64_t group, int64_t dim) { return block_fn(group, dim) != nullptr; }

// Sequences [b0, b1) as one task: shared blocks (every sequence's first `num_shared`) are read once
// for the whole chunk, then each sequence's own blocks. Rows are laid out as q: [B, H, D].
struct DecodeTask {
  const uint16_t *q, *k, *v;
  const int64_t *tables, *lens, *shared;
  int64_t heads, kv, dim, width, num_shared;
  float scale;
  BlockFn attend;
};

void run_decode_task(const DecodeTask& a, int64_t b0, int64_t b1, uint16_t* out) {
  const int64_t group = a.heads / a.kv, block = 16, stride = a.kv * a.dim;
  const int64_t rows = (b1 - b0) * a.heads;
  std::vector<RowState> state(rows);
  std::vector<float> acc(rows * a.dim, 0.0f);
  auto attend_all_heads = [&](int64_t b, int64_t block_id, int count) {
    const int64_t base = block_id * block * stride;
    for (int64_t h = 0; h < a.kv; ++h) {
      const int64_t row = (b - b0) * a.heads + h * group;
      a.attend(a.q + (b * a.heads + h * group) * a.dim, a.k + base + h * a.dim,
               a.v + base + h * a.dim, stride, count, a.scale, state.data() + row,
               acc.data() + row * a.dim);
    }
  };
  for (int64_t i = 0; i < a.num_shared; ++i)
    for (int64_t b = b0; b < b1; ++b) attend_all_heads(b, a.shared[i], 16);
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t i = 0; i * block < a.lens[b] && i < a.width; ++i)
      attend_all_heads(b, a.tables[b * a.width + i],
                       static_cast<int>(std::min<int64_t>(block, a.lens[b] - i * block)));
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* o = out + (b0 * a.heads + r) * a.dim;
    const float inv = 1.0f / state[r].sum;
    for (int64_t c = 0; c < a.dim; ++c) o[c] = float_to_bf16(acc[r * a.dim + c] * inv);
  }
}

// q [B, H, D]; k_pool/v_pool [num_blocks, 16, KV, D]; tables [B, n] int64 (own blocks);
// lens [B] int64 (own tokens); shared [P] int64 blocks every sequence starts with (full blocks).
torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale) {
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2), kv = k_pool.size(2);
  TORCH_CHECK(k_pool.size(1) == 16 && paged_decode_supports(heads / kv, dim),
              "paged_decode: block size 16, head dim 32/64/128, group 1-4 or 8");
  DecodeTask task{u16(q), u16(k_pool), u16(v_pool), tables.data_ptr<int64_t>(),
                  lens.data_ptr<int64_t>(), shared.data_ptr<int64_t>(), heads, kv, dim,
                  tables.size(1), shared.size(0), static_cast<float>(scale),
                  block_fn(heads / kv, dim)};
  // With a shared prefix, a chunk of sequences shares each pass over it (one chunk per thread).
  const int64_t threads = at::get_num_threads();
  const int64_t chunk = task.num_shared ? std::max<int64_t>(1, (batch + threads - 1) / threads) : 1;
  const int64_t chunks = (batch + chunk - 1) / chunk;
  torch::Tensor out = torch::empty_like(q);
  uint16_t* od = u16_mut(out);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c)
      run_decode_task(task, c * chunk, std::min(batch, (c + 1) * chunk), od);
  });
  return out;
}


// One prefill chunk: q [n, H, D] are the chunk's tokens at positions context_len - n .. context_len - 1
// (causal: each sees keys up to its own position); block_ids [num_blocks] int64 its block table.
torch::Tensor paged_prefill(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale) {
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv = k_pool.size(2);
  const int64_t group = heads / kv, stride = kv * dim, block = 16;
  TORCH_CHECK(k_pool.size(1) == block && paged_decode_supports(group, dim));
  const BlockFn attend = block_fn(group, dim);
  const uint16_t *qd = u16(q), *kd = u16(k_pool), *vd = u16(v_pool);
  const int64_t* ids = block_ids.data_ptr<int64_t>();
  torch::Tensor out = torch::empty_like(q);
  uint16_t* od = u16_mut(out);
  at::parallel_for(0, n * kv, 8, [&](int64_t begin, int64_t end) {
    std::vector<RowState> state(group);
    std::vector<float> acc(group * dim);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / kv, h = task % kv, seen = context_len - n + i + 1;
      std::fill(state.begin(), state.end(), RowState{});
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int64_t row = (i * heads + h * group) * dim;
      for (int64_t j = 0; j * block < seen; ++j) {
        const int64_t base = ids[j] * block * stride + h * dim;
        const int count = static_cast<int>(std::min<int64_t>(block, seen - j * block));
        attend(qd + row, kd + base, vd + base, stride, count, static_cast<float>(scale),
               state.data(), acc.data());
      }
      for (int64_t g = 0; g < group; ++g) {
        const float inv = 1.0f / state[g].sum;
        for (int64_t c = 0; c < dim; ++c) od[row + g * dim + c] = float_to_bf16(acc[g * dim + c] * inv);
      }
    }
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear);
  m.def("rope_write_kv", &rope_write_kv);
  m.def("paged_decode", &paged_decode);
  m.def("paged_prefill", &paged_prefill);
  m.def("paged_decode_supports", &paged_decode_supports);
}
