// unlearn/: LMCleaner's correction, the retrain baseline, the certificate, the noise and the
// membership-inference AUC.  Expected values come from a naive SGD loop written here (the
// counterfactual retrain), explicit step Jacobians built with Eigen, spectral norms from Eigen's
// eigensolver (the truncation bound's gamma), hand-computed closed forms (sigma, composition) and a
// brute-force pairwise count (AUC).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "unlearn/least_squares.hpp"
#include "unlearn/lmcleaner.hpp"
#include "unlearn/run.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::unlearn;

namespace {

// A recorded SGD problem: design, targets, start, batches, per-step learning rates.
struct Problem {
  Eigen::MatrixXd A;
  Eigen::VectorXd b, theta0;
  std::vector<std::vector<int>> batches;
  std::vector<double> lrs;
  double lambda = 0;
  bool logistic = false;
};

// Gaussian design [n, p]; least-squares targets A theta* + noise or Bernoulli(sigmoid(a . theta*))
// labels; batches are consecutive slices of per-epoch shuffles; eta_s = lr (1 - 0.3 s / tau).
Problem make_problem(int p, int n, int batch, int tau, double lr, double lambda, bool logistic, std::uint64_t seed) {
  Rng rng(seed);
  Problem pr;
  pr.lambda = lambda;
  pr.logistic = logistic;
  pr.A.resize(n, p);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < p; ++j) pr.A(i, j) = rng.normal();
  Eigen::VectorXd star(p);
  for (int j = 0; j < p; ++j) star[j] = (logistic ? 0.3 : 1.0) * rng.normal();
  pr.b.resize(n);
  for (int i = 0; i < n; ++i) {
    const double z = pr.A.row(i).dot(star);
    pr.b[i] = logistic ? (rng.uniform() < 1 / (1 + std::exp(-z)) ? 1.0 : 0.0) : z + 0.1 * rng.normal();
  }
  pr.theta0.resize(p);
  for (int j = 0; j < p; ++j) pr.theta0[j] = 0.1 * rng.normal();
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::size_t cursor = perm.size();
  for (int s = 0; s < tau; ++s) {
    std::vector<int> bt;
    for (int k = 0; k < batch; ++k) {
      if (cursor == perm.size()) {
        for (int i = 0; i < n; ++i) perm[static_cast<std::size_t>(i)] = i;
        for (std::size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
        cursor = 0;
      }
      bt.push_back(perm[cursor++]);
    }
    pr.batches.push_back(bt);
    pr.lrs.push_back(lr * (1 - 0.3 * s / tau));
  }
  return pr;
}

LeastSquaresRun least_squares(const Problem& pr, std::int64_t every) {
  return LeastSquaresRun(pr.A, pr.b, pr.theta0, pr.batches, pr.lrs, pr.lambda, every);
}

// The loss's first and second derivative in the margin, written out independently of the library.
void derivs(const Problem& pr, double z, double y, double& d1, double& d2) {
  if (pr.logistic) {
    const double q = 1 / (1 + std::exp(-z));
    d1 = q - y;
    d2 = q * (1 - q);
  } else {
    d1 = z - y;
    d2 = 1;
  }
}

Eigen::VectorXd batch_gradient(const Problem& pr, int s, const Eigen::VectorXd& theta) {
  Eigen::VectorXd g = Eigen::VectorXd::Zero(theta.size());
  for (int i : pr.batches[static_cast<std::size_t>(s)]) {
    double d1 = 0, d2 = 0;
    derivs(pr, pr.A.row(i).dot(theta), pr.b[i], d1, d2);
    g += d1 * pr.A.row(i).transpose();
  }
  return g / static_cast<double>(pr.batches[static_cast<std::size_t>(s)].size());
}

Eigen::MatrixXd batch_hessian(const Problem& pr, int s, const Eigen::VectorXd& theta) {
  const auto p = theta.size();
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(p, p);
  for (int i : pr.batches[static_cast<std::size_t>(s)]) {
    double d1 = 0, d2 = 0;
    derivs(pr, pr.A.row(i).dot(theta), pr.b[i], d1, d2);
    H += d2 * pr.A.row(i).transpose() * pr.A.row(i);
  }
  return H / static_cast<double>(pr.batches[static_cast<std::size_t>(s)].size());
}

// The naive SGD loop: theta[0 .. tau] with the steps in `skip` taken as no-ops.
std::vector<Eigen::VectorXd> naive_sgd(const Problem& pr, const std::set<std::int64_t>& skip = {}) {
  std::vector<Eigen::VectorXd> th{pr.theta0};
  for (int s = 0; s < static_cast<int>(pr.batches.size()); ++s) {
    const Eigen::VectorXd& t = th.back();
    th.push_back(skip.count(s) ? t : Eigen::VectorXd(t - pr.lrs[static_cast<std::size_t>(s)] * (batch_gradient(pr, s, t) + pr.lambda * t)));
  }
  return th;
}

// I + J_s = I - eta_s (H_s + lambda I) at the recorded theta[s].
Eigen::MatrixXd step_map(const Problem& pr, int s, const Eigen::VectorXd& theta) {
  const auto p = theta.size();
  return Eigen::MatrixXd::Identity(p, p) -
         pr.lrs[static_cast<std::size_t>(s)] * (batch_hessian(pr, s, theta) + pr.lambda * Eigen::MatrixXd::Identity(p, p));
}

Eigen::VectorXd as_eigen(const std::vector<double>& x) {
  return Eigen::Map<const Eigen::VectorXd>(x.data(), static_cast<Eigen::Index>(x.size()));
}

std::vector<double> as_std(const Eigen::VectorXd& x) { return {x.data(), x.data() + x.size()}; }

LmCleanerOptions options(std::int64_t K, HvpMode mode, bool probe = true) {
  LmCleanerOptions o;
  o.K = K;
  o.mode = mode;
  o.probe = probe;
  return o;
}

}  // namespace

