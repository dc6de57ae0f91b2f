#include "nn/mlstm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace icmlkit::nn {

template <class T>
T log_sigmoid(T x) noexcept {
  return std::min(x, T(0)) - std::log1p(std::exp(-std::abs(x)));
}

template <class T>
void mlstm_step(T* st, int dk, int dv, const T* q, const T* k, const T* v, T ig, T fg, T* h) noexcept {
  T* C = st;
  T* n = C + std::size_t(dk) * dv;
  T& m = n[dk];
  T& started = n[dk + 1];
  const T scale = T(1 / std::sqrt(double(dk)));
  const T lf = log_sigmoid(fg);
  T fdec, iw, mnew;
  if (started != T(0)) {
    mnew = std::max(lf + m, ig);
    fdec = std::exp(lf + m - mnew);
    iw = std::exp(ig - mnew);
  } else {  // m_0 = -inf: the old state (zero) does not count
    mnew = ig;
    fdec = T(0);
    iw = T(1);
  }
  m = mnew;
  started = T(1);
  for (int a = 0; a < dk; ++a) {
    const T ka = iw * k[a] * scale;
    n[a] = fdec * n[a] + ka;
    T* Ca = C + std::size_t(a) * dv;
    for (int e = 0; e < dv; ++e) Ca[e] = fdec * Ca[e] + ka * v[e];
  }
  T qn = 0;
  for (int a = 0; a < dk; ++a) qn += q[a] * n[a];
  const T den = std::max(std::abs(qn), std::exp(-mnew)) + T(kMlstmEps);
  std::fill_n(h, dv, T(0));
  for (int a = 0; a < dk; ++a) {
    const T qa = q[a];
    const T* Ca = C + std::size_t(a) * dv;
    for (int e = 0; e < dv; ++e) h[e] += qa * Ca[e];
  }
  for (int e = 0; e < dv; ++e) h[e] /= den;
}

template <class T>
void mlstm_recurrent(const MlstmHead<T>& x, T* h, int ldh, T* state) {
  std::vector<T> own;
  if (!state) {
    own.assign(std::size_t(mlstm_state_floats(x.dk, x.dv)), T(0));
    state = own.data();
  }
  for (int t = 0; t < x.S; ++t)
    mlstm_step(state, x.dk, x.dv, x.q[t], x.k[t], x.v[t], x.ig[t][0], x.fg[t][0], h + std::int64_t(t) * ldh);
}

