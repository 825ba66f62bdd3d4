// Skinny bf16 GEMM over pre-packed weights (AVX512-BF16) with fused prologues (RMSNorm, SiLU*mul)
// and a fused residual add; the torch reference is F.linear on the same bf16 values.
#include "cpu_kernels.h"
#include "cpu_pool.h"

namespace lantern {
namespace {

constexpr int kGroup = 64;  // output rows per packed weight group (4 zmm of 16 fp32 lanes)

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

constexpr int64_t kPrologueRows = 8;  // rows per prologue task (a prefill chunk: 64 tasks)

// Lanes [j, j + 16) of a row of `width` elements (the mask covers a partial tail).
inline __mmask16 tail_mask(int64_t width, int64_t j) {
  return width - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (width - j)) - 1);
}
inline __m512 load16_masked(const uint16_t* p, __mmask16 lanes) {
  return _mm512_cvtpbh_ps((__m256bh)_mm256_maskz_loadu_epi16(lanes, p));
}

// x [M, K] bf16 -> rms_norm(x) * weight, rounded once to bf16 (K padded with zeros to kp).
// Rows are split across the pool: on a 512-row prefill chunk a single-threaded prologue left the
// other cores idle for a noticeable part of each GEMM.
void rms_norm_rows(const torch::Tensor& x, const torch::Tensor& weight, double eps, uint16_t* out,
                   int64_t kp) {
  const int64_t rows = x.size(0), k = x.size(1);
  const uint16_t* src = data<uint16_t>(x);
  const uint16_t* w = data<uint16_t>(weight);
  parallel_tasks((rows + kPrologueRows - 1) / kPrologueRows, [&](int64_t task) {
    for (int64_t r = task * kPrologueRows; r < std::min(rows, (task + 1) * kPrologueRows); ++r) {
      const uint16_t* row = src + r * k;
      __m512 squares = _mm512_setzero_ps();
      for (int64_t i = 0; i < k; i += 16) {
        const __m512 v = load16_masked(row + i, tail_mask(k, i));
        squares = _mm512_fmadd_ps(v, v, squares);
      }
      const float mean = _mm512_reduce_add_ps(squares) / static_cast<float>(k);
      const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(mean + static_cast<float>(eps)));
      for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 lanes = tail_mask(k, i);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(load16_masked(row + i, lanes), inv),
                                       load16_masked(w + i, lanes));
        _mm256_mask_storeu_epi16(out + r * kp + i, lanes, (__m256i)_mm512_cvtneps_pbh(v));
      }
      for (int64_t i = k; i < kp; ++i) out[r * kp + i] = 0;
    }
  });
}

// gate_up [M, 2I] bf16 -> silu(gate) * up [M, I], rounded once to bf16; rows split as above.
void silu_mul_rows(const torch::Tensor& gate_up, uint16_t* out, int64_t kp) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  const uint16_t* src = data<uint16_t>(gate_up);
  parallel_tasks((rows + kPrologueRows - 1) / kPrologueRows, [&](int64_t task) {
    for (int64_t r = task * kPrologueRows; r < std::min(rows, (task + 1) * kPrologueRows); ++r) {
      const uint16_t* gate = src + r * 2 * inner;
      const uint16_t* up = gate + inner;
      for (int64_t i = 0; i < inner; i += 16) {
        const __mmask16 lanes = tail_mask(inner, i);
        const __m512 g = load16_masked(gate + i, lanes), u = load16_masked(up + i, lanes);
        const __m512 sig = _mm512_div_ps(
            _mm512_set1_ps(1.0f),
            _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        const __m256bh res = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_mul_ps(g, sig), u));
        _mm256_mask_storeu_epi16(out + r * kp + i, lanes, (__m256i)res);
      }
      for (int64_t j = inner; j < kp; ++j) out[r * kp + j] = 0;
    }
  });
}

// out[0:width] = bf16(acc + residual), 16 lanes at a time (residual may be null).
inline void store_row(const float* acc, int64_t width, const uint16_t* res, uint16_t* out) {
  for (int64_t j = 0; j < width; j += 16) {
    const __mmask16 lanes = tail_mask(width, j);
    __m512 v = _mm512_loadu_ps(acc + j);
    if (res)
      v = _mm512_add_ps(v, _mm512_cvtpbh_ps((__m256bh)_mm256_maskz_loadu_epi16(lanes, res + j)));
    _mm256_mask_storeu_epi16(out + j, lanes, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

}  // namespace

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
      rms_norm_rows(x, *norm_weight, eps, data_mut<uint16_t>(xin), kp);
    } else if (prologue == "silu_mul") {
      silu_mul_rows(x, data_mut<uint16_t>(xin), kp);
    } else {
      xin.zero_();
      xin.narrow(1, 0, x.size(1)).copy_(x);
    }
  }
  TORCH_CHECK(!residual || (residual->is_contiguous() && residual->size(1) == n_out));
  torch::Tensor out = torch::empty({rows, n_out}, x.options());
  const uint16_t* xs = data<uint16_t>(xin);
  const uint16_t* w = data<uint16_t>(packed);
  const uint16_t* res = residual ? data<uint16_t>(*residual) : nullptr;
  uint16_t* dst = data_mut<uint16_t>(out);
  // One task = one weight group x up to 64 rows; row chunks of a group run back to back (its
  // weights stay in cache).
  const int64_t chunks = (rows + kGroup - 1) / kGroup;
  parallel_tasks(groups * chunks, [&](int64_t task) {
    const int64_t g = task / chunks, r0 = (task % chunks) * kGroup;
    const int64_t count = std::min<int64_t>(kGroup, rows - r0);
    alignas(64) float acc[kGroup * kGroup];
    gemm_rows(xs + r0 * kp, kp, count, w + g * kpairs * 2 * kGroup, kpairs, acc);
    const int64_t n0 = g * kGroup, width = std::min<int64_t>(kGroup, n_out - n0);
    for (int64_t r = r0; r < r0 + count; ++r)
      store_row(acc + (r - r0) * kGroup, width, res ? res + r * n_out + n0 : nullptr,
                dst + r * n_out + n0);
  });
  return out;
}

}  // namespace lantern
