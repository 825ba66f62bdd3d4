// Shared pieces of the CPU kernels: element conversions, the AVX512 vector helpers (AVX512-BF16
// build) and the entry points bound in cpu_module.cpp, which both builds (cpu_*.cpp for
// AVX512-BF16, *_avx2.cpp for AVX2 + FMA) define. Built at engine start by selfhost/cpu_kernels.py.
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lantern {

inline float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline uint16_t float_to_bf16(float v) { return c10::BFloat16(v).x; }  // round to nearest even

// Storage element <-> fp32: bf16 travels as its uint16 bits, fp32 as itself.
inline float to_float(uint16_t v) { return bf16_to_float(v); }
inline float to_float(float v) { return v; }
template <typename T> T from_float(float v);
template <> inline uint16_t from_float<uint16_t>(float v) { return float_to_bf16(v); }
template <> inline float from_float<float>(float v) { return v; }

#if defined(__AVX512F__)
// 16 consecutive elements as fp32 lanes.
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

#endif  // __AVX512F__

template <typename T> const T* data(const torch::Tensor& t);
template <> inline const uint16_t* data<uint16_t>(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
template <> inline const float* data<float>(const torch::Tensor& t) { return t.data_ptr<float>(); }
template <typename T> T* data_mut(torch::Tensor& t) { return const_cast<T*>(data<T>(t)); }

#if defined(__AVX512F__)
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
#endif  // __AVX512F__

// cpu_linear.cpp / linear_avx2.cpp (bf16 only): the skinny GEMM of either build; fp32_out
// writes its bf16-rounded results widened to fp32 (no residual then).
torch::Tensor linear_impl(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                          const std::string& prologue,
                          const c10::optional<torch::Tensor>& norm_weight, double eps,
                          const c10::optional<torch::Tensor>& residual, bool fp32_out);
inline torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                            const std::string& prologue,
                            const c10::optional<torch::Tensor>& norm_weight, double eps,
                            const c10::optional<torch::Tensor>& residual) {
  return linear_impl(x, packed, n_out, prologue, norm_weight, eps, residual, false);
}
// Both builds' linear_impl: write out one weight group's accumulators (rows r0..r0+count of
// columns n0..n0+width, `stride` floats a row) as bf16 through `store(acc, width, res, out)`
// (plus the residual row, if any) or, with dst32, as fp32 through `store32(acc, width, out)`.
template <class Store, class Store32>
inline void store_group(const float* acc, int64_t stride, int64_t r0, int64_t count, int64_t n0,
                        int64_t width, int64_t n_out, const uint16_t* res, uint16_t* dst,
                        float* dst32, Store store, Store32 store32) {
  for (int64_t r = r0; r < r0 + count; ++r) {
    const float* row = acc + (r - r0) * stride;
    if (dst32 != nullptr)
      store32(row, width, dst32 + r * n_out + n0);
    else
      store(row, width, res ? res + r * n_out + n0 : nullptr, dst + r * n_out + n0);
  }
}
// linear() into fp32 [rows, n_out]: its bf16-rounded results widened (logits for the sampler;
// no residual), without a separate conversion pass (torch's .float() ran on its OpenMP pool).
inline torch::Tensor linear_logits(const torch::Tensor& x, const torch::Tensor& packed,
                                   int64_t n_out, const std::string& prologue,
                                   const c10::optional<torch::Tensor>& norm_weight, double eps) {
  return linear_impl(x, packed, n_out, prologue, norm_weight, eps, c10::nullopt, true);
}
// cpu_rope.cpp (bf16 and fp32, portable C++)
torch::Tensor rope_write_kv(const torch::Tensor& qkv, const torch::Tensor& positions,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const torch::Tensor& slots, torch::Tensor k_pool, torch::Tensor v_pool,
                            int64_t num_heads);
// cpu_attention.cpp / attention_avx2.cpp (bf16 and fp32)
bool paged_attention_supports(int64_t group, int64_t dim);
torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_pool,
                           const torch::Tensor& v_pool, const torch::Tensor& tables,
                           const torch::Tensor& lens, const torch::Tensor& shared, double scale);
torch::Tensor paged_prefill(const torch::Tensor& q, const torch::Tensor& k_pool,
                            const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                            int64_t context_len, double scale);

// cpu_sample.cpp (both builds): torch.argmax(logits, dim=-1) of contiguous fp32 [rows, vocab]
torch::Tensor argmax_rows(const torch::Tensor& logits);
// cpu_forward.cpp (both builds): one prefill chunk's attention, on the path this build runs best
torch::Tensor prefill_attention(const torch::Tensor& q, const torch::Tensor& k_pool,
                                const torch::Tensor& v_pool, const torch::Tensor& block_ids,
                                int64_t context_len, double scale);
// cpu_forward.cpp (both builds): every decoder layer of one forward (kernel_layer.py's sequence)
torch::Tensor forward_layers(torch::Tensor x, const std::vector<std::vector<torch::Tensor>>& layers,
                             const torch::Tensor& kv_cache, const torch::Tensor& positions,
                             const torch::Tensor& cos, const torch::Tensor& sin,
                             const torch::Tensor& slots, int64_t num_decodes,
                             const torch::Tensor& decode_tables, const torch::Tensor& decode_lens,
                             const torch::Tensor& shared, const std::vector<int64_t>& prefill_starts,
                             const std::vector<int64_t>& prefill_lens,
                             const std::vector<int64_t>& prefill_contexts,
                             const std::vector<torch::Tensor>& prefill_blocks,
                             const std::vector<int64_t>& shape, double eps);

}  // namespace lantern