namespace {

/// Dot product of length n.
template <class T>
T dot(const T* a, const T* b, int n) noexcept {
  T s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// The parallel form's per-row quantities, recomputed by the forward and the backward:
/// F [S] cumulative log f; for row i: m_i and the decay row D_ij = exp(F_i - F_j + ig_j - m_i).
template <class T>
void cumulative_log_forget(const MlstmHead<T>& x, std::vector<T>& F) {
  F.resize(std::size_t(x.S));
  T acc = 0;
  for (int t = 0; t < x.S; ++t) {
    acc += log_sigmoid(x.fg[t][0]);
    F[std::size_t(t)] = acc;
  }
}

/// Row i's stabiliser and its argmax: m_i = max_{j<=i} (F_i - F_j + ig_j).
template <class T>
T row_max(const MlstmHead<T>& x, const std::vector<T>& F, int i, int* arg) {
  T m = -std::numeric_limits<T>::infinity();
  for (int j = 0; j <= i; ++j) {
    const T l = F[std::size_t(i)] - F[std::size_t(j)] + x.ig[j][0];
    if (l > m) { m = l; *arg = j; }
  }
  return m;
}

/// Row i of the parallel form: D_ij = exp(F_i - F_j + ig_j - m_i), s_ij = q_i.k_j / sqrt(dk) and
/// c_ij = s_ij D_ij for j <= i into D, s, c [S]; returns b_i = sum_j c_ij, with m_i and its argmax.
template <class T>
T parallel_row(const MlstmHead<T>& x, const std::vector<T>& F, int i, T* m, int* arg, std::vector<T>& D, std::vector<T>& s,
               std::vector<T>& c) {
  const T scale = T(1 / std::sqrt(double(x.dk)));
  *m = row_max(x, F, i, arg);
  T b = 0;
  for (int j = 0; j <= i; ++j) {
    D[std::size_t(j)] = std::exp(F[std::size_t(i)] - F[std::size_t(j)] + x.ig[j][0] - *m);
    s[std::size_t(j)] = dot(x.q[i], x.k[j], x.dk) * scale;
    c[std::size_t(j)] = s[std::size_t(j)] * D[std::size_t(j)];
    b += c[std::size_t(j)];
  }
  return b;
}

}  // namespace

template <class T>
void mlstm_parallel(const MlstmHead<T>& x, T* h, int ldh) {
  const int S = x.S, dv = x.dv;
  std::vector<T> F, D(static_cast<std::size_t>(S)), s(D.size()), c(D.size());
  cumulative_log_forget(x, F);
  for (int i = 0; i < S; ++i) {
    int arg = 0;
    T m;
    const T b = parallel_row(x, F, i, &m, &arg, D, s, c);
    const T den = std::max(std::abs(b), std::exp(-m)) + T(kMlstmEps);
    T* hi = h + std::int64_t(i) * ldh;
    std::fill_n(hi, dv, T(0));
    for (int j = 0; j <= i; ++j) {
      const T cj = c[std::size_t(j)];
      const T* vj = x.v[j];
      for (int e = 0; e < dv; ++e) hi[e] += cj * vj[e];
    }
    for (int e = 0; e < dv; ++e) hi[e] /= den;
  }
}

template <class T>
void mlstm_parallel_backward(const MlstmHead<T>& x, const T* dh, int ldh, T* dq, T* dk, T* dv, T* dig, T* dfg) {
  const int S = x.S, dkw = x.dk, dvw = x.dv;
  const T scale = T(1 / std::sqrt(double(dkw)));
  auto row = [](T* p, int ld, int t) { return p + std::int64_t(t) * ld; };
  std::vector<T> F, s(static_cast<std::size_t>(S)), D(static_cast<std::size_t>(S)), c(static_cast<std::size_t>(S)), N(static_cast<std::size_t>(dvw)), dF(static_cast<std::size_t>(S), T(0));
  cumulative_log_forget(x, F);
  for (int i = 0; i < S; ++i) {
    int arg = 0;
    T m;
    const T b = parallel_row(x, F, i, &m, &arg, D, s, c);
    std::fill(N.begin(), N.end(), T(0));
    for (int j = 0; j <= i; ++j)
      for (int e = 0; e < dvw; ++e) N[std::size_t(e)] += c[std::size_t(j)] * x.v[j][e];
    const T em = std::exp(-m);
    const T den = std::max(std::abs(b), em) + T(kMlstmEps);
    const T* g = dh + std::int64_t(i) * ldh;
    // h = N / den
    const T dden = -dot(g, N.data(), dvw) / (den * den);
    T db = 0, dm = 0;
    if (std::abs(b) >= em) db = b >= 0 ? dden : -dden;
    else dm = -em * dden;
    T* dqi = row(dq, x.q.ld, i);
    T sum_dl = 0;  // sum_j dlogD_ij (for dF_i)
    for (int j = 0; j <= i; ++j) {
      const T* vj = x.v[j];
      const T cj = c[std::size_t(j)];
      T dc = db;
      T* dvj = row(dv, x.v.ld, j);
      for (int e = 0; e < dvw; ++e) {
        dc += g[e] / den * vj[e];
        dvj[e] += cj * g[e] / den;
      }
      const T dsij = dc * D[std::size_t(j)];
      const T dlog = dc * s[std::size_t(j)] * D[std::size_t(j)];  // dD * D
      // s_ij = scale q_i.k_j
      const T* kj = x.k[j];
      const T* qi = x.q[i];
      T* dkj = row(dk, x.k.ld, j);
      for (int a = 0; a < dkw; ++a) {
        dqi[a] += dsij * scale * kj[a];
        dkj[a] += dsij * scale * qi[a];
      }
      dm -= dlog;                 // D_ij = exp(logD_ij - m_i)
      row(dig, x.ig.ld, j)[0] += dlog;
      dF[std::size_t(j)] -= dlog;
      sum_dl += dlog;
    }
    // m_i = logD_{i, arg}
    row(dig, x.ig.ld, arg)[0] += dm;
    dF[std::size_t(arg)] -= dm;
    sum_dl += dm;
    dF[std::size_t(i)] += sum_dl;
  }
  // F_i = sum_{s<=i} log f_s  ->  dlogf_s = sum_{i>=s} dF_i;  log f = logsigmoid(fg)
  T acc = 0;
  for (int t = S - 1; t >= 0; --t) {
    acc += dF[std::size_t(t)];
    const T fg = x.fg[t][0];
    row(dfg, x.fg.ld, t)[0] += acc / (T(1) + std::exp(fg));  // d logsigmoid = sigmoid(-fg)
  }
}

template <class T>
void mlstm_chunkwise(const MlstmHead<T>& x, T* h, int ldh, T* state, int chunk) {
  const int S = x.S, dk = x.dk, dv = x.dv;
  const T scale = T(1 / std::sqrt(double(dk)));
  std::vector<T> own;
  if (!state) {
    own.assign(std::size_t(mlstm_state_floats(dk, dv)), T(0));
    state = own.data();
  }
  T* C = state;
  T* n = C + std::size_t(dk) * dv;
  T& m = n[dk];
  T& started = n[dk + 1];
  chunk = std::max(chunk, 1);
  std::vector<T> b(static_cast<std::size_t>(chunk)), c(static_cast<std::size_t>(chunk)), ks(static_cast<std::size_t>(chunk) * dk);
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int t0 = 0; t0 < S; t0 += chunk) {
    const int L = std::min(chunk, S - t0);
    // b_i: cumulative log f inside the chunk; the old state decays by b_i + m.
    T acc = 0;
    for (int i = 0; i < L; ++i) {
      acc += log_sigmoid(x.fg[t0 + i][0]);
      b[std::size_t(i)] = acc;
      const T* kk = x.k[t0 + i];
      for (int a = 0; a < dk; ++a) ks[std::size_t(i) * dk + a] = kk[a] * scale;
    }
    const T m_prev = started != T(0) ? m : ninf;
    for (int i = 0; i < L; ++i) {
      const T bi = b[std::size_t(i)];
      T mi = bi + m_prev;
      for (int j = 0; j <= i; ++j) mi = std::max(mi, bi - b[std::size_t(j)] + x.ig[t0 + j][0]);
      const T* qi = x.q[t0 + i];
      T* hi = h + std::int64_t(t0 + i) * ldh;
      std::fill_n(hi, dv, T(0));
      T qn = 0;
      if (m_prev != ninf) {  // the carried state's part
        const T w = std::exp(bi + m_prev - mi);
        for (int a = 0; a < dk; ++a) {
          const T qa = qi[a] * w;
          qn += qa * n[a];
          const T* Ca = C + std::size_t(a) * dv;
          for (int e = 0; e < dv; ++e) hi[e] += qa * Ca[e];
        }
      }
      for (int j = 0; j <= i; ++j) {
        const T cj = dot(qi, ks.data() + std::size_t(j) * dk, dk) * std::exp(bi - b[std::size_t(j)] + x.ig[t0 + j][0] - mi);
        qn += cj;
        const T* vj = x.v[t0 + j];
        for (int e = 0; e < dv; ++e) hi[e] += cj * vj[e];
      }
      const T den = std::max(std::abs(qn), std::exp(-mi)) + T(kMlstmEps);
      for (int e = 0; e < dv; ++e) hi[e] /= den;
    }
    // the state after the chunk's last step
    const T bL = b[std::size_t(L - 1)];
    T mnew = bL + m_prev;
    for (int j = 0; j < L; ++j) mnew = std::max(mnew, bL - b[std::size_t(j)] + x.ig[t0 + j][0]);
    const T w = m_prev != ninf ? std::exp(bL + m_prev - mnew) : T(0);
    for (std::size_t a = 0; a < std::size_t(dk) * dv; ++a) C[a] *= w;
    for (int a = 0; a < dk; ++a) n[a] *= w;
    for (int j = 0; j < L; ++j) {
      const T wj = std::exp(bL - b[std::size_t(j)] + x.ig[t0 + j][0] - mnew);
      const T* kj = ks.data() + std::size_t(j) * dk;
      const T* vj = x.v[t0 + j];
      for (int a = 0; a < dk; ++a) {
        const T ka = wj * kj[a];
        n[a] += ka;
        T* Ca = C + std::size_t(a) * dv;
        for (int e = 0; e < dv; ++e) Ca[e] += ka * vj[e];
      }
    }
    m = mnew;
    started = T(1);
  }
}

