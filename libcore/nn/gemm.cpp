#include "nn/gemm.hpp"

// GCC 12 warns that the masked AVX-512 intrinsics read an uninitialised vector (the
// _mm512_undefined_ps of their pass-through operand) when inlined: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "util/threads.hpp"

namespace icmlkit::nn {

namespace {

// Blocking, in BLIS's loop order: for each NC-column block and each K block, op(B)'s KC x NC
// slice is packed once into micro-panels shared by the threads; then each MC-row block of C
// packs its MC x KC slice of op(A) and runs the micro-kernel over its MR x NR tiles, the row
// blocks shared out among the threads.  MC and NC are multiples of every path's MR and NR.
constexpr int kMC = 48, kNC = 1024, kKC = kGemmKC;

/// Packing buffers, allocated on first use and kept (no allocation in a training step after the
/// first).  `b` belongs to the thread that calls gemm (shared by its team), `a` to each thread.
struct PackBuffers {
  float* a = nullptr;  // kMC x kKC
  float* b = nullptr;  // kKC x kNC
  PackBuffers() {
    a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMC * kKC));
    b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kKC * kNC));
  }
  ~PackBuffers() {
    std::free(a);
    std::free(b);
  }
  PackBuffers(const PackBuffers&) = delete;
  PackBuffers& operator=(const PackBuffers&) = delete;
};

PackBuffers& pack_buffers() {
  thread_local PackBuffers buf;
  return buf;
}

struct Operands {
  bool ta, tb;
  int M, N, K;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float* C;
  int ldc;
  bool accumulate;
};

bool cpu_avx512() noexcept {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}
bool cpu_avx2() noexcept {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

GemmPath g_forced = GemmPath::automatic;

GemmPath resolve(GemmPath p) noexcept {
  if (p == GemmPath::automatic) p = g_forced;
  if (p == GemmPath::automatic) p = cpu_avx512() ? GemmPath::avx512 : cpu_avx2() ? GemmPath::avx2 : GemmPath::portable;
  if (p == GemmPath::avx512 && !cpu_avx512()) p = GemmPath::portable;
  if (p == GemmPath::avx2 && !cpu_avx2()) p = GemmPath::portable;
  return p;
}

/// 16 x 16 transpose in registers: r[i] lane j becomes r[j] lane i.
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4a + b] now holds, in each 128-bit lane L, the 4 x 4 block (rows 4L..4L+3 of the input
  // group a, column b of each).  Two rounds of 128-bit shuffles finish the transpose.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

/// dst[k·R + r] = src[r·ld + k] for r < rows (zero for rows <= r < R), k < kc: R rows of a
/// row-major matrix interleaved k-major, the layout of a micro-panel.  AVX-512: 16 x 16 blocks
/// transposed in registers.
template <int R>
__attribute__((target("avx512f"))) void interleave_rows_avx512(const float* src, std::size_t ld, int rows, int kc,
                                                                float* dst) {
  int k = 0;
  for (; k + 16 <= kc; k += 16)
    for (int g = 0; g < R; g += 16) {
      const int n = std::min(16, R - g);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = g + i < rows ? _mm512_loadu_ps(src + std::size_t(g + i) * ld + k) : _mm512_setzero_ps();
      transpose16(r);
      const __mmask16 m = __mmask16((1u << n) - 1);
      for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + std::size_t(k + j) * R + g, m, r[j]);
    }
  for (; k < kc; ++k)
    for (int i = 0; i < R; ++i) dst[std::size_t(k) * R + i] = i < rows ? src[std::size_t(i) * ld + k] : 0.0f;
}

/// The same in plain loops (k outer: each row's cache line is reused across 16 k).
template <int R>
void interleave_rows(const float* src, std::size_t ld, int rows, int kc, float* dst) {
  if (resolve(GemmPath::automatic) == GemmPath::avx512) return interleave_rows_avx512<R>(src, ld, rows, kc, dst);
  for (int k = 0; k < kc; ++k)
    for (int i = 0; i < R; ++i) dst[std::size_t(k) * R + i] = i < rows ? src[std::size_t(i) * ld + k] : 0.0f;
}

