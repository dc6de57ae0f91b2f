#include "nn/poet.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <type_traits>

#include "nn/gemm.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

namespace {

/// C [M, N] (=, or += when `acc`) op(A) · op(B) as nn::gemm (row-major, leading dimensions);
/// float on the trainer's GEMM (on `nthreads`), double by a plain loop (the tests' reference).
template <class T>
void mm(bool tA, bool tB, int M, int N, int K, const T* A, int lda, const T* B, int ldb, T* C, int ldc, bool acc,
        int nthreads) {
  if constexpr (std::is_same_v<T, float>) {
    gemm_path(GemmPath::automatic, nthreads, tA, tB, M, N, K, A, lda, B, ldb, C, ldc, acc);
  } else {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        T s = 0;
        for (int k = 0; k < K; ++k) s += (tA ? A[k * lda + i] : A[i * lda + k]) * (tB ? B[j * ldb + k] : B[k * ldb + j]);
        C[i * ldc + j] = acc ? C[i * ldc + j] + s : s;
      }
  }
}

/// Y [N, width] = X [N, width] with its first `nblocks` column blocks of b multiplied on the right
/// by Rb[r] (or Rb[r]^T when `trans`); the columns past nblocks·b are copied.
template <class T>
void rotate_columns(const T* X, int N, int width, const T* Rb, int nblocks, int b, bool trans, T* Y) {
  for (int r = 0; r < nblocks; ++r)
    mm<T>(false, trans, N, b, b, X + r * b, width, Rb + std::size_t(r) * b * b, b, Y + r * b, width, false, threads());
  const int done = nblocks * b;
  if (done < width)
    for (int n = 0; n < N; ++n)
      std::copy(X + std::size_t(n) * width + done, X + std::size_t(n) * width + width, Y + std::size_t(n) * width + done);
}

/// dRb[r] += X_r^T Y_r over the first `nblocks` column blocks of X, Y [N, width].
template <class T>
void accumulate_block_grad(const T* X, const T* Y, int N, int width, int nblocks, int b, T* dRb) {
  for (int r = 0; r < nblocks; ++r)
    mm<T>(true, false, b, b, N, X + r * b, width, Y + r * b, width, dRb + std::size_t(r) * b * b, b, true, threads());
}

/// Runs f(i, scratch) for every block i in parallel (each thread its own scratch).
template <class T, class F>
void for_blocks(int nblocks, F&& f) {
#pragma omp parallel num_threads(threads()) if (nblocks > 1 && threads() > 1)
  {
    std::vector<T> scratch;
#pragma omp for schedule(static)
    for (int i = 0; i < nblocks; ++i) f(i, scratch);
  }
}

/// xp [N, cols] = x with its columns permuted: xp[j] = x[perm_in_inv[j]] (the input side's Pi_in).
template <class T>
void gather_columns(const T* x, int N, int cols, const std::vector<int>& perm_in_inv, T* xp) {
  for (int n = 0; n < N; ++n) {
    const T* xr = x + std::size_t(n) * cols;
    T* o = xp + std::size_t(n) * cols;
    for (int j = 0; j < cols; ++j) o[j] = xr[perm_in_inv[j]];
  }
}

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<double> cayley_coefficients(CayleyPolynomial p, int k) {
  if (k < 1) throw UsageError(fmt::format("the Cayley-Neumann polynomial needs k >= 1 terms (got {})", k), "--poet-terms");
  std::vector<double> c(std::size_t(k) + 1, 2.0);
  c[0] = 1.0;
  if (p == CayleyPolynomial::neumann) c.push_back(1.0);  // (I + Q)(I + ... + Q^k): Q^{k+1} once
  return c;
}

template <class T>
void cayley_forward(const T* Q, int b, const std::vector<double>& c, T* R, std::vector<T>& work) {
  const std::size_t bb = std::size_t(b) * b;
  const int D = static_cast<int>(c.size()) - 1;
  work.resize(bb);
  T* acc = work.data();
  // Horner: R = c0 I + Q (c1 I + Q (... (c_{D-1} I + c_D Q)))
  for (std::size_t e = 0; e < bb; ++e) acc[e] = T(c[D]) * Q[e];
  for (int i = 0; i < b; ++i) acc[std::size_t(i) * b + i] += T(c[D - 1]);
  for (int j = D - 2; j >= 0; --j) {
    mm<T>(false, false, b, b, b, Q, b, acc, b, R, b, false, 1);
    for (int i = 0; i < b; ++i) R[std::size_t(i) * b + i] += T(c[j]);
    std::copy(R, R + bb, acc);
  }
  std::copy(acc, acc + bb, R);
}

