// smc/: particle populations, resampling, Langevin moves and increments, MML on the toy model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "smc/ebm.hpp"
#include "smc/moves.hpp"
#include "smc/optimize.hpp"
#include "smc/particles.hpp"
#include "smc/reward.hpp"
#include "smc/simd.hpp"

#include <numbers>

using namespace icmlkit;
using namespace icmlkit::smc;

namespace {
// y_d ~ N(x_d, 1), x_d ~ N(1, 1): the toy model of Kuntz, Lim & Johansen (2023), D = 100.
ToyHierarchical toy(int D, std::uint64_t seed) {
  Rng rng(seed);
  Eigen::VectorXd y(D);
  for (int d = 0; d < D; ++d) y[d] = 1.0 + rng.normal() + rng.normal();
  return ToyHierarchical(y);
}
}  // namespace

TEST_CASE("smc: ESS of equal and degenerate weights") {
  Population p;
  p.x = Eigen::MatrixXd::Zero(10, 1);
  p.logw = Eigen::ArrayXd::Zero(10);
  CHECK(p.ess() == doctest::Approx(10.0));
  p.logw[3] = 1000;
  CHECK(p.ess() == doctest::Approx(1.0));
}

TEST_CASE("smc: multinomial and systematic resampling are unbiased") {
  // Truth: E[count_i] = N w_i.  20,000 repetitions; 5-sigma bound on the mean count
  // (sd of a count <= sqrt(N w_i)), so a false failure has probability < 1e-5 per entry.
  Eigen::ArrayXd w(5);
  w << 0.05, 0.4, 0.15, 0.3, 0.1;
  for (auto scheme : {Resampling::multinomial, Resampling::systematic}) {
    Rng rng(13);
    Eigen::ArrayXd counts = Eigen::ArrayXd::Zero(5);
    const int reps = 20000;
    for (int r = 0; r < reps; ++r)
      for (auto i : resample_indices(w, scheme, rng)) counts[i] += 1;
    counts /= reps;
    for (int i = 0; i < 5; ++i) CHECK(std::abs(counts[i] - 5 * w[i]) < 5 * std::sqrt(5 * w[i] / reps));
  }
}

TEST_CASE("smc: invariant-move increment is exactly 0 when theta does not change") {
  const auto p = toy(10, 1);
  Eigen::VectorXd th(1), x = Eigen::VectorXd::LinSpaced(10, -1, 2);
  th << 0.7;
  CHECK(invariant_increment(p, th, th, x) == 0.0);
  Eigen::VectorXd th2(1);
  th2 << 0.8;
  CHECK(invariant_increment(p, th, th2, x) == doctest::Approx(-(p.energy(th2, x) - p.energy(th, x))));
}

TEST_CASE("smc: ULA increment equals the SMC-sampler weight with ULA forward and backward kernels") {
  // Truth: log [pi_next(x') L(x' -> x)] - log [pi_k(x) K(x -> x')] with the Gaussian ULA
  // transition densities written out (normalising constants cancel).
  const auto p = toy(4, 2);
  Eigen::VectorXd tk(1), tn(1);
  tk << 0.3;
  tn << 0.45;
  Eigen::VectorXd x(4), xn(4);
  x << 0.1, -0.4, 1.2, 0.8;
  xn << 0.3, -0.1, 1.0, 0.9;
  const double g = 0.05;
  auto log_k = [&](const Eigen::VectorXd& th, const Eigen::VectorXd& from, const Eigen::VectorXd& to) {
    return -(to - from + g * p.grad_x(th, from)).squaredNorm() / (4 * g);
  };
  const double truth = -p.energy(tn, xn) + log_k(tn, xn, x) + p.energy(tk, x) - log_k(tk, x, xn);
  CHECK(ula_increment(p, tk, tn, x, xn, g) == doctest::Approx(truth).epsilon(1e-12));
}

