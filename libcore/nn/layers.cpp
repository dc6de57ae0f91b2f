#include "nn/layers.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "lm/forward.hpp"
#include "lm/matmul.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

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

/// y [N, O] = x [N, K] · W^T, plain loops (double path).
void naive_xwt(const double* x, int N, int K, const double* W, int O, double* y) {
#pragma omp parallel for schedule(static) num_threads(threads()) if (std::int64_t(N) * O * K > (1 << 18))
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double s = 0;
      const double* xr = x + std::size_t(n) * K;
      const double* w = W + std::size_t(o) * K;
      for (int k = 0; k < K; ++k) s += xr[k] * w[k];
      y[std::size_t(n) * O + o] = s;
    }
}

}  // namespace

template <class T>
void linear_forward(const T* x, int N, int K, const T* W, int O, T* y) {
  if constexpr (std::is_same_v<T, float>) lm::matmul_xwt(x, N, K, K, W, O, y, O);
  else naive_xwt(x, N, K, W, O, y);
}

template <class T>
void linear_backward(const T* dy, const T* x, int N, int K, const T* W, int O, T* dx, T* dW, bool accumulate_dx) {
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

template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttnShape& s, T* out, T* mx, T* inv) {
  const int nh = s.n_heads, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int dq = nh * hd, dkv = s.n_kv_heads * hd;
  const T scale = static_cast<T>(1.0 / std::sqrt(double(hd)));
  const int tasks = s.B * s.S * nh;
  const int nthreads = threads();
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && std::int64_t(tasks) * s.S * hd >= (1 << 20))
  {
    std::vector<T> sc(s.S);
#pragma omp for schedule(dynamic, 16)
    for (int task = 0; task < tasks; ++task) {
      const int row = task / nh, h = task % nh, g = h / group;
      const int b = row / s.S, t = row % s.S, base = b * s.S;
      const T* qr = q + std::size_t(row) * dq + h * hd;
      for (int j = 0; j <= t; ++j) sc[j] = dot(qr, k + std::size_t(base + j) * dkv + g * hd, hd) * scale;
      T m = sc[0];
      for (int j = 1; j <= t; ++j) m = std::max(m, sc[j]);
      double sum = 0.0;
      for (int j = 0; j <= t; ++j) { sc[j] = std::exp(sc[j] - m); sum += sc[j]; }
      const T iv = static_cast<T>(1.0 / sum);
      T* o = out + std::size_t(row) * dq + h * hd;
      std::fill_n(o, hd, T(0));
      for (int j = 0; j <= t; ++j) {
        const T p = sc[j] * iv;
        const T* vv = v + std::size_t(base + j) * dkv + g * hd;
        for (int e = 0; e < hd; ++e) o[e] += p * vv[e];
      }
      mx[std::size_t(row) * nh + h] = m;
      inv[std::size_t(row) * nh + h] = iv;
    }
  }
}

template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* mx, const T* inv,
                        const AttnShape& s, T* dq, T* dk, T* dv) {
  const int nh = s.n_heads, hd = s.head_dim, nkv = s.n_kv_heads, group = nh / nkv;
  const int dqw = nh * hd, dkvw = nkv * hd;
  const T scale = static_cast<T>(1.0 / std::sqrt(double(hd)));
  std::fill_n(dq, std::size_t(s.B) * s.S * dqw, T(0));
  std::fill_n(dk, std::size_t(s.B) * s.S * dkvw, T(0));
  std::fill_n(dv, std::size_t(s.B) * s.S * dkvw, T(0));
  const int tasks = s.B * nkv;
  const int nthreads = threads();
  // A parallel region costs microseconds (much more on a loaded machine): only for >= 1M MACs.
  const std::int64_t work = std::int64_t(s.B) * s.S * s.S * nh * hd;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && tasks > 1 && work >= (1 << 21))
  {
    std::vector<T> p(s.S), dp(s.S);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / nkv, g = task % nkv, base = b * s.S;
      for (int t = 0; t < s.S; ++t) {
        const int row = base + t;
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const T* qr = q + std::size_t(row) * dqw + h * hd;
          const T* go = dout + std::size_t(row) * dqw + h * hd;
          const T m = mx[std::size_t(row) * nh + h], iv = inv[std::size_t(row) * nh + h];
          double D = 0.0;
          for (int j = 0; j <= t; ++j) {
            const T* kj = k + std::size_t(base + j) * dkvw + g * hd;
            const T* vj = v + std::size_t(base + j) * dkvw + g * hd;
            p[j] = std::exp(dot(qr, kj, hd) * scale - m) * iv;  // the forward's probability
            dp[j] = dot(go, vj, hd);
            D += double(p[j]) * dp[j];
          }
          T* dqr = dq + std::size_t(row) * dqw + h * hd;
          for (int j = 0; j <= t; ++j) {
            const T ds = p[j] * (dp[j] - static_cast<T>(D)) * scale;
            const T* kj = k + std::size_t(base + j) * dkvw + g * hd;
            T* dkj = dk + std::size_t(base + j) * dkvw + g * hd;
            T* dvj = dv + std::size_t(base + j) * dkvw + g * hd;
            const T pj = p[j];
            for (int e = 0; e < hd; ++e) {
              dqr[e] += ds * kj[e];
              dkj[e] += ds * qr[e];
              dvj[e] += pj * go[e];
            }
          }
        }
      }
    }
  }
}

template <class T>
void swiglu_forward(const T* g, const T* u, std::int64_t n, T* h) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T gv = g[i];
    h[i] = gv / (T(1) + std::exp(-gv)) * u[i];  // as lm::forward
  }
}

template <class T>
void swiglu_backward(const T* dh, const T* g, const T* u, std::int64_t n, T* dg, T* du) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T gv = g[i], sg = T(1) / (T(1) + std::exp(-gv));
    du[i] = dh[i] * gv * sg;
    dg[i] = dh[i] * u[i] * sg * (T(1) + gv * (T(1) - sg));
  }
}

template <class T>
double cross_entropy(const T* logits, int N, int V, const int* targets, T* dlogits, double scale) {
  std::vector<double> row_loss(N, 0.0);
  const int nthreads = threads();
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && std::int64_t(N) * V >= (1 << 20))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + std::size_t(n) * V;
    T* dl = dlogits ? dlogits + std::size_t(n) * V : nullptr;
    if (targets[n] < 0) {
      if (dl) std::fill_n(dl, V, T(0));
      continue;
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
                                      const AttnShape&, T*, T*, T*);                                  \
  template void swiglu_forward<T>(const T*, const T*, std::int64_t, T*);                              \
  template void swiglu_backward<T>(const T*, const T*, const T*, std::int64_t, T*, T*);               \
  template double cross_entropy<T>(const T*, int, int, const int*, T*, double);

ICMLKIT_NN_LAYERS(float)
ICMLKIT_NN_LAYERS(double)

}  // namespace icmlkit::nn
