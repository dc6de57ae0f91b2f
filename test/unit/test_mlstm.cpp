// The mLSTM kernels (nn/mlstm.hpp): recurrent, parallel and chunkwise forms against each other,
// the plain unstabilised recurrence of the paper's eq. 8-10 as independent truth, and every
// backward against central finite differences in double.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "nn/mlstm.hpp"
#include "nn_test_support.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

/// Random inputs of one head stored interleaved in [S, width] rows (a head inside a wider array).
struct HeadData {
  int S, dk, dv, width;
  std::vector<double> q, k, v, g;  // g: [S, 2] = (ig, fg)
  HeadData(int S_, int dk_, int dv_, std::uint64_t seed, double ig_mean = 0.0, double fg_mean = 2.0)
      : S(S_), dk(dk_), dv(dv_), width(dk_ + 3), q(std::size_t(S_) * width), k(q.size()), v(std::size_t(S_) * (dv_ + 1)),
        g(std::size_t(S_) * 2) {
    Rng rng(seed);
    for (auto& x : q) x = rng.normal();
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
    for (int t = 0; t < S; ++t) {
      g[std::size_t(2 * t)] = ig_mean + 2.0 * rng.normal();
      g[std::size_t(2 * t + 1)] = fg_mean + 1.5 * rng.normal();
    }
  }
  template <class T>
  MlstmHead<T> head(const std::vector<T>& qq, const std::vector<T>& kk, const std::vector<T>& vv, const std::vector<T>& gg) const {
    MlstmHead<T> h;
    h.S = S; h.dk = dk; h.dv = dv;
    h.q = {qq.data() + 1, width};
    h.k = {kk.data() + 2, width};
    h.v = {vv.data(), dv + 1};
    h.ig = {gg.data(), 2};
    h.fg = {gg.data() + 1, 2};
    return h;
  }
};

template <class T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]));
  return w;
}

}  // namespace

TEST_CASE("mlstm: the recurrent form equals the unstabilised recurrence of eq. 8-10 with max(|n.q|, 1)") {
  // Independent truth: S_t = f S + i k v^T, z_t = f z + i k with i = exp(ig), f = sigmoid(fg),
  // h = q^T S / max(|q.z|, 1), in long double without any stabiliser (moderate gates keep it finite).
  const HeadData d(40, 6, 5, 11, 0.0, 2.0);
  std::vector<double> h(std::size_t(d.S) * d.dv);
  const auto x = d.head(d.q, d.k, d.v, d.g);
  mlstm_recurrent(x, h.data(), d.dv);
  std::vector<long double> Sm(std::size_t(d.dk) * d.dv, 0), z(std::size_t(d.dk), 0);
  const long double scale = 1.0L / std::sqrt((long double)d.dk);
  double worst = 0;
  for (int t = 0; t < d.S; ++t) {
    const long double i = std::exp((long double)x.ig[t][0]), f = 1.0L / (1.0L + std::exp(-(long double)x.fg[t][0]));
    for (int a = 0; a < d.dk; ++a) {
      z[a] = f * z[a] + i * x.k[t][a] * scale;
      for (int e = 0; e < d.dv; ++e) Sm[a * d.dv + e] = f * Sm[a * d.dv + e] + i * x.k[t][a] * scale * x.v[t][e];
    }
    long double qz = 0;
    for (int a = 0; a < d.dk; ++a) qz += x.q[t][a] * z[a];
    const long double den = std::max(std::abs(qz), 1.0L);
    for (int e = 0; e < d.dv; ++e) {
      long double num = 0;
      for (int a = 0; a < d.dk; ++a) num += x.q[t][a] * Sm[a * d.dv + e];
      // the stabilised form adds eps e^{m} to the denominator: relative 1e-6 e^{m} / den at most
      worst = std::max(worst, double(std::abs(num / den - (long double)h[std::size_t(t) * d.dv + e]) / (1 + std::abs(num / den))));
    }
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("mlstm: recurrent, parallel and chunkwise forms agree to 1e-5 in float on feature-mapped q, k") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    // q and k as the hybrid block feeds them: Hedgehog features (a softmax over the features), so
    // q.n > 0 and the output is well conditioned (random signed q, k make |q.n| cross 0).
    HeadData d(150, 8, 8, seed, seed == 3 ? -4.0 : 0.5, seed == 2 ? -1.0 : 3.0);
    for (auto* a : {&d.q, &d.k})
      for (int t = 0; t < d.S; ++t) {
        double* r = a->data() + std::size_t(t) * d.width;
        double s = 0;
        for (int i = 0; i < d.width; ++i) s += (r[i] = std::exp(r[i]));
        for (int i = 0; i < d.width; ++i) r[i] /= s;
      }
    const auto q = cast<float>(d.q), k = cast<float>(d.k), v = cast<float>(d.v), g = cast<float>(d.g);
    const auto x = d.head(q, k, v, g);
    std::vector<float> hr(std::size_t(d.S) * d.dv), hp(hr.size()), hc(hr.size()), hc7(hr.size());
    mlstm_recurrent(x, hr.data(), d.dv);
    mlstm_parallel(x, hp.data(), d.dv);
    mlstm_chunkwise<float>(x, hc.data(), d.dv, nullptr, 64);
    mlstm_chunkwise<float>(x, hc7.data(), d.dv, nullptr, 7);
    double wp = 0, wc = 0, wc7 = 0;
    for (std::size_t i = 0; i < hr.size(); ++i) {
      wp = std::max(wp, double(std::abs(hr[i] - hp[i])));
      wc = std::max(wc, double(std::abs(hr[i] - hc[i])));
      wc7 = std::max(wc7, double(std::abs(hr[i] - hc7[i])));
    }
    CAPTURE(seed);
    CHECK(wp < 1e-5);
    CHECK(wc < 1e-5);
    CHECK(wc7 < 1e-5);
  }
}

