// fit/mixlaw: the KKT capacity allocation, analytic gradients, recovery of known laws.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "fit/mixlaw.hpp"
#include "fit/mix_optimize.hpp"
#include "fit/mixlaw_fit.hpp"
#include "num/simplex.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::fit;

namespace {

Eigen::ArrayXd arr(std::initializer_list<double> v) {
  Eigen::ArrayXd a(static_cast<Eigen::Index>(v.size()));
  Eigen::Index i = 0;
  for (double x : v) a[i++] = x;
  return a;
}

// Random mixtures on the simplex (some exact zeros), N = 100 (M params), D = 10 (B tokens).
MixData random_runs(int n, int K, std::uint64_t seed) {
  Rng rng(seed);
  MixData d;
  for (int i = 0; i < K; ++i) d.domains.push_back("d" + std::to_string(i));
  d.h.resize(n, K);
  for (int r = 0; r < n; ++r) {
    double s = 0;
    for (int i = 0; i < K; ++i) {
      const double e = rng.uniform() < 0.15 ? 0.0 : -std::log(1 - rng.uniform());
      d.h(r, i) = e;
      s += e;
    }
    if (s == 0) { d.h(r, 0) = 1; s = 1; }
    d.h.row(r) /= s;
  }
  d.params = Eigen::ArrayXd::Constant(n, 100.0);
  d.tokens = Eigen::ArrayXd::Constant(n, 10.0);
  d.loss = Eigen::ArrayXXd::Zero(n, K);
  d.set_mask(0.0);
  return d;
}

Eigen::VectorXd capacity_noise_truth(int K) {
  Eigen::VectorXd p(5 * K + 1);
  for (int i = 0; i < K; ++i) {
    p[i] = 1.0 + 0.3 * i;           // c
    p[K + i] = 0.2 + 0.05 * i;      // b
    p[2 * K + i] = 0.3 + 0.04 * i;  // a
    p[3 * K + i] = 1.5 + 0.2 * i;   // E
    p[4 * K + i] = 0.4 + 0.1 * i;   // A
  }
  p[5 * K] = 0.5;  // H
  return p;
}

void check_objective_gradient(const MixLaw& law, const MixData& d, const Eigen::VectorXd& p) {
  // Truth: central differences; tolerance 1e-5 relative (step 1e-6, smooth away from kinks).
  double f;
  Eigen::VectorXd g(p.size());
  REQUIRE(law.objective(p.data(), d, &f, g.data()));
  for (Eigen::Index k = 0; k < p.size(); ++k) {
    const double h = 1e-6 * std::max(1.0, std::abs(p[k]));
    Eigen::VectorXd pp = p, pm = p;
    pp[k] += h;
    pm[k] -= h;
    double fp, fm;
    REQUIRE(law.objective(pp.data(), d, &fp, nullptr));
    REQUIRE(law.objective(pm.data(), d, &fm, nullptr));
    CAPTURE(k);
    CHECK(g[k] == doctest::Approx((fp - fm) / (2 * h)).epsilon(1e-5).scale(1e-3));
  }
}

}  // namespace

TEST_CASE("mixlaw: KKT allocation satisfies the optimality conditions") {
  const Eigen::ArrayXd h = arr({0.5, 0.3, 0.15, 0.05, 0.0}), c = arr({1.0, 2.0, 0.5, 1.5, 1.0}),
                      b = arr({0.2, 0.4, 0.3, 0.1, 0.3});
  const double H = 2.0, N = 50.0;
  const auto a = allocate_capacity(h, c, b, H, N);
  CHECK(a.x.sum() == doctest::Approx(N + 4 * H).epsilon(1e-12));
  CHECK((a.x >= H - 1e-12).all());
  CHECK_FALSE(a.free[4]);  // h = 0 sits at the bound
  // Stationarity: h_i b_i c_i x_i^(-b_i-1) = lambda on free domains, <= lambda at the bound.
  const double lambda = std::exp(a.log_lambda);
  for (Eigen::Index i = 0; i < 5; ++i) {
    const double mg = h[i] * b[i] * c[i] * std::pow(a.x[i], -b[i] - 1);
    if (a.free[i]) CHECK(mg == doctest::Approx(lambda).epsilon(1e-9));
    else CHECK(mg <= lambda * (1 + 1e-9));
  }
}

