#include "nn/flash_attention.hpp"

// GCC 12 warns that the masked AVX-512 intrinsics read an uninitialised vector (the
// _mm512_undefined_ps of their pass-through operand) when inlined: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/gemm.hpp"
#include "nn/vecmath.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

namespace {

constexpr int BR = kFlashBR, BC = kFlashBC;

/// Number of keys of block j0 (of width bc) that query position t may attend: clamp(t − j0 + 1).
inline int visible(int t, int j0, int bc) { return std::clamp(t - j0 + 1, 0, bc); }

/// A thread's scratch, grown on demand and kept (no allocation once shapes repeat).
struct Scratch {
  std::vector<float> buf;
  float* get(std::size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  }
};
Scratch& scratch(int which) {
  thread_local Scratch s[12];
  return s[which];
}

// ---- the softmax of a score tile ------------------------------------------------------------
// With head_dim 32 a score costs 2 x 2 x 32 FLOP of products, so the softmax per score is as
// expensive as the products unless it runs one pass per tile in full-width vectors: AVX-512
// versions below (exp inline, tails masked), the vec:: row functions elsewhere.

/// The tile softmax follows the GEMM's path (nn::set_gemm_path), so tests can run either.
bool use_avx512() noexcept { return gemm_path_now() == GemmPath::avx512; }

/// e^x on 16 lanes: vec::exp's method (clamp, x = n ln2 + r, Cephes polynomial), 2^n by scalef.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3f)), _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 lanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max(n, 0)) - 1); }

/// Forward, one tile: for rows r < br, the first n_r = visible(i0 + r, j0, bc) scores of row r
/// (stride ld) become e^(scale·s − m_new) with m_new = max(m_r, scale · max s), the rest of the
/// row's bc entries 0; l_r = l_r · alpha_r + Σ e with alpha_r = e^(m_r − m_new) (0 while m_r is
/// −inf, 1 for rows without visible keys).
__attribute__((target("avx512f"))) void online_softmax_avx512(float* sc, int br, int bc, int ld, int i0, int j0,
                                                               float scale, float* m, float* l, float* alpha) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < br; ++r) {
    float* row = sc + std::size_t(r) * ld;
    const int n = visible(i0 + r, j0, bc);
    if (n == 0) {
      std::fill(row, row + bc, 0.0f);
      alpha[r] = 1.0f;
      continue;
    }
    __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int c = 0; c < n; c += 16)
      vmax = _mm512_mask_max_ps(vmax, lanes(n - c), vmax, _mm512_loadu_ps(row + c));
    const float mnew = std::max(m[r], scale * _mm512_reduce_max_ps(vmax));
    const __m512 shift = _mm512_set1_ps(-mnew);
    __m512 sum = _mm512_setzero_ps();
    int c = 0;
    for (; c < n; c += 16) {
      const __mmask16 k = lanes(n - c);
      const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, row + c), vs, shift)));
      sum = _mm512_add_ps(sum, e);
      _mm512_mask_storeu_ps(row + c, lanes(bc - c), e);
    }
    for (; c < bc; c += 16) _mm512_mask_storeu_ps(row + c, lanes(bc - c), _mm512_setzero_ps());
    alpha[r] = m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : vec::exp(m[r] - mnew);
    l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);
    m[r] = mnew;
  }
}

void online_softmax(float* sc, int br, int bc, int ld, int i0, int j0, float scale, float* m, float* l,
                    float* alpha) {
  if (use_avx512()) return online_softmax_avx512(sc, br, bc, ld, i0, j0, scale, m, l, alpha);
  for (int r = 0; r < br; ++r) {
    float* row = sc + std::size_t(r) * ld;
    const int n = visible(i0 + r, j0, bc);
    alpha[r] = 1.0f;
    if (n > 0) {
      const float mnew = std::max(m[r], scale * vec::max(row, n));
      alpha[r] = m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : vec::exp(m[r] - mnew);
      l[r] = l[r] * alpha[r] + vec::exp_affine_sum(row, n, scale, -mnew);
      m[r] = mnew;
    }
    std::fill(row + n, row + bc, 0.0f);
  }
}

