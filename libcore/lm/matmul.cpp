#include "lm/matmul.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>
#include <type_traits>

#include "lm/matmul_q8.hpp"
#include "num/half.hpp"
#include "util/block_pool.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

namespace {

/// The fixed final reduction of eight lanes.
inline float reduce8(const float* l) noexcept {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// ---- portable path: scalar code that performs exactly the AVX2 path's operations ------------

/// bfloat16 bits, a distinct type from f16's std::uint16_t so that overloads pick the widening.
struct Bf16 {
  std::uint16_t bits;
};
static_assert(sizeof(Bf16) == 2);

inline float widen(float w) noexcept { return w; }
inline float widen(std::uint16_t h) noexcept { return num::f16_to_f32(h); }
inline float widen(Bf16 h) noexcept { return num::bf16_to_f32(h.bits); }

template <class WT>
void tile_portable(const float* x, int R, int K, int ldx, const WT* W, int o0, int O1, float* y, int ldy) {
  for (int r = 0; r < R; ++r) {
    const float* xr = x + std::size_t(r) * ldx;
    for (int o = o0; o < O1; ++o) {
      const WT* w = W + std::size_t(o) * K;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int k = 0;
      for (; k + 8 <= K; k += 8)
        for (int j = 0; j < 8; ++j) acc[j] = std::fma(xr[k + j], widen(w[k + j]), acc[j]);
      if (k < K)
        for (int j = 0; j < 8; ++j)
          acc[j] = k + j < K ? std::fma(xr[k + j], widen(w[k + j]), acc[j]) : std::fma(0.0f, 0.0f, acc[j]);
      y[std::size_t(r) * ldy + o] = reduce8(acc);
    }
  }
}

// ---- bf16-dot, portable: AVX512-BF16's arithmetic in scalar code ---------------------------

/// f rounded to bfloat16 (nearest, ties to even), a denormal flushed to a zero of its sign (the
/// hardware treats denormal inputs as zero, so none reaches it).
inline std::uint16_t bf16_dot_of(float f) noexcept {
  const std::uint16_t h = num::f32_to_bf16(f);
  return (h & 0x7f80u) == 0 ? static_cast<std::uint16_t>(h & 0x8000u) : h;
}

/// v with a denormal flushed to a zero of its sign (the hardware's results).
inline float flush_denormal(float v) noexcept {
  return std::fabs(v) < std::numeric_limits<float>::min() ? std::copysign(0.0f, v) : v;
}

/// Columns [o0, O1) of bf16-dot weights W [O, K] against R rows of bfloat16 x (xb, [R, K]):
/// lane j of chunk c takes the pair k = 16c + 2j, 16c + 2j + 1 — odd element first, each step one
/// exactly rounded fused multiply-add of exact bf16 products (measured bitwise equal to
/// VDPBF16PS on 3.2M random lanes) — the last chunk zero-padded, then the fixed 8-lane sum.
void tile_bf16dot_portable(const std::uint16_t* xb, int R, int K, const std::uint16_t* W, int o0, int O1, float* y,
                           int ldy) {
  auto val = [K](const std::uint16_t* v, int k) { return k < K ? num::bf16_to_f32(v[k]) : 0.0f; };
  for (int r = 0; r < R; ++r) {
    const std::uint16_t* xr = xb + std::size_t(r) * K;
    for (int o = o0; o < O1; ++o) {
      const std::uint16_t* w = W + std::size_t(o) * K;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < K; k += 16)
        for (int j = 0; j < 8; ++j) {
          const int e = k + 2 * j;
          acc[j] = flush_denormal(std::fma(val(xr, e + 1), val(w, e + 1), acc[j]));
          acc[j] = flush_denormal(std::fma(val(xr, e), val(w, e), acc[j]));
        }
      y[std::size_t(r) * ldy + o] = reduce8(acc);
    }
  }
}

// ---- AVX2 + FMA path ------------------------------------------------------------------------

__attribute__((target("avx2,fma,f16c"))) inline __m256i tail_mask(int rem) {
  alignas(32) static const int m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 - rem));
}

__attribute__((target("avx2,fma,f16c"))) inline float reduce_vec(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return reduce8(l);
}

// Register tile: 3 rows x 4 columns = 12 accumulators (+4 weight vectors) of the 16 ymm
// registers; measured ~45 GMAC/s per core, near the FMA peak (3x4 beat 2x4, 4x2, 4x3).
constexpr int RTILE = 3, CTILE = 4;