TEST_CASE("unlearn: curvature-product mode names round-trip and a bad one names --hvp") {
  for (HvpMode m : {HvpMode::fisher, HvpMode::ggn, HvpMode::exact}) CHECK(parse_hvp_mode(hvp_mode_name(m)) == m);
  try {
    parse_hvp_mode("diag");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(e.where() == "--hvp");
  }
}

TEST_CASE("unlearn: seek from checkpoints replays the recorded run bit for bit") {
  const Problem pr = make_problem(20, 200, 8, 60, 0.05, 0.01, false, 11);
  LeastSquaresRun sparse = least_squares(pr, 7), scratch = least_squares(pr, 1000);
  const auto truth = naive_sgd(pr);
  std::vector<double> a, b;
  for (std::int64_t s : {0, 13, 14, 35, 60, 3, 59, 21}) {
    sparse.seek(s);
    scratch.seek(s);
    CHECK(sparse.at() == s);
    sparse.params(a);
    scratch.params(b);
    CHECK(a == b);  // bitwise
    CHECK((as_eigen(a) - truth[static_cast<std::size_t>(s)]).cwiseAbs().maxCoeff() < 1e-12);
  }
  // Leaving the trajectory (a skipped step, replaced parameters) does not leak into a later seek.
  sparse.seek(10);
  sparse.advance(true);
  sparse.seek(20);
  sparse.params(a);
  sparse.seek(15);
  sparse.set_params(std::vector<double>(20, 1.0));
  sparse.seek(20);
  sparse.params(b);
  scratch.seek(20);
  std::vector<double> c;
  scratch.params(c);
  CHECK(a == c);
  CHECK(b == c);
  CHECK_THROWS_AS(sparse.seek(61), InputError);
  sparse.seek(60);
  CHECK_THROWS_AS(sparse.advance(), RuntimeError);
}