template <class T>
void feature_map_forward(const T* x, int ldx, int N, int d, const T* F, T* out, int ldo) {
  for (int r = 0; r < N; ++r) {
    const T* xr = x + std::int64_t(r) * ldx;
    T* o = out + std::int64_t(r) * ldo;
    T mx = -std::numeric_limits<T>::infinity();
    for (int a = 0; a < d; ++a) {
      o[a] = dot(F + std::size_t(a) * d, xr, d);
      mx = std::max(mx, o[a]);
    }
    T sum = 0;
    for (int a = 0; a < d; ++a) { o[a] = std::exp(o[a] - mx); sum += o[a]; }
    const T inv = T(1) / sum;
    for (int a = 0; a < d; ++a) o[a] *= inv;
  }
}

template <class T>
void feature_map_backward(const T* x, int ldx, int N, int d, const T* F, const T* out, int ldo, const T* dout, T* dx,
                          T* dF) {
  std::vector<T> dz(static_cast<std::size_t>(d));
  for (int r = 0; r < N; ++r) {
    const T* xr = x + std::int64_t(r) * ldx;
    const T* o = out + std::int64_t(r) * ldo;
    const T* g = dout + std::int64_t(r) * ldo;
    const T od = dot(o, g, d);
    for (int a = 0; a < d; ++a) dz[std::size_t(a)] = o[a] * (g[a] - od);
    T* dxr = dx + std::int64_t(r) * ldx;
    for (int a = 0; a < d; ++a) {
      const T za = dz[std::size_t(a)];
      const T* Fa = F + std::size_t(a) * d;
      for (int e = 0; e < d; ++e) dxr[e] += za * Fa[e];
      if (dF) {
        T* dFa = dF + std::size_t(a) * d;
        for (int e = 0; e < d; ++e) dFa[e] += za * xr[e];
      }
    }
  }
}