TEST_CASE("mixlaw: KKT allocation equals a brute-force constrained optimum (K = 3)") {
  // Truth: dense grid over (x1, x2) with x3 = T - x1 - x2, all >= H.
  const Eigen::ArrayXd h = arr({0.6, 0.3, 0.1}), c = arr({1.0, 1.5, 2.0}), b = arr({0.3, 0.2, 0.5});
  const double H = 1.0, N = 20.0, T = N + 2 * H;
  auto F = [&](double x1, double x2, double x3) {
    return h[0] * c[0] * std::pow(x1, -b[0]) + h[1] * c[1] * std::pow(x2, -b[1]) + h[2] * c[2] * std::pow(x3, -b[2]);
  };
  double best = 1e300, bx1 = 0, bx2 = 0;
  for (double x1 = H; x1 <= T - 2 * H; x1 += 0.005)
    for (double x2 = H; x2 <= T - H - x1; x2 += 0.005) {
      const double v = F(x1, x2, T - x1 - x2);
      if (v < best) { best = v; bx1 = x1; bx2 = x2; }
    }
  const auto a = allocate_capacity(h, c, b, H, N);
  CHECK(F(a.x[0], a.x[1], a.x[2]) <= best + 1e-12);
  CHECK(a.x[0] == doctest::Approx(bx1).epsilon(0.01));
  CHECK(a.x[1] == doctest::Approx(bx2).epsilon(0.01));
  // A case where the small-weight domain is pushed onto the bound H.
  const Eigen::ArrayXd h2 = arr({0.98, 0.019, 0.001});
  const auto a2 = allocate_capacity(h2, c, b, 3.0, 20.0);
  CHECK_FALSE(a2.free[2]);
  CHECK(a2.x[2] == 3.0);
}

TEST_CASE("mixlaw: analytic gradients match finite differences for every law") {
  MixData d = random_runs(12, 4, 1);
  const auto cn = make_mixlaw("capacity-noise");
  const Eigen::VectorXd p = capacity_noise_truth(4);
  Eigen::ArrayXXd y;
  REQUIRE(cn->predict(p.data(), d, y));
  Rng rng(2);
  for (Eigen::Index r = 0; r < y.rows(); ++r)
    for (Eigen::Index i = 0; i < y.cols(); ++i) d.loss(r, i) = y(r, i) + 0.05 * rng.normal();
  d.set_mask(0.0);
  // H large enough that some domains sit on the bound (tests the active-set terms).
  Eigen::VectorXd q = p;
  q[20] = 6.0;
  check_objective_gradient(*cn, d, p);
  check_objective_gradient(*cn, d, q);
  const auto cap = make_mixlaw("capacity");
  Eigen::VectorXd pc(13);
  pc << p.segment(0, 8), p.segment(12, 4), 0.5;
  check_objective_gradient(*cap, d, pc);
  const auto ex = make_mixlaw("exponential");
  Eigen::VectorXd pe = ex->initial(d);
  for (Eigen::Index k = 0; k < pe.size(); ++k) pe[k] += 0.1 * rng.normal();
  check_objective_gradient(*ex, d, pe);
  const auto lin = make_mixlaw("linear");
  Eigen::VectorXd pl = lin->initial(d);
  pl.array() += 0.1;
  check_objective_gradient(*lin, d, pl);
}

TEST_CASE("mixlaw: gradient of the weighted loss in h matches finite differences") {
  const auto cn = make_mixlaw("capacity-noise");
  const Eigen::VectorXd p = capacity_noise_truth(4);
  const Eigen::ArrayXd h = arr({0.4, 0.3, 0.2, 0.1}), v = arr({1.0, 0.5, 2.0, 1.0});
  Eigen::ArrayXd g;
  cn->weighted_loss_grad(p.data(), h, 100.0, 10.0, v, &g);
  for (Eigen::Index j = 0; j < 4; ++j) {
    Eigen::ArrayXd hp = h, hm = h;
    const double e = 1e-6;
    hp[j] += e;
    hm[j] -= e;
    const double fd = (cn->weighted_loss_grad(p.data(), hp, 100.0, 10.0, v, nullptr) -
                       cn->weighted_loss_grad(p.data(), hm, 100.0, 10.0, v, nullptr)) / (2 * e);
    CHECK(g[j] == doctest::Approx(fd).epsilon(1e-5));
  }
}