/// Eight weights widened to float32 (f16 -> f32 is exact, so both storages give the same bits).
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const Bf16* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
/// The last rem < 8 weights, zero-padded (as the masked x load).
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_tail(const float* p, int rem) {
  return _mm256_maskload_ps(p, tail_mask(rem));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_tail(const std::uint16_t* p, int rem) {
  alignas(16) std::uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(b, p, sizeof(std::uint16_t) * rem);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_tail(const Bf16* p, int rem) {
  alignas(16) Bf16 b[8] = {};
  std::memcpy(b, p, sizeof(Bf16) * rem);
  return load8(b);
}

/// Software prefetch of the weight rows two column tiles ahead, into L2 (hint T1), for f16
/// weights only.  Measured on the 2-core EPYC (Zen 4) with 32000 x 768 weights in DRAM, one
/// row: f16 streaming rose from ~10 to ~17-22 GB/s (the hardware prefetcher alone keeps too
/// few lines in flight for 8 rows each read 16 bytes per step); f32 weights did not gain
/// (and lost ~10% when L3-resident), so they keep the hardware prefetcher alone.  T0 thrashed
/// L1 at K = 2048.  Prefetching moves no data into registers: the arithmetic is unchanged.
template <class WT> constexpr bool kPrefetch = sizeof(WT) == 2;
constexpr int kPrefetchTiles = 2;

/// RT rows x CT columns register tile; every (r, o) has its own 8-lane accumulator.  When
/// `ahead` is not null (and kPrefetch<WT>, CT >= 4), the CT weight rows starting there are
/// prefetched at the pace the tile's own rows are read.
template <int RT, int CT, class WT>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const float* x, int ldx, int K, const WT* W,
                                                    int o, float* y, int ldy, const WT* ahead = nullptr) {
  __m256 acc[RT][CT];
  for (int r = 0; r < RT; ++r)
    for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_setzero_ps();
  const WT* w[CT];
  for (int c = 0; c < CT; ++c) w[c] = W + std::size_t(o + c) * K;
  // CT rows of K weights are contiguous: CT * 8 weights (CT * 16 bytes for f16) per step.
  const char* pf = kPrefetch<WT> && CT >= 4 ? reinterpret_cast<const char*>(ahead) : nullptr;
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    if constexpr (kPrefetch<WT> && CT >= 4)
      if (pf) {
        for (int i = 0; i < CT * int(sizeof(WT)) * 8 / 64; ++i) _mm_prefetch(pf + 64 * i, _MM_HINT_T1);
        pf += CT * sizeof(WT) * 8;
      }
    __m256 wv[CT];
    for (int c = 0; c < CT; ++c) wv[c] = load8(w[c] + k);
    for (int r = 0; r < RT; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + std::size_t(r) * ldx + k);
      for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  if (k < K) {
    const __m256i m = tail_mask(K - k);
    __m256 wv[CT];
    for (int c = 0; c < CT; ++c) wv[c] = load_tail(w[c] + k, K - k);
    for (int r = 0; r < RT; ++r) {
      const __m256 xv = _mm256_maskload_ps(x + std::size_t(r) * ldx + k, m);
      for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < RT; ++r) {
    float* yr = y + std::size_t(r) * ldy + o;
    if constexpr (CT % 4 == 0) {
      // Four accumulators at once: two hadd levels give (x0+x1)+(x2+x3) in the low and
      // (x4+x5)+(x6+x7) in the high 128 bits, whose sum is exactly reduce8 of each.
      for (int c = 0; c < CT; c += 4) {
        const __m256 ab = _mm256_hadd_ps(acc[r][c], acc[r][c + 1]);
        const __m256 cd = _mm256_hadd_ps(acc[r][c + 2], acc[r][c + 3]);
        const __m256 abcd = _mm256_hadd_ps(ab, cd);
        _mm_storeu_ps(yr + c, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
      }
    } else {
      for (int c = 0; c < CT; ++c) yr[c] = reduce_vec(acc[r][c]);
    }
  }
}

/// The rows kPrefetchTiles column tiles of width CT after column o, or null past the last
/// column (O) of the matrix.
template <int CT, class WT>
inline const WT* ahead_of(const WT* W, int K, int o, int O) noexcept {
  const int a = o + kPrefetchTiles * CT;
  return a + CT <= O ? W + std::size_t(a) * K : nullptr;
}

/// Columns [o, o + CT) against every row: the CT weight rows stay in L1 while all row tiles
/// pass; the first row tile prefetches the tile kPrefetchTiles ahead (O: the matrix's columns).
template <int CT, class WT>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const float* x, int R, int ldx, int K, const WT* W,
                                                    int o, int O, float* y, int ldy) {
  // 3-row tiles; a remainder of one row after at least one tile becomes two 2-row tiles
  // (a lone row keeps only CT accumulators busy).  The arithmetic per (r, o) is unchanged.
  int full = R / RTILE, rem = R % RTILE;
  if (rem == 1 && full >= 1) { --full; rem = 4; }
  const WT* ahead = ahead_of<CT>(W, K, o, O);
  int r = 0;
  for (int i = 0; i < full; ++i, r += RTILE, ahead = nullptr)
    tile_avx2<RTILE, CT>(x + std::size_t(r) * ldx, ldx, K, W, o, y + std::size_t(r) * ldy, ldy, ahead);
  for (; rem >= 2; rem -= 2, r += 2, ahead = nullptr)
    tile_avx2<2, CT>(x + std::size_t(r) * ldx, ldx, K, W, o, y + std::size_t(r) * ldy, ldy, ahead);
  if (rem == 1) tile_avx2<1, CT>(x + std::size_t(r) * ldx, ldx, K, W, o, y + std::size_t(r) * ldy, ldy, ahead);
}

/// out[j] = the 8-lane dot of q with keys[j] (length K) for eight keys at once (one accumulator
/// each, reduced four at a time as tile_avx2 does), so each equals dot8(q, keys[j], K).
__attribute__((target("avx2,fma,f16c"))) void dot8_keys8(const float* q, const float* const* keys, int K, float* out) {
  __m256 acc[8];
  for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 qv = _mm256_loadu_ps(q + k);
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys[c] + k), acc[c]);
  }
  if (k < K) {
    const __m256i m = tail_mask(K - k);
    const __m256 qv = _mm256_maskload_ps(q + k, m);
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(keys[c] + k, m), acc[c]);
  }
  for (int c = 0; c < 8; c += 4) {
    const __m256 ab = _mm256_hadd_ps(acc[c], acc[c + 1]);
    const __m256 cd = _mm256_hadd_ps(acc[c + 2], acc[c + 3]);
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    _mm_storeu_ps(out + c, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
}

/// Columns [o0, O1) of a matrix with O columns against all R rows.
template <class WT>
__attribute__((target("avx2,fma,f16c"))) void block_avx2(const float* x, int R, int K, int ldx, const WT* W,
                                                     int o0, int O1, int O, float* y, int ldy) {
  int o = o0;
  if (R == 1)  // a single row needs eight columns in flight to hide the FMA latency
    for (; o + 8 <= O1; o += 8) tile_avx2<1, 8>(x, ldx, K, W, o, y, ldy, ahead_of<8>(W, K, o, O));
  for (; o + CTILE <= O1; o += CTILE) rows_avx2<CTILE>(x, R, ldx, K, W, o, O, y, ldy);
  for (; o < O1; ++o) rows_avx2<1>(x, R, ldx, K, W, o, O, y, ldy);
}

/// Eight weights k = 8j..8j+8 of a Q8_0 / Q4_0 block (scale d) widened to float32: d * q, as
/// dequantize_row (one rounding each).
__attribute__((target("avx2,fma,f16c"))) inline __m256 qchunk8(WeightType wt, const std::uint8_t* blk, int j, __m256 d) {
  if (wt == WeightType::q8_0) {
    const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j)));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
  }
  __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * (j & 1)));
  if (j >= 2) q = _mm_srli_epi16(q, 4);
  q = _mm_and_si128(q, _mm_set1_epi8(0x0f));
  const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), _mm256_set1_epi32(8));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
}

