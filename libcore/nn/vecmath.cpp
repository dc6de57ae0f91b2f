#include "nn/vecmath.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

// One clone per path; the loops below are written so that GCC vectorises them (no branches in
// the bodies, reductions over an explicit array of 16 lanes).
#define ICMLKIT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace icmlkit::nn::vec {

namespace {

constexpr int L = 16;  // lanes of every reduction

/// The exp kernel, inlined into every clone (see vecmath.hpp for the method).
inline float exp_inline(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const std::int32_t e = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

/// Fixed combination of the 16 lanes: pairwise, ((0+1)+(2+3))+... .
inline float combine(const float* a) {
  float b[8], c[4];
  for (int i = 0; i < 8; ++i) b[i] = a[2 * i] + a[2 * i + 1];
  for (int i = 0; i < 4; ++i) c[i] = b[2 * i] + b[2 * i + 1];
  return (c[0] + c[1]) + (c[2] + c[3]);
}

}  // namespace

float exp(float x) noexcept { return exp_inline(x); }

ICMLKIT_CLONES float max(const float* x, int n) noexcept {
  float m[L];
  for (int l = 0; l < L; ++l) m[l] = x[0];
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
  for (; i < n; ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
  float r = m[0];
  for (int l = 1; l < L; ++l) r = m[l] > r ? m[l] : r;
  return r;
}

ICMLKIT_CLONES float exp_affine_sum(float* x, int n, float a, float b) noexcept {
  float s[L] = {};
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) {
      const float e = exp_inline(a * x[i + l] + b);
      x[i + l] = e;
      s[l] += e;
    }
  for (int l = 0; i < n; ++i, ++l) {
    x[i] = exp_inline(a * x[i] + b);
    s[l] += x[i];
  }
  return combine(s);
}

ICMLKIT_CLONES void exp_affine_scale(float* x, int n, float a, float b, float c) noexcept {
  for (int i = 0; i < n; ++i) x[i] = exp_inline(a * x[i] + b) * c;
}

ICMLKIT_CLONES void softmax_grad(const float* P, float* dP, int n, float D, float s) noexcept {
  for (int i = 0; i < n; ++i) dP[i] = P[i] * (dP[i] - D) * s;
}

ICMLKIT_CLONES void scale(float* x, int n, float a) noexcept {
  for (int i = 0; i < n; ++i) x[i] *= a;
}

ICMLKIT_CLONES float dot(const float* x, const float* y, int n) noexcept {
  float s[L] = {};
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) s[l] += x[i + l] * y[i + l];
  for (int l = 0; i < n; ++i, ++l) s[l] += x[i] * y[i];
  return combine(s);
}

ICMLKIT_CLONES float rmsnorm_row(const float* x, int d, const float* w, float eps, float* y) noexcept {
  float s[L] = {};
  int i = 0;
  for (; i + L <= d; i += L)
    for (int l = 0; l < L; ++l) s[l] += x[i + l] * x[i + l];
  for (int l = 0; i < d; ++i, ++l) s[l] += x[i] * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(double(combine(s)) / d + eps));
  for (int j = 0; j < d; ++j) y[j] = w[j] * (x[j] * r);
  return r;
}

ICMLKIT_CLONES void rmsnorm_backward_row(const float* dy, const float* x, int d, const float* w, float r,
                                         float* dx, float* dw) noexcept {
  float s[L] = {};
  int i = 0;
  for (; i + L <= d; i += L)
    for (int l = 0; l < L; ++l) s[l] += w[i + l] * dy[i + l] * x[i + l];
  for (int l = 0; i < d; ++i, ++l) s[l] += w[i] * dy[i] * x[i];
  const float c = r * r * r * combine(s) / float(d);
  for (int j = 0; j < d; ++j) {
    dx[j] += r * w[j] * dy[j] - c * x[j];
    dw[j] += dy[j] * x[j] * r;
  }
}

ICMLKIT_CLONES void swiglu(const float* g, const float* u, std::int64_t n, float* h) noexcept {
  for (std::int64_t i = 0; i < n; ++i) h[i] = g[i] / (1.0f + exp_inline(-g[i])) * u[i];
}

ICMLKIT_CLONES void swiglu_backward(const float* dh, const float* g, const float* u, std::int64_t n, float* dg,
                                    float* du) noexcept {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gv = g[i], sg = 1.0f / (1.0f + exp_inline(-gv));
    du[i] = dh[i] * gv * sg;
    dg[i] = dh[i] * u[i] * sg * (1.0f + gv * (1.0f - sg));
  }
}

ICMLKIT_CLONES double logsumexp_row(const float* l, int V, float* dl, double scale) noexcept {
  const float m = max(l, V);
  float s[L] = {};
  int i = 0;
  for (; i + L <= V; i += L)
    for (int k = 0; k < L; ++k) s[k] += exp_inline(l[i + k] - m);
  for (int k = 0; i < V; ++i, ++k) s[k] += exp_inline(l[i] - m);
  double z = 0.0;
  for (int k = 0; k < L; ++k) z += s[k];
  const double lse = double(m) + std::log(z);
  if (dl) {
    const float lsef = static_cast<float>(lse), sc = static_cast<float>(scale);
    for (int j = 0; j < V; ++j) dl[j] = sc * exp_inline(l[j] - lsef);
  }
  return lse;
}

ICMLKIT_CLONES void adamw(float* w, const float* g, float* m, float* v, std::int64_t n, float b1, float b2,
                          float keep, float step, float sqrt_bc2, float eps) noexcept {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (std::int64_t j = 0; j < n; ++j) {
    const float gj = g[j];
    const float mj = b1 * m[j] + c1 * gj;
    const float vj = b2 * v[j] + c2 * gj * gj;
    m[j] = mj;
    v[j] = vj;
    w[j] = w[j] * keep - step * mj / (__builtin_sqrtf(vj) / sqrt_bc2 + eps);
  }
}

}  // namespace icmlkit::nn::vec