template <class T>
void cayley_backward(const T* Q, int b, const std::vector<double>& c, const T* dR, T* dQ, std::vector<T>& work) {
  // dQ = sum_j (Q^T)^j dR S_j with S_j = sum_{r >= 0} c_{j+1+r} (Q^T)^r, run from j = D-1 down:
  //   S_{D-1} = c_D I, S_j = c_{j+1} I + Q^T S_{j+1};  acc_{D-1} = dR S_{D-1}, acc_j = Q^T acc_{j+1} + dR S_j.
  const std::size_t bb = std::size_t(b) * b;
  const int D = static_cast<int>(c.size()) - 1;
  work.resize(3 * bb);
  T *S = work.data(), *tmp = S + bb, *acc = tmp + bb;
  for (std::size_t e = 0; e < bb; ++e) acc[e] = T(c[D]) * dR[e];
  std::fill(S, S + bb, T(0));
  for (int i = 0; i < b; ++i) S[std::size_t(i) * b + i] = T(c[D]);
  for (int j = D - 2; j >= 0; --j) {
    mm<T>(true, false, b, b, b, Q, b, S, b, tmp, b, false, 1);
    for (int i = 0; i < b; ++i) tmp[std::size_t(i) * b + i] += T(c[j + 1]);
    std::copy(tmp, tmp + bb, S);
    mm<T>(true, false, b, b, b, Q, b, acc, b, tmp, b, false, 1);
    mm<T>(false, false, b, b, b, dR, b, S, b, tmp, b, true, 1);
    std::copy(tmp, tmp + bb, acc);
  }
  std::copy(acc, acc + bb, dQ);
}

template <class T>
void skew_from_upper(const T* v, int b, T* Q) {
  std::size_t e = 0;
  for (int r = 0; r < b; ++r) {
    Q[std::size_t(r) * b + r] = T(0);
    for (int c = r + 1; c < b; ++c, ++e) {
      Q[std::size_t(r) * b + c] = v[e];
      Q[std::size_t(c) * b + r] = -v[e];
    }
  }
}

template <class T>
void skew_grad_to_upper(const T* dQ, int b, T* gv) {
  std::size_t e = 0;
  for (int r = 0; r < b; ++r)
    for (int c = r + 1; c < b; ++c, ++e) gv[e] += dQ[std::size_t(r) * b + c] - dQ[std::size_t(c) * b + r];
}

std::uint64_t poet_permutation_seed(std::uint64_t seed, std::int64_t merges, int index) noexcept {
  return splitmix64(splitmix64(splitmix64(seed ^ 0x504f45542d58ULL) + std::uint64_t(merges)) + std::uint64_t(index));
}

std::string poet_block_sizes(const std::vector<std::pair<int, int>>& dims) {
  int g = 0;
  for (auto [r, c] : dims) g = std::gcd(g, std::gcd(r, c));
  std::string s;
  for (int b = 2; b <= g; ++b)
    if (g % b == 0) s += (s.empty() ? "" : ", ") + std::to_string(b);
  return s.empty() ? "none" : s;
}

template <class T>
void PoetLinear<T>::draw_permutations(std::uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](int n, std::vector<int>& p, std::vector<int>& inv) {
    p.resize(n);
    std::iota(p.begin(), p.end(), 0);
    for (int i = n - 1; i > 0; --i) std::swap(p[i], p[rng.below(std::uint64_t(i) + 1)]);  // Fisher-Yates
    inv.resize(n);
    for (int i = 0; i < n; ++i) inv[p[i]] = i;
  };
  draw(cols, perm_in, perm_in_inv);
  draw(rows, perm_out, perm_out_inv);
}

