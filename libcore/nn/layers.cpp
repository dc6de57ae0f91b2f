#include "nn/layers.hpp"

// The double path's products are small: Eigen's own OpenMP split of them costs far more than it
// gains (20x slower at 2 threads on this machine's 64 x 128 products).
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Dense>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "lm/forward.hpp"
#include "lm/matmul.hpp"
#include "nn/flash_attention.hpp"
#include "nn/gemm.hpp"
#include "nn/vecmath.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

namespace {
TrainKernels g_kernels = TrainKernels::fast;

/// Whether T's fast path runs (float with the fast kernel set).
template <class T>
bool fast() noexcept {
  return std::is_same_v<T, float> && g_kernels == TrainKernels::fast;
}
}  // namespace

void set_train_kernels(TrainKernels k) noexcept { g_kernels = k; }
TrainKernels train_kernels() noexcept { return g_kernels; }

namespace {

/// out [C, R] = in [R, C]^T.
template <class T>
void transpose(const T* in, int R, int C, T* out) {
  constexpr int BS = 32;
  for (int r0 = 0; r0 < R; r0 += BS)
    for (int c0 = 0; c0 < C; c0 += BS) {
      const int r1 = std::min(R, r0 + BS), c1 = std::min(C, c0 + BS);
      for (int r = r0; r < r1; ++r)
        for (int c = c0; c < c1; ++c) out[std::size_t(c) * R + r] = in[std::size_t(r) * C + c];
    }
}

/// Dot product: the engine's 8-lane arithmetic in float, a plain sum in double.
template <class T>
inline T dot(const T* a, const T* b, int n) {
  if constexpr (std::is_same_v<T, float>) {
    return lm::dot8(a, b, n);
  } else {
    T s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
  }
}

/// Row-major double matrices as Eigen maps (the double path's products run on Eigen's GEMM).
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat>;
using MMap = Eigen::Map<RowMat>;

/// y [N, O] = x [N, K] · W^T (double path).
void eigen_xwt(const double* x, int N, int K, const double* W, int O, double* y) {
  MMap(y, N, O).noalias() = CMap(x, N, K) * CMap(W, O, K).transpose();
}

}  // namespace

template <class T>
void linear_forward(const T* x, int N, int K, const T* W, int O, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) gemm(false, true, N, O, K, x, K, W, K, y, O, false);
    else lm::matmul_xwt(x, N, K, K, W, O, y, O);
  } else {
    eigen_xwt(x, N, K, W, O, y);
  }
}

template <class T>
void linear_backward(const T* dy, const T* x, int N, int K, const T* W, int O, T* dx, T* dW, bool accumulate_dx) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) {  // dx [N, K] (+)= dy [N, O] · W [O, K];  dW [O, K] += dy^T · x [N, K]
      if (dx) gemm(false, false, N, K, O, dy, O, W, K, dx, K, accumulate_dx);
      if (dW) gemm(true, false, O, K, N, dy, O, x, K, dW, K, true);
      return;
    }
  }
  if constexpr (std::is_same_v<T, double>) {  // dx [N, K] (+)= dy · W;  dW [O, K] += dy^T · x
    if (dx) {
      if (accumulate_dx) MMap(dx, N, K).noalias() += CMap(dy, N, O) * CMap(W, O, K);
      else MMap(dx, N, K).noalias() = CMap(dy, N, O) * CMap(W, O, K);
    }
    if (dW) MMap(dW, O, K).noalias() += CMap(dy, N, O).transpose() * CMap(x, N, K);
    return;
  }
  // Both products as "rows times transposed matrix" on the forward kernel:
  //   dx [N, K] = dy [N, O] · (W^T [K, O])^T        dW [O, K] += dy^T [O, N] · (x^T [K, N])^T
  thread_local std::vector<T> wt, dyt, xt, tmp;
  if (dx) {
    wt.resize(std::size_t(K) * O);
    transpose(W, O, K, wt.data());
    if (accumulate_dx) {
      tmp.resize(std::size_t(N) * K);
      linear_forward(dy, N, O, wt.data(), K, tmp.data());
      for (std::size_t i = 0; i < tmp.size(); ++i) dx[i] += tmp[i];
    } else {
      linear_forward(dy, N, O, wt.data(), K, dx);
    }
  }
  if (dW) {
    dyt.resize(std::size_t(O) * N);
    xt.resize(std::size_t(K) * N);
    tmp.resize(std::size_t(O) * K);
    transpose(dy, N, O, dyt.data());
    transpose(x, N, K, xt.data());
    linear_forward(dyt.data(), O, N, xt.data(), K, tmp.data());
    for (std::size_t i = 0; i < tmp.size(); ++i) dW[i] += tmp[i];
  }
}