/// Backward, one tile: P[r][j] = e^(scale·s − mx_r) · inv_r for the visible j, 0 for the rest
/// (mx, inv of the tile's first row at index 0, consecutive rows `mstride` apart).
__attribute__((target("avx512f"))) void probs_avx512(float* P, int br, int bc, int ld, int i0, int j0, float scale,
                                                      const float* mx, const float* inv, int mstride) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < br; ++r) {
    float* row = P + std::size_t(r) * ld;
    const int n = visible(i0 + r, j0, bc);
    const __m512 shift = _mm512_set1_ps(-mx[std::size_t(r) * mstride]);
    const __m512 c = _mm512_set1_ps(inv[std::size_t(r) * mstride]);
    int j = 0;
    for (; j < n; j += 16) {
      const __mmask16 k = lanes(n - j);
      const __m512 e = exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, row + j), vs, shift));
      _mm512_mask_storeu_ps(row + j, lanes(bc - j), _mm512_maskz_mul_ps(k, e, c));
    }
    for (; j < bc; j += 16) _mm512_mask_storeu_ps(row + j, lanes(bc - j), _mm512_setzero_ps());
  }
}

void probs(float* P, int br, int bc, int ld, int i0, int j0, float scale, const float* mx, const float* inv,
           int mstride) {
  if (use_avx512()) return probs_avx512(P, br, bc, ld, i0, j0, scale, mx, inv, mstride);
  for (int r = 0; r < br; ++r) {
    float* p = P + std::size_t(r) * ld;
    const int n = visible(i0 + r, j0, bc);
    vec::exp_affine_scale(p, n, scale, -mx[std::size_t(r) * mstride], inv[std::size_t(r) * mstride]);
    std::fill(p + n, p + bc, 0.0f);
  }
}

/// dS = P ⊙ (dP − D_r) · scale in place of dP for a tile's rows (D of the tile's first row at
/// index 0).
__attribute__((target("avx512f"))) void softmax_grad_avx512(const float* P, float* dP, int br, int bc, int ld,
                                                             const float* D, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < br; ++r) {
    const float* p = P + std::size_t(r) * ld;
    float* d = dP + std::size_t(r) * ld;
    const __m512 vd = _mm512_set1_ps(D[r]);
    for (int j = 0; j < bc; j += 16) {
      const __mmask16 k = lanes(bc - j);
      const __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + j), vd);
      _mm512_mask_storeu_ps(d + j, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), g), vs));
    }
  }
}

void softmax_grad(const float* P, float* dP, int br, int bc, int ld, const float* D, float scale) {
  if (use_avx512()) return softmax_grad_avx512(P, dP, br, bc, ld, D, scale);
  for (int r = 0; r < br; ++r)
    vec::softmax_grad(P + std::size_t(r) * ld, dP + std::size_t(r) * ld, bc, D[r], scale);
}

}  // namespace