/// RT rows x CT columns of quantised weights (rows of rb bytes at W, K a multiple of 32) with the
/// AVX2 tile's arithmetic, each weight chunk widened in registers (no scratch): the bits of
/// tile_avx2 on the dequantised rows.
template <int RT, int CT>
__attribute__((target("avx2,fma,f16c"))) void tile_quant_avx2(const float* x, int ldx, int K, const std::uint8_t* W,
                                                          std::size_t rb, WeightType wt, int o, float* y, int ldy) {
  __m256 acc[RT][CT];
  for (int r = 0; r < RT; ++r)
    for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_setzero_ps();
  const std::size_t bs = wt == WeightType::q8_0 ? 34 : 18;
  for (int b = 0; b < K / 32; ++b) {
    const std::uint8_t* blk[CT];
    __m256 d[CT];
    for (int c = 0; c < CT; ++c) {
      blk[c] = W + std::size_t(o + c) * rb + b * bs;
      std::uint16_t h;
      std::memcpy(&h, blk[c], 2);
      d[c] = _mm256_set1_ps(_cvtsh_ss(h));
    }
    for (int j = 0; j < 4; ++j) {
      __m256 wv[CT];
      for (int c = 0; c < CT; ++c) wv[c] = qchunk8(wt, blk[c], j, d[c]);
      for (int r = 0; r < RT; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + std::size_t(r) * ldx + 32 * b + 8 * j);
        for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < RT; ++r)
    for (int c = 0; c < CT; ++c) y[std::size_t(r) * ldy + o + c] = reduce_vec(acc[r][c]);
}

/// Quantised columns [o0, o1) against one to three rows, fused (tile_quant_avx2): 8-column tiles
/// for one row, 4-column tiles for two or three, single columns at the end.
void block_quant_avx2(const float* x, int R, int K, int ldx, const std::uint8_t* W, std::size_t rb, WeightType wt,
                      int o0, int o1, float* y, int ldy) {
  for (int r = 0; r < R;) {
    const float* xr = x + std::size_t(r) * ldx;
    float* yr = y + std::size_t(r) * ldy;
    int o = o0;
    if (R - r == 1) {
      for (; o + 8 <= o1; o += 8) tile_quant_avx2<1, 8>(xr, ldx, K, W, rb, wt, o, yr, ldy);
      for (; o < o1; ++o) tile_quant_avx2<1, 1>(xr, ldx, K, W, rb, wt, o, yr, ldy);
      r += 1;
    } else {  // two rows at a time (a third alone)
      for (; o + 4 <= o1; o += 4) tile_quant_avx2<2, 4>(xr, ldx, K, W, rb, wt, o, yr, ldy);
      for (; o < o1; ++o) tile_quant_avx2<2, 1>(xr, ldx, K, W, rb, wt, o, yr, ldy);
      r += 2;
    }
  }
}

// ---- AVX-512 path (two or more rows) -------------------------------------------------------

// GCC 12's AVX-512 headers start some intrinsics (broadcast, extract) from an "undefined" register,
// which -Wmaybe-uninitialized reports at every use; the values are fully written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ICMLKIT_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,avx2,fma,f16c")))

/// x rows packed in pairs: pair p, chunk c holds x[2p, 8c..8c+8) then x[2p+1, 8c..8c+8), the last
/// partial chunk and a missing odd row zero (the zero padding of the 8-lane order).  `xp` has
/// ceil(R/2) * nch * 16 floats.
void pack_pairs(const float* x, int R, int K, int ldx, int nch, float* xp) {
  const int npairs = (R + 1) / 2;
  for (int p = 0; p < npairs; ++p)
    for (int h = 0; h < 2; ++h) {
      const int r = 2 * p + h;
      float* dst = xp + std::size_t(p) * nch * 16 + 8 * h;
      for (int c = 0; c < nch; ++c, dst += 16) {
        const int n = r < R ? std::min(8, K - 8 * c) : 0;
        if (n > 0) std::memcpy(dst, x + std::size_t(r) * ldx + 8 * c, sizeof(float) * n);
        std::fill(dst + std::max(n, 0), dst + 8, 0.0f);
      }
    }
}

/// bf16 rows xb [R, K] packed in pairs for the bf16-dot tile: pair p, chunk c holds xb[2p,
/// 16c..16c+16) then xb[2p+1, 16c..16c+16) (64 bytes, as a float32 chunk), the tail and a missing
/// odd row zero.  `xp` has ceil(R/2) * ceil(K/16) * 16 floats.
void pack_pairs_bf16(const std::uint16_t* xb, int R, int K, float* xp) {
  const int nch = (K + 15) / 16;
  auto* dst = reinterpret_cast<std::uint16_t*>(xp);
  for (int p = 0; p < (R + 1) / 2; ++p)
    for (int c = 0; c < nch; ++c)
      for (int h = 0; h < 2; ++h, dst += 16) {
        const int r = 2 * p + h, n = r < R ? std::min(16, K - 16 * c) : 0;
        if (n > 0) std::memcpy(dst, xb + std::size_t(r) * K + 16 * c, sizeof(std::uint16_t) * n);
        std::fill(dst + n, dst + 16, std::uint16_t(0));
      }
}

/// Two packed rows' halves of acc (columns c..c+3 of pair registers a..d) reduced with the
/// fixed 8-lane tree: within each 128-bit lane, two horizontal-add levels give
/// (l0+l1)+(l2+l3) and (l4+l5)+(l6+l7) of each column; the lane pairs are then added.
ICMLKIT_AVX512 inline __m512 hadd512(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/// Eight weights at p widened to float32 in both 256-bit halves (the broadcast of a weight
/// chunk to the two rows of a pair).
ICMLKIT_AVX512 inline __m512 wchunk512(const float* p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }
ICMLKIT_AVX512 inline __m512 wchunk512(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
ICMLKIT_AVX512 inline __m512 wchunk512(const Bf16* p) {
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
/// The first rem < 8 weights at p, the rest zero, as wchunk512 (nothing past p + rem is read).
ICMLKIT_AVX512 inline __m512 wtail512(const float* p, int rem) {
  return _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(__mmask8((1u << rem) - 1), p));
}
ICMLKIT_AVX512 inline __m512 wtail512(const std::uint16_t* p, int rem) {
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_maskz_loadu_epi16(__mmask8((1u << rem) - 1), p)));
}
ICMLKIT_AVX512 inline __m512 wtail512(const Bf16* p, int rem) {
  const __m128i h = _mm_maskz_loadu_epi16(__mmask8((1u << rem) - 1), p);
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_broadcastsi128_si256(h));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/// bf16-dot weights (WeightType::bf16_dot): bfloat16 bits multiplied by AVX512-BF16's pair dot
/// product against x rows rounded to bfloat16; a chunk is 16 values (8 lanes x a pair).
struct Bf16Dot {
  std::uint16_t bits;
};
static_assert(sizeof(Bf16Dot) == 2);

/// Values per chunk of the 8-lane order: 8 (one per lane), 16 for bf16-dot (a pair per lane).
template <class WT> constexpr int kStep = 8;
template <> constexpr int kStep<Bf16Dot> = 16;

/// Sixteen bf16-dot weights at p in both 256-bit halves (bits, not widened), and the first rem < 16.
ICMLKIT_AVX512 inline __m512 wchunk512(const Bf16Dot* p) {
  return _mm512_castsi512_ps(_mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
ICMLKIT_AVX512 inline __m512 wtail512(const Bf16Dot* p, int rem) {
  return _mm512_castsi512_ps(_mm512_broadcast_i64x4(_mm256_maskz_loadu_epi16(__mmask16((1u << rem) - 1), p)));
}

/// acc + x w per lane: one fused multiply-add (float32 weights, widened 16-bit ones), or for
/// bf16-dot the pair dot product acc + x_odd w_odd, then + x_even w_even (each product exact,
/// each sum rounded to nearest; denormals flushed).
template <class WT>
ICMLKIT_AVX512 inline __m512 madd512(__m512 x, __m512 w, __m512 acc) {
  if constexpr (std::is_same_v<WT, Bf16Dot>)
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(x), (__m512bh)_mm512_castps_si512(w));
  else
    return _mm512_fmadd_ps(x, w, acc);
}

/// P row pairs x C columns register tile: xp packed pairs (stride pstride floats, ceil(K/8)
/// chunks), w C weight rows of type WT (stride ldw elements, K of them read), results to rows
/// [0, rows) of y (rows <= 2P; a missing odd row is computed on zeros and not stored).
template <int P, int C, class WT>
ICMLKIT_AVX512 void tile512(const float* xp, std::size_t pstride, const WT* w, std::size_t ldw, int K,
                            float* y, int ldy, int rows, const WT* ahead, int k0 = 0, int k1 = -1,
                            float* part = nullptr) {
  static_assert(C % 4 == 0, "columns in groups of four");
  constexpr int S = kStep<WT>;
  const int nfull = K / S, rem = K % S;
  if (k1 < 0) k1 = nfull;
  __m512 acc[P][C];
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < C; ++c) acc[p][c] = k0 > 0 ? _mm512_loadu_ps(part + 16 * (p * C + c)) : _mm512_setzero_ps();
  const char* pf = ahead ? reinterpret_cast<const char*>(ahead) + std::size_t(C) * sizeof(WT) * S * k0 : nullptr;
  for (int k = k0; k < k1; ++k) {
    if (pf) {  // the tile kPrefetchTiles ahead, C rows of K contiguous weights, at this tile's pace
      for (int i = 0; i < C * int(sizeof(WT)) * S / 64; ++i) _mm_prefetch(pf + 64 * i, _MM_HINT_T1);
      pf += C * sizeof(WT) * S;
    }
    __m512 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = wchunk512(w + c * ldw + S * k);
    for (int p = 0; p < P; ++p) {
      const __m512 xv = _mm512_loadu_ps(xp + p * pstride + 16 * k);
      for (int c = 0; c < C; ++c) acc[p][c] = madd512<WT>(xv, wv[c], acc[p][c]);
    }
  }
  if (k1 < nfull) {  // a K block before the last: the lane accumulators kept, unreduced
    for (int p = 0; p < P; ++p)
      for (int c = 0; c < C; ++c) _mm512_storeu_ps(part + 16 * (p * C + c), acc[p][c]);
    return;
  }
  if (rem) {
    __m512 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = wtail512(w + c * ldw + S * nfull, rem);
    for (int p = 0; p < P; ++p) {
      const __m512 xv = _mm512_loadu_ps(xp + p * pstride + 16 * nfull);
      for (int c = 0; c < C; ++c) acc[p][c] = madd512<WT>(xv, wv[c], acc[p][c]);
    }
  }
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < C; c += 4) {
      const __m512 abcd = hadd512(hadd512(acc[p][c], acc[p][c + 1]), hadd512(acc[p][c + 2], acc[p][c + 3]));
      // 128-bit lanes: row 2p lanes 0-3 then 4-7, row 2p+1 the same.
      const __m128 r0 = _mm_add_ps(_mm512_extractf32x4_ps(abcd, 0), _mm512_extractf32x4_ps(abcd, 1));
      const __m128 r1 = _mm_add_ps(_mm512_extractf32x4_ps(abcd, 2), _mm512_extractf32x4_ps(abcd, 3));
      if (2 * p < rows) _mm_storeu_ps(y + std::size_t(2 * p) * ldy + c, r0);
      if (2 * p + 1 < rows) _mm_storeu_ps(y + std::size_t(2 * p + 1) * ldy + c, r1);
    }
}

