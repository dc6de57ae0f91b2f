// The training products: a packed, blocked single-precision GEMM with run-time CPU dispatch.
//
// C [M, N] = op(A) [M, K] · op(B) [K, N]  (or C += …), every operand row-major with its own
// leading dimension; op(X) is X or X^T as the flags say, read through the packing, so no
// transposed copy of an operand is ever materialised (dW += dy^T·x reads dy as it lies).
//
// Arithmetic (the determinism contract, issue 24): for every output entry,
//   acc_b = fma(a[k_last], b[k_last], … fma(a[k_0], b[k_0], 0))   over the k of K-block b
//   (blocks of kGemmKC consecutive k, in increasing k), and
//   C = acc_0 + acc_1 + … (left to right), added to the old C when accumulating.
// That sequence depends only on K and on the entry's own row of op(A) and column of op(B): not
// on M or N, the tiling, the thread count or the code path (AVX-512, AVX2 and the portable
// loop all use fused multiply-add), so a row's bits are the same whether it is multiplied
// alone or inside a batch of 2048 (test_nn_gemm.cpp proves it).  This is the property packed
// LoRA jobs and data-parallel ranks rely on.  It is not the inference engine's 8-lane order
// (lm/matmul.hpp), which stays what inference uses.
#pragma once

#include <cstddef>

namespace icmlkit::nn {

/// Depth of one K block (see the arithmetic above).
inline constexpr int kGemmKC = 256;

/// Which inner kernel runs (tests and benchmarks; the results are bitwise the same).
enum class GemmPath { automatic, avx512, avx2, portable };

/// Restricts what GemmPath::automatic resolves to (process-wide; tests run the whole fast path —
/// gemm, nn::panels and flash attention's softmax — on each path a CPU offers).  `automatic`
/// restores the CPU's best.  A path the CPU lacks falls back to portable.
void set_gemm_path(GemmPath p) noexcept;
/// What GemmPath::automatic resolves to now.
GemmPath gemm_path_now() noexcept;

/// C [M, N] (row stride ldc) = (or += when `accumulate`) op(A) · op(B), where
/// op(A)[i][k] = transA ? A[k·lda + i] : A[i·lda + k] and op(B)[k][j] = transB ? B[j·ldb + k]
/// : B[k·ldb + j].  M, N, K >= 0 (K = 0 gives C = 0, or leaves C when accumulating).  Parallel
/// over output tiles on icmlkit::threads(); no allocation after a thread's first call.
void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float* C, int ldc, bool accumulate);

/// The same on a chosen path (falls back to portable when the CPU lacks it) and thread count.
void gemm_path(GemmPath path, int threads, bool transA, bool transB, int M, int N, int K, const float* A,
               int lda, const float* B, int ldb, float* C, int ldc, bool accumulate);

/// Products on operands packed once and reused (flash attention's tiles, which would otherwise
/// repack the same rows for every tile).  The layout is the micro-kernel's on the path gemm()
/// takes on this CPU: an A operand [M, K] is ceil(M/mr) panels, panel p holding rows
/// p·mr … p·mr+mr−1 k-major (element (i, k) at p·mr·K + k·mr + i mod mr, rows past M zero);
/// a B operand [K, N] is ceil(N/nr) panels of nr columns, element (k, j) at
/// (j / nr)·nr·K + k·nr + j mod nr.  The arithmetic per entry is gemm()'s.
namespace panels {
struct Geometry {
  int mr, nr;  ///< rows of an A panel, columns of a B panel
};
/// The running path's panel sizes.
Geometry geometry() noexcept;
/// Floats pack_a / pack_b write for an [M, K] A operand / a [K, N] B operand.
std::size_t a_size(int M, int K) noexcept;
std::size_t b_size(int K, int N) noexcept;
/// Packs op(A) [M, K] (op as in gemm) into dst (a_size(M, K) floats).
void pack_a(bool transA, int M, int K, const float* A, int lda, float* dst) noexcept;
/// Packs op(B) [K, N] into dst (b_size(K, N) floats).
void pack_b(bool transB, int K, int N, const float* B, int ldb, float* dst) noexcept;
/// C [M, N] (=, or += when accumulating) from packed panels on the calling thread: Ap is the
/// first A panel of the rows wanted (offset by k0·mr for a K range starting at k0), A panels
/// `astride` floats apart (mr · the packed K); Bp and `bstride` likewise for B.
void multiply(int M, int N, int K, const float* Ap, std::size_t astride, const float* Bp, std::size_t bstride,
              float* C, int ldc, bool accumulate) noexcept;
}  // namespace panels

/// Name of the path gemm() takes on this CPU ("avx512", "avx2" or "portable").
const char* gemm_path_name() noexcept;

/// GFLOP/s of gemm() for an n x n x n product on the current thread count, best of `reps`
/// timed runs after one warm-up (2 n^3 FLOP each): the machine's measured GEMM rate that the
/// trainer's model-FLOP utilisation is quoted against.
double gemm_gflops(int n = 1024, int reps = 3);

}  // namespace icmlkit::nn
