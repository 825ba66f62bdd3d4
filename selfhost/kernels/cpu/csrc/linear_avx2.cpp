// Skinny bf16 GEMM of the AVX2 + FMA build over the same packed weights as cpu_linear.cpp
// ([N/64][K/2][64][2] bf16), with the same fused prologues (RMSNorm, SiLU*mul) and residual add.
// bf16 pairs become fp32 by integer shifts and feed fp32 FMAs; torch reference: F.linear.
#include "cpu_avx2.h"
#include "cpu_pool.h"

#include <atomic>

namespace lantern {
namespace {

using namespace avx2;

constexpr int kGroup = 64;            // output rows per packed weight group
constexpr int64_t kPrologueRows = 8;  // rows per prologue task

// Batch-1 GEMV: software prefetch this many bytes ahead in the weight stream (0: none); the
// hardware prefetcher restarts at every 4 KiB page and every call's new matrix. 1 KiB: on the
// Zen 3 host a decode step's 120 GEMVs (cold) 19.9 -> 16.9 and 18.7 -> 17.1 ms (21:58 and 22:25
// UTC; 512 B to 4 KiB alike).
constexpr int64_t kGemvPrefetchBytes = 1024;

// acc_out[r][j*8 .. j*8+8) (row stride 64) = x[r] . W rows [j0*8 + j*8, +8) of one group, over all
// K pairs. x holds fp32 copies of the bf16 inputs (ldx floats per row); MR x NW accumulators.
template <int MR, int NW, bool kPrefetch = false>
void gemm_tile(const float* x, int64_t ldx, const uint16_t* group, int64_t kpairs, int j0,
               float* acc_out, int64_t ahead = 0) {
  __m256 acc[MR][NW];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NW; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const uint16_t* w = group + kp * 2 * kGroup + j0 * 16;
    if (kPrefetch)  // this K pair's 4 lines, `ahead` bytes further down the weight stream
      for (int line = 0; line < 4; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(w) + ahead + 64 * line, _MM_HINT_T0);
    __m256 xa[MR], xb[MR];
    for (int r = 0; r < MR; ++r) {
      xa[r] = _mm256_broadcast_ss(x + r * ldx + 2 * kp);
      xb[r] = _mm256_broadcast_ss(x + r * ldx + 2 * kp + 1);
    }
    for (int j = 0; j < NW; ++j) {
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 16));
      const __m256 wa = low_halves(pairs), wb = high_halves(pairs);
      for (int r = 0; r < MR; ++r) {
        acc[r][j] = _mm256_fmadd_ps(wa, xa[r], acc[r][j]);
        acc[r][j] = _mm256_fmadd_ps(wb, xb[r], acc[r][j]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NW; ++j) _mm256_storeu_ps(acc_out + r * kGroup + j * 8, acc[r][j]);
}

// Rows in pairs over half a group at a time (8 accumulators + 4 broadcasts fit the 16 ymm
// registers); a last odd row over the whole group.
void gemm_rows(const float* x, int64_t ldx, int64_t rows, const uint16_t* group, int64_t kpairs,
               float* acc) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    gemm_tile<2, 4>(x + r * ldx, ldx, group, kpairs, 0, acc + r * kGroup);
    gemm_tile<2, 4>(x + r * ldx, ldx, group, kpairs, 4, acc + r * kGroup + 32);
  }
  if (r == 0 && rows == 1) {
    const int64_t ahead = kGemvPrefetchBytes;
    if (ahead > 0) return gemm_tile<1, 8, true>(x, ldx, group, kpairs, 0, acc, ahead);
  }
  if (r < rows) gemm_tile<1, 8>(x + r * ldx, ldx, group, kpairs, 0, acc + r * kGroup);
}