/// Chunks per K block of the register tiles (rows512): 12 rows x 48 chunks of 8 f32 x values
/// (18 KiB) beside 4 columns of weights stay in L1.
constexpr int kKBlock = 48;

/// A thread's parked lane accumulators between K blocks (rows512).
thread_local std::vector<float> tl_kblock_part;

/// Rows per register tile: 6 pairs (24 accumulators, 4 weight registers and one for x of the
/// 32; measured 5-10% faster than 4 pairs for 16-bit weights at 64+ rows).
constexpr int kRowTile = 12;

/// Rows tile by tile (12 rows, then the last 2-10) against the columns [0, n4) (n4 a multiple of 4)
/// of the weight rows w (stride ldw elements, K read per row).
/// The first row tile prefetches the weights kPrefetchTiles column tiles ahead, at its own pace
/// (while it streams them from memory; later row tiles find them in L2), up to the matrix's last
/// column `ocols` counted from w.  (Prefetching the next column block during the later row
/// tiles too was measured slower at 16 rows and no faster at 64.)
template <int C, class WT>
ICMLKIT_AVX512 void rows512(const float* xp, int R, int K, const WT* w, std::size_t ldw, int n4, int ocols, float* y,
                            int ldy) {
  constexpr int S = kStep<WT>;
  const std::size_t pstride = std::size_t((K + S - 1) / S) * 16;
  const int nfull = K / S;
  // K blocks of kKBlock chunks when a row tile's x no longer fits L1 beside a column tile's
  // weights (12 rows x 768 f32 already fill it): each tile's lane accumulators are parked in
  // `part` between blocks, so every (row, output) keeps its order and bits.
  const bool blocked = R >= kRowTile && nfull > 2 * kKBlock;  // (K = 768 f32: measured no gain)
  const int ntc = n4 / C;
  std::vector<float>& part = tl_kblock_part;
  if (blocked) part.resize(std::size_t((R + kRowTile - 1) / kRowTile) * ntc * (kRowTile / 2) * C * 16);
  for (int k0 = 0; k0 < (blocked ? nfull : 1); k0 += kKBlock) {
    const int k1 = blocked ? std::min(nfull, k0 + kKBlock) : nfull;
    for (int r = 0; r < R; r += kRowTile) {
      const int rows = std::min(kRowTile, R - r);
      const float* xr = xp + std::size_t(r / 2) * pstride;
      float* yr = y + std::size_t(r) * ldy;
      for (int o = 0; o < n4; o += C) {
        const WT* wo = w + std::size_t(o) * ldw;
        const int a = o + kPrefetchTiles * C;
        const WT* ahead = r == 0 && a + C <= ocols ? w + std::size_t(a) * ldw : nullptr;
        float* pt = blocked ? part.data() + (std::size_t(r / kRowTile) * ntc + o / C) * (kRowTile / 2) * C * 16 : nullptr;
        switch ((rows + 1) / 2) {
          case 6: tile512<6, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
          case 5: tile512<5, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
          case 4: tile512<4, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
          case 3: tile512<3, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
          case 2: tile512<2, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
          default: tile512<1, C>(xr, pstride, wo, ldw, K, yr + o, ldy, rows, ahead, k0, k1, pt); break;
        }
      }
    }
  }
}

