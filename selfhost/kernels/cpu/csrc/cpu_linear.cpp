// Skinny bf16 GEMM over pre-packed weights (AVX512-BF16) with fused prologues (RMSNorm, SiLU*mul)
// and a fused residual add; the torch reference is F.linear on the same bf16 values.
#include "cpu_kernels.h"
#include "cpu_pool.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace lantern {
namespace {

constexpr int kGroup = 64;  // output rows per packed weight group (4 zmm of 16 fp32 lanes)

// Batch-1 GEMV: software prefetch this many bytes ahead in the weight stream into L1 (0: none),
// as in the AVX2 build: the hardware prefetcher restarts at every 4 KiB page and every call's new
// matrix; and kL2Factor times as far ahead into L2, which keeps more lines in flight than the
// core's L1 fill buffers allow (Xeon host, 01:39 UTC, three interleaved pairs of engine steps:
// 22.2 -> 19.9, 22.5 -> 21.4, 20.1 -> 20.1 ms).
constexpr int64_t kGemvPrefetchBytes = 1024;
constexpr int64_t kL2Factor = 8;

// Decode batches (1-64 rows, one task per weight group): while a task computes its group, it
// prefetches the group a thread is likely to claim next (this group + the pool's thread count:
// threads claim groups in turn). At 2-64 rows: into L2, spread over the group's K pairs (a group
// is read from memory by its first 4-row tile and from L2 by the rest, so without it memory sat
// idle through three quarters of a batch-16 GEMM and compute through the first quarter). At 1
// row: the GEMV's prefetch stream runs on into that group instead of into the group next to this
// one in memory, which the other thread is reading at the same time.

// Batch 1: spans of consecutive groups per task, this many per thread.
constexpr int64_t kGemvSpansPerThread = 4;

// Skinny GEMM: out[M, N] = x[M, K] @ W[N, K]^T, W packed as [N/64][K/2][64][2] bf16 (pairs of K
// for one dpbf16 lane), fp32 accumulation. Each weight group is read from memory once for all M.

// The byte `ahead` bytes past K pair kp of a group's weight stream, which continues past the
// group's end into `next` (the group this thread will likely claim next) where there is one.
inline const char* stream_at(const uint16_t* group, int64_t kpairs, const char* next, int64_t kp,
                             int64_t ahead) {
  const int64_t offset = kp * 2 * kGroup * 2 + ahead, end = kpairs * 2 * kGroup * 2;
  if (offset < end || next == nullptr) return reinterpret_cast<const char*>(group) + offset;
  return next + (offset - end);
}

// next: another group to prefetch: into L2, `lines_per_kp` lines per K pair (rows > 1), or
// (kPrefetch, batch 1) where the GEMV's prefetch stream runs past this group's end.
template <int MR, bool kPrefetch = false>
void gemm_tile(const uint16_t* x, int64_t ldx, const uint16_t* group, int64_t kp0, int64_t kpairs,
               bool accumulate, float* acc_out, int64_t ahead = 0, const char* next = nullptr,
               int lines_per_kp = 0) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j)
      acc[r][j] = accumulate ? _mm512_loadu_ps(acc_out + r * kGroup + j * 16) : _mm512_setzero_ps();
  const int32_t* xp = reinterpret_cast<const int32_t*>(x);
  for (int64_t kp = kp0; kp < kpairs; ++kp) {
    const uint16_t* w = group + kp * 2 * kGroup;
    for (int line = 0; line < lines_per_kp; ++line)
      _mm_prefetch(next + ((kp - kp0) * lines_per_kp + line) * 64, _MM_HINT_T1);
    if (kPrefetch) {  // this K pair's 4 lines, `ahead` bytes further down the weight stream
      const char* l1 = stream_at(group, kpairs, next, kp, ahead);
      const char* l2 = stream_at(group, kpairs, next, kp, kL2Factor * ahead);
      for (int line = 0; line < 4; ++line) _mm_prefetch(l1 + 64 * line, _MM_HINT_T0);
      for (int line = 0; line < 4; ++line) _mm_prefetch(l2 + 64 * line, _MM_HINT_T1);
    }
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

// acc[r][0, 64) (= or += when accumulate) over K pairs [kp0, kpairs) of one group, r < rows.
// next (may be null): a group of the same shape to bring into L2 meanwhile, a share per row tile.
void gemm_rows(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* group, int64_t kp0,
               int64_t kpairs, bool accumulate, float* acc, const uint16_t* next = nullptr) {
  if (rows == 1) {
    const int64_t ahead = kGemvPrefetchBytes;
    if (ahead > 0)
      return gemm_tile<1, true>(x, ldx, group, kp0, kpairs, accumulate, acc, ahead,
                                reinterpret_cast<const char*>(next));
  }
  // the next group is 4 * kpairs lines: row tile t fetches the run of lines(t) * kpairs of them
  // starting t * per_kp * kpairs lines in, lines(t) per K pair of its loop (none past the end)
  const int64_t tiles = (rows + 3) / 4;
  const int per_kp = next != nullptr && kp0 == 0 ? static_cast<int>((4 + tiles - 1) / tiles) : 0;
  auto lines = [&](int64_t tile) {
    return static_cast<int>(std::clamp<int64_t>(4 - tile * per_kp, 0, per_kp));
  };
  auto share = [&](int64_t tile) {
    return lines(tile) == 0 ? nullptr
                            : reinterpret_cast<const char*>(next) + tile * per_kp * kpairs * 64;
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    gemm_tile<4>(x + r * ldx, ldx, group, kp0, kpairs, accumulate, acc + r * kGroup, 0,
                 share(r / 4), lines(r / 4));
  const uint16_t* xr = x + r * ldx;
  float* ar = acc + r * kGroup;
  const char* nx = share(r / 4);
  const int nl = lines(r / 4);
  switch (rows - r) {
    case 3: gemm_tile<3>(xr, ldx, group, kp0, kpairs, accumulate, ar, 0, nx, nl); break;
    case 2: gemm_tile<2>(xr, ldx, group, kp0, kpairs, accumulate, ar, 0, nx, nl); break;
    case 1: gemm_tile<1>(xr, ldx, group, kp0, kpairs, accumulate, ar, 0, nx, nl); break;
    default: break;
  }
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
// AMX tiles for batches of at least kAmxMinRows rows (prefill chunks, decode batches): the
// packed group's K-pair rows are AMX B tiles as they are (16 K pairs x 16 columns x 2 bf16, row
// stride 256 bytes), x rows are A tiles (16 rows x 32 bf16, padded with zero rows). Fewer rows
// stay on dpbf16: for them the padded tiles are mostly empty.
constexpr int64_t kTileRows = 16, kTilePairs = 16;

// Linux grants AMX tile state to a process only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); where it refuses, the dpbf16 GEMM runs.
bool amx_permitted() {
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return granted;
}
// 8: on the Xeon host (16:30 UTC) a layer's four GEMMs took 0.32 ms on AMX vs 0.58 on dpbf16 for
// 8 rows, 0.28 vs 0.28 for 4, 0.28 vs 0.20 for 2.
constexpr int64_t kAmxMinRows = 8;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: C (16 rows x 16 fp32); 4, 5: A (16 rows x 32 bf16); 6, 7: B (16 K pairs x 16 x 2).
void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kTileRows;
  }
  _tile_loadconfig(&cfg);
}

// acc[r][0, 64) = x[r] . group over K pairs [0, kfull) (a multiple of 16) for r < rows (<= 64);
// x must be readable up to the next multiple of 16 rows. 2 x 2 C tiles per 32 rows x 32 columns.
void amx_group_rows(const uint16_t* x, int64_t ldx, int64_t rows, const uint16_t* group,
                    int64_t kfull, float* acc) {
  const int64_t lda = ldx * 2, ldb = kGroup * 2 * 2, ldc = kGroup * 4;  // bytes
  for (int64_t r = 0; r < rows; r += 2 * kTileRows) {
    const bool both = rows - r > kTileRows;
    const uint16_t* a = x + r * ldx;
    for (int64_t half = 0; half < 2; ++half) {
      const uint16_t* b = group + half * 64;  // columns [32 half, 32 half + 32) x 2 bf16
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t kp = 0; kp < kfull; kp += kTilePairs) {
        _tile_loadd(4, a + 2 * kp, lda);
        _tile_loadd(6, b + kp * 2 * kGroup, ldb);
        _tile_loadd(7, b + kp * 2 * kGroup + 32, ldb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (both) {
          _tile_loadd(5, a + kTileRows * ldx + 2 * kp, lda);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      float* c = acc + r * kGroup + half * 32;
      _tile_stored(0, c, ldc);
      _tile_stored(1, c + 16, ldc);
      if (both) {
        _tile_stored(2, c + kTileRows * kGroup, ldc);
        _tile_stored(3, c + kTileRows * kGroup + 16, ldc);
      }
    }
  }
}
#endif  // AMX

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

bool amx_used_for(int64_t rows) {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  return rows >= kAmxMinRows && amx_permitted();
#else
  (void)rows;
  return false;
#endif
}

// One task's rows [r0, r0 + count) of weight group `group` into acc[count][64] fp32.
void group_rows(const uint16_t* x, int64_t kp, int64_t count, const uint16_t* group,
                int64_t kpairs, bool amx, float* acc, const uint16_t* next) {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  if (amx) {
    const int64_t kfull = kpairs / kTilePairs * kTilePairs;
    amx_configure();
    amx_group_rows(x, kp, count, group, kfull, acc);
    _tile_release();
    if (kfull < kpairs) gemm_rows(x, kp, count, group, kfull, kpairs, kfull > 0, acc);
    return;
  }
#endif
  (void)amx;
  gemm_rows(x, kp, count, group, 0, kpairs, false, acc, next);
}

}  // namespace

namespace {

// out[0:width] = bf16(acc) widened to fp32: the values of linear()'s bf16 output, as fp32.
inline void store_row_fp32(const float* acc, int64_t width, float* out) {
  for (int64_t j = 0; j < width; j += 16) {
    const __mmask16 lanes = tail_mask(width, j);
    const __m512 v = _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(_mm512_loadu_ps(acc + j)));
    _mm512_mask_storeu_ps(out + j, lanes, v);
  }
}

}  // namespace

// prologue: "none" (x used as is), "rms_norm" (norm_weight, eps) or "silu_mul" (x = [gate | up]).
// fp32_out: the bf16-rounded results widened to fp32 (logits for the sampler; no residual).
torch::Tensor linear_impl(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                          const std::string& prologue,
                          const c10::optional<torch::Tensor>& norm_weight, double eps,
                          const c10::optional<torch::Tensor>& residual, bool fp32_out) {
  TORCH_CHECK(x.dtype() == torch::kBFloat16 && x.is_contiguous() && x.dim() == 2);
  const int64_t rows = x.size(0), groups = packed.size(0), kpairs = packed.size(1);
  const int64_t kp = 2 * kpairs;
  const bool amx = amx_used_for(rows);
  // AMX reads A tiles of 16 rows: the input is padded with zero rows to a multiple of 16.
  const int64_t padded_rows = amx ? (rows + 15) / 16 * 16 : rows;
  torch::Tensor xin = x;
  if (prologue != "none" || x.size(1) != kp || padded_rows != rows) {
    xin = torch::empty({padded_rows, kp}, x.options());
    if (prologue == "rms_norm") {
      rms_norm_rows(x, *norm_weight, eps, data_mut<uint16_t>(xin), kp);
    } else if (prologue == "silu_mul") {
      silu_mul_rows(x, data_mut<uint16_t>(xin), kp);
    } else {
      xin.narrow(0, 0, rows).zero_();
      xin.narrow(0, 0, rows).narrow(1, 0, x.size(1)).copy_(x);
    }
    if (padded_rows != rows) xin.narrow(0, rows, padded_rows - rows).zero_();
  }
  TORCH_CHECK(!residual || (residual->is_contiguous() && residual->size(1) == n_out));
  TORCH_CHECK(!(fp32_out && residual), "linear: fp32 output takes no residual");
  torch::Tensor out = torch::empty({rows, n_out}, x.options().dtype(fp32_out ? torch::kFloat32
                                                                              : torch::kBFloat16));
  const uint16_t* xs = data<uint16_t>(xin);
  const uint16_t* w = data<uint16_t>(packed);
  const uint16_t* res = residual ? data<uint16_t>(*residual) : nullptr;
  uint16_t* dst = fp32_out ? nullptr : data_mut<uint16_t>(out);
  float* dst32 = fp32_out ? out.data_ptr<float>() : nullptr;
  // One task = one weight group x up to 64 rows; row chunks of a group run back to back (its
  // weights stay in cache). Batch 1 (a GEMV): one task = a span of consecutive groups, so each
  // thread streams long runs of memory as a plain sum does (kGemvSpansPerThread spans per
  // thread; 0: one group per task, as for batches).
  const int64_t chunks = (rows + kGroup - 1) / kGroup, threads = at::get_num_threads();
  const int64_t spans = rows == 1 && !amx ? kGemvSpansPerThread * threads : 0;
  const int64_t span = spans > 0 ? std::max<int64_t>(1, (groups + spans - 1) / spans) : 1;
  const bool ahead = chunks == 1 && !amx;
  const int64_t group_elems = kpairs * 2 * kGroup;
  auto run_group = [&](int64_t g, int64_t r0, const uint16_t* next) {
    const int64_t count = std::min<int64_t>(kGroup, rows - r0);
    alignas(64) float acc[kGroup * kGroup];
    group_rows(xs + r0 * kp, kp, count, w + g * group_elems, kpairs, amx, acc, next);
    const int64_t n0 = g * kGroup, width = std::min<int64_t>(kGroup, n_out - n0);
    store_group(acc, kGroup, r0, count, n0, width, n_out, res, dst, dst32, store_row,
                store_row_fp32);
  };
  if (span > 1) {  // the next group of a span is this thread's next; the span's last has none
    parallel_tasks((groups + span - 1) / span, [&](int64_t task) {
      const int64_t end = std::min(groups, (task + 1) * span);
      for (int64_t g = task * span; g < end; ++g)
        run_group(g, 0, ahead && g + 1 < end ? w + (g + 1) * group_elems : nullptr);
    });
    return out;
  }
  parallel_tasks(groups * chunks, [&](int64_t task) {
    const int64_t g = task / chunks;
    run_group(g, (task % chunks) * kGroup,
              ahead && g + threads < groups ? w + (g + threads) * group_elems : nullptr);
  });
  return out;
}

}  // namespace lantern