TEST_CASE("mlstm: the chunkwise form carries the state: two calls equal one, and equal the recurrent state") {
  const HeadData d(100, 4, 6, 5);
  const auto x = d.head(d.q, d.k, d.v, d.g);
  const int n = mlstm_state_floats(d.dk, d.dv);
  std::vector<double> st_r(n, 0.0), st_c(n, 0.0), h_r(std::size_t(d.S) * d.dv), h_c(h_r.size());
  mlstm_recurrent(x, h_r.data(), d.dv, st_r.data());
  MlstmHead<double> a = x, b = x;
  a.S = 37;
  b.S = d.S - 37;
  b.q.p += 37 * b.q.ld; b.k.p += 37 * b.k.ld; b.v.p += 37 * b.v.ld; b.ig.p += 37 * b.ig.ld; b.fg.p += 37 * b.fg.ld;
  mlstm_chunkwise(a, h_c.data(), d.dv, st_c.data(), 16);
  mlstm_chunkwise(b, h_c.data() + 37 * d.dv, d.dv, st_c.data(), 16);
  CHECK(max_abs_diff(h_r, h_c) < 1e-12);
  CHECK(max_abs_diff(st_r, st_c) < 1e-12);
}

TEST_CASE("mlstm: the parallel backward matches finite differences in double") {
  for (std::uint64_t seed : {7u, 8u}) {
    HeadData d(9, 4, 3, seed, seed == 8 ? -3.0 : 0.0, 1.0);
    std::vector<double> w(std::size_t(d.S) * d.dv);
    Rng rng(seed + 100);
    for (auto& x : w) x = rng.normal();
    auto loss = [&]() {
      std::vector<double> h(w.size());
      mlstm_parallel(d.head(d.q, d.k, d.v, d.g), h.data(), d.dv);
      double s = 0;
      for (std::size_t i = 0; i < h.size(); ++i) s += w[i] * h[i];
      return s;
    };
    std::vector<double> dq(d.q.size(), 0), dk(d.k.size(), 0), dv(d.v.size(), 0), dg(d.g.size(), 0);
    const auto x = d.head(d.q, d.k, d.v, d.g);
    mlstm_parallel_backward(x, w.data(), d.dv, dq.data() + 1, dk.data() + 2, dv.data(), dg.data(), dg.data() + 1);
    double worst = 0;
    auto check = [&](std::vector<double>& val, const std::vector<double>& grad) {
      for (std::size_t i = 0; i < val.size(); ++i) {
        const double num = testing::fd(loss, val[i]);
        worst = std::max(worst, std::abs(num - grad[i]) / std::max(1.0, std::abs(num)));
      }
    };
    check(d.q, dq);
    check(d.k, dk);
    check(d.v, dv);
    check(d.g, dg);
    CAPTURE(seed);
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("mlstm: the feature map and windowed attention backwards match finite differences") {
  const int N = 5, d = 4, ld = 6;
  Rng rng(21);
  std::vector<double> x(std::size_t(N) * ld), F(std::size_t(d) * d), w(std::size_t(N) * ld);
  for (auto& v : x) v = rng.normal();
  for (auto& v : F) v = rng.normal();
  for (auto& v : w) v = rng.normal();
  auto fmap_loss = [&]() {
    std::vector<double> o(std::size_t(N) * ld, 0);
    feature_map_forward(x.data(), ld, N, d, F.data(), o.data(), ld);
    double s = 0;
    for (int r = 0; r < N; ++r)
      for (int a = 0; a < d; ++a) s += w[std::size_t(r) * ld + a] * o[std::size_t(r) * ld + a];
    return s;
  };
  std::vector<double> o(std::size_t(N) * ld, 0), dx(x.size(), 0), dF(F.size(), 0);
  feature_map_forward(x.data(), ld, N, d, F.data(), o.data(), ld);
  for (int r = 0; r < N; ++r) {
    double s = 0;
    for (int a = 0; a < d; ++a) s += o[std::size_t(r) * ld + a];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-12));  // a distribution over the features
  }
  feature_map_backward(x.data(), ld, N, d, F.data(), o.data(), ld, w.data(), dx.data(), dF.data());
  double worst = 0;
  for (int r = 0; r < N; ++r)
    for (int a = 0; a < d; ++a) {
      const std::size_t i = std::size_t(r) * ld + a;
      worst = std::max(worst, std::abs(testing::fd(fmap_loss, x[i]) - dx[i]));
    }
  for (std::size_t i = 0; i < F.size(); ++i) worst = std::max(worst, std::abs(testing::fd(fmap_loss, F[i]) - dF[i]));
  CHECK(worst < 1e-8);

  // windowed attention: S 12, window 3, 2 sinks
  const int S = 12, hd = 4, W = 3, sinks = 2;
  std::vector<double> q(std::size_t(S) * hd), k(q.size()), v(q.size()), g(q.size());
  for (auto* a : {&q, &k, &v, &g})
    for (auto& e : *a) e = rng.normal();
  auto att_loss = [&]() {
    std::vector<double> out(q.size()), mx(S), inv(S);
    window_attention_forward<double>(S, hd, W, sinks, {q.data(), hd}, {k.data(), hd}, {v.data(), hd}, out.data(), hd, mx.data(),
                                     inv.data());
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += g[i] * out[i];
    return s;
  };
  std::vector<double> out(q.size()), mx(S), inv(S), dq(q.size(), 0), dk(q.size(), 0), dv(q.size(), 0);
  window_attention_forward<double>(S, hd, W, sinks, {q.data(), hd}, {k.data(), hd}, {v.data(), hd}, out.data(), hd, mx.data(),
                                   inv.data());
  // row 9 attends exactly keys 0, 1 (sinks) and 7, 8, 9 (window): moving key 5 changes nothing
  const double before = out[9 * hd];
  k[5 * hd] += 3.0;
  window_attention_forward<double>(S, hd, W, sinks, {q.data(), hd}, {k.data(), hd}, {v.data(), hd}, out.data(), hd, mx.data(),
                                   inv.data());
  CHECK(out[9 * hd] == before);
  k[5 * hd] -= 3.0;
  window_attention_forward<double>(S, hd, W, sinks, {q.data(), hd}, {k.data(), hd}, {v.data(), hd}, out.data(), hd, mx.data(),
                                   inv.data());
  window_attention_backward<double>(S, hd, W, sinks, {q.data(), hd}, {k.data(), hd}, {v.data(), hd}, out.data(), hd, mx.data(),
                                    inv.data(), g.data(), dq.data(), dk.data(), dv.data());
  worst = 0;
  for (auto [val, grad] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}})
    for (std::size_t i = 0; i < val->size(); ++i) worst = std::max(worst, std::abs(testing::fd(att_loss, (*val)[i]) - (*grad)[i]));
  CHECK(worst < 1e-8);
}
