// Vectorised elementwise kernels of the float training path (issue 24), compiled three times
// (x86-64-v4: AVX-512; x86-64-v3: AVX2 + FMA; baseline) and chosen at load time by the CPU
// (GCC function multi-versioning).  Every reduction keeps 16 partial sums in a fixed lane
// order, so results depend on the input and the CPU's path only: never on threads or on which
// other rows share a call.  A different path may differ in the last bits (fused multiply-add is
// contracted on the AVX paths), so training bits are reproducible per machine type.
#pragma once

#include <algorithm>
#include <cstdint>

#include "util/threads.hpp"

namespace icmlkit::nn::vec {

/// Runs f(begin, end) over [0, n) in fixed chunks of `chunk`, in parallel (icmlkit::threads())
/// when there are more than `min_chunks` of them.  For elementwise work, whose bits the split
/// cannot change.
template <class F>
void parallel_chunks(std::int64_t n, std::int64_t chunk, std::int64_t min_chunks, F&& f) {
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  const int nt = threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && chunks > min_chunks)
  for (std::int64_t c = 0; c < chunks; ++c) f(c * chunk, std::min(n, (c + 1) * chunk));
}

/// e^x in float for x in [−87.3, 88.3] (inputs outside are clamped to that range): Cody–Waite
/// reduction x = n ln2 + r and a degree-6 polynomial for e^r (Cephes expf coefficients);
/// relative error about 2e-7 (test_nn.cpp checks it against std::exp in double).
float exp(float x) noexcept;

/// max_i x[i] for n >= 1.
float max(const float* x, int n) noexcept;

/// x[i] = e^(a·x[i] + b) for i < n; returns Σ_i x[i] (float lanes in a fixed order).
float exp_affine_sum(float* x, int n, float a, float b) noexcept;

/// x[i] = e^(a·x[i] + b) · c for i < n.
void exp_affine_scale(float* x, int n, float a, float b, float c) noexcept;

/// dS[i] = P[i] · (dP[i] − D) · s in place of dP, for i < n (attention's softmax backward).
void softmax_grad(const float* P, float* dP, int n, float D, float s) noexcept;

/// x[i] *= a for i < n.
void scale(float* x, int n, float a) noexcept;

/// Σ_i x[i]·y[i] in float lanes, accumulated in a fixed order.
float dot(const float* x, const float* y, int n) noexcept;

/// y [d] = w ⊙ x · r where r = 1/sqrt(mean(x²) + eps) (returned); the training RMSNorm.
float rmsnorm_row(const float* x, int d, const float* w, float eps, float* y) noexcept;

/// RMSNorm backward of one row: dx += r·(w⊙dy) − r³/d · x · Σ_j w_j dy_j x_j; dw += dy ⊙ x · r.
void rmsnorm_backward_row(const float* dy, const float* x, int d, const float* w, float r, float* dx,
                          float* dw) noexcept;

/// h[i] = silu(g[i]) · u[i] for i < n (SwiGLU).
void swiglu(const float* g, const float* u, std::int64_t n, float* h) noexcept;

/// dg = dh ⊙ u ⊙ σ(g)(1 + g(1 − σ(g))), du = dh ⊙ silu(g).
void swiglu_backward(const float* dh, const float* g, const float* u, std::int64_t n, float* dg,
                     float* du) noexcept;

/// One row of softmax cross-entropy: returns log Σ_i e^(l[i]) (max-shifted, the sum in double
/// over float lanes); with `dl` non-null writes dl[i] = scale · e^(l[i] − lse) (target not
/// subtracted here).
double logsumexp_row(const float* l, int V, float* dl, double scale) noexcept;

/// AdamW on a contiguous slice (PyTorch's update, nn/adamw.hpp): m = b1 m + (1−b1) g;
/// v = b2 v + (1−b2) g²; w ·= keep; w −= step · m / (sqrt(v) / sqrt_bc2 + eps).
void adamw(float* w, const float* g, float* m, float* v, std::int64_t n, float b1, float b2, float keep,
           float step, float sqrt_bc2, float eps) noexcept;

}  // namespace icmlkit::nn::vec