TEST_CASE("smc: MALA, RWM and HMC leave the Gaussian posterior invariant (moment test)") {
  // x_d | y, theta ~ N((y_d + theta)/2, 1/2).  20,000 exact draws, 10 MALA steps each; the
  // standard error of the mean is 0.005 and of the variance 0.005: 6-sigma bounds.
  const auto p = toy(2, 3);
  Eigen::VectorXd th(1);
  th << 0.5;
  Rng rng(4);
  const int n = 20000;
  Eigen::MatrixXd xs(n, 2);
  for (int i = 0; i < n; ++i) {
    Eigen::VectorXd x(2);
    for (int d = 0; d < 2; ++d) x[d] = 0.5 * (p.y()[d] + th[0]) + std::sqrt(0.5) * rng.normal();
    xs.row(i) = x.transpose();
  }
  for (int move = 0; move < 3; ++move) {
    Eigen::MatrixXd ys = xs;
    for (int i = 0; i < n; ++i) {
      Eigen::VectorXd x = ys.row(i).transpose();
      for (int s = 0; s < 10; ++s)
        x = move == 0 ? mala_step(p, th, x, 0.4, rng) : move == 1 ? rwm_step(p, th, x, 0.4, rng) : hmc_step(p, th, x, 0.2, 5, rng);
      ys.row(i) = x.transpose();
    }
    for (int d = 0; d < 2; ++d) {
      CAPTURE(move);
      const double m = ys.col(d).mean(), v = (ys.col(d).array() - m).square().mean();
      CHECK(std::abs(m - 0.5 * (p.y()[d] + th[0])) < 0.03);
      CHECK(std::abs(v - 0.5) < 0.03);
    }
  }
}

TEST_CASE("smc: every method converges to the marginal-likelihood maximiser mean(y) on the toy model") {
  // Truth: the MLE is mean(y); exact EM converges to the same fixed point.
  const auto p = toy(100, 5);
  const double mle = p.y().mean();
  double em = 0;
  for (int k = 0; k < 200; ++k) em = p.em_step(em);
  CHECK(em == doctest::Approx(mle).epsilon(1e-12));
  Eigen::VectorXd th0 = Eigen::VectorXd::Zero(1), x0 = Eigen::VectorXd::Zero(100);
  struct Case { Method m; Move mv; double tol; };
  for (const auto& c : {Case{Method::sosmc, Move::ula, 0.05}, Case{Method::sosmc, Move::mala, 0.05},
                        Case{Method::sosmc, Move::rwm, 0.25}, Case{Method::sosmc, Move::hmc, 0.05},
                        Case{Method::impdiff, Move::ula, 0.05}, Case{Method::pgd, Move::ula, 0.05},
                        Case{Method::soul, Move::ula, 0.15}}) {
    SmcOptions o;
    o.method = c.m;
    o.move = c.mv;
    o.particles = 100;
    o.steps = 400;
    o.learning_rate = 0.01;
    o.step_size = 0.01;
    o.seed = 9;
    const auto r = maximise_marginal_likelihood(p, th0, x0, o);
    CAPTURE(static_cast<int>(c.m));
    CAPTURE(static_cast<int>(c.mv));
    // Tolerance: Monte Carlo error of the particle gradient at N = 100 (SOUL: one chain); RWM
    // (no gradient) mixes slowest in 100 dimensions, so theta still lags after 400 steps
    // (start error 0.94).
    CHECK(std::abs(r.theta[0] - mle) < c.tol);
    CHECK(r.trajectory.size() == 400);
  }
}

TEST_CASE("smc: SOSMC with Adam also converges to mean(y)") {
  const auto p = toy(100, 5);
  SmcOptions o;
  o.optimizer = Optimizer::adam;
  o.learning_rate = 0.05;
  o.steps = 400;
  o.seed = 2;
  const auto r = maximise_marginal_likelihood(p, Eigen::VectorXd::Zero(1), Eigen::VectorXd::Zero(100), o);
  CHECK(std::abs(r.theta[0] - p.y().mean()) < 0.05);
}

TEST_CASE("smc: runs are reproducible per seed and reject bad settings") {
  const auto p = toy(20, 6);
  SmcOptions o;
  o.steps = 50;
  o.seed = 1;
  const Eigen::VectorXd th0 = Eigen::VectorXd::Zero(1), x0 = Eigen::VectorXd::Zero(20);
  CHECK(maximise_marginal_likelihood(p, th0, x0, o).theta[0] == maximise_marginal_likelihood(p, th0, x0, o).theta[0]);
  o.particles = 0;
  CHECK_THROWS(maximise_marginal_likelihood(p, th0, x0, o));
}