/// The caller's packed rows (read by every thread of the parallel region).
thread_local std::vector<float> tl_packed;
/// The caller's rows rounded to bfloat16 [R, K], and packed in pairs (bf16-dot products).
thread_local std::vector<std::uint16_t> tl_bf16_rows;
thread_local std::vector<float> tl_packed_bf16;
/// The caller's bf16 rows in the AMX B-tile layout (pack_amx_rows).
thread_local std::vector<std::uint32_t> tl_packed_amx;
/// The caller's rows quantised to Q8_0 blocks (act-q8 products).
thread_local detail::Q8Rows tl_q8_rows;

/// Columns [o0, o1) of W against the packed rows on AVX-512 (16-bit weights widened in the
/// register tile, once per row tile); columns past the last multiple of four go to the AVX2 tile
/// (the same arithmetic).
template <class WT>
ICMLKIT_AVX512 void block_avx512(const float* x, const float* xp, int R, int K, int ldx, const WT* W, int o0,
                                 int o1, int O, float* y, int ldy) {
  const int n4 = (o1 - o0) / 4 * 4;
  if (n4 > 0) rows512<4>(xp, R, K, W + std::size_t(o0) * K, std::size_t(K), n4, O - o0, y + o0, ldy);
  for (int o = o0 + n4; o < o1; ++o) rows_avx2<1>(x, R, ldx, K, W, o, O, y, ldy);
}

/// out[k] = bf16_dot_of(x[k]) sixteen at a time, the same integer steps (NaN quieted, nearest
/// even, a denormal result to a signed zero); returns how many it did (a multiple of 16).
ICMLKIT_AVX512 int round_bf16_avx512(const float* x, int K, std::uint16_t* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x0040);
  const __m512i exp16 = _mm512_set1_epi32(0x7f80), sign16 = _mm512_set1_epi32(0x8000);
  int k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512i u = _mm512_loadu_si512(x + k);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    h = _mm512_mask_or_epi32(h, nan, _mm512_srli_epi32(u, 16), quiet);
    const __mmask16 tiny = _mm512_testn_epi32_mask(h, exp16);
    h = _mm512_mask_and_epi32(h, tiny, h, sign16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(h));
  }
  return k;
}

/// Columns [o0, o1) of bf16-dot weights against the rows on AVX512-BF16 (xp16: the bf16 rows
/// packed in pairs, 16 values a chunk; one or two rows take 8-column tiles), the last one to three
/// columns on the portable path (the same bits).
ICMLKIT_AVX512 void block_bf16dot(const std::uint16_t* xb, const float* xp16, int R, int K, const Bf16Dot* W, int o0,
                                  int o1, int O, float* y, int ldy) {
  int o = o0;
  if (R <= 2) {
    const int n8 = (o1 - o) / 8 * 8;
    if (n8 > 0) rows512<8>(xp16, R, K, W + std::size_t(o) * K, std::size_t(K), n8, O - o, y + o, ldy);
    o += n8;
  }
  const int n4 = (o1 - o) / 4 * 4;
  if (n4 > 0) rows512<4>(xp16, R, K, W + std::size_t(o) * K, std::size_t(K), n4, O - o, y + o, ldy);
  o += n4;
  if (o < o1) tile_bf16dot_portable(xb, R, K, reinterpret_cast<const std::uint16_t*>(W), o, o1, y, ldy);
}

// ---- bf16-dot on AMX-BF16 -------------------------------------------------------------------
//
// C^T = W X^T on the tile unit: A tiles are 16 weight rows x 32 bf16 (row-major W as it is held),
// B tiles the x rows in the unit's pair layout (B[p][n] = x[n][2p], x[n][2p+1], 16 rows n a
// group, missing rows zero), C tiles 16 outputs x 16 rows accumulated over the K chunks in
// increasing order.  TDPBF16PS's rounding inside a chunk is the unit's own (not the pair order of
// VDPBF16PS: measured, it matches no sequential order), but an output's bits depend only on its
// weight row and x row (measured and tested), so a row's result does not depend on the batch.

#define ICMLKIT_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

/// The tile configuration (palette 1): tiles 0-3 accumulators, 4-5 weights, 6-7 x, all 16 x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

/// x rows xb [R, K] in the B-tile layout: group g (16 rows) and chunk c (32 k) a 1 KiB tile at
/// (g * nchunks + c) * 256 dwords, dword [p][n] = the pair (xb[16g + n][32c + 2p], ... + 1).
void pack_amx_rows(const std::uint16_t* xb, int R, int K, std::uint32_t* xt) {
  const int nck = (K + 31) / 32, ng = (R + 15) / 16;
  for (int c = 0; c < nck; ++c)
    for (int g = 0; g < ng; ++g) {
      std::uint32_t* t = xt + (std::size_t(g) * nck + c) * 256;
      for (int p = 0; p < 16; ++p)
        for (int n = 0; n < 16; ++n) {
          const int r = 16 * g + n, k = 32 * c + 2 * p;
          const std::uint32_t lo = r < R && k < K ? xb[std::size_t(r) * K + k] : 0;
          const std::uint32_t hi = r < R && k + 1 < K ? xb[std::size_t(r) * K + k + 1] : 0;
          t[16 * p + n] = lo | (hi << 16);
        }
    }
}

/// Where the A tile of weight rows [o, o + m) (m <= 16 valid), chunk c, is read from: W itself for
/// a full tile, else a zero-padded copy in `pad` (16 x 32 bf16); `stride` its row stride in bytes.
inline const std::uint16_t* a_tile(const std::uint16_t* W, int K, int o, int m, int c, std::uint16_t* pad,
                                   std::size_t& stride) {
  const int kn = std::min(32, K - 32 * c);
  if (m == 16 && kn == 32) {
    stride = std::size_t(K) * 2;
    return W + std::size_t(o) * K + 32 * c;
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) pad[32 * i + j] = i < m && j < kn ? W[std::size_t(o + i) * K + 32 * c + j] : 0;
  stride = 64;
  return pad;
}

/// Chunks ahead that a strip's weight rows are prefetched (a tile load of 16 strided rows gets
/// little from the hardware prefetcher: measured 1.3-2x faster from L3 with 2-4 chunks ahead).
constexpr int kAmxAhead = 4;