/// dst[k·R + j] = src[k·ld + j] for j < cols (zero for cols <= j < R), k < kc, on AVX-512:
/// masked 16-lane loads and stores.
template <int R>
__attribute__((target("avx512f"))) void copy_rows_avx512(const float* src, std::size_t ld, int cols, int kc,
                                                          float* dst) {
  constexpr int G = (R + 15) / 16;
  __mmask16 load[G], store[G];
  for (int g = 0; g < G; ++g) {
    const int c = std::clamp(cols - 16 * g, 0, 16), w = std::min(16, R - 16 * g);
    load[g] = __mmask16((1u << c) - 1);
    store[g] = __mmask16((1u << w) - 1);
  }
  for (int k = 0; k < kc; ++k)
    for (int g = 0; g < G; ++g)
      _mm512_mask_storeu_ps(dst + std::size_t(k) * R + 16 * g, store[g],
                            _mm512_maskz_loadu_ps(load[g], src + std::size_t(k) * ld + 16 * g));
}

/// dst[k·R + j] = src[k·ld + j] for j < cols (zero for cols <= j < R): R consecutive values per
/// k, the layout of a micro-panel from a matrix whose rows already run along the panel.
template <int R>
void copy_rows(const float* src, std::size_t ld, int cols, int kc, float* dst) {
  if (resolve(GemmPath::automatic) == GemmPath::avx512) return copy_rows_avx512<R>(src, ld, cols, kc, dst);
  for (int k = 0; k < kc; ++k) {
    const float* s = src + std::size_t(k) * ld;
    float* d = dst + std::size_t(k) * R;
    if (cols == R) {
      for (int j = 0; j < R; ++j) d[j] = s[j];
    } else {
      for (int j = 0; j < R; ++j) d[j] = j < cols ? s[j] : 0.0f;
    }
  }
}

/// Packs op(A)[i0 : i0+mc, k0 : k0+kc] as micro-panels of MR rows: panel p holds, for each k,
/// MR consecutive values (rows past mc are zero).
template <int MR>
void pack_a(const Operands& o, int i0, int mc, int k0, int kc, float* dst) {
  for (int p = 0; p < mc; p += MR) {
    const int rows = std::min(MR, mc - p);
    if (o.ta) copy_rows<MR>(o.A + std::size_t(k0) * o.lda + i0 + p, o.lda, rows, kc, dst + std::size_t(p) * kc);
    else interleave_rows<MR>(o.A + std::size_t(i0 + p) * o.lda + k0, o.lda, rows, kc, dst + std::size_t(p) * kc);
  }
}

/// Packs micro-panel q (columns j0 + q·NR …, at most NR of them, zero beyond nc) of
/// op(B)[k0 : k0+kc, j0 : j0+nc]: for each k, NR consecutive values.
template <int NR>
void pack_b_panel(const Operands& o, int k0, int kc, int j0, int nc, int q, float* dst) {
  float* panel = dst + std::size_t(q) * NR * kc;
  const int c0 = q * NR, cols = std::min(NR, nc - c0);
  if (!o.tb) copy_rows<NR>(o.B + std::size_t(k0) * o.ldb + j0 + c0, o.ldb, cols, kc, panel);
  else interleave_rows<NR>(o.B + std::size_t(j0 + c0) * o.ldb + k0, o.ldb, cols, kc, panel);
}

// ---- micro-kernels: acc = Σ_k fma over one K block, then C = acc or C += acc --------------------

/// Portable: MR x NR accumulators in plain arrays, std::fma (the same single rounding).
struct Portable {
  static constexpr int MR = 4, NR = 8;
  static void kernel(int kc, const float* Ap, const float* Bp, float* C, int ldc, int m, int n, bool add) {
    float acc[MR][NR] = {};
    for (int k = 0; k < kc; ++k)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = std::fma(Ap[k * MR + i], Bp[k * NR + j], acc[i][j]);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float& c = C[std::size_t(i) * ldc + j];
        c = add ? c + acc[i][j] : acc[i][j];
      }
  }
};

/// AVX2 + FMA: 6 rows x 16 columns (12 ymm accumulators).
struct Avx2 {
  static constexpr int MR = 6, NR = 16;
  __attribute__((target("avx2,fma"))) static void kernel(int kc, const float* Ap, const float* Bp, float* C,
                                                           int ldc, int m, int n, bool add) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
    for (int k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_loadu_ps(Bp + k * NR), b1 = _mm256_loadu_ps(Bp + k * NR + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 a = _mm256_broadcast_ss(Ap + k * MR + i);
        c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
      }
    }
    if (m == MR && n == NR) {
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        float* c = C + std::size_t(i) * ldc;
        if (add) {
          c0[i] = _mm256_add_ps(_mm256_loadu_ps(c), c0[i]);
          c1[i] = _mm256_add_ps(_mm256_loadu_ps(c + 8), c1[i]);
        }
        _mm256_storeu_ps(c, c0[i]);
        _mm256_storeu_ps(c + 8, c1[i]);
      }
      return;
    }
    alignas(32) float t[MR][NR];
    for (int i = 0; i < MR; ++i) {
      _mm256_store_ps(t[i], c0[i]);
      _mm256_store_ps(t[i] + 8, c1[i]);
    }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float& c = C[std::size_t(i) * ldc + j];
        c = add ? c + t[i][j] : t[i][j];
      }
  }
};