template <class T>
void embedding_forward(const T* E, int d, const int* tokens, int N, T* out) {
  for (int n = 0; n < N; ++n) std::copy_n(E + std::size_t(tokens[n]) * d, d, out + std::size_t(n) * d);
}

template <class T>
void embedding_backward(const T* dout, int d, const int* tokens, int N, T* dE) {
  for (int n = 0; n < N; ++n) {
    T* row = dE + std::size_t(tokens[n]) * d;
    const T* g = dout + std::size_t(n) * d;
    for (int i = 0; i < d; ++i) row[i] += g[i];
  }
}

template <class T>
void rmsnorm_forward(const T* x, int N, int d, const T* w, double eps, T* y, T* rstd) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) {
      const int nt = threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && std::int64_t(N) * d >= (1 << 16))
      for (int r = 0; r < N; ++r)
        rstd[r] = vec::rmsnorm_row(x + std::size_t(r) * d, d, w, float(eps), y + std::size_t(r) * d);
      return;
    }
  }
  for (int r = 0; r < N; ++r) {
    const T* xr = x + std::size_t(r) * d;
    T* yr = y + std::size_t(r) * d;
    double ss = 0.0;
    for (int i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const T inv = static_cast<T>(1.0 / std::sqrt(ss / d + eps));  // as lm::rms_norm
    for (int i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
    rstd[r] = inv;
  }
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, int N, int d, const T* w, const T* rstd, T* dx, T* dw) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) {  // dw is one sum over rows: rows in order on one thread (d is small)
      for (int r = 0; r < N; ++r)
        vec::rmsnorm_backward_row(dy + std::size_t(r) * d, x + std::size_t(r) * d, d, w, rstd[r],
                                  dx + std::size_t(r) * d, dw);
      return;
    }
  }
  for (int r = 0; r < N; ++r) {
    const T* xr = x + std::size_t(r) * d;
    const T* g = dy + std::size_t(r) * d;
    T* dxr = dx + std::size_t(r) * d;
    const double rs = rstd[r];
    double dot_wgx = 0.0;
    for (int i = 0; i < d; ++i) dot_wgx += double(w[i]) * g[i] * xr[i];
    const double c = rs * rs * rs * dot_wgx / d;
    for (int i = 0; i < d; ++i) {
      dxr[i] += static_cast<T>(rs * w[i] * g[i] - c * xr[i]);
      dw[i] += static_cast<T>(double(g[i]) * xr[i] * rs);
    }
  }
}

template <class T>
void rope_tables(const int* pos, int N, int hd, double theta, std::vector<T>& cs, std::vector<T>& sn) {
  const int half = hd / 2;
  cs.resize(std::size_t(N) * half);
  sn.resize(cs.size());
  for (int r = 0; r < N; ++r)
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * i / hd);
      const double a = pos[r] * freq;
      cs[std::size_t(r) * half + i] = static_cast<T>(std::cos(a));
      sn[std::size_t(r) * half + i] = static_cast<T>(std::sin(a));
    }
}

namespace {
template <class T>
void rope_apply(T* x, int N, int H, int hd, lm::RopeStyle style, const T* cs, const T* sn, T sign) {
  const int half = hd / 2;
  for (int r = 0; r < N; ++r) {
    const T* c = cs + std::size_t(r) * half;
    const T* s = sn + std::size_t(r) * half;
    for (int h = 0; h < H; ++h) {
      T* xh = x + (std::size_t(r) * H + h) * hd;
      for (int i = 0; i < half; ++i) {
        const int a = style == lm::RopeStyle::half ? i : 2 * i;
        const int b = style == lm::RopeStyle::half ? i + half : 2 * i + 1;
        const T x1 = xh[a], x2 = xh[b], si = sign * s[i];
        xh[a] = x1 * c[i] - x2 * si;
        xh[b] = x2 * c[i] + x1 * si;
      }
    }
  }
}
}  // namespace