TEST_CASE("unlearn: step Jacobian products equal the explicit matrices (least squares and logistic)") {
  for (bool logistic : {false, true}) {
    const Problem pr = make_problem(12, 100, 8, 30, 0.1, 0.02, logistic, 5);
    std::unique_ptr<Run> run;
    if (logistic)
      run = std::make_unique<LogisticRun>(pr.A, pr.b, pr.theta0, pr.batches, pr.lrs, pr.lambda, 5);
    else
      run = std::make_unique<LeastSquaresRun>(pr.A, pr.b, pr.theta0, pr.batches, pr.lrs, pr.lambda, 5);
    const auto th = naive_sgd(pr);
    Rng rng(3);
    std::vector<double> v(12), out, diff, g;
    for (double& x : v) x = rng.normal();
    const Eigen::VectorXd ve = as_eigen(v);
    for (int s : {0, 7, 29}) {
      run->seek(s);
      const Eigen::VectorXd& t = th[static_cast<std::size_t>(s)];
      const double eta = pr.lrs[static_cast<std::size_t>(s)];
      const Eigen::VectorXd ge = batch_gradient(pr, s, t);
      run->gradient(g);
      CHECK((as_eigen(g) - ge).cwiseAbs().maxCoeff() < 1e-12);
      // fisher: -eta (g g^T + lambda I) v
      const Eigen::MatrixXd F = ge * ge.transpose() + pr.lambda * Eigen::MatrixXd::Identity(12, 12);
      run->jacobian_product(HvpMode::fisher, v, out);
      CHECK((as_eigen(out) + eta * F * ve).cwiseAbs().maxCoeff() < 1e-12);
      // exact and ggn: -eta (H + lambda I) v with the batch Hessian at theta[s]
      const Eigen::VectorXd jv = (step_map(pr, s, t) - Eigen::MatrixXd::Identity(12, 12)) * ve;
      for (HvpMode m : {HvpMode::exact, HvpMode::ggn}) {
        run->jacobian_product(m, v, out);
        CHECK((as_eigen(out) - jv).cwiseAbs().maxCoeff() < 1e-12);
      }
      // The step map's actual difference: equal to J v for the affine least-squares map, close to
      // it (second order in v) for logistic regression.
      run->update_difference(v, diff);
      const Eigen::VectorXd want = -eta * (ge - batch_gradient(pr, s, t - ve) + pr.lambda * ve);
      CHECK((as_eigen(diff) - want).cwiseAbs().maxCoeff() < 1e-12);
      if (!logistic) CHECK((as_eigen(diff) - jv).cwiseAbs().maxCoeff() < 1e-12);
      CHECK(run->at() == s);
    }
  }
}

TEST_CASE("unlearn: exact and ggn corrections on least squares equal retraining (K = infinity)") {
  const Problem pr = make_problem(20, 200, 8, 60, 0.05, 0.01, false, 11);
  LeastSquaresRun run = least_squares(pr, 7);
  const Eigen::VectorXd theta_tau = naive_sgd(pr).back();
  const std::vector<std::vector<std::int64_t>> requests = {{17}, {30, 5, 6, 5, 59, 0}, {59}, {0}, {40, 41}};
  for (const auto& req : requests) {
    const std::set<std::int64_t> del(req.begin(), req.end());
    const Eigen::VectorXd truth = naive_sgd(pr, del).back();
    std::vector<double> rt;
    CHECK(retrain(run, req, rt) == 60 - *del.begin());
    CHECK((as_eigen(rt) - truth).cwiseAbs().maxCoeff() < 1e-12);
    REQUIRE((truth - theta_tau).norm() > 1e-4);  // the deletion moves the model
    for (HvpMode m : {HvpMode::exact, HvpMode::ggn}) {
      CAPTURE(hvp_mode_name(m));
      CAPTURE(req.size());
      const Correction c = lmcleaner_correction(run, req, options(-1, m));
      const Eigen::VectorXd hat = theta_tau - as_eigen(c.v);
      CHECK((hat - truth).cwiseAbs().maxCoeff() < 1e-8);
      CHECK(c.lin_residual < 1e-10);  // the step map is affine: only rounding
      std::int64_t propagated = 0;
      for (std::int64_t s = *del.begin(); s < 60; ++s) propagated += del.count(s) ? 0 : 1;
      CHECK(c.products == propagated);
      CHECK(c.probes == propagated);
      REQUIRE(c.deleted.size() == del.size());
      for (const auto& d : c.deleted) {
        CHECK(d.k_used == 59 - d.step);
        CHECK_FALSE(d.truncated);
      }
    }
  }
  CHECK_THROWS_AS(lmcleaner_correction(run, {60}, options(-1, HvpMode::exact)), UsageError);
  CHECK_THROWS_AS(lmcleaner_correction(run, {-1, 3}, options(-1, HvpMode::exact)), UsageError);
  CHECK_THROWS_AS(lmcleaner_correction(run, {}, options(-1, HvpMode::exact)), UsageError);
  std::vector<double> rt;
  CHECK_THROWS_AS(retrain(run, {}, rt), UsageError);

  // The paper's rank-one Fisher product is an approximation of H_s: its distance is reported only.
  const std::set<std::int64_t> del{17};
  const Correction f = lmcleaner_correction(run, {17}, options(-1, HvpMode::fisher));
  const Correction e = lmcleaner_correction(run, {17}, options(-1, HvpMode::exact));
  const Eigen::VectorXd truth = naive_sgd(pr, del).back();
  MESSAGE("fisher arm: ||theta_hat - theta_retrain|| = " << (theta_tau - as_eigen(f.v) - truth).norm()
          << ", ||v_exact|| = " << as_eigen(e.v).norm() << ", no correction: " << (theta_tau - truth).norm());
}