/// AVX-512F: 12 rows x 32 columns (24 zmm accumulators); partial tiles through masked loads and
/// stores.
struct Avx512 {
  static constexpr int MR = 12, NR = 32;
  __attribute__((target("avx512f"))) static void kernel(int kc, const float* Ap, const float* Bp, float* C,
                                                          int ldc, int m, int n, bool add) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_loadu_ps(Bp + k * NR), b1 = _mm512_loadu_ps(Bp + k * NR + 16);
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 a = _mm512_set1_ps(Ap[k * MR + i]);
        c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
      }
    }
    const __mmask16 k0 = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __mmask16 k1 = n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
      float* c = C + std::size_t(i) * ldc;
      if (add) {
        c0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, c), c0[i]);
        c1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, c + 16), c1[i]);
      }
      _mm512_mask_storeu_ps(c, k0, c0[i]);
      _mm512_mask_storeu_ps(c + 16, k1, c1[i]);
    }
  }
};

/// Row block [i0, i0 + mc) of C, columns [j0 + c0, j0 + c1) of column block j0, for K block k0
/// (op(B)'s slice already packed in Bp): packs op(A)'s slice and runs the micro-kernel over
/// its tiles.  c0 and c1 are multiples of NR (c1 may be nc).
template <class P>
void row_block(const Operands& o, int i0, int k0, int kc, int j0, int c0, int c1, const float* Bp, float* Ap) {
  constexpr int MR = P::MR, NR = P::NR;
  const int mc = std::min(kMC, o.M - i0);
  const bool add = o.accumulate || k0 > 0;
  pack_a<MR>(o, i0, mc, k0, kc, Ap);
  for (int q = c0; q < c1; q += NR) {
    const float* panel = Bp + std::size_t(q) * kc;
    for (int p = 0; p < mc; p += MR)
      P::kernel(kc, Ap + std::size_t(p) * kc, panel, o.C + std::size_t(i0 + p) * o.ldc + j0 + q, o.ldc,
                std::min(MR, mc - p), std::min(NR, c1 - q), add);
  }
}

template <class P>
void run(const Operands& o, int nthreads) {
  static_assert(kMC % P::MR == 0 && kNC % P::NR == 0, "blocking must be a multiple of the micro-tile");
  constexpr int NR = P::NR;
  if (o.M <= 0 || o.N <= 0) return;
  if (o.K <= 0) {
    if (!o.accumulate)
      for (int i = 0; i < o.M; ++i) std::fill_n(o.C + std::size_t(i) * o.ldc, o.N, 0.0f);
    return;
  }
  float* Bp = pack_buffers().b;  // the caller's: shared by the team below
  const int mblocks = (o.M + kMC - 1) / kMC;
  const double flops = 2.0 * o.M * o.N * o.K;
  // Work items are (row block, column chunk) pairs; with few row blocks (dW of a narrow
  // projection) the columns are split too, so that every thread has work.  Every entry's
  // arithmetic is fixed (gemm.hpp): how the panels and items are shared changes no bit.  Small
  // products run on the calling thread (a team of one).
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && flops >= 4e6)
  {
    const int team = omp_get_num_threads();
    float* Ap = pack_buffers().a;
    for (int j0 = 0; j0 < o.N; j0 += kNC)
      for (int k0 = 0; k0 < o.K; k0 += kKC) {
        const int nc = std::min(kNC, o.N - j0), kc = std::min(kKC, o.K - k0);
        const int npanels = (nc + NR - 1) / NR;
        int split = 1;
        while (team > 1 && mblocks * split < 4 * team && npanels >= 2 * split) split *= 2;
        const int per = (npanels + split - 1) / split;  // panels per column chunk
#pragma omp for schedule(dynamic, 2)  // dynamic: a thread the machine has descheduled holds up no panel
        for (int q = 0; q < npanels; ++q) pack_b_panel<NR>(o, k0, kc, j0, nc, q, Bp);
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < mblocks * split; ++it) {
          const int c0 = (it % split) * per * NR, c1 = std::min(nc, c0 + per * NR);
          if (c0 < c1) row_block<P>(o, (it / split) * kMC, k0, kc, j0, c0, c1, Bp, Ap);
        }
      }
  }
}


}  // namespace