template <class T>
void rope_forward(T* x, int N, int H, int hd, lm::RopeStyle style, const T* cs, const T* sn) {
  rope_apply(x, N, H, hd, style, cs, sn, T(1));
}

template <class T>
void rope_backward(T* dx, int N, int H, int hd, lm::RopeStyle style, const T* cs, const T* sn) {
  rope_apply(dx, N, H, hd, style, cs, sn, T(-1));
}

namespace {

/// y [R, O] (row stride ldy) = x [R, K] (row stride ldx) · W^T, W [O, K] contiguous, on the
/// calling thread: the engine's 8-lane arithmetic in float (so an entry equals dot8 of its row
/// and column), plain sums in double.
template <class T>
void xwt1(const T* x, int R, int K, int ldx, const T* W, int O, T* y, int ldy) {
  if constexpr (std::is_same_v<T, float>) {
    lm::matmul_xwt_path(x, R, K, ldx, W, O, y, ldy, true, 1);
  } else {
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) {
        T s = 0;
        for (int k = 0; k < K; ++k) s += x[std::size_t(r) * ldx + k] * W[std::size_t(o) * K + k];
        y[std::size_t(r) * ldy + o] = s;
      }
  }
}

/// Causal products of one head: y[t, j] = x_t · w_j for j <= t (row blocks skip most of the
/// masked upper triangle; entries above the diagonal inside a block are computed and unused).
template <class T>
void causal_xwt(const T* x, int S, int K, int ldx, const T* W, T* y) {
  constexpr int RB = 64;
  for (int r0 = 0; r0 < S; r0 += RB) {
    const int r1 = std::min(S, r0 + RB);
    xwt1(x + std::size_t(r0) * ldx, r1 - r0, K, ldx, W, r1, y + std::size_t(r0) * S, S);
  }
}

/// Copies the head slice [S, hd] at column offset `off` of rows with stride `ld` to a
/// contiguous [S, hd] (transposed = false) or [hd, S] (transposed = true) array.
template <class T>
void gather_head(const T* src, int S, int hd, int ld, int off, T* dst, bool transposed) {
  for (int t = 0; t < S; ++t)
    for (int e = 0; e < hd; ++e) {
      const T v = src[std::size_t(t) * ld + off + e];
      if (transposed) dst[std::size_t(e) * S + t] = v;
      else dst[std::size_t(t) * hd + e] = v;
    }
}

}  // namespace

template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttnShape& s, T* out, T* mx, T* inv) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) return flash_attention_forward(q, k, v, s, out, mx, inv);
  }
  const int nh = s.n_heads, hd = s.head_dim, group = s.n_heads / s.n_kv_heads, S = s.S;
  const int dq = nh * hd, dkv = s.n_kv_heads * hd;
  const T scale = static_cast<T>(1.0 / std::sqrt(double(hd)));
  const int tasks = s.B * nh;
  const int nthreads = threads();
  const std::int64_t work = std::int64_t(tasks) * S * S * hd;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && tasks > 1 && work >= (1 << 21))
  {
    std::vector<T> sc(std::size_t(S) * S), kg(std::size_t(S) * hd);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / nh, h = task % nh, g = h / group, base = b * S;
      // scores: the 8-lane dot of every (t, j), exactly lm::forward's dot8(q_t, k_j).
      gather_head(k + std::size_t(base) * dkv, S, hd, dkv, g * hd, kg.data(), false);
      causal_xwt(q + std::size_t(base) * dq + h * hd, S, hd, dq, kg.data(), sc.data());
      for (int t = 0; t < S; ++t) {
        T* row = sc.data() + std::size_t(t) * S;
        for (int j = 0; j <= t; ++j) row[j] *= scale;
        T m = row[0];
        for (int j = 1; j <= t; ++j) m = std::max(m, row[j]);
        double sum = 0.0;
        for (int j = 0; j <= t; ++j) { row[j] = std::exp(row[j] - m); sum += row[j]; }
        const T iv = static_cast<T>(1.0 / sum);
        T* o = out + std::size_t(base + t) * dq + h * hd;
        std::fill_n(o, hd, T(0));
        for (int j = 0; j <= t; ++j) {  // the engine's order: keys ascending, no FMA
          const T p = row[j] * iv;
          const T* vv = v + std::size_t(base + j) * dkv + g * hd;
          for (int e = 0; e < hd; ++e) o[e] += p * vv[e];
        }
        mx[std::size_t(base + t) * nh + h] = m;
        inv[std::size_t(base + t) * nh + h] = iv;
      }
    }
  }
}