/// Prefetches chunk c of weight rows [o, o + m) (one 64-byte line each) into L1, if c < nck.
inline void prefetch_strip(const std::uint16_t* W, int K, int o, int m, int c, int nck) {
  if (c >= nck) return;
  for (int i = 0; i < m; ++i) _mm_prefetch(reinterpret_cast<const char*>(W + std::size_t(o + i) * K + 32 * c), _MM_HINT_T0);
}

/// A stored accumulator tile (cbuf: 16 outputs from o x 16 rows of group g) to y, valid outputs
/// below o1 and rows below R.
inline void scatter_tile(const float* cbuf, int o, int o1, int g, int R, float* y, int ldy) {
  for (int m = 0; m < std::min(16, o1 - o); ++m)
    for (int n = 0; n < std::min(16, R - 16 * g); ++n) y[std::size_t(16 * g + n) * ldy + o + m] = cbuf[16 * m + n];
}

// Tile numbers are immediates of the instructions, hence a macro.
#define ICMLKIT_STORE_TILE(T, o, g) \
  do {                              \
    _tile_stored(T, cbuf, 64);      \
    scatter_tile(cbuf, o, o1, g, R, y, ldy); \
  } while (0)

/// Columns [o0, o1) of bf16-dot weights W [O, K] against the packed rows xt (R rows) on AMX:
/// one group of rows takes four 16-column strips at a time, more groups two strips x two groups.
ICMLKIT_AMX void block_amx(const std::uint32_t* xt, int R, int K, const std::uint16_t* W, int o0, int o1, float* y,
                           int ldy) {
  static const TileConfig cfg;
  _tile_loadconfig(&cfg);
  alignas(64) std::uint16_t pad[16 * 32];
  alignas(64) float cbuf[256];
  const int nck = (K + 31) / 32, ng = (R + 15) / 16;
  std::size_t sa = 0;
  if (ng == 1) {
    for (int o = o0; o < o1; o += 64) {
      const int ns = std::min(4, (o1 - o + 15) / 16);  // strips in this step
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int c = 0; c < nck; ++c) {
        prefetch_strip(W, K, o, std::min(64, o1 - o), c + kAmxAhead, nck);
        _tile_loadd(6, xt + std::size_t(c) * 256, 64);  // the one group
        _tile_loadd(4, a_tile(W, K, o, std::min(16, o1 - o), c, pad, sa), sa);
        _tile_dpbf16ps(0, 4, 6);
        if (ns > 1) { _tile_loadd(5, a_tile(W, K, o + 16, std::min(16, o1 - o - 16), c, pad, sa), sa); _tile_dpbf16ps(1, 5, 6); }
        if (ns > 2) { _tile_loadd(4, a_tile(W, K, o + 32, std::min(16, o1 - o - 32), c, pad, sa), sa); _tile_dpbf16ps(2, 4, 6); }
        if (ns > 3) { _tile_loadd(5, a_tile(W, K, o + 48, std::min(16, o1 - o - 48), c, pad, sa), sa); _tile_dpbf16ps(3, 5, 6); }
      }
      ICMLKIT_STORE_TILE(0, o, 0);
      if (ns > 1) ICMLKIT_STORE_TILE(1, o + 16, 0);
      if (ns > 2) ICMLKIT_STORE_TILE(2, o + 32, 0);
      if (ns > 3) ICMLKIT_STORE_TILE(3, o + 48, 0);
    }
  } else {
    for (int o = o0; o < o1; o += 32) {
      const bool two = o + 16 < o1;
      for (int g = 0; g < ng; g += 2) {
        const bool g2 = g + 1 < ng;
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int c = 0; c < nck; ++c) {
          if (g == 0) prefetch_strip(W, K, o, std::min(32, o1 - o), c + kAmxAhead, nck);  // later groups find them in L1/L2
          const std::uint32_t* b = xt + (std::size_t(g) * nck + c) * 256;
          _tile_loadd(4, a_tile(W, K, o, std::min(16, o1 - o), c, pad, sa), sa);
          _tile_loadd(6, b, 64);
          _tile_dpbf16ps(0, 4, 6);
          if (g2) { _tile_loadd(7, b + std::size_t(nck) * 256, 64); _tile_dpbf16ps(1, 4, 7); }
          if (two) {
            _tile_loadd(5, a_tile(W, K, o + 16, std::min(16, o1 - o - 16), c, pad, sa), sa);
            _tile_dpbf16ps(2, 5, 6);
            if (g2) _tile_dpbf16ps(3, 5, 7);
          }
        }
        ICMLKIT_STORE_TILE(0, o, g);
        if (g2) ICMLKIT_STORE_TILE(1, o, g + 1);
        if (two) ICMLKIT_STORE_TILE(2, o + 16, g);
        if (two && g2) ICMLKIT_STORE_TILE(3, o + 16, g + 1);
      }
    }
  }
  _tile_release();  // the tile state need not be saved at the next context switch
}

/// Rows from which the AVX-512 tile runs: below, a pass is bound by the weight stream and the
/// AVX2 tiles (2-3 rows, eight accumulators) keep more FMAs in flight.
constexpr int kWideRows = 4;

/// dequantize_row on AVX-512: the same products d * q (one rounding each, F16C's exact scale),
/// 16 at a time.
ICMLKIT_AVX512 void dequantize_row_avx512(WeightType wt, const std::uint8_t* row, int K, float* out) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int b = 0; b < K / 32; ++b) {
    const std::uint8_t* blk = row + std::size_t(b) * (wt == WeightType::q8_0 ? 34 : 18);
    std::uint16_t h;
    std::memcpy(&h, blk, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    __m512i lo, hi;
    if (wt == WeightType::q8_0) {
      lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
      hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
    } else {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(v, low4)), eight);
      hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), low4)), eight);
    }
    _mm512_storeu_ps(out + 32 * b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)));
    _mm512_storeu_ps(out + 32 * b + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)));
  }
}

#pragma GCC diagnostic pop

/// Columns [o0, o1) of one product on the chosen path (xp: the packed rows when `wide`).
template <class WT>
void run_block(const float* x, const float* xp, bool wide, int R, int K, int ldx, const WT* W, int o0, int o1, int O,
               float* y, int ldy, Isa isa) {
  if (wide) block_avx512(x, xp, R, K, ldx, W, o0, o1, O, y, ldy);
  else if (isa != Isa::portable) block_avx2(x, R, K, ldx, W, o0, o1, O, y, ldy);
  else tile_portable(x, R, K, ldx, W, o0, o1, y, ldy);
}

/// Quantised columns [o0, o1) (rows of `row_bytes` at W) widened into this thread's scratch,
/// then multiplied as float32 by the path's block kernel.
thread_local std::vector<float> tl_widened;