void flash_attention_forward(const float* q, const float* k, const float* v, const AttnShape& s, float* out,
                             float* mx, float* inv) {
  const int nh = s.n_heads, hd = s.head_dim, group = s.n_heads / s.n_kv_heads, S = s.S;
  const int dq = nh * hd, dkv = s.n_kv_heads * hd;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const int tasks = s.B * nh, nt = threads();
  const double work = double(tasks) * S * S * hd;
  const auto geo = panels::geometry();
  const std::size_t qstride = std::size_t(geo.mr) * hd, kstride = std::size_t(geo.nr) * hd;
  const std::size_t vstride = std::size_t(geo.nr) * S;
#pragma omp parallel num_threads(nt) if (nt > 1 && tasks > 1 && work >= double(1 << 21))
  {
    float* sc = scratch(0).get(std::size_t(BR) * BC);
    float* o = scratch(1).get(std::size_t(BR) * hd);
    float* m = scratch(2).get(BR);
    float* l = scratch(3).get(BR);
    float* alpha = scratch(8).get(BR);
    float* Qp = scratch(4).get(panels::a_size(S, hd));   // Q_h as A panels          [S, hd]
    float* Ktp = scratch(5).get(panels::b_size(hd, S));  // K_g^T as B panels        [hd, S]
    float* Vp = scratch(6).get(panels::b_size(S, hd));   // V_g as B panels          [S, hd]
    float* Pp = scratch(7).get(panels::a_size(BR, BC));  // one tile's P as A panels [br, bc]
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / nh, h = task % nh, g = h / group, base = b * S;
      panels::pack_a(false, S, hd, q + std::size_t(base) * dq + h * hd, dq, Qp);
      panels::pack_b(true, hd, S, k + std::size_t(base) * dkv + g * hd, dkv, Ktp);
      panels::pack_b(false, S, hd, v + std::size_t(base) * dkv + g * hd, dkv, Vp);
      for (int i0 = 0; i0 < S; i0 += BR) {
        const int br = std::min(BR, S - i0);
        std::fill_n(m, br, -std::numeric_limits<float>::infinity());
        std::fill_n(l, br, 0.0f);
        std::fill_n(o, std::size_t(br) * hd, 0.0f);
        for (int j0 = 0; j0 < i0 + br; j0 += BC) {
          const int bc = std::min(BC, i0 + br - j0);
          panels::multiply(br, bc, hd, Qp + std::size_t(i0) * hd, qstride, Ktp + std::size_t(j0) * hd, kstride, sc,
                           BC, false);  // raw scores Q_i K_j^T
          online_softmax(sc, br, bc, BC, i0, j0, scale, m, l, alpha);
          for (int r = 0; r < br; ++r)
            if (alpha[r] != 1.0f) vec::scale(o + std::size_t(r) * hd, hd, alpha[r]);
          panels::pack_a(false, br, bc, sc, BC, Pp);
          panels::multiply(br, hd, bc, Pp, std::size_t(geo.mr) * bc, Vp + std::size_t(j0) * geo.nr, vstride, o, hd, true);  // O += P V_j
        }
        for (int r = 0; r < br; ++r) {
          const std::size_t row = std::size_t(base + i0 + r);
          const float il = 1.0f / l[r];
          float* dst = out + row * dq + h * hd;
          for (int e = 0; e < hd; ++e) dst[e] = o[std::size_t(r) * hd + e] * il;
          mx[row * nh + h] = m[r];
          inv[row * nh + h] = il;
        }
      }
    }
  }
}