TEST_CASE("unlearn: truncated windows follow the explicit products and obey the geometric bound") {
  // p = 8 < batch 64: every batch Hessian has full rank, so the step maps contract (gamma < 1).
  const Problem pr = make_problem(8, 256, 64, 60, 0.6, 0.01, false, 23);
  LeastSquaresRun run = least_squares(pr, 10);
  const auto th = naive_sgd(pr);
  const std::int64_t tz = 10;
  const Eigen::VectorXd truth = naive_sgd(pr, {tz}).back();
  const Eigen::VectorXd u = th[tz + 1] - th[tz];
  double gamma = 0;  // max spectral norm of I - eta_s (H_s + lambda I) over the propagated steps
  for (int s = tz + 1; s < 60; ++s) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(step_map(pr, s, th[static_cast<std::size_t>(s)]));
    gamma = std::max(gamma, es.eigenvalues().cwiseAbs().maxCoeff());
  }
  REQUIRE(gamma < 1);
  double prev = INFINITY;
  for (std::int64_t K : {1, 2, 4, 8, 16}) {
    CAPTURE(K);
    const Correction c = lmcleaner_correction(run, {tz}, options(K, HvpMode::exact));
    REQUIRE(c.deleted.size() == 1);
    CHECK(c.deleted[0].k_used == K);
    CHECK(c.deleted[0].truncated);
    CHECK(c.deleted[0].u_norm == doctest::Approx(u.norm()).epsilon(1e-12));
    CHECK(c.products == K);
    CHECK(c.ratio_max <= gamma + 1e-12);
    const double err = (th.back() - as_eigen(c.v) - truth).norm();
    MESSAGE("K = " << K << ": error " << err << ", bound " << std::pow(gamma, K) / (1 - gamma) * u.norm());
    CHECK(err <= std::pow(gamma, static_cast<double>(K)) / (1 - gamma) * u.norm());
    CHECK(err <= prev * 1.05);
    prev = err;
  }

  // The reference's damping: delta[s+1] = (I + J_s - eta_s lambda_d I) delta[s].
  {
    LmCleanerOptions o = options(4, HvpMode::exact);
    o.damping = 0.3;
    Eigen::VectorXd want = u;
    for (int s = tz + 1; s <= tz + 4; ++s)
      want = (step_map(pr, s, th[static_cast<std::size_t>(s)]) -
              pr.lrs[static_cast<std::size_t>(s)] * 0.3 * Eigen::MatrixXd::Identity(8, 8)) * want;
    CHECK((as_eigen(lmcleaner_correction(run, {tz}, o).v) - want).cwiseAbs().maxCoeff() < 1e-12);
  }

  // Several deleted steps with finite windows: v = sum_i prod_{s in window_i} M_s u_i, where a
  // deleted step inside a window is the counterfactual's no-op (M = I), checked against the
  // explicit matrices; {10, 30} also takes the walk's jump over steps with nothing to carry.
  const std::vector<std::vector<std::int64_t>> requests = {{10, 12}, {10, 30}, {10, 11}, {57, 59}};
  for (const auto& req : requests)
    for (std::int64_t K : {0, 1, 4}) {
      CAPTURE(K);
      CAPTURE(req[0]);
      CAPTURE(req[1]);
      const std::set<std::int64_t> del(req.begin(), req.end());
      Eigen::VectorXd want = Eigen::VectorXd::Zero(8);
      for (std::int64_t t : req) {
        Eigen::VectorXd d = th[static_cast<std::size_t>(t + 1)] - th[static_cast<std::size_t>(t)];
        for (std::int64_t s = t + 1; s <= std::min<std::int64_t>(t + K, 59); ++s)
          if (!del.count(s)) d = step_map(pr, static_cast<int>(s), th[static_cast<std::size_t>(s)]) * d;
        want += d;
      }
      const Correction c = lmcleaner_correction(run, req, options(K, HvpMode::exact));
      CHECK((as_eigen(c.v) - want).cwiseAbs().maxCoeff() < 1e-12);
      REQUIRE(c.deleted.size() == 2);
      for (const auto& d : c.deleted) {
        CHECK(d.k_used == std::min<std::int64_t>(K, 59 - d.step));
        CHECK(d.truncated == (d.k_used < 59 - d.step));
      }
    }
}

