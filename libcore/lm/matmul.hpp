// Batch-invariant matrix products for the CPU engine.
//
// y[r, o] = sum_k x[r, k] * W[o, k] is evaluated in one fixed order for every (r, o): eight
// lanes (lane j takes k = j mod 8, fused multiply-add in increasing k, the last partial chunk
// zero-padded), then the fixed sum ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).  Which rows share a
// pass, how the work is tiled, how many threads run it, and whether the AVX2 or the portable
// path runs never change a single bit of y (tests prove it), so a row's logits do not depend
// on the rest of the batch — the property lossless speculative decoding needs.
#pragma once

#include <cstdint>

namespace icmlkit::lm {

/// y [R, O] (row stride ldy) = x [R, K] (row stride ldx) * W^T, W [O, K] row-major.
/// Parallel over output columns with OpenMP (icmlkit::threads()).
void matmul_xwt(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy);

/// The same on the portable (non-AVX2) path or the AVX2 path, for tests: both must agree
/// bitwise with matmul_xwt.  `avx2` is ignored (portable used) when the CPU lacks AVX2/FMA.
void matmul_xwt_path(const float* x, int R, int K, int ldx, const float* W, int O, float* y,
                     int ldy, bool avx2, int threads);

/// The same with W held as IEEE binary16 bits [O, K]: every weight is widened exactly, so the
/// result is bitwise that of matmul_xwt on the widened float32 weights (half the bytes read).
void matmul_xwt_f16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy);
/// The f16 product on a chosen code path (tests).
void matmul_xwt_f16_path(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y,
                         int ldy, bool avx2, int threads);

/// The 8-lane dot product of a and b (length K) with the same arithmetic as one entry of
/// matmul_xwt (used for attention scores).
float dot8(const float* a, const float* b, int K) noexcept;

/// Whether this CPU runs the AVX2+FMA path.
bool have_avx2() noexcept;

}  // namespace icmlkit::lm