template <class T>
void PoetLinear<T>::prepare(const ParamStore<T>& store, PoetWork<T>&) {
  const int nb = out_blocks + in_blocks;
  const std::size_t bb = std::size_t(b) * b, ne = std::size_t(b) * (b - 1) / 2;
  R.resize(nb * bb);
  dR.assign(nb * bb, T(0));
  const T* qv = store.params[q].value.data();
  for_blocks<T>(nb, [&](int i, std::vector<T>& s) {
    s.resize(2 * bb);
    skew_from_upper(qv + i * ne, b, s.data());
    std::vector<T> work;
    cayley_forward(s.data(), b, coeffs, R.data() + i * bb, work);
  });
}

template <class T>
void PoetLinear<T>::forward(const T* x, int N, const T* W0, T* y, std::vector<T>& y0, PoetWork<T>& w) const {
  const std::size_t bb = std::size_t(b) * b;
  const T *Rout = R.data(), *Rin = R.data() + out_blocks * bb;
  w.a.resize(std::size_t(N) * cols);
  w.b.resize(std::size_t(N) * cols);
  gather_columns(x, N, cols, perm_in_inv, w.a.data());
  rotate_columns(w.a.data(), N, cols, Rin, in_blocks, b, false, w.b.data());  // u = xp R_in
  y0.resize(std::size_t(N) * rows);
  mm<T>(false, true, N, rows, cols, w.b.data(), cols, W0, cols, y0.data(), rows, false, threads());  // y0 = u W0^T
  w.c.resize(std::max(w.c.size(), std::size_t(N) * rows));
  rotate_columns(y0.data(), N, rows, Rout, out_blocks, b, false, w.c.data());  // z = y0 R_out
  for (int n = 0; n < N; ++n) {  // y[i] = z[perm_out[i]]
    const T* zr = w.c.data() + std::size_t(n) * rows;
    T* o = y + std::size_t(n) * rows;
    for (int i = 0; i < rows; ++i) o[i] = zr[perm_out[i]];
  }
}

template <class T>
void PoetLinear<T>::backward(const T* dy, const T* x, int N, const T* W0, T* dx, bool accumulate_dx,
                             const std::vector<T>& y0, PoetWork<T>& w) {
  const std::size_t bb = std::size_t(b) * b;
  const T *Rout = R.data(), *Rin = R.data() + out_blocks * bb;
  T *dRout = dR.data(), *dRin = dR.data() + out_blocks * bb;
  const std::size_t wide = std::size_t(N) * std::max(rows, cols);
  w.a.resize(std::max(w.a.size(), wide));
  w.b.resize(std::max(w.b.size(), wide));
  w.c.resize(std::max(w.c.size(), wide));
  T *dz = w.c.data(), *dy0 = w.b.data(), *du = w.a.data();
  for (int n = 0; n < N; ++n) {  // dz[perm_out[i]] = dy[i]
    const T* g = dy + std::size_t(n) * rows;
    T* o = dz + std::size_t(n) * rows;
    for (int i = 0; i < rows; ++i) o[perm_out[i]] = g[i];
  }
  accumulate_block_grad(y0.data(), dz, N, rows, out_blocks, b, dRout);            // dR_out += y0^T dz
  rotate_columns(dz, N, rows, Rout, out_blocks, b, true, dy0);                     // dy0 = dz R_out^T
  mm<T>(false, false, N, cols, rows, dy0, rows, W0, cols, du, cols, false, threads());  // du = dy0 W0
  T* xp = w.c.data();  // dz is spent
  gather_columns(x, N, cols, perm_in_inv, xp);
  accumulate_block_grad(xp, du, N, cols, in_blocks, b, dRin);                      // dR_in += xp^T du
  if (!dx) return;
  T* dxp = w.b.data();
  rotate_columns(du, N, cols, Rin, in_blocks, b, true, dxp);                       // dxp = du R_in^T
  for (int n = 0; n < N; ++n) {  // dx[perm_in_inv[j]] (+)= dxp[j]
    const T* g = dxp + std::size_t(n) * cols;
    T* o = dx + std::size_t(n) * cols;
    if (accumulate_dx)
      for (int j = 0; j < cols; ++j) o[perm_in_inv[j]] += g[j];
    else
      for (int j = 0; j < cols; ++j) o[perm_in_inv[j]] = g[j];
  }
}