TEST_CASE("smc: SIMD exp and log agree with the C library to 1e-15") {
  // Truth: std::exp / std::log (correctly rounded to < 1 ulp); tolerance 4e-15 relative (the
  // polynomials' truncation is < 2e-16; reduction and Horner rounding add a few ulp).
  const int n = 20001;
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = -708.0 * i / (n - 1);
  exp_nonpositive(x.data(), y.data(), n);
  for (int i = 0; i < n; ++i) {
    const double t = std::exp(x[static_cast<std::size_t>(i)]);
    CHECK(std::abs(y[static_cast<std::size_t>(i)] - t) <= 4e-15 * t);
  }
  const double below[2] = {-709.0, -1e4};
  double out[2];
  exp_nonpositive(below, out, 2);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == 0.0);
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = std::exp(-700.0 + 1400.0 * i / (n - 1));
  log_positive(x.data(), y.data(), n);
  for (int i = 0; i < n; ++i) {
    const double t = std::log(x[static_cast<std::size_t>(i)]);
    CHECK(std::abs(y[static_cast<std::size_t>(i)] - t) <= 4e-15 * std::max(1.0, std::abs(t)));
  }
}

TEST_CASE("smc: polar candidates equal the scalar polar method on the same SplitMix64 words") {
  // Truth: the textbook formulas evaluated here with std::log and std::sqrt on the SplitMix64
  // sequence (seed, gamma and mixer constants of Steele, Lea & Flood 2014): accept iff
  // 0 < s < 1, factor sqrt(-2 ln s / s); tolerance 1e-15 relative (the SIMD log is within 1e-15
  // relative, its sqrt within an ulp).
  const std::uint64_t key = 12345, counter = 77;
  const int n = 4096;
  std::vector<double> v1(n), v2(n), f(n), acc(n);
  polar_candidates(key, counter, n, v1.data(), v2.data(), f.data(), acc.data());
  int accepted = 0;
  for (int k = 0; k < n; ++k) {
    std::uint64_t z = key + (counter + static_cast<std::uint64_t>(k) + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const std::int64_t ia = static_cast<std::int32_t>(static_cast<std::uint32_t>(z >> 32)),
                       ib = static_cast<std::int32_t>(static_cast<std::uint32_t>(z));
    const double a = static_cast<double>(ia) * 0x1.0p-31, b = static_cast<double>(ib) * 0x1.0p-31;
    // s = a^2 + b^2 rounded once (from the exact integer sum), as the kernel forms it: near
    // s = 1, log s is ill-conditioned and a twice-rounded s would differ in the 15th digit.
    const std::uint64_t q = static_cast<std::uint64_t>(ia * ia) + static_cast<std::uint64_t>(ib * ib);
    const bool ok = q > 0 && q < (std::uint64_t{1} << 62);
    const double s = static_cast<double>(q) * 0x1.0p-62;
    CHECK(v1[static_cast<std::size_t>(k)] == a);
    CHECK(v2[static_cast<std::size_t>(k)] == b);
    CHECK(acc[static_cast<std::size_t>(k)] == (ok ? 1.0 : 0.0));
    if (ok) {
      const double want = std::sqrt(-2 * std::log(s) / s);
      CHECK(std::abs(f[static_cast<std::size_t>(k)] - want) <= 1e-15 * want);
      ++accepted;
    }
  }
  // The acceptance rate is pi / 4 (binomial sd 0.0064 at n = 4096; 6 sd).
  CHECK(std::abs(accepted / static_cast<double>(n) - std::numbers::pi / 4) < 0.039);
}

TEST_CASE("smc: NormalStream draws have the standard normal's moments, CDF and no lag-1 correlation") {
  // Truth: E z = 0, E z^2 = 1, E z^4 = 3, E z_i z_{i+1} = 0 (the two values of a polar pair and
  // neighbouring pairs are independent), and Phi(t) = erfc(-t / sqrt 2) / 2 at several t.
  // n = 400,000 draws in uneven calls; bounds are 6 standard errors (sd of z, z^2, z^4, z z',
  // and of an indicator sqrt(Phi (1 - Phi))), a false-alarm rate below 1e-8 per check.
  NormalStream ns(17);
  const int n = 400000;
  std::vector<double> z(n);
  for (int at = 0, c = 1; at < n; at += c, c = c * 7 % 1001 + 1) ns.fill(z.data() + at, std::min(c, n - at));
  const std::vector<double> ts{-3.0, -1.5, -0.5, 0.0, 0.7, 2.5};
  std::vector<double> cdf(ts.size(), 0.0);
  double m1 = 0, m2 = 0, m4 = 0, lag = 0;
  for (int i = 0; i < n; ++i) {
    const double v = z[static_cast<std::size_t>(i)];
    m1 += v;
    m2 += v * v;
    m4 += v * v * v * v;
    if (i + 1 < n) lag += v * z[static_cast<std::size_t>(i) + 1];
    for (std::size_t k = 0; k < ts.size(); ++k) cdf[k] += v < ts[k];
  }
  m1 /= n; m2 /= n; m4 /= n; lag /= n - 1;
  const double se = 1 / std::sqrt(static_cast<double>(n));
  CHECK(std::abs(m1) < 6 * se);
  CHECK(std::abs(m2 - 1) < 6 * std::sqrt(2.0) * se);
  CHECK(std::abs(m4 - 3) < 6 * std::sqrt(96.0) * se);
  CHECK(std::abs(lag) < 6 * se);
  for (std::size_t k = 0; k < ts.size(); ++k) {
    const double phi = 0.5 * std::erfc(-ts[k] / std::sqrt(2.0));
    CHECK(std::abs(cdf[k] / n - phi) < 6 * std::sqrt(phi * (1 - phi)) * se);
  }
  // Reproducible per key; another key gives another stream.
  NormalStream a(5), b(5), c(6);
  std::vector<double> za(1000), zb(1000), zc(1000);
  a.fill(za.data(), 1000);
  b.fill(zb.data(), 1000);
  c.fill(zc.data(), 1000);
  CHECK(za == zb);
  CHECK(za != zc);
}

TEST_CASE("smc: the mixture's batched evaluation equals the per-point energy, gradients and reward") {
  // Truth: the scalar path (energy, grad_x, grad_theta, reward per point); 1e-12 absolute.
  const auto p = MixtureRewardTuning::hexagon(0.1, 100, 3);
  Eigen::VectorXd th(6);
  th << 0.3, -0.2, 0.5, 0.1, -0.4, 0.0;
  Rng rng(2);
  const Eigen::MatrixXd xs = 3.0 * p.sample(th, 3000, rng);  // spread out, some far from every mean
  Evaluation ev;
  p.evaluate(th, xs, ev);
  REQUIRE(ev.aux.cols() == 7);
  for (Eigen::Index i = 0; i < xs.rows(); i += 7) {
    const Eigen::VectorXd x = xs.row(i).transpose();
    CHECK(ev.e[i] == doctest::Approx(p.energy(th, x)).epsilon(1e-12));
    CHECK((ev.g.row(i).transpose() - p.grad_x(th, x)).norm() < 1e-12 * (1 + x.norm()));
    const Eigen::VectorXd r = ev.aux.row(i).head(6).transpose();
    CHECK((p.grad_theta(th, x) - (th.array() - th.maxCoeff()).exp().matrix() / (th.array() - th.maxCoeff()).exp().sum() + r).norm() < 1e-12);
    CHECK(ev.aux(i, 6) == doctest::Approx(p.reward(x)).epsilon(1e-13));
  }
  const Eigen::ArrayXd w = Eigen::ArrayXd::Constant(xs.rows(), 1.0 / xs.rows());
  CHECK((p.gradient_at(th, xs, w, ev) - p.gradient_at(th, xs, w, Evaluation{})).norm() < 1e-14);
}

TEST_CASE("smc: the mixture's KL term from cached reference kernels equals per-sample grad_theta U") {
  // Truth: beta (E_ref[grad_theta U] - E_w[grad_theta U]) summed point by point with grad_theta
  // (its own log-domain responsibilities), against the difference of the ascent directions at
  // beta and at 0 (same reference samples: same n_ref and seed); 1e-12 absolute.  Case 2: two
  // means 200 apart with logits (-700, 0): the rows near the first mean underflow the
  // cached-kernel path (pi_0 K ~ 1e-304) and must take the log-domain fallback.
  const double beta = 0.3;
  auto half_plane = [](const Eigen::VectorXd& x) { return x[0] > 0 ? 1.0 : 0.0; };
  Eigen::MatrixXd far(2, 2);
  far << -100, 0, 100, 0;
  const Eigen::VectorXd far_ref = Eigen::VectorXd::Zero(2);
  struct Case {
    MixtureRewardTuning p, p0;
    Eigen::VectorXd th;
  };
  Eigen::VectorXd th1(6), th2(2);
  th1 << 0.3, -0.2, 0.5, 0.1, -0.4, 0.0;
  th2 << -700, 0;
  const std::vector<Case> cases{
      {MixtureRewardTuning::hexagon(beta, 1500, 9), MixtureRewardTuning::hexagon(0.0, 1500, 9), th1},
      {MixtureRewardTuning(far, 0.5, far_ref, beta, half_plane, 1500, 9),
       MixtureRewardTuning(far, 0.5, far_ref, 0.0, half_plane, 1500, 9), th2}};
  for (const auto& c : cases) {
    Rng rng(4);
    const Eigen::MatrixXd xs = 1.5 * c.p.sample(c.p.reference_logits(), 800, rng);
    Eigen::ArrayXd w(800);
    for (auto& v : w) v = 0.1 + rng.uniform();
    w /= w.sum();
    const Eigen::Index M = c.th.size();
    Eigen::VectorXd eref = Eigen::VectorXd::Zero(M), ew = Eigen::VectorXd::Zero(M);
    const Eigen::MatrixXd& xr = c.p.reference_samples();
    REQUIRE(xr.rows() == 1500);
    for (Eigen::Index i = 0; i < xr.rows(); ++i) eref += c.p.grad_theta(c.th, xr.row(i).transpose());
    eref /= static_cast<double>(xr.rows());
    for (Eigen::Index i = 0; i < xs.rows(); ++i) ew += w[i] * c.p.grad_theta(c.th, xs.row(i).transpose());
    const Eigen::VectorXd kl_part = c.p0.gradient(c.th, xs, w) - c.p.gradient(c.th, xs, w);
    REQUIRE(kl_part.allFinite());
    CHECK((kl_part - beta * (eref - ew)).norm() < 1e-12);
  }
}

TEST_CASE("smc: mixture reward tuning — grad_theta U and the reward gradient against independent truth") {
  const auto p = MixtureRewardTuning::hexagon(0.1, 20000, 3);
  Eigen::VectorXd th(6);
  th << 0.3, -0.2, 0.5, 0.1, -0.4, 0.0;
  // grad_theta U against central differences of U.
  Eigen::VectorXd x(2);
  x << 1.5, -0.7;
  const Eigen::VectorXd g = p.grad_theta(th, x);
  for (int k = 0; k < 6; ++k) {
    Eigen::VectorXd a = th, b = th;
    a[k] += 1e-6;
    b[k] -= 1e-6;
    CHECK(g[k] == doctest::Approx((p.energy(a, x) - p.energy(b, x)) / 2e-6).epsilon(1e-6));
  }
  // J(theta) = E_pi[R] - beta KL(p_ref || pi) by quadrature on a 2-D grid (independent of the
  // particle estimator); its finite-difference gradient against the estimator on 200,000
  // exact draws (Monte Carlo standard error about 1e-3 here; tolerance 6e-3).
  auto density = [&](const Eigen::VectorXd& t, double x0, double x1) {
    Eigen::ArrayXd pi = (t.array() - t.maxCoeff()).exp();
    pi /= pi.sum();
    double d = 0;
    for (int m = 0; m < 6; ++m) {
      const double a0 = x0 - 4 * std::cos(2 * std::numbers::pi * m / 6), a1 = x1 - 4 * std::sin(2 * std::numbers::pi * m / 6);
      d += pi[m] * std::exp(-(a0 * a0 + a1 * a1) / 2) / (2 * std::numbers::pi);  // variance 1
    }
    return d;
  };
  auto J = [&](const Eigen::VectorXd& t) {
    double er = 0, kl = 0;
    const double h = 0.05;
    for (double x0 = -14; x0 < 22; x0 += h)
      for (double x1 = -14; x1 < 16; x1 += h) {
        const double q = density(t, x0, x1), pr = density(p.reference_logits(), x0, x1);
        Eigen::VectorXd xx(2);
        xx << x0, x1;
        er += p.reward(xx) * q * h * h;
        if (pr > 1e-300 && q > 1e-300) kl += pr * std::log(pr / q) * h * h;
      }
    return er - 0.1 * kl;
  };
  Rng rng(8);
  const Eigen::MatrixXd xs = p.sample(th, 200000, rng);
  const Eigen::VectorXd est = p.gradient(th, xs, Eigen::ArrayXd::Constant(200000, 1.0 / 200000));
  for (int k : {0, 3}) {
    Eigen::VectorXd a = th, b = th;
    a[k] += 1e-3;
    b[k] -= 1e-3;
    CHECK(est[k] == doctest::Approx((J(a) - J(b)) / 2e-3).epsilon(0).scale(1).epsilon(6e-3));
  }
}

TEST_CASE("smc: SOSMC reward tuning raises the mean reward of the hexagon mixture") {
  const auto p = MixtureRewardTuning::hexagon(0.001, 2000, 4);
  SmcOptions o;
  o.particles = 500;
  o.steps = 200;
  o.learning_rate = 20;  // the reward's gradient is small (R <= 0.4 and mostly ~0.01)
  o.step_size = 0.1;
  o.seed = 5;
  Rng rng(6);
  const Eigen::MatrixXd x0s = p.sample(p.reference_logits(), 1, rng);
  const auto r = maximise_marginal_likelihood(p, p.reference_logits(), x0s.row(0).transpose(), o);
  Rng ev(7);
  const double before = p.mean_reward(p.reference_logits(), 50000, ev);
  const double after = p.mean_reward(r.theta, 50000, ev);
  MESSAGE("mean reward " << before << " -> " << after);
  // Truth: exact mixture draws; the MC error of each mean is below 1e-3.
  CHECK(after > 1.5 * before);
}

// ---- 2-D energy-based model (MLP energy) reward tuning ------------------------------------

TEST_CASE("smc: MLP energy gradients in x and theta match central finite differences") {
  // Truth: central differences with h = 1e-5 (truncation O(h^2) ~ 1e-10, rounding ~ 1e-11 / h);
  // tolerance 1e-6 absolute.  Large random weights (sd 0.7) make the SiLU layers nonlinear.
  const MlpEnergy net(2, 7, 3);
  Rng rng(3);
  const Eigen::VectorXd th = net.init(0.7, rng) + 0.3 * Eigen::VectorXd::NullaryExpr(net.n_params(), [&] { return rng.normal(); });
  Eigen::VectorXd x(2);
  x << 0.4, -1.3;
  Eigen::VectorXd gx, gt;
  const double e = net.backward(th, x, &gx, &gt);
  CHECK(e == doctest::Approx(net.energy(th, x)).epsilon(1e-14));
  const double h = 1e-5;
  for (int j = 0; j < 2; ++j) {
    Eigen::VectorXd xp = x, xm = x;
    xp[j] += h;
    xm[j] -= h;
    CHECK(std::abs(gx[j] - (net.energy(th, xp) - net.energy(th, xm)) / (2 * h)) < 1e-6);
  }
  for (int k = 0; k < net.n_params(); ++k) {
    Eigen::VectorXd tp = th, tm = th;
    tp[k] += h;
    tm[k] -= h;
    CHECK(std::abs(gt[k] - (net.energy(tp, x) - net.energy(tm, x)) / (2 * h)) < 1e-6);
  }
}

TEST_CASE("smc: EBM reward-tuning gradient equals the derivative of E[R] - beta KL by quadrature") {
  // On a grid the model is a discrete distribution w(theta) ~ exp(-E_theta(node)), for which
  // grad J = -Cov_w(R, grad E) - beta Cov_w(E - E_0, grad E) holds exactly.  Truth: J by the
  // same quadrature (EbmRewardTuning::summarise), differentiated by central differences along
  // random directions (h = 1e-5); tolerance 1e-6 relative to the directional derivative's scale.
  const MlpEnergy net(2, 6, 2);
  Rng rng(5);
  const Eigen::VectorXd th0 = net.init(0.8, rng);
  const EbmRewardTuning p(net, th0, 0.25);
  const Eigen::VectorXd th = th0 + 0.2 * Eigen::VectorXd::NullaryExpr(net.n_params(), [&] { return rng.normal(); });
  const Grid2d grid = make_grid(3.0, 31);
  const Eigen::ArrayXd w = p.grid_weights(th, grid);
  const Eigen::VectorXd g = p.gradient(th, grid.x, w);
  CHECK(p.summarise(th, grid).kl > 1e-3);  // the KL term is really exercised
  for (int rep = 0; rep < 3; ++rep) {
    const Eigen::VectorXd v = Eigen::VectorXd::NullaryExpr(net.n_params(), [&] { return rng.normal(); }).normalized();
    const double h = 1e-5;
    const double fd = (p.summarise(th + h * v, grid).objective - p.summarise(th - h * v, grid).objective) / (2 * h);
    CHECK(g.dot(v) == doctest::Approx(fd).epsilon(1e-6).scale(g.norm()));
  }
  // At theta = theta_0 the KL part vanishes and the estimate is the reward covariance only.
  const EbmRewardTuning p0(net, th0, 0.0);
  const Eigen::ArrayXd w0 = p.grid_weights(th0, grid);
  CHECK((p.gradient(th0, grid.x, w0) - p0.gradient(th0, grid.x, w0)).norm() < 1e-12 * (1 + g.norm()));
}

TEST_CASE("smc: EBM optimal reward is the published optimum of the reference run") {
  // Truth: the reference's metrics.json for beta = 0.25 reports p0A = 0.5420000553 and
  // opt_reward = 0.9847588389 (pi* ~ pi_0 exp(R / beta)); 1e-9 relative.
  CHECK(EbmRewardTuning::optimal_reward(0.5420000553131104, 0.25) == doctest::Approx(0.9847588388636662).epsilon(1e-9));
  CHECK(EbmRewardTuning::optimal_reward(0.5, 1e-3) == doctest::Approx(1.0));
}

TEST_CASE("smc: make_circles has two concentric rings and a trained EBM concentrates on them") {
  // Truth: without noise the radii ratio is exactly `factor` after any common scaling.
  Rng rng(1);
  const Eigen::MatrixXd c = make_circles(400, 0.0, 0.5, 2.5, rng);
  const double r_out = c.row(0).norm(), r_in = c.row(399).norm();
  CHECK(r_in / r_out == doctest::Approx(0.5).epsilon(1e-9));
  // Trained with the tool's schedule, the model's mass within 0.5 of a ring must exceed the
  // untrained (nearly flat) model's by a wide margin; quadrature on a 100 x 100 grid.
  Rng rng2(2);
  const Eigen::MatrixXd data = make_circles(2000, 0.02, 0.5, 2.5, rng2);
  const MlpEnergy net(2, 32, 2);
  EbmTrainOptions o;  // the tool's defaults
  o.seed = 7;
  const Eigen::VectorXd th = train_ebm(net, data, o);
  Rng rng3(7);
  const Eigen::VectorXd th_init = net.init(o.init_std, rng3);
  const Grid2d grid = make_grid(6.0, 100);
  const EbmRewardTuning p(net, th_init, 0.0);
  auto near_mass = [&](const Eigen::VectorXd& t) {
    const Eigen::ArrayXd w = p.grid_weights(t, grid);
    double m = 0;
    for (Eigen::Index i = 0; i < grid.x.rows(); ++i) {
      const double r = grid.x.row(i).norm();
      if (std::min(std::abs(r - r_out), std::abs(r - r_in)) < 0.5) m += w[i];
    }
    return m;
  };
  const double before = near_mass(th_init), after = near_mass(th);
  MESSAGE("mass near the rings: untrained " << before << ", trained " << after);
  CHECK(after > before + 0.2);
}