void run_quant_block(const float* x, const float* xp, bool wide, int R, int K, int ldx, const MatmulJob& jb, int o0,
                     int o1, Isa isa) {
  const int n = o1 - o0;
  const std::size_t rb = weight_row_bytes(jb.wt, K);
  if (!wide && isa != Isa::portable) {  // few rows: widened in registers, no scratch
    block_quant_avx2(x, R, K, ldx, static_cast<const std::uint8_t*>(jb.W), rb, jb.wt, o0, o1, jb.y, jb.ldy);
    return;
  }
  std::vector<float>& ws = tl_widened;
  if (ws.size() < std::size_t(n) * K) ws.resize(std::size_t(n) * K);
  const auto* W = static_cast<const std::uint8_t*>(jb.W);
  const bool v512 = isa == Isa::avx512 || isa == Isa::amx;
  for (int o = 0; o < n; ++o) {
    if (v512) dequantize_row_avx512(jb.wt, W + std::size_t(o0 + o) * rb, K, ws.data() + std::size_t(o) * K);
    else dequantize_row(jb.wt, W + std::size_t(o0 + o) * rb, K, ws.data() + std::size_t(o) * K);
  }
  run_block(x, xp, wide, R, K, ldx, static_cast<const float*>(ws.data()), 0, n, n, jb.y + o0, jb.ldy, isa);
}

/// The products `jobs` of the same x in one parallel loop: their column blocks are one index
/// space, claimed one at a time by the threads of util/block_pool (a loop costs a few
/// microseconds; a 7m model's decode step has dozens).
void run_jobs(const float* x, int R, int K, int ldx, const MatmulJob* jobs, int njobs, Isa isa, int nthreads) {
  if (R <= 0 || njobs <= 0) return;
  const bool aq = std::any_of(jobs, jobs + njobs, [](const MatmulJob& j) { return is_act_q8(j.wt); });
  // Column blocks small enough that a block's weights stay in L2 while all rows pass over it
  // (whole 16-row groups when an act-q8 product is among the jobs).
  int block = std::max(4, std::min(64, (1 << 16) / std::max(K, 1) / 4 * 4));
  if (aq) block = std::max(16, block / 16 * 16);
  int nblocks = 0;
  std::int64_t cols = 0;
  int first[8];
  for (int j = 0; j < njobs; ++j) {
    first[j] = nblocks;
    nblocks += (jobs[j].O + block - 1) / block;
    cols += jobs[j].O;
  }
  // Only for >= 32k multiply-adds (measured: a 256 x 256 one-row product gains from 2 threads).
  const bool par = nthreads > 1 && nblocks > 1 && cols * K * R >= (1 << 15);
  const bool dot = std::any_of(jobs, jobs + njobs, [](const MatmulJob& j) { return j.wt == WeightType::bf16_dot; });
  const bool f32_rows = std::any_of(jobs, jobs + njobs, [](const MatmulJob& j) { return j.wt != WeightType::bf16_dot && !is_act_q8(j.wt); });
  if (isa == Isa::amx && !dot) isa = Isa::avx512;  // the tile unit runs bf16-dot products only
  const bool wide = (isa == Isa::avx512 || isa == Isa::amx) && R >= kWideRows && f32_rows;
  // act-q8: the rows quantised to Q8_0 blocks once per pass.
  const detail::Q8Rows* q8rows = nullptr;
  if (aq) {
    detail::quantize_rows_q8(x, R, K, ldx, isa, tl_q8_rows);
    q8rows = &tl_q8_rows;
  }
  const float* xp = nullptr;
  if (wide) {
    const int nch = (K + 7) / 8;
    tl_packed.resize(std::size_t((R + 1) / 2) * nch * 16);
    pack_pairs(x, R, K, ldx, nch, tl_packed.data());
    xp = tl_packed.data();
  }
  // bf16-dot: the rows rounded to bfloat16 once per pass, packed in pairs for AVX512-BF16.
  const bool dot_amx = dot && isa == Isa::amx;
  const bool dot_hw = dot && !dot_amx && isa == Isa::avx512 && have_avx512_bf16();
  const std::uint16_t* xb = nullptr;
  const float* xp16 = nullptr;
  const std::uint32_t* xt = nullptr;  // (thread_local buffers are the caller's: pointers taken here)
  if (dot) {
    tl_bf16_rows.resize(std::size_t(R) * K);
    for (int r = 0; r < R; ++r) {
      const float* xr = x + std::size_t(r) * ldx;
      std::uint16_t* out = tl_bf16_rows.data() + std::size_t(r) * K;
      int k = isa == Isa::avx512 || isa == Isa::amx ? round_bf16_avx512(xr, K, out) : 0;
      for (; k < K; ++k) out[k] = bf16_dot_of(xr[k]);
    }
    xb = tl_bf16_rows.data();
    if (dot_amx) {
      tl_packed_amx.resize(std::size_t((K + 31) / 32) * ((R + 15) / 16) * 256);
      pack_amx_rows(xb, R, K, tl_packed_amx.data());
      xt = tl_packed_amx.data();
    }
    if (dot_hw) {
      tl_packed_bf16.resize(std::size_t((R + 1) / 2) * ((K + 15) / 16) * 16);
      pack_pairs_bf16(xb, R, K, tl_packed_bf16.data());
      xp16 = tl_packed_bf16.data();
    }
  }
  parallel_blocks(nblocks, par ? nthreads : 1, [&](int b) {
    int j = njobs - 1;
    while (first[j] > b) --j;
    const MatmulJob& jb = jobs[j];
    const int o0 = (b - first[j]) * block, o1 = std::min(jb.O, o0 + block);
    switch (jb.wt) {
      case WeightType::f32: run_block(x, xp, wide, R, K, ldx, static_cast<const float*>(jb.W), o0, o1, jb.O, jb.y, jb.ldy, isa); break;
      case WeightType::f16: run_block(x, xp, wide, R, K, ldx, static_cast<const std::uint16_t*>(jb.W), o0, o1, jb.O, jb.y, jb.ldy, isa); break;
      case WeightType::bf16: run_block(x, xp, wide, R, K, ldx, static_cast<const Bf16*>(jb.W), o0, o1, jb.O, jb.y, jb.ldy, isa); break;
      case WeightType::bf16_dot:
        if (dot_amx) block_amx(xt, R, K, static_cast<const std::uint16_t*>(jb.W), o0, o1, jb.y, jb.ldy);
        else if (dot_hw) block_bf16dot(xb, xp16, R, K, static_cast<const Bf16Dot*>(jb.W), o0, o1, jb.O, jb.y, jb.ldy);
        else tile_bf16dot_portable(xb, R, K, static_cast<const std::uint16_t*>(jb.W), o0, o1, jb.y, jb.ldy);
        break;
      case WeightType::q8_0:
      case WeightType::q4_0: run_quant_block(x, xp, wide, R, K, ldx, jb, o0, o1, isa); break;
      case WeightType::q8_0_aq:
      case WeightType::q4_0_aq:
        detail::block_act_q8(*q8rows, static_cast<const std::uint8_t*>(jb.W), jb.wt, o0, o1, jb.y, jb.ldy, isa);
        break;
    }
  });
}

}  // namespace