template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* mx,
                        const T* inv, const AttnShape& s, T* dq, T* dk, T* dv) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) return flash_attention_backward(dout, q, k, v, out, mx, inv, s, dq, dk, dv);
  }
  const int nh = s.n_heads, hd = s.head_dim, nkv = s.n_kv_heads, group = nh / nkv, S = s.S;
  const int dqw = nh * hd, dkvw = nkv * hd;
  const T scale = static_cast<T>(1.0 / std::sqrt(double(hd)));
  std::fill_n(dq, std::size_t(s.B) * S * dqw, T(0));
  std::fill_n(dk, std::size_t(s.B) * S * dkvw, T(0));
  std::fill_n(dv, std::size_t(s.B) * S * dkvw, T(0));
  const int tasks = s.B * nkv;
  const int nthreads = threads();
  const std::int64_t work = std::int64_t(s.B) * S * S * nh * hd;
  // One task per (sequence, KV head): its query heads run serially, so dk/dv have one writer.
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && tasks > 1 && work >= (1 << 21))
  {
    const std::size_t SS = std::size_t(S) * S, SH = std::size_t(S) * hd;
    std::vector<T> P(SS), dP(SS), tr(SS), kg(SH), kgt(SH), vg(SH), qt(SH), got(SH), tmp(SH);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / nkv, g = task % nkv, base = b * S;
      gather_head(k + std::size_t(base) * dkvw, S, hd, dkvw, g * hd, kg.data(), false);
      gather_head(k + std::size_t(base) * dkvw, S, hd, dkvw, g * hd, kgt.data(), true);
      gather_head(v + std::size_t(base) * dkvw, S, hd, dkvw, g * hd, vg.data(), false);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const T* qh = q + std::size_t(base) * dqw + h * hd;
        const T* goh = dout + std::size_t(base) * dqw + h * hd;
        causal_xwt(qh, S, hd, dqw, kg.data(), P.data());   // scores, as in the forward
        causal_xwt(goh, S, hd, dqw, vg.data(), dP.data());  // dP = dO · V^T
        for (int t = 0; t < S; ++t) {
          T* p = P.data() + std::size_t(t) * S;
          T* d = dP.data() + std::size_t(t) * S;
          const T m = mx[std::size_t(base + t) * nh + h], iv = inv[std::size_t(base + t) * nh + h];
          double D = 0.0;
          for (int j = 0; j <= t; ++j) {
            p[j] = std::exp(p[j] * scale - m) * iv;  // the forward's probability, bit for bit
            D += double(p[j]) * d[j];
          }
          for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - static_cast<T>(D)) * scale;  // dS / sqrt(hd)
          std::fill(p + t + 1, p + S, T(0));
          std::fill(d + t + 1, d + S, T(0));
        }
        // dQ_h = dS · K  (written straight into dq: one writer per (row, head))
        xwt1(dP.data(), S, S, S, kgt.data(), hd, dq + std::size_t(base) * dqw + h * hd, dqw);
        // dK_g += dS^T · Q_h
        transpose(dP.data(), S, S, tr.data());
        gather_head(qh, S, hd, dqw, 0, qt.data(), true);
        xwt1(tr.data(), S, S, S, qt.data(), hd, tmp.data(), hd);
        for (int t = 0; t < S; ++t)
          for (int e = 0; e < hd; ++e) dk[std::size_t(base + t) * dkvw + g * hd + e] += tmp[std::size_t(t) * hd + e];
        // dV_g += P^T · dO_h
        transpose(P.data(), S, S, tr.data());
        gather_head(goh, S, hd, dqw, 0, got.data(), true);
        xwt1(tr.data(), S, S, S, got.data(), hd, tmp.data(), hd);
        for (int t = 0; t < S; ++t)
          for (int e = 0; e < hd; ++e) dv[std::size_t(base + t) * dkvw + g * hd + e] += tmp[std::size_t(t) * hd + e];
      }
    }
  }
}