TEST_CASE("mixlaw: fitting recovers a known capacity-noise law on generated runs") {
  MixData d = random_runs(40, 3, 7);
  const auto law = make_mixlaw("capacity-noise");
  const Eigen::VectorXd truth = capacity_noise_truth(3);
  Eigen::ArrayXXd y;
  REQUIRE(law->predict(truth.data(), d, y));
  d.loss = y;
  d.set_mask(0.0);
  MixFitOptions opt;
  opt.starts = 2;
  opt.hops = 2;
  opt.seed = 3;
  const auto r = fit_mixlaw(*law, d, opt);
  // Noise-free data from a law in the model class: the fitted law reproduces every observed
  // (masked) loss; entries with h_i = 0 are not observed, so they are not constrained.
  Eigen::ArrayXXd pred;
  REQUIRE(law->predict(r.params.data(), d, pred));
  CHECK(((pred - y).abs() / y * d.mask).maxCoeff() < 1e-3);
  CHECK(r.objective < 1e-6);
}

TEST_CASE("mixlaw: linear law is the exact least-squares solution, with metrics by hand") {
  MixData d = random_runs(30, 3, 9);
  Eigen::VectorXd beta(9);
  beta << 2, 0.5, 0.1, 0.3, 3, 0.2, 0.4, 0.6, 2.5;
  const auto lin = make_mixlaw("linear");
  Eigen::ArrayXXd y;
  lin->predict(beta.data(), d, y);
  d.loss = y;
  d.set_mask(0.0);
  const Eigen::VectorXd fit = lin->initial(d);
  CHECK((fit - beta).cwiseAbs().maxCoeff() < 1e-10);
  const auto m = mix_metrics(y * 1.01, d);
  CHECK(m["mre"].get<double>() == doctest::Approx(0.01).epsilon(1e-9));
  CHECK(m["spearman"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("mixlaw: projection onto the bounded simplex satisfies its KKT conditions") {
  // Truth: h = clip(y - tau, lo, hi) with one tau; free coordinates share y_i - h_i = tau.
  Rng rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    Eigen::ArrayXd y(5), lo = Eigen::ArrayXd::Constant(5, 0.05), hi = Eigen::ArrayXd::Constant(5, 0.6);
    for (int i = 0; i < 5; ++i) y[i] = rng.uniform(-1, 1.5);
    const Eigen::ArrayXd h = num::project_bounded_simplex(y, lo, hi);
    CHECK(h.sum() == doctest::Approx(1.0).epsilon(1e-14));
    CHECK(((h >= lo - 1e-15) && (h <= hi + 1e-15)).all());
    double tau = std::numeric_limits<double>::quiet_NaN();
    for (int i = 0; i < 5; ++i)
      if (h[i] > lo[i] + 1e-12 && h[i] < hi[i] - 1e-12) tau = y[i] - h[i];
    if (std::isnan(tau)) continue;
    for (int i = 0; i < 5; ++i) {
      if (h[i] <= lo[i] + 1e-12) CHECK(y[i] - lo[i] <= tau + 1e-9);
      else if (h[i] >= hi[i] - 1e-12) CHECK(y[i] - hi[i] >= tau - 1e-9);
      else CHECK(y[i] - h[i] == doctest::Approx(tau).epsilon(1e-9));
    }
  }
  CHECK_THROWS(num::project_bounded_simplex(Eigen::ArrayXd::Zero(3), Eigen::ArrayXd::Constant(3, 0.5),
                                            Eigen::ArrayXd::Ones(3)));
}

TEST_CASE("mixlaw: optimised mixture matches a dense grid over the simplex (K = 3)") {
  // Truth: exhaustive grid with step 0.002 over the 2-simplex.
  MixData d = random_runs(5, 3, 12);
  const auto cn = make_mixlaw("capacity-noise");
  const Eigen::VectorXd p = capacity_noise_truth(3);
  const Eigen::ArrayXd v = Eigen::ArrayXd::Constant(3, 1.0 / 3);
  MixOptimizeOptions opt;
  opt.lower = Eigen::ArrayXd::Constant(3, 0.02);
  opt.upper = Eigen::ArrayXd::Constant(3, 0.9);
  const auto best = optimize_mixture(*cn, p, 100.0, 10.0, v, opt);
  double grid_best = 1e300;
  Eigen::ArrayXd grid_h(3);
  for (double a = 0.02; a <= 0.9; a += 0.002)
    for (double b = 0.02; b <= 0.9 && a + b <= 0.98; b += 0.002) {
      Eigen::ArrayXd h(3);
      h << a, b, 1 - a - b;
      if (h[2] > 0.9) continue;
      const double f = cn->weighted_loss_grad(p.data(), h, 100.0, 10.0, v, nullptr);
      if (f < grid_best) { grid_best = f; grid_h = h; }
    }
  CHECK(best.objective <= grid_best + 1e-12);
  CHECK((best.h - grid_h).abs().maxCoeff() < 0.01);
}

namespace {
// Runs of a known capacity-noise law with multiplicative noise (sd 2%) on the losses.
MixData noisy_runs(int n, std::uint64_t seed) {
  MixData d = random_runs(n, 3, seed);
  const auto law = make_mixlaw("capacity-noise");
  const Eigen::VectorXd truth = capacity_noise_truth(3);
  Eigen::ArrayXXd y;
  REQUIRE(law->predict(truth.data(), d, y));
  Rng rng(seed + 1);
  for (Eigen::Index r = 0; r < y.rows(); ++r)
    for (Eigen::Index i = 0; i < y.cols(); ++i) y(r, i) *= 1 + 0.02 * rng.normal();
  d.loss = y;
  d.set_mask(0.0);
  return d;
}
}  // namespace

TEST_CASE("mixlaw: the l2 penalty shrinks the noise amplitudes to a stationary point of MSE + l2 sum A^2") {
  const MixData d = noisy_runs(40, 21);
  const auto law = make_mixlaw("capacity-noise");
  MixFitOptions opt;
  opt.starts = 1;
  opt.hops = 0;
  opt.seed = 5;
  opt.fixed["H"] = 0.5;
  const auto plain = fit_mixlaw(*law, d, opt);
  opt.l2 = 0.05;
  const auto pen = fit_mixlaw(*law, d, opt);
  const int K = 3;
  const Eigen::VectorXd A_plain = plain.params.segment(4 * K, K), A_pen = pen.params.segment(4 * K, K);
  CHECK(A_pen.squaredNorm() < 0.5 * A_plain.squaredNorm());
  // The reported objective is the MSE plus the penalty.
  CHECK(pen.objective == doctest::Approx(pen.mse + 0.05 * A_pen.squaredNorm()).epsilon(1e-12));
  // Stationarity, from the law's own MSE gradient: d MSE / d A_i = -2 l2 A_i where A_i is
  // well inside its box [0, 500] (near 0 the box's logistic map flattens and L-BFGS stalls
  // there, so those are only required to be small).
  Eigen::VectorXd g(pen.params.size());
  double f = 0;
  REQUIRE(law->objective(pen.params.data(), d, &f, g.data()));
  CHECK(f == doctest::Approx(pen.mse).epsilon(1e-12));
  for (int i = 0; i < K; ++i) {
    if (A_pen[i] > 1e-2) CHECK(g[4 * K + i] == doctest::Approx(-2 * 0.05 * A_pen[i]).epsilon(0.05));
    else CHECK(A_pen[i] < 0.5 * A_plain[i]);
  }
}

TEST_CASE("mixlaw: early stopping refits for the iterations its held-in rows score best") {
  const MixData d = noisy_runs(30, 33);
  const auto law = make_mixlaw("capacity-noise");
  MixFitOptions opt;
  opt.starts = 2;
  opt.hops = 1;
  opt.seed = 8;
  opt.early_stop = 0.3;
  opt.trace = true;
  opt.monitor = &d;
  opt.lbfgs.max_iterations = 60;
  const auto r = fit_mixlaw(*law, d, opt);
  CHECK(r.selection == "held-in");
  REQUIRE(r.early_stop_step >= 1);
  // From the trace: the winner's held-in phase has its lowest held-in MSE at early_stop_step,
  // and its refit on every row stops there; the start scores are those lowest MSEs.
  for (int s = 0; s < 2; ++s) {
    double best = 1e300;
    int best_step = -1, last_fit_step = -1;
    for (const auto& t : r.trace) {
      if (t.start != s) continue;
      if (t.held_in_phase) {
        REQUIRE(std::isfinite(t.held_in_mse));
        if (t.held_in_mse < best) { best = t.held_in_mse; best_step = t.step; }
      } else {
        CHECK(std::isnan(t.held_in_mse));
        CHECK(std::isfinite(t.monitor_mre));
        last_fit_step = std::max(last_fit_step, t.step);
      }
    }
    CHECK(r.start_scores[static_cast<std::size_t>(s)] == doctest::Approx(best).epsilon(1e-12));
    CHECK(last_fit_step <= std::max(1, best_step));
    if (s == r.best_start) CHECK(r.early_stop_step == last_fit_step);
  }
  CHECK(r.start_scores[static_cast<std::size_t>(r.best_start)] <= r.start_scores[static_cast<std::size_t>(1 - r.best_start)]);
  opt.early_stop = 0.99;
  CHECK_THROWS_AS(fit_mixlaw(*law, d, opt), UsageError);
}

TEST_CASE("mixlaw: cross-validated start selection picks the lowest fold error, reproducibly") {
  const MixData d = noisy_runs(24, 44);
  const auto law = make_mixlaw("capacity");
  MixFitOptions opt;
  opt.starts = 3;
  opt.hops = 0;
  opt.seed = 2;
  opt.cv_folds = 4;
  opt.lbfgs.max_iterations = 80;
  const auto r = fit_mixlaw(*law, d, opt);
  CHECK(r.selection == "cv");
  REQUIRE(r.start_scores.size() == 3);
  for (double s : r.start_scores) CHECK(std::isfinite(s));
  for (double s : r.start_scores) CHECK(r.start_scores[static_cast<std::size_t>(r.best_start)] <= s);
  CHECK(r.local_solves == 3 * (1 + 4));
  const auto again = fit_mixlaw(*law, d, opt);
  CHECK((again.params - r.params).norm() == 0);
  opt.cv_folds = 25;
  CHECK_THROWS_AS(fit_mixlaw(*law, d, opt), UsageError);
}

TEST_CASE("mixlaw: l2 chosen by cross-validation follows the one-standard-error rule and keeps a real noise term") {
  // Noise-free runs of a known capacity-noise law over several token budgets: the noise term
  // is identifiable and real, so penalising it costs held-out error and l2 = 0 must win.
  MixData d = random_runs(40, 3, 51);
  for (Eigen::Index r = 0; r < d.tokens.size(); ++r) d.tokens[r] = std::vector<double>{2, 5, 10, 20}[static_cast<std::size_t>(r % 4)];
  const auto law = make_mixlaw("capacity-noise");
  const Eigen::VectorXd truth = capacity_noise_truth(3);
  Eigen::ArrayXXd y;
  REQUIRE(law->predict(truth.data(), d, y));
  d.loss = y;
  d.set_mask(0.0);
  MixFitOptions opt;
  opt.starts = 1;
  opt.hops = 0;
  opt.seed = 4;
  opt.fixed["H"] = 0.5;
  opt.l2 = -1;  // cross-validated
  opt.l2_grid = {0.0, 0.1, 1.0};
  opt.l2_folds = 4;
  const auto r = fit_mixlaw(*law, d, opt);
  REQUIRE(r.l2_scores.size() == 3);
  REQUIRE(r.l2_score_se.size() == 3);
  CHECK(r.l2 == 0.0);
  CHECK(r.l2_scores[0] < r.l2_scores[1]);
  CHECK(r.l2_scores[0] < r.l2_scores[2]);
  // The rule, recomputed from the reported scores: the largest l2 within one SE of the best.
  std::size_t best = 0;
  for (std::size_t g = 1; g < 3; ++g)
    if (r.l2_scores[g] < r.l2_scores[best]) best = g;
  double chosen = -1;
  for (std::size_t g = 0; g < 3; ++g)
    if (r.l2_scores[g] <= r.l2_scores[best] + r.l2_score_se[best]) chosen = std::max(chosen, opt.l2_grid[g]);
  CHECK(r.l2 == chosen);
  // With 2 % noise on the losses the noise term is still worth its keep: the rule keeps l2 small.
  Rng rng(77);
  for (Eigen::Index r2 = 0; r2 < d.loss.rows(); ++r2)
    for (Eigen::Index i = 0; i < d.loss.cols(); ++i) d.loss(r2, i) *= 1 + 0.02 * rng.normal();
  const auto noisy = fit_mixlaw(*law, d, opt);
  CHECK(noisy.l2 < 1.0);
  CHECK(noisy.l2_scores[0] < noisy.l2_scores[2]);
  // Laws with no noise term ignore the penalty and report no cross-validation.
  const auto cap = fit_mixlaw(*make_mixlaw("capacity"), d, opt);
  CHECK(cap.l2_scores.empty());
  CHECK(cap.l2 == 0.0);
}
