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
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) {
          float v = acc[r * kGroup + j];
          if (res) v += bf16_to_float(res[r * n_out + n0 + j]);
          dst[r * n_out + n0 + j] = float_to_bf16(v);
        }
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
// Paged decode attention. Online softmax over 16-token blocks read in place from the pool.

struct RowState {
  float max = -INFINITY;
  float sum = 0.0f;
};

// q rows [R][D] bf16 attend to `count` tokens of one block; k, v point at token 0 of this head,
// `stride` elements between tokens. acc [R][D] fp32, p scratch [R][16].
void attend_block(const uint16_t* const* q, int rows, const uint16_t* k, const uint16_t* v,
                  int64_t stride, int count, int64_t dim, float scale, RowState* state, float* acc,
                  float* p) {
  const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
  alignas(64) float scores[16];
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < count; ++t) {
      __m512 dot = _mm512_setzero_ps();
      for (int64_t c = 0; c < dim; c += 32)
        dot = _mm512_dpbf16_ps(dot, (__m512bh)_mm512_loadu_si512(q[r] + c),
                               (__m512bh)_mm512_loadu_si512(k + t * stride + c));
      scores[t] = _mm512_reduce_add_ps(dot) * scale;
    }
    __m512 s = _mm512_maskz_loadu_ps(valid, scores);
    const float top = std::max(state[r].max, _mm512_mask_reduce_max_ps(valid, s));
    const float alpha = std::exp(state[r].max - top);
    __m512 e = _mm512_maskz_mov_ps(valid, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(top))));
    state[r].sum = state[r].sum * alpha + _mm512_reduce_add_ps(e);
    state[r].max = top;
    _mm512_storeu_ps(p + r * 16, e);
    for (int64_t c = 0; c < dim; c += 16)
      _mm512_storeu_ps(acc + r * dim + c,
                       _mm512_mul_ps(_mm512_loadu_ps(acc + r * dim + c), _mm512_set1_ps(alpha)));
  }
  for (int t = 0; t < count; ++t) {
    const uint16_t* vt = v + t * stride;
    for (int64_t c = 0; c < dim; c += 16) {
      __m512 vv = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)(vt + c)));
      for (int r = 0; r < rows; ++r) {
        float* a = acc + r * dim + c;
        _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_set1_ps(p[r * 16 + t]), vv, _mm512_loadu_ps(a)));
      }
    }
  }
}

// q [B, H, D]; k_pool/v_pool [num_blocks, block_size, KV, D]; tables [B, n] int64 (own blocks);
// lens [B] int64 (own tokens); shared [P] int64 blocks every sequence starts with (full blocks).
torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale) {
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t block = k_pool.size(1), kv = k_pool.size(2), group = heads / kv;
  TORCH_CHECK(block == 16 && dim % 32 == 0, "paged_decode: block size 16, head dim % 32");
  const int64_t stride = kv * dim, num_shared = shared.size(0), width = tables.size(1);
  // With a shared prefix, several sequences share one pass over it (their rows stacked).
  const int64_t chunk = num_shared ? std::max<int64_t>(1, (batch + 3) / 4) : 1;
  const int64_t chunks = (batch + chunk - 1) / chunk;
  torch::Tensor out = torch::empty_like(q);
  const uint16_t *qd = u16(q), *kd = u16(k_pool), *vd = u16(v_pool);
  const int64_t *tab = tables.data_ptr<int64_t>(), *len = lens.data_ptr<int64_t>();
  const int64_t* sh = shared.data_ptr<int64_t>();
  uint16_t* od = u16_mut(out);
  at::parallel_for(0, chunks * kv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task % kv, b0 = (task / kv) * chunk, b1 = std::min(batch, b0 + chunk);
      const int rows = static_cast<int>((b1 - b0) * group);
      std::vector<const uint16_t*> qrows(rows);
      for (int r = 0; r < rows; ++r)
        qrows[r] = qd + ((b0 + r / group) * heads + h * group + r % group) * dim;
      std::vector<RowState> state(rows);
      std::vector<float> acc(rows * dim, 0.0f), p(rows * 16);
      for (int64_t i = 0; i < num_shared; ++i) {
        const int64_t base = (sh[i] * block * kv + h) * dim;
        attend_block(qrows.data(), rows, kd + base, vd + base, stride, 16, dim, scale,
                     state.data(), acc.data(), p.data());
      }
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = (b - b0) * group;
        for (int64_t i = 0; i * block < len[b] && i < width; ++i) {
          const int count = static_cast<int>(std::min<int64_t>(block, len[b] - i * block));
          const int64_t base = (tab[b * width + i] * block * kv + h) * dim;
          attend_block(qrows.data() + r0, group, kd + base, vd + base, stride, count, dim, scale,
                       state.data() + r0, acc.data() + r0 * dim, p.data() + r0 * 16);
        }
      }
      for (int r = 0; r < rows; ++r) {
        uint16_t* o = od + ((b0 + r / group) * heads + h * group + r % group) * dim;
        const float inv = 1.0f / state[r].sum;
        for (int64_t c = 0; c < dim; ++c) o[c] = float_to_bf16(acc[r * dim + c] * inv);
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
}