template <class T>
void swiglu_forward(const T* g, const T* u, std::int64_t n, T* h) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) {
      vec::parallel_chunks(n, 1 << 14, 4, [&](std::int64_t a, std::int64_t b) { vec::swiglu(g + a, u + a, b - a, h + a); });
      return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const T gv = g[i];
    h[i] = gv / (T(1) + std::exp(-gv)) * u[i];  // as lm::forward
  }
}

template <class T>
void swiglu_backward(const T* dh, const T* g, const T* u, std::int64_t n, T* dg, T* du) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast<T>()) {
      vec::parallel_chunks(n, 1 << 14, 4, [&](std::int64_t a, std::int64_t b) {
        vec::swiglu_backward(dh + a, g + a, u + a, b - a, dg + a, du + a);
      });
      return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const T gv = g[i], sg = T(1) / (T(1) + std::exp(-gv));
    du[i] = dh[i] * gv * sg;
    dg[i] = dh[i] * u[i] * sg * (T(1) + gv * (T(1) - sg));
  }
}

template <class T>
double cross_entropy(const T* logits, int N, int V, const int* targets, T* dlogits, double scale_all,
                     const double* row_scale, double* row_loss_out) {
  std::vector<double> row_loss(N, 0.0);  // shared by the threads below (one entry per row)
  const int nthreads = threads();
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && std::int64_t(N) * V >= (1 << 20))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + std::size_t(n) * V;
    T* dl = dlogits ? dlogits + std::size_t(n) * V : nullptr;
    const double scale = row_scale ? row_scale[n] : scale_all;
    if (targets[n] < 0) {
      if (dl) std::fill_n(dl, V, T(0));
      continue;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (fast<T>()) {
        const double lse = vec::logsumexp_row(l, V, dl, scale);
        row_loss[n] = lse - double(l[targets[n]]);
        if (dl) dl[targets[n]] -= static_cast<T>(scale);
        continue;
      }
    }
    double m = l[0];
    for (int i = 1; i < V; ++i) m = std::max(m, double(l[i]));
    double z = 0.0;
    for (int i = 0; i < V; ++i) z += std::exp(double(l[i]) - m);
    const double lse = m + std::log(z);
    row_loss[n] = lse - double(l[targets[n]]);
    if (dl) {
      for (int i = 0; i < V; ++i) dl[i] = static_cast<T>(scale * std::exp(double(l[i]) - lse));
      dl[targets[n]] -= static_cast<T>(scale);
    }
  }
  double total = 0.0;
  for (double x : row_loss) total += x;  // fixed order: thread-count invariant
  if (row_loss_out) std::copy(row_loss.begin(), row_loss.end(), row_loss_out);
  return total;
}

#define ICMLKIT_NN_LAYERS(T)                                                                          \
  template void linear_forward<T>(const T*, int, int, const T*, int, T*);                             \
  template void linear_backward<T>(const T*, const T*, int, int, const T*, int, T*, T*, bool);        \
  template void embedding_forward<T>(const T*, int, const int*, int, T*);                             \
  template void embedding_backward<T>(const T*, int, const int*, int, T*);                            \
  template void rmsnorm_forward<T>(const T*, int, int, const T*, double, T*, T*);                     \
  template void rmsnorm_backward<T>(const T*, const T*, int, int, const T*, const T*, T*, T*);        \
  template void rope_tables<T>(const int*, int, int, double, std::vector<T>&, std::vector<T>&);        \
  template void rope_forward<T>(T*, int, int, int, lm::RopeStyle, const T*, const T*);                \
  template void rope_backward<T>(T*, int, int, int, lm::RopeStyle, const T*, const T*);               \
  template void attention_forward<T>(const T*, const T*, const T*, const AttnShape&, T*, T*, T*);     \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*,     \
                                      const T*, const AttnShape&, T*, T*, T*);                                \
  template void swiglu_forward<T>(const T*, const T*, std::int64_t, T*);                              \
  template void swiglu_backward<T>(const T*, const T*, const T*, std::int64_t, T*, T*);               \
  template double cross_entropy<T>(const T*, int, int, const int*, T*, double, const double*, double*);

ICMLKIT_NN_LAYERS(float)
ICMLKIT_NN_LAYERS(double)

}  // namespace icmlkit::nn
