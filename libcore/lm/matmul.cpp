#include "lm/matmul.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "num/half.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

namespace {

/// The fixed final reduction of eight lanes.
inline float reduce8(const float* l) noexcept {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// ---- portable path: scalar code that performs exactly the AVX2 path's operations ------------

inline float widen(float w) noexcept { return w; }
inline float widen(std::uint16_t h) noexcept { return num::f16_to_f32(h); }

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
/// The last rem < 8 weights, zero-padded (as the masked x load).
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_tail(const float* p, int rem) {
  return _mm256_maskload_ps(p, tail_mask(rem));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_tail(const std::uint16_t* p, int rem) {
  alignas(16) std::uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(b, p, sizeof(std::uint16_t) * rem);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}

/// Software prefetch of the weight rows two column tiles ahead, into L2 (hint T1), for f16
/// weights only.  Measured on the 2-core EPYC (Zen 4) with 32000 x 768 weights in DRAM, one
/// row: f16 streaming rose from ~10 to ~17-22 GB/s (the hardware prefetcher alone keeps too
/// few lines in flight for 8 rows each read 16 bytes per step); f32 weights did not gain
/// (and lost ~10% when L3-resident), so they keep the hardware prefetcher alone.  T0 thrashed
/// L1 at K = 2048.  Prefetching moves no data into registers: the arithmetic is unchanged.
template <class WT> constexpr bool kPrefetch = std::is_same_v<WT, std::uint16_t>;
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

template <class WT>
void run(const float* x, int R, int K, int ldx, const WT* W, int O, float* y, int ldy, bool avx2,
         int nthreads) {
  if (R <= 0 || O <= 0) return;
  // Column blocks small enough that a block's weights stay in L2 while all rows pass over it.
  const int block = std::max(4, std::min(64, (1 << 16) / std::max(K, 1) / 4 * 4));
  const int nblocks = (O + block - 1) / block;
  // A parallel region costs a few microseconds (more on a loaded machine): only for >= 256k MACs.
  const bool par = nthreads > 1 && nblocks > 1 && std::int64_t(O) * K * R >= (1 << 18);
#pragma omp parallel for schedule(static) num_threads(nthreads) if (par)
  for (int b = 0; b < nblocks; ++b) {
    const int o0 = b * block, o1 = std::min(O, o0 + block);
    if (avx2) block_avx2(x, R, K, ldx, W, o0, o1, O, y, ldy);
    else tile_portable(x, R, K, ldx, W, o0, o1, y, ldy);
  }
}

}  // namespace

bool have_avx2() noexcept {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return ok;
}

void matmul_xwt(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy) {
  run(x, R, K, ldx, W, O, y, ldy, have_avx2(), threads());
}

void matmul_xwt_path(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy,
                     bool avx2, int nthreads) {
  run(x, R, K, ldx, W, O, y, ldy, avx2 && have_avx2(), std::max(1, nthreads));
}

void matmul_xwt_f16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy) {
  run(x, R, K, ldx, W, O, y, ldy, have_avx2(), threads());
}

void matmul_xwt_f16_path(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y,
                         int ldy, bool avx2, int nthreads) {
  run(x, R, K, ldx, W, O, y, ldy, avx2 && have_avx2(), std::max(1, nthreads));
}

float dot8(const float* a, const float* b, int K) noexcept {
  float y;
  if (have_avx2()) block_avx2(a, 1, K, K, b, 0, 1, 1, &y, 1);
  else tile_portable(a, 1, K, K, b, 0, 1, &y, 1);
  return y;
}

}  // namespace icmlkit::lm