TEST_CASE("unlearn: logistic regression has a small linearisation error that the probe's residuals bound") {
  const Problem pr = make_problem(20, 200, 8, 60, 0.1, 0.01, true, 31);
  LogisticRun run(pr.A, pr.b, pr.theta0, pr.batches, pr.lrs, pr.lambda, 8);
  const auto th = naive_sgd(pr);
  // Every step map is non-expansive here (eta_s (||H_s|| + lambda) <= 2 with H_s <= mean a a^T / 4),
  // so each step's residual r_s passes on undiminished at most: sum r_s >= the final error.
  for (int s = 0; s < 60; ++s) {
    Eigen::MatrixXd H = Eigen::MatrixXd::Zero(20, 20);
    for (int i : pr.batches[static_cast<std::size_t>(s)]) H += pr.A.row(i).transpose() * pr.A.row(i) / 32.0;
    REQUIRE(pr.lrs[static_cast<std::size_t>(s)] * (H.operatorNorm() + pr.lambda) <= 2);
  }
  const std::vector<std::int64_t> req = {5, 20};
  const Eigen::VectorXd truth = naive_sgd(pr, {5, 20}).back();
  const Correction c = lmcleaner_correction(run, req, options(-1, HvpMode::exact));
  const Correction g = lmcleaner_correction(run, req, options(-1, HvpMode::ggn));
  CHECK(as_eigen(c.v) == as_eigen(g.v));  // canonical link: the GGN is the Hessian
  const double err = (th.back() - as_eigen(c.v) - truth).norm();
  const double shift = (th.back() - truth).norm();
  MESSAGE("logistic: error " << err << ", residual sum " << c.lin_residual << ", uncorrected " << shift);
  CHECK(err > 1e-12);
  CHECK(err < 0.05 * shift);  // measured 0.0005 of 0.042
  CHECK(c.lin_residual >= err);
  CHECK(c.lin_residual < 0.1 * shift);  // and of the error's order here (measured 0.0019 vs 0.0005)
}

TEST_CASE("unlearn: the public projector is orthonormal and fixed by its seed") {
  for (auto [d, k] : {std::pair<std::size_t, int>{300, 40}, {4000, 50}, {5, 5}}) {
    const std::vector<double> q = public_projector(d, k, 42);
    const Eigen::Map<const Eigen::MatrixXd> Q(q.data(), static_cast<Eigen::Index>(d), k);
    CHECK((Q.transpose() * Q - Eigen::MatrixXd::Identity(k, k)).cwiseAbs().maxCoeff() < 1e-10);
    CHECK(public_projector(d, k, 42) == q);
    CHECK(public_projector(d, k, 43) != q);
  }
  CHECK_THROWS_AS(public_projector(5, 6, 42), UsageError);
  CHECK_THROWS_AS(public_projector(5, 0, 42), UsageError);
}