// The GEMM's fp32 input rows [M, kp] from the prologue: "none" (x as is), "rms_norm" (rounded once
// to bf16, as the reference's bf16 F.rms_norm) or "silu_mul" (x = [gate | up], rounded once).
// Columns past K are zero. Rows are split across the pool.
void input_rows(const torch::Tensor& x, const std::string& prologue,
                const c10::optional<torch::Tensor>& norm_weight, double eps, float* out,
                int64_t kp) {
  const bool silu = prologue == "silu_mul", norm = prologue == "rms_norm";
  const int64_t rows = x.size(0), k = silu ? x.size(1) / 2 : x.size(1);
  const uint16_t* src = data<uint16_t>(x);
  const uint16_t* w = norm ? data<uint16_t>(*norm_weight) : nullptr;
  parallel_tasks((rows + kPrologueRows - 1) / kPrologueRows, [&](int64_t task) {
    for (int64_t r = task * kPrologueRows; r < std::min(rows, (task + 1) * kPrologueRows); ++r) {
      const uint16_t* row = src + r * x.size(1);
      float* dst = out + r * kp;
      int64_t i = 0;
      if (silu) {
        for (; i + 8 <= k; i += 8) {
          const __m256 g = load8(row + i), u = load8(row + k + i);
          const __m256 one = _mm256_set1_ps(1.0f);
          const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
          _mm256_storeu_ps(dst + i, round_bf16(_mm256_mul_ps(_mm256_mul_ps(g, sig), u)));
        }
        for (; i < k; ++i) {
          const float g = to_float(row[i]), u = to_float(row[k + i]);
          dst[i] = to_float(float_to_bf16(g / (1.0f + std::exp(-g)) * u));
        }
      } else if (norm) {
        __m256 squares = _mm256_setzero_ps();
        for (; i + 8 <= k; i += 8) squares = _mm256_fmadd_ps(load8(row + i), load8(row + i), squares);
        float sum = hsum(squares);
        for (; i < k; ++i) sum += to_float(row[i]) * to_float(row[i]);
        const float inv = 1.0f / std::sqrt(sum / static_cast<float>(k) + static_cast<float>(eps));
        for (i = 0; i + 8 <= k; i += 8)
          _mm256_storeu_ps(dst + i, round_bf16(_mm256_mul_ps(_mm256_mul_ps(load8(row + i), _mm256_set1_ps(inv)), load8(w + i))));
        for (; i < k; ++i) dst[i] = to_float(float_to_bf16(to_float(row[i]) * inv * to_float(w[i])));
      } else {
        for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, load8(row + i));
        for (; i < k; ++i) dst[i] = to_float(row[i]);
      }
      for (int64_t i = k; i < kp; ++i) dst[i] = 0.0f;
    }
  });
}

// out[0:width] = bf16(acc + residual) (residual may be null).
inline void store_row(const float* acc, int64_t width, const uint16_t* res, uint16_t* out) {
  int64_t j = 0;
  for (; j + 8 <= width; j += 8) {
    __m256 v = _mm256_loadu_ps(acc + j);
    if (res) v = _mm256_add_ps(v, load8(res + j));
    store8(out + j, v);
  }
  for (; j < width; ++j) out[j] = float_to_bf16(acc[j] + (res ? to_float(res[j]) : 0.0f));
}

// out[0:width] = bf16(acc) widened to fp32: the values of linear()'s bf16 output, as fp32.
inline void store_row_fp32(const float* acc, int64_t width, float* out) {
  int64_t j = 0;
  for (; j + 8 <= width; j += 8) _mm256_storeu_ps(out + j, round_bf16(_mm256_loadu_ps(acc + j)));
  for (; j < width; ++j) out[j] = to_float(float_to_bf16(acc[j]));
}

}  // namespace

// fp32_out: the bf16-rounded results widened to fp32 (logits for the sampler; no residual).
torch::Tensor linear_impl(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                          const std::string& prologue,
                          const c10::optional<torch::Tensor>& norm_weight, double eps,
                          const c10::optional<torch::Tensor>& residual, bool fp32_out) {
  TORCH_CHECK(x.dtype() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  TORCH_CHECK(prologue == "none" || prologue == "silu_mul" || (prologue == "rms_norm" && norm_weight),
              "linear: prologue none, rms_norm (with its weight) or silu_mul");
  const int64_t rows = x.size(0), groups = packed.size(0), kpairs = packed.size(1);
  const int64_t kp = 2 * kpairs;
  std::vector<float> xf(rows * kp);
  input_rows(x, prologue, norm_weight, eps, xf.data(), kp);
  TORCH_CHECK(!residual || (residual->is_contiguous() && residual->size(1) == n_out));
  TORCH_CHECK(!(fp32_out && residual), "linear: fp32 output takes no residual");
  torch::Tensor out = torch::empty({rows, n_out}, x.options().dtype(fp32_out ? torch::kFloat32
                                                                              : torch::kBFloat16));
  const uint16_t* w = data<uint16_t>(packed);
  const uint16_t* res = residual ? data<uint16_t>(*residual) : nullptr;
  uint16_t* dst = fp32_out ? nullptr : data_mut<uint16_t>(out);
  float* dst32 = fp32_out ? out.data_ptr<float>() : nullptr;
  // One task = one weight group x up to 64 rows; row chunks of a group run back to back.
  const int64_t chunks = (rows + kGroup - 1) / kGroup;
  parallel_tasks(groups * chunks, [&](int64_t task) {
    const int64_t g = task / chunks, r0 = (task % chunks) * kGroup;
    const int64_t count = std::min<int64_t>(kGroup, rows - r0);
    alignas(64) float acc[kGroup * kGroup];
    gemm_rows(xf.data() + r0 * kp, kp, count, w + g * kpairs * 2 * kGroup, kpairs, acc);
    const int64_t n0 = g * kGroup, width = std::min<int64_t>(kGroup, n_out - n0);
    store_group(acc, kGroup, r0, count, n0, width, n_out, res, dst, dst32, store_row,
                store_row_fp32);
  });
  return out;
}

}  // namespace lantern