void flash_attention_backward(const float* dout, const float* q, const float* k, const float* v,
                              const float* out, const float* mx, const float* inv, const AttnShape& s,
                              float* dq, float* dk, float* dv) {
  const int nh = s.n_heads, hd = s.head_dim, nkv = s.n_kv_heads, group = nh / nkv, S = s.S;
  const int dqw = nh * hd, dkvw = nkv * hd;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const int tasks = s.B * nkv, nt = threads();
  const double work = double(s.B) * S * S * nh * hd;
  const auto geo = panels::geometry();
  const std::size_t astride = std::size_t(geo.mr) * hd, tstride = std::size_t(geo.nr) * hd;
  const std::size_t sstride = std::size_t(geo.nr) * S;
#pragma omp parallel num_threads(nt) if (nt > 1 && tasks > 1 && work >= double(1 << 21))
  {
    float* P = scratch(0).get(std::size_t(BR) * BC);
    float* dP = scratch(1).get(std::size_t(BR) * BC);
    float* D = scratch(2).get(S);
    float* Ktp = scratch(3).get(panels::b_size(hd, S));   // K_g^T  B panels [hd, S]: scores
    float* Kp = scratch(4).get(panels::b_size(S, hd));    // K_g    B panels [S, hd]: dQ += dS K
    float* Vtp = scratch(5).get(panels::b_size(hd, S));   // V_g^T  B panels [hd, S]: dP = dO V^T
    float* Qp = scratch(6).get(panels::a_size(S, hd));    // Q_h    A panels [S, hd]: scores
    float* Qb = scratch(7).get(panels::b_size(S, hd));    // Q_h    B panels [S, hd]: dK += dS^T Q
    float* dOp = scratch(8).get(panels::a_size(S, hd));   // dO_h   A panels [S, hd]: dP
    float* dOb = scratch(9).get(panels::b_size(S, hd));   // dO_h   B panels [S, hd]: dV += P^T dO
    float* Tp = scratch(10).get(std::max(panels::a_size(BR, BC), panels::a_size(BC, BR)));  // a tile as A panels
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / nkv, g = task % nkv, base = b * S;
      // This task is the only writer of its rows' dq (heads of group g) and dk, dv (KV head g).
      for (int t = 0; t < S; ++t) {
        const std::size_t row = std::size_t(base + t);
        std::fill_n(dq + row * dqw + g * group * hd, std::size_t(group) * hd, 0.0f);
        std::fill_n(dk + row * dkvw + g * hd, hd, 0.0f);
        std::fill_n(dv + row * dkvw + g * hd, hd, 0.0f);
      }
      const float* Kg = k + std::size_t(base) * dkvw + g * hd;
      const float* Vg = v + std::size_t(base) * dkvw + g * hd;
      panels::pack_b(true, hd, S, Kg, dkvw, Ktp);
      panels::pack_b(false, S, hd, Kg, dkvw, Kp);
      panels::pack_b(true, hd, S, Vg, dkvw, Vtp);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* Qh = q + std::size_t(base) * dqw + h * hd;
        const float* dOh = dout + std::size_t(base) * dqw + h * hd;
        panels::pack_a(false, S, hd, Qh, dqw, Qp);
        panels::pack_b(false, S, hd, Qh, dqw, Qb);
        panels::pack_a(false, S, hd, dOh, dqw, dOp);
        panels::pack_b(false, S, hd, dOh, dqw, dOb);
        for (int t = 0; t < S; ++t) {
          const std::size_t off = std::size_t(base + t) * dqw + h * hd;
          D[t] = vec::dot(dout + off, out + off, hd);
        }
        for (int j0 = 0; j0 < S; j0 += BC) {
          const int bc = std::min(BC, S - j0);
          float* dKj = dk + std::size_t(base + j0) * dkvw + g * hd;
          float* dVj = dv + std::size_t(base + j0) * dkvw + g * hd;
          for (int i0 = (j0 / BR) * BR; i0 < S; i0 += BR) {
            const int br = std::min(BR, S - i0);
            const std::size_t qoff = std::size_t(base + i0) * dqw + h * hd;
            panels::multiply(br, bc, hd, Qp + std::size_t(i0) * hd, astride, Ktp + std::size_t(j0) * hd, tstride, P,
                             BC, false);  // raw scores
            probs(P, br, bc, BC, i0, j0, scale, mx + std::size_t(base + i0) * nh + h, inv + std::size_t(base + i0) * nh + h,
                  nh);
            panels::pack_a(true, bc, br, P, BC, Tp);  // P^T
            panels::multiply(bc, hd, br, Tp, std::size_t(geo.mr) * br, dOb + std::size_t(i0) * geo.nr, sstride, dVj,
                             dkvw, true);  // dV_j += P^T dO_i
            panels::multiply(br, bc, hd, dOp + std::size_t(i0) * hd, astride, Vtp + std::size_t(j0) * hd, tstride, dP,
                             BC, false);  // dP = dO_i V_j^T
            softmax_grad(P, dP, br, bc, BC, D + i0, scale);
            panels::pack_a(false, br, bc, dP, BC, Tp);  // dS (already / sqrt(hd)); zero where masked
            panels::multiply(br, hd, bc, Tp, std::size_t(geo.mr) * bc, Kp + std::size_t(j0) * geo.nr, sstride,
                             dq + qoff, dqw, true);  // dQ_i += dS K_j
            panels::pack_a(true, bc, br, dP, BC, Tp);  // dS^T
            panels::multiply(bc, hd, br, Tp, std::size_t(geo.mr) * br, Qb + std::size_t(i0) * geo.nr, sstride, dKj,
                             dkvw, true);  // dK_j += dS^T Q_i
          }
        }
      }
    }
  }
}

}  // namespace icmlkit::nn