TEST_CASE("unlearn: subspace and isotropic noise have the calibrated scales and are fixed by the seed") {
  const std::size_t d = 4000;
  const int k = 50;
  NoiseOptions no;
  no.kind = "subspace";
  no.rank = k;
  no.public_seed = 42;
  no.seed = 7;
  Certificate cert;
  cert.sigma_par = 2.0;
  cert.sigma_perp = 0.3;
  std::vector<double> base(d);
  for (std::size_t i = 0; i < d; ++i) base[i] = 0.001 * static_cast<double>(i);
  std::vector<double> theta = base;
  const NoiseDraw draw = add_noise(theta, cert, no);
  const Eigen::VectorXd xi = as_eigen(theta) - as_eigen(base);
  const std::vector<double> q = public_projector(d, k, 42);
  const Eigen::Map<const Eigen::MatrixXd> Q(q.data(), static_cast<Eigen::Index>(d), k);
  const Eigen::VectorXd par = Q * (Q.transpose() * xi);
  const double rms_par = par.norm() / std::sqrt(double(k)), rms_perp = (xi - par).norm() / std::sqrt(double(d - k));
  CHECK(rms_par / cert.sigma_par > 0.8);
  CHECK(rms_par / cert.sigma_par < 1.25);
  CHECK(rms_perp / cert.sigma_perp > 0.8);
  CHECK(rms_perp / cert.sigma_perp < 1.25);
  CHECK(draw.rms_par == doctest::Approx(rms_par).epsilon(1e-9));
  CHECK(draw.rms_perp == doctest::Approx(rms_perp).epsilon(1e-9));
  CHECK(draw.norm == doctest::Approx(xi.norm()).epsilon(1e-9));
  std::vector<double> again = base;
  add_noise(again, cert, no);
  CHECK(again == theta);
  no.seed = 8;
  again = base;
  add_noise(again, cert, no);
  CHECK(again != theta);

  no.kind = "isotropic";
  cert.sigma_par = cert.sigma_perp = 1.5;
  theta = base;
  const NoiseDraw iso = add_noise(theta, cert, no);
  const Eigen::VectorXd xi2 = as_eigen(theta) - as_eigen(base);
  const double rms = xi2.norm() / std::sqrt(double(d));
  CHECK(rms / 1.5 > 0.8);
  CHECK(rms / 1.5 < 1.25);
  const double rms_in = (Q.transpose() * xi2).norm() / std::sqrt(double(k));  // isotropic: the same in the subspace
  CHECK(rms_in / 1.5 > 0.8);
  CHECK(rms_in / 1.5 < 1.25);
  CHECK(iso.norm == doctest::Approx(xi2.norm()).epsilon(1e-9));

  no.kind = "none";
  theta = base;
  add_noise(theta, cert, no);
  CHECK(theta == base);
}