void set_gemm_path(GemmPath p) noexcept { g_forced = p; }
GemmPath gemm_path_now() noexcept { return resolve(GemmPath::automatic); }

void gemm_path(GemmPath path, int nthreads, bool transA, bool transB, int M, int N, int K, const float* A,
               int lda, const float* B, int ldb, float* C, int ldc, bool accumulate) {
  const Operands o{transA, transB, M, N, K, A, lda, B, ldb, C, ldc, accumulate};
  nthreads = std::max(1, nthreads);
  switch (resolve(path)) {
    case GemmPath::avx512: run<Avx512>(o, nthreads); break;
    case GemmPath::avx2: run<Avx2>(o, nthreads); break;
    default: run<Portable>(o, nthreads); break;
  }
}

namespace panels {

namespace {
template <class F>
decltype(auto) with_path(F&& f) {
  switch (resolve(GemmPath::automatic)) {
    case GemmPath::avx512: return f(Avx512{});
    case GemmPath::avx2: return f(Avx2{});
    default: return f(Portable{});
  }
}
}  // namespace

Geometry geometry() noexcept {
  return with_path([](auto p) { return Geometry{decltype(p)::MR, decltype(p)::NR}; });
}

std::size_t a_size(int M, int K) noexcept {
  const int mr = geometry().mr;
  return std::size_t((M + mr - 1) / mr) * mr * std::size_t(std::max(K, 0));
}

std::size_t b_size(int K, int N) noexcept {
  const int nr = geometry().nr;
  return std::size_t((N + nr - 1) / nr) * nr * std::size_t(std::max(K, 0));
}

void pack_a(bool transA, int M, int K, const float* A, int lda, float* dst) noexcept {
  const Operands o{transA, false, M, 0, K, A, lda, nullptr, 0, nullptr, 0, false};
  with_path([&](auto p) {
    constexpr int MR = decltype(p)::MR;
    ::icmlkit::nn::pack_a<MR>(o, 0, M, 0, K, dst);  // the GEMM's own packer (not this function)
  });
}

void pack_b(bool transB, int K, int N, const float* B, int ldb, float* dst) noexcept {
  const Operands o{false, transB, 0, N, K, nullptr, 0, B, ldb, nullptr, 0, false};
  with_path([&](auto p) {
    constexpr int NR = decltype(p)::NR;
    for (int q = 0; q < (N + NR - 1) / NR; ++q) pack_b_panel<NR>(o, 0, K, 0, N, q, dst);
  });
}

void multiply(int M, int N, int K, const float* Ap, std::size_t astride, const float* Bp, std::size_t bstride,
              float* C, int ldc, bool accumulate) noexcept {
  with_path([&](auto p) {
    using P = decltype(p);
    constexpr int MR = P::MR, NR = P::NR;
    if (K <= 0) {
      if (!accumulate)
        for (int i = 0; i < M; ++i) std::fill_n(C + std::size_t(i) * ldc, N, 0.0f);
      return;
    }
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0);
      const bool add = accumulate || k0 > 0;
      for (int j = 0; j < N; j += NR) {
        const float* b = Bp + std::size_t(j / NR) * bstride + std::size_t(k0) * NR;
        for (int i = 0; i < M; i += MR)
          P::kernel(kc, Ap + std::size_t(i / MR) * astride + std::size_t(k0) * MR, b, C + std::size_t(i) * ldc + j,
                    ldc, std::min(MR, M - i), std::min(NR, N - j), add);
      }
    }
  });
}

}  // namespace panels

void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float* C, int ldc, bool accumulate) {
  gemm_path(GemmPath::automatic, threads(), transA, transB, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

const char* gemm_path_name() noexcept {
  switch (resolve(GemmPath::automatic)) {
    case GemmPath::avx512: return "avx512";
    case GemmPath::avx2: return "avx2";
    default: return "portable";
  }
}

double gemm_gflops(int n, int reps) {
  std::vector<float> a(std::size_t(n) * n), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = float(int(i % 7) - 3) * 0.125f;
    b[i] = float(int(i % 5) - 2) * 0.25f;
  }
  gemm(false, false, n, n, n, a.data(), n, b.data(), n, c.data(), n, false);  // warm-up
  double best = 1e300;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(false, false, n, n, n, a.data(), n, b.data(), n, c.data(), n, false);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * double(n) / best / 1e9;
}

}  // namespace icmlkit::nn