template <class T>
void window_attention_forward(int S, int hd, int window, int sinks, HeadRows<T> q, HeadRows<T> k, HeadRows<T> v, T* out,
                              int ldo, T* mx, T* inv) {
  const T scale = T(1 / std::sqrt(double(hd)));
  std::vector<T> sc(static_cast<std::size_t>(S));
  for (int i = 0; i < S; ++i) {
    T m = -std::numeric_limits<T>::infinity();
    for (int j = 0; j <= i; ++j) {
      if (!window_attends(i, j, window, sinks)) continue;
      sc[std::size_t(j)] = dot(q[i], k[j], hd) * scale;
      m = std::max(m, sc[std::size_t(j)]);
    }
    double sum = 0;
    for (int j = 0; j <= i; ++j)
      if (window_attends(i, j, window, sinks)) {
        sc[std::size_t(j)] = std::exp(sc[std::size_t(j)] - m);
        sum += sc[std::size_t(j)];
      }
    const T iv = T(1.0 / sum);
    T* o = out + std::int64_t(i) * ldo;
    std::fill_n(o, hd, T(0));
    for (int j = 0; j <= i; ++j)
      if (window_attends(i, j, window, sinks)) {
        const T p = sc[std::size_t(j)] * iv;
        const T* vj = v[j];
        for (int e = 0; e < hd; ++e) o[e] += p * vj[e];
      }
    mx[i] = m;
    inv[i] = iv;
  }
}

template <class T>
void window_attention_backward(int S, int hd, int window, int sinks, HeadRows<T> q, HeadRows<T> k, HeadRows<T> v,
                               const T* out, int ldo, const T* mx, const T* inv, const T* dout, T* dq, T* dk, T* dv) {
  const T scale = T(1 / std::sqrt(double(hd)));
  auto row = [](T* p, int ld, int t) { return p + std::int64_t(t) * ld; };
  for (int i = 0; i < S; ++i) {
    const T* g = dout + std::int64_t(i) * ldo;
    const T Dsum = dot(g, out + std::int64_t(i) * ldo, hd);
    T* dqi = row(dq, q.ld, i);
    for (int j = 0; j <= i; ++j) {
      if (!window_attends(i, j, window, sinks)) continue;
      const T p = std::exp(dot(q[i], k[j], hd) * scale - mx[i]) * inv[i];
      const T dp = dot(g, v[j], hd);
      const T ds = p * (dp - Dsum) * scale;
      T* dvj = row(dv, v.ld, j);
      T* dkj = row(dk, k.ld, j);
      const T* kj = k[j];
      const T* qi = q[i];
      for (int e = 0; e < hd; ++e) {
        dvj[e] += p * g[e];
        dqi[e] += ds * kj[e];
        dkj[e] += ds * qi[e];
      }
    }
  }
}

#define ICMLKIT_NN_MLSTM(T)                                                                                            \
  template T log_sigmoid<T>(T) noexcept;                                                                               \
  template void mlstm_step<T>(T*, int, int, const T*, const T*, const T*, T, T, T*) noexcept;                          \
  template void mlstm_recurrent<T>(const MlstmHead<T>&, T*, int, T*);                                                  \
  template void mlstm_parallel<T>(const MlstmHead<T>&, T*, int);                                                       \
  template void mlstm_parallel_backward<T>(const MlstmHead<T>&, const T*, int, T*, T*, T*, T*, T*);                    \
  template void mlstm_chunkwise<T>(const MlstmHead<T>&, T*, int, T*, int);                                             \
  template void feature_map_forward<T>(const T*, int, int, int, const T*, T*, int);                                    \
  template void feature_map_backward<T>(const T*, int, int, int, const T*, const T*, int, const T*, T*, T*);           \
  template void window_attention_forward<T>(int, int, int, int, HeadRows<T>, HeadRows<T>, HeadRows<T>, T*, int, T*,    \
                                            T*);                                                                       \
  template void window_attention_backward<T>(int, int, int, int, HeadRows<T>, HeadRows<T>, HeadRows<T>, const T*, int, \
                                             const T*, const T*, const T*, T*, T*, T*);

ICMLKIT_NN_MLSTM(float)
ICMLKIT_NN_MLSTM(double)

}  // namespace icmlkit::nn