TEST_CASE("unlearn: certify's sensitivity, sigmas and labels") {
  // Two truncated deleted steps: ||u|| = 2 (K* = 4) and 1 (K* = 2); ||v|| = 5.
  Correction c;
  c.v = {3, 4};
  c.deleted = {{3, 4, true, 2.0}, {8, 2, true, 1.0}};
  c.gamma_hat = 0.9;
  c.ratio_max = 0.95;
  c.lin_residual = 0.3;
  NoiseOptions iso;
  iso.kind = "isotropic";
  iso.epsilon = 2;
  iso.delta = 1e-5;
  BoundOptions supplied;
  supplied.gamma = 0.5;
  supplied.c_lin = 0.1;

  // Delta = 0.1 (2 + 1) + 0.5^4 / 0.5 * 2 + 0.5^2 / 0.5 * 1 = 0.3 + 0.25 + 0.5 = 1.05.
  Certificate a = certify(c, supplied, iso);
  CHECK(a.kind == "certified");
  CHECK(a.linearisation_term == doctest::Approx(0.3));
  CHECK(a.truncation_term == doctest::Approx(0.75));
  CHECK(a.sensitivity == doctest::Approx(1.05));
  // 1.05 / 2 * sqrt(2 ln(1.25e5)) = 2.543522762867829
  CHECK(a.sigma_par == doctest::Approx(2.543522762867829).epsilon(1e-12));
  CHECK(a.sigma_perp == a.sigma_par);
  CHECK(a.sigma_par == doctest::Approx(1.05 / 2 * std::sqrt(2 * std::log(1.25 / 1e-5))).epsilon(1e-12));

  NoiseOptions sub = iso;
  sub.kind = "subspace";
  sub.beta = 0.25;
  Certificate b = certify(c, supplied, sub);
  CHECK(b.kind == "certified");
  // 2 * 1.05 / 2 * sqrt(2 ln(2.5e5)) = 5.235114298087661
  CHECK(b.sigma_par == doctest::Approx(5.235114298087661).epsilon(1e-12));
  CHECK(b.sigma_par == doctest::Approx(2 * 1.05 / 2 * std::sqrt(2 * std::log(2.5 / 1e-5))).epsilon(1e-12));
  CHECK(b.sigma_perp == doctest::Approx(0.25 * b.sigma_par).epsilon(1e-15));
  CHECK(b.rank == 2);  // clamped to the dimension
  CHECK(b.beta == 0.25);

  // Both constants estimated: gamma = 0.9, C_lin = 0.3 / 3; Delta = 0.3 + 0.9^4/0.1*2 + 0.9^2/0.1 = 21.522.
  const Certificate e = certify(c, BoundOptions{}, iso);
  CHECK(e.kind == "empirical");
  CHECK(e.gamma_source == "estimated");
  CHECK(e.c_lin_source == "estimated");
  CHECK(e.c_lin == doctest::Approx(0.1));
  CHECK(e.sensitivity == doctest::Approx(21.522));
  BoundOptions only_c;
  only_c.c_lin = 0.1;
  CHECK(certify(c, only_c, iso).kind == "empirical");  // gamma still estimated for truncated windows

  // No window truncated: gamma plays no part, so a supplied C_lin certifies.
  Correction full = c;
  for (auto& d : full.deleted) d.truncated = false;
  full.gamma_hat = full.ratio_max = std::nan("");
  const Certificate f = certify(full, only_c, iso);
  CHECK(f.kind == "certified");
  CHECK(f.gamma_source == "unused");
  CHECK(f.truncation_term == 0);
  CHECK(f.sensitivity == doctest::Approx(0.3));
  const nlohmann::json j = f.to_json(full);
  CHECK(j.at("gamma_hat").is_null());
  CHECK(j.at("kind") == "certified");
  CHECK(j.at("deleted").size() == 2);
  CHECK(j.at("deleted")[1].at("step") == 8);
  CHECK(j.at("sensitivity").get<double>() == doctest::Approx(0.3));
  CHECK(j.at("v_norm").get<double>() == doctest::Approx(5));

  BoundOptions subst;
  subst.substitute_norm = true;
  const Certificate s = certify(c, subst, iso);
  CHECK(s.kind == "substitute");
  CHECK(s.sensitivity == doctest::Approx(5));

  NoiseOptions none;
  none.kind = "none";
  const Certificate n = certify(c, supplied, none);
  CHECK(n.kind == "none");
  CHECK(n.sigma_par == 0);
  CHECK(n.sigma_perp == 0);
  CHECK(n.sensitivity == doctest::Approx(1.05));
  CHECK(n.to_json(c).at("epsilon").is_null());

  // An expanding trajectory (gamma_hat >= 1) with truncated windows: no finite bound.
  Correction expanding = c;
  expanding.gamma_hat = 1.2;
  CHECK_THROWS_AS(certify(expanding, BoundOptions{}, iso), RuntimeError);
  CHECK_THROWS_AS(certify(expanding, only_c, sub), RuntimeError);
  CHECK(std::isinf(certify(expanding, BoundOptions{}, none).sensitivity));
  CHECK(certify(expanding, subst, iso).kind == "substitute");
  // K = 0 everywhere: nothing to estimate gamma from.
  Correction k0 = c;
  k0.gamma_hat = std::nan("");
  CHECK_THROWS_AS(certify(k0, only_c, iso), RuntimeError);
  // The probe off and C_lin not supplied.
  Correction blind = c;
  blind.lin_residual = std::nan("");
  CHECK_THROWS_AS(certify(blind, BoundOptions{}, iso), RuntimeError);
  CHECK(certify(blind, BoundOptions{}, none).c_lin_source == "unavailable");
  BoundOptions only_g;
  only_g.gamma = 0.5;
  CHECK_THROWS_AS(certify(blind, only_g, iso), RuntimeError);
  CHECK(certify(blind, supplied, iso).kind == "certified");
}