const char* weight_type_name(WeightType wt) noexcept {
  static const char* const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "bf16-dot", "q8_0+act-q8", "q4_0+act-q8"};
  return names[static_cast<int>(wt)];
}

WeightType block_format(WeightType wt) noexcept {
  if (wt == WeightType::q8_0_aq) return WeightType::q8_0;
  if (wt == WeightType::q4_0_aq) return WeightType::q4_0;
  return wt;
}

bool is_act_q8(WeightType wt) noexcept { return wt == WeightType::q8_0_aq || wt == WeightType::q4_0_aq; }

std::size_t weight_row_bytes(WeightType wt, int K) noexcept {
  switch (wt) {
    case WeightType::f32: return std::size_t(K) * 4;
    case WeightType::f16:
    case WeightType::bf16:
    case WeightType::bf16_dot: return std::size_t(K) * 2;
    case WeightType::q8_0:
    case WeightType::q8_0_aq: return std::size_t(K / 32) * 34;
    case WeightType::q4_0:
    case WeightType::q4_0_aq: return std::size_t(K / 32) * 18;
  }
  return 0;
}

void dequantize_row(WeightType wt, const std::uint8_t* row, int K, float* out) noexcept {
  for (int b = 0; b < K / 32; ++b) {
    std::uint16_t h;
    if (wt == WeightType::q8_0) {
      const std::uint8_t* blk = row + std::size_t(b) * 34;
      std::memcpy(&h, blk, 2);
      const float d = num::f16_to_f32(h);
      for (int j = 0; j < 32; ++j) out[32 * b + j] = d * static_cast<float>(static_cast<std::int8_t>(blk[2 + j]));
    } else {
      const std::uint8_t* blk = row + std::size_t(b) * 18;
      std::memcpy(&h, blk, 2);
      const float d = num::f16_to_f32(h);
      for (int j = 0; j < 16; ++j) {
        out[32 * b + j] = d * static_cast<float>((blk[2 + j] & 0x0f) - 8);
        out[32 * b + 16 + j] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
      }
    }
  }
}

namespace {

/// Whether the CPU has AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24, 22) and Linux grants this
/// process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, asked once).
bool amx_bf16_usable() noexcept {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

}  // namespace

bool isa_available(Isa isa) noexcept {
  static const bool avx2 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2: return avx2;
    case Isa::avx512: return avx512;
    case Isa::amx: return avx512 && amx_bf16_usable();
  }
  return false;
}

Isa best_isa() noexcept {
  static const Isa best = [] {
    Isa cap = Isa::amx;
    if (const char* e = std::getenv("ICMLKIT_ISA")) {
      const std::string v = e;
      if (v == "portable") cap = Isa::portable;
      else if (v == "avx2") cap = Isa::avx2;
      else if (v == "avx512") cap = Isa::avx512;
    }
    for (Isa i : {Isa::amx, Isa::avx512, Isa::avx2})
      if (int(i) <= int(cap) && isa_available(i)) return i;
    return Isa::portable;
  }();
  return best;
}

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::amx: return "amx";
  }
  return "?";
}

bool have_avx2() noexcept { return isa_available(Isa::avx2); }

bool have_avx512_bf16() noexcept {
  static const bool yes = isa_available(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
  return yes;
}

std::uint16_t bf16_dot_round(float f) noexcept { return bf16_dot_of(f); }

const char* bf16_dot_unit() noexcept {
  const Isa isa = best_isa();
  if (isa == Isa::amx) return "amx";
  return isa == Isa::avx512 && have_avx512_bf16() ? "avx512-bf16" : "emulated";
}

void matmul_xwt_on(const float* x, int R, int K, int ldx, const void* W, WeightType wt, int O, float* y, int ldy,
                   Isa isa, int nthreads) {
  if (is_act_q8(wt) && O % 16 != 0) throw std::invalid_argument("matmul_xwt_on: an act-q8 product needs O a multiple of 16");
  const MatmulJob job{W, wt, O, y, ldy};
  run_jobs(x, R, K, ldx, &job, 1, isa_available(isa) ? isa : Isa::portable, std::max(1, nthreads));
}

void matmul_xwt(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy) {
  matmul_xwt_on(x, R, K, ldx, W, WeightType::f32, O, y, ldy, best_isa(), threads());
}

void matmul_xwt_f16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy) {
  matmul_xwt_on(x, R, K, ldx, W, WeightType::f16, O, y, ldy, best_isa(), threads());
}

void matmul_xwt_bf16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy) {
  matmul_xwt_on(x, R, K, ldx, W, WeightType::bf16, O, y, ldy, best_isa(), threads());
}

void matmul_xwt_path(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy, bool fast,
                     int nthreads) {
  matmul_xwt_on(x, R, K, ldx, W, WeightType::f32, O, y, ldy, fast ? best_isa() : Isa::portable, nthreads);
}

void matmul_xwt_f16_path(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy,
                         bool fast, int nthreads) {
  matmul_xwt_on(x, R, K, ldx, W, WeightType::f16, O, y, ldy, fast ? best_isa() : Isa::portable, nthreads);
}

void matmul_xwt_jobs(const float* x, int R, int K, int ldx, const MatmulJob* jobs, int njobs, int nthreads) {
  if (njobs > 8) throw std::invalid_argument("matmul_xwt_jobs: at most 8 products");
  for (int j = 0; j < njobs; ++j)
    if (is_act_q8(jobs[j].wt) && jobs[j].O % 16 != 0)
      throw std::invalid_argument("matmul_xwt_jobs: an act-q8 product needs O a multiple of 16");
  run_jobs(x, R, K, ldx, jobs, njobs, best_isa(), nthreads > 0 ? nthreads : threads());
}

void dot8_many(const float* q, const float* const* keys, int n, int K, float* out) noexcept {
  int j = 0;
  if (have_avx2())
    for (; j + 8 <= n; j += 8) dot8_keys8(q, keys + j, K, out + j);
  for (; j < n; ++j) out[j] = dot8(q, keys[j], K);
}

float dot8(const float* a, const float* b, int K) noexcept {
  float y;
  if (have_avx2()) block_avx2(a, 1, K, K, b, 0, 1, 1, &y, 1);
  else tile_portable(a, 1, K, K, b, 0, 1, &y, 1);
  return y;
}

}  // namespace icmlkit::lm