template <class T>
void PoetLinear<T>::finish(ParamStore<T>& store, PoetWork<T>&) const {
  const int nb = out_blocks + in_blocks;
  const std::size_t bb = std::size_t(b) * b, ne = std::size_t(b) * (b - 1) / 2;
  const T* qv = store.params[q].value.data();
  T* gq = store.params[q].grad.data();
  for_blocks<T>(nb, [&](int i, std::vector<T>& s) {
    s.resize(2 * bb);
    skew_from_upper(qv + i * ne, b, s.data());
    std::vector<T> work;
    cayley_backward(s.data(), b, coeffs, dR.data() + i * bb, s.data() + bb, work);
    skew_grad_to_upper(s.data() + bb, b, gq + i * ne);
  });
}

template <class T>
void PoetLinear<T>::effective_weight(const T* W0, T* W) const {
  const std::size_t bb = std::size_t(b) * b, n = std::size_t(rows) * cols;
  const T *Rout = R.data(), *Rin = R.data() + out_blocks * bb;
  std::vector<T> m1(n), m(n);
  for (int r = 0; r < out_blocks; ++r)  // M1 = BlockDiag(R_out)^T W0, block row by block row
    mm<T>(true, false, b, cols, b, Rout + r * bb, b, W0 + std::size_t(r) * b * cols, cols, m1.data() + std::size_t(r) * b * cols,
          cols, false, threads());
  std::copy(W0 + std::size_t(out_blocks) * b * cols, W0 + n, m1.data() + std::size_t(out_blocks) * b * cols);
  rotate_columns(m1.data(), rows, cols, Rin, in_blocks, b, true, m.data());  // M = M1 BlockDiag(R_in)^T
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < cols; ++c) W[std::size_t(i) * cols + c] = m[std::size_t(perm_out[i]) * cols + perm_in[c]];
}

#define ICMLKIT_NN_POET(T)                                                                                   \
  template void cayley_forward<T>(const T*, int, const std::vector<double>&, T*, std::vector<T>&);           \
  template void cayley_backward<T>(const T*, int, const std::vector<double>&, const T*, T*, std::vector<T>&); \
  template void skew_from_upper<T>(const T*, int, T*);                                                       \
  template void skew_grad_to_upper<T>(const T*, int, T*);                                                    \
  template struct PoetLinear<T>;
ICMLKIT_NN_POET(float)
ICMLKIT_NN_POET(double)

PoetAdamW::PoetAdamW(const ParamStore<float>& store, std::vector<char> is_q, FoamOptions adam, double q_lr_ratio,
                     int merge_every)
    : is_q_(std::move(is_q)), adam_(adam), q_lr_ratio_(q_lr_ratio), merge_every_(merge_every) {
  if (!(adam.beta1 >= 0 && adam.beta1 < 1) || !(adam.beta2 >= 0 && adam.beta2 < 1)) throw UsageError("betas must be in [0, 1)");
  if (is_q_.size() != store.params.size()) throw UsageError("POETAdamW: one Q flag per store tensor");
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    const auto& p = store.params[i];
    if (p.frozen) continue;
    index_.push_back(static_cast<int>(i));
    names_.push_back(p.name);
    m_.emplace_back(p.numel(), 0.0f);
    v_.emplace_back(p.numel(), 0.0f);
  }
}

void PoetAdamW::step(ParamStore<float>& store, double lr) {
  ++t_;
  const std::int64_t local = merge_every_ > 0 ? (t_ - 1) % merge_every_ + 1 : t_;  // Q steps since the last merge
  FoamOptions q = adam_;
  q.weight_decay = 0;
  for (std::size_t k = 0; k < index_.size(); ++k) {
    Param<float>& p = store.params[index_[k]];
    if (is_q_[index_[k]])
      foam_adam_update(p.value.data(), p.grad.data(), m_[k].data(), v_[k].data(), p.numel(), local, lr * q_lr_ratio_, q, false);
    else
      foam_adam_update(p.value.data(), p.grad.data(), m_[k].data(), v_[k].data(), p.numel(), t_, lr, adam_, p.decay);
  }
}

void PoetAdamW::reset_q() noexcept {
  for (std::size_t k = 0; k < index_.size(); ++k)
    if (is_q_[index_[k]]) {
      std::fill(m_[k].begin(), m_[k].end(), 0.0f);
      std::fill(v_[k].begin(), v_[k].end(), 0.0f);
    }
}

std::vector<StateBuffer> PoetAdamW::state() { return moment_buffers(names_, m_, v_); }

}  // namespace icmlkit::nn