TEST_CASE("unlearn: check_noise_options refuses bad values naming the flag") {
  CHECK_NOTHROW(check_noise_options(NoiseOptions{}, BoundOptions{}));
  const auto flag = [](NoiseOptions no, BoundOptions bo) -> std::string {
    try {
      check_noise_options(no, bo);
    } catch (const UsageError& e) {
      return e.where();
    }
    return "";
  };
  const auto with = [](auto set) {
    NoiseOptions no;
    set(no);
    return no;
  };
  CHECK(flag(with([](NoiseOptions& o) { o.epsilon = 0; }), {}) == "--epsilon");
  CHECK(flag(with([](NoiseOptions& o) { o.epsilon = -1; }), {}) == "--epsilon");
  CHECK(flag(with([](NoiseOptions& o) { o.delta = 0; }), {}) == "--delta");
  CHECK(flag(with([](NoiseOptions& o) { o.delta = 1; }), {}) == "--delta");
  CHECK(flag(with([](NoiseOptions& o) { o.beta = 0; }), {}) == "--beta");
  CHECK(flag(with([](NoiseOptions& o) { o.beta = 1.5; }), {}) == "--beta");
  CHECK(flag(with([](NoiseOptions& o) { o.beta = 1; }), {}).empty());
  CHECK(flag(with([](NoiseOptions& o) { o.rank = 0; }), {}) == "--noise-rank");
  CHECK(flag(with([](NoiseOptions& o) { o.kind = "laplace"; }), {}) == "--noise");
  BoundOptions bo;
  bo.gamma = 1;
  CHECK(flag({}, bo) == "--gamma");
  bo.gamma = 0.99;
  CHECK(flag({}, bo).empty());
  bo.c_lin = -1;
  CHECK(flag({}, bo) == "--c-lin");
}

TEST_CASE("unlearn: sequential composition against hand-computed numbers") {
  // ln(1 / delta') = 1/2 makes the root sqrt(sum eps^2): 3 + 4 + sqrt(9 + 16) = 12.
  const auto [e1, d1] = compose({3, 4}, {1e-5, 2e-5}, std::exp(-0.5));
  CHECK(e1 == doctest::Approx(12).epsilon(1e-14));
  CHECK(d1 == doctest::Approx(3e-5 + 0.6065306597126334).epsilon(1e-14));
  // 1.5 + sqrt(2 ln(1e6) 1.25) = 1.5 + sqrt(34.538776394910684) = 1.5 + 5.8769700011919985
  const auto [e2, d2] = compose({1, 0.5}, {1e-5, 1e-5}, 1e-6);
  CHECK(e2 == doctest::Approx(1.5 + 5.8769700011919985).epsilon(1e-14));
  CHECK(d2 == doctest::Approx(2.1e-5).epsilon(1e-12));
  CHECK_THROWS_AS(compose({1}, {}, 1e-6), UsageError);
  CHECK_THROWS_AS(compose({1}, {1e-5}, 0), UsageError);
}

TEST_CASE("unlearn: membership-inference AUC equals the pairwise count, ties halved") {
  Rng rng(9);
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> mem(57), non(43);
    for (double& x : mem) x = std::floor(rng.uniform() * 8) / 4;  // coarse: many ties
    for (double& x : non) x = std::floor(rng.uniform() * 9) / 4;
    double pairs = 0;
    for (double a : mem)
      for (double b : non) pairs += a < b ? 1.0 : a == b ? 0.5 : 0.0;
    CHECK(mia_auc(mem, non) == doctest::Approx(pairs / (57.0 * 43.0)).epsilon(1e-14));
  }
  CHECK(mia_auc({1, 2}, {3, 4, 5}) == 1.0);
  CHECK(mia_auc({3, 4, 5}, {1, 2}) == 0.0);
  CHECK(mia_auc({1, 1}, {1}) == 0.5);
  CHECK_THROWS_AS(mia_auc({}, {1}), InputError);
  CHECK_THROWS_AS(mia_auc({1}, {}), InputError);
  CHECK_THROWS_AS(mia_auc({1, NAN}, {1}), InputError);
}
