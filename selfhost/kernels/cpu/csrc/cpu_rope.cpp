// RoPE + KV write (portable C++, both builds): q and k rotated, k and v stored at their pool
// slots; bf16 or fp32 storage, fp32 math. The torch reference is selfhost/model.py's rotate.
#include "cpu_kernels.h"

namespace lantern {
namespace {

template <typename T>
torch::Tensor rope_typed(const torch::Tensor& qkv, const int64_t* pos, const float* cs,
                         const float* sn, const int64_t* slot, torch::Tensor& k_pool,
                         torch::Tensor& v_pool, int64_t num_heads) {
  const int64_t tokens = qkv.size(0), heads = qkv.size(1), dim = qkv.size(2), half = dim / 2;
  const int64_t kv = (heads - num_heads) / 2;
  torch::Tensor q = torch::empty({tokens, num_heads, dim}, qkv.options());
  const T* src = data<T>(qkv);
  T *qd = data_mut<T>(q), *kd = data_mut<T>(k_pool), *vd = data_mut<T>(v_pool);
  for (int64_t t = 0; t < tokens; ++t) {
    const float *c = cs + pos[t] * dim, *s = sn + pos[t] * dim;
    for (int64_t h = 0; h < num_heads + kv; ++h) {
      const T* x = src + (t * heads + h) * dim;
      T* o = h < num_heads ? qd + (t * num_heads + h) * dim
                           : kd + (slot[t] * kv + (h - num_heads)) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = to_float(x[i]), b = to_float(x[i + half]);
        o[i] = from_float<T>(a * c[i] - b * s[i]);
        o[i + half] = from_float<T>(b * c[i + half] + a * s[i + half]);
      }
    }
    std::memcpy(vd + slot[t] * kv * dim, src + (t * heads + num_heads + kv) * dim,
                kv * dim * sizeof(T));
  }
  return q;
}

}  // namespace

// RoPE (rotate-half, fp32 tables) on q and k, then k and v written into the pool at their slots.
// qkv [T, H + 2 KV, D]; cos/sin [max_pos, D] fp32; k_pool/v_pool [slots, KV, D] -> q [T, H, D].
torch::Tensor rope_write_kv(const torch::Tensor& qkv, const torch::Tensor& positions,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const torch::Tensor& slots, torch::Tensor k_pool, torch::Tensor v_pool,
                            int64_t num_heads) {
  TORCH_CHECK(qkv.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous());
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  if (qkv.scalar_type() == torch::kBFloat16)
    return rope_typed<uint16_t>(qkv, pos, cos.data_ptr<float>(), sin.data_ptr<float>(), slot,
                                k_pool, v_pool, num_heads);
  return rope_typed<float>(qkv, pos, cos.data_ptr<float>(), sin.data_ptr<float>(), slot, k_pool,
                           v_pool, num_heads);
}

}  // namespace lantern
