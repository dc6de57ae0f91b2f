// fit/: Chinchilla and data-constrained laws — gradients, published numbers, recovery.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <omp.h>

#include "fit/law.hpp"
#include "fit/law_data.hpp"
#include "fit/law_fit.hpp"
#include "io/table.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::fit;

namespace {

// Published data-constrained parameters (Muennighoff et al. 2023, datablations README).
Eigen::VectorXd published_dc() {
  Eigen::VectorXd p(7);
  p << 6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596, 15.387756, 5.309743;
  return p;
}

LawData rows(std::initializer_list<std::initializer_list<double>> xs) {
  LawData d;
  d.x.resize(static_cast<Eigen::Index>(xs.size()), static_cast<Eigen::Index>(xs.begin()->size()));
  Eigen::Index i = 0;
  for (const auto& r : xs) {
    Eigen::Index j = 0;
    for (double v : r) d.x(i, j++) = v;
    ++i;
  }
  return d;
}

// Central finite differences of log_predict, compared entry by entry.  Tolerance: the
// O(h^2) truncation plus rounding of a 1e-6 relative step on O(1) log-losses, ~1e-7.
void check_jacobian(const Law& law, const LawData& d, Eigen::VectorXd p) {
  Eigen::ArrayXd out;
  Eigen::ArrayXXd jac;
  REQUIRE(law.log_predict(p.data(), d, out, &jac));
  for (Eigen::Index k = 0; k < p.size(); ++k) {
    const double h = 1e-6 * std::max(1.0, std::abs(p[k]));
    Eigen::VectorXd pp = p, pm = p;
    pp[k] += h;
    pm[k] -= h;
    Eigen::ArrayXd op, om;
    REQUIRE(law.log_predict(pp.data(), d, op, nullptr));
    REQUIRE(law.log_predict(pm.data(), d, om, nullptr));
    const Eigen::ArrayXd fd = (op - om) / (2 * h);
    for (Eigen::Index i = 0; i < d.x.rows(); ++i) {
      CAPTURE(k);
      CAPTURE(i);
      CHECK(jac(i, k) == doctest::Approx(fd[i]).epsilon(1e-6).scale(1.0));
    }
    // And log_predict agrees with log(predict).
    CHECK((out - law.predict(p.data(), d).log()).abs().maxCoeff() < 1e-12);
  }
}

const std::string kDatablations = std::string(ICMLKIT_SHARED_DATA) + "/scaling/datablations_runs.csv";

}  // namespace

TEST_CASE("fit: Chinchilla analytic gradient matches finite differences") {
  ChinchillaLaw law;
  LawData d = rows({{1e8, 2e9}, {7e9, 1.4e11}, {4e5, 1e7}});
  Eigen::VectorXd p(5);
  p << 6.0, 6.0, 0.5, 0.34, 0.28;
  check_jacobian(law, d, p);
}

TEST_CASE("fit: data-constrained gradient matches finite differences (U_N binding and not)") {
  DataConstrainedLaw law;
  // Rows: single epoch small model; heavy repetition; N far above N_opt(U) (U_N binding).
  LawData d = rows({{1e8, 2e9, 2e9}, {1e9, 1e11, 4e9}, {8.67e9, 1.78e11, 1e8}, {2.8e9, 5.5e10, 4e9}});
  check_jacobian(law, d, published_dc());
  Eigen::VectorXd q = published_dc();
  q[3] = 0.4;  // alpha != beta exercises every term of d log N_opt
  q[5] = 3.0;
  check_jacobian(law, d, q);
}

TEST_CASE("fit: data-constrained law reproduces the published predictions to 1e-12") {
  // Truth: datablations README, scaling_law(6.34e9, 242e9, 25e9) and (8.67e9, 178e9, 25e9).
  DataConstrainedLaw law;
  LawData d = rows({{6.34e9, 242e9, 25e9}, {8.67e9, 178e9, 25e9}});
  const Eigen::VectorXd p = published_dc();
  const Eigen::ArrayXd y = law.predict(p.data(), d);
  CHECK(std::abs(y[0] - 2.2256440889984477) < 1e-12);
  CHECK(std::abs(y[1] - 2.2269634075087867) < 1e-12);
}

TEST_CASE("fit: compute-optimal allocation minimises the law along C = 6ND") {
  // Truth: a dense scan of log N along the budget line, independent of the closed form.
  const double A = 406.4, B = 410.7, E = 1.69, alpha = 0.34, beta = 0.28, C = 5.76e23;
  const auto o = compute_optimal(A, B, E, alpha, beta, C);
  CHECK(o.params * o.tokens * 6 == doctest::Approx(C).epsilon(1e-12));
  double best_loss = 1e9, best_n = 0;
  for (double ln = std::log(1e8); ln < std::log(1e13); ln += 1e-4) {
    const double n = std::exp(ln), dd = C / (6 * n);
    const double l = E + A / std::pow(n, alpha) + B / std::pow(dd, beta);
    if (l < best_loss) { best_loss = l; best_n = n; }
  }
  CHECK(o.params == doctest::Approx(best_n).epsilon(2e-4));
  CHECK(o.loss == doctest::Approx(best_loss).epsilon(1e-9));
}

TEST_CASE("fit: Chinchilla fit recovers known parameters from generated runs") {
  // Truth: data generated from Hoffmann et al.'s published law with 0.5% multiplicative noise.
  ChinchillaLaw law;
  Eigen::VectorXd truth(5);
  truth << std::log(406.4), std::log(410.7), std::log(1.69), 0.34, 0.28;
  Rng rng(3);
  LawData d;
  const int n = 120;
  d.x.resize(n, 2);
  for (int i = 0; i < n; ++i) {
    d.x(i, 0) = std::exp(rng.uniform(std::log(7e7), std::log(1.6e10)));
    d.x(i, 1) = std::exp(rng.uniform(std::log(5e9), std::log(5e11)));
  }
  d.loss = law.predict(truth.data(), d);
  for (int i = 0; i < n; ++i) d.loss[i] *= 1 + 0.005 * rng.normal();
  FitOptions opt;
  opt.grid = {{"a", {0, 5, 10}}, {"b", {0, 5, 10}}, {"e", {0, 1}}, {"alpha", {0.5}}, {"beta", {0.5}}};
  const auto r = fit_law(law, d, opt);
  CHECK(r.converged);
  // Tolerance: at 0.5% noise on 120 runs the exponents are identified to a few percent.
  CHECK(r.params[3] == doctest::Approx(0.34).epsilon(0.08));
  CHECK(r.params[4] == doctest::Approx(0.28).epsilon(0.08));
  CHECK(std::exp(r.params[2]) == doctest::Approx(1.69).epsilon(0.05));
  // Noise-free data: exact recovery.
  d.loss = law.predict(truth.data(), d);
  const auto r0 = fit_law(law, d, opt);
  for (int k = 0; k < 5; ++k) CHECK(r0.params[k] == doctest::Approx(truth[k]).epsilon(1e-5));
}

TEST_CASE("fit: data-constrained fit with the base fixed recovers R_D*, R_N* from generated runs") {
  DataConstrainedLaw law;
  Eigen::VectorXd truth = published_dc();
  truth[5] = 9.0;
  truth[6] = 3.0;
  Rng rng(11);
  LawData d;
  const int n = 150;
  d.x.resize(n, 3);
  for (int i = 0; i < n; ++i) {
    const double N = std::exp(rng.uniform(std::log(1e8), std::log(9e9)));
    const double U = std::exp(rng.uniform(std::log(1e8), std::log(2e10)));
    const double epochs = std::exp(rng.uniform(0, std::log(60.0)));
    d.x(i, 0) = N;
    d.x(i, 1) = U * epochs;
    d.x(i, 2) = U;
  }
  d.loss = law.predict(truth.data(), d);
  FitOptions opt;
  for (int k = 0; k < 5; ++k) opt.fixed[law.param_names()[static_cast<std::size_t>(k)]] = truth[k];
  const auto r = fit_law(law, d, opt);
  CHECK(r.params[5] == doctest::Approx(9.0).epsilon(1e-4));
  CHECK(r.params[6] == doctest::Approx(3.0).epsilon(1e-4));
  CHECK(r.objective < 1e-12);
}

TEST_CASE("fit: datablations runs — published objective, R^2 and the R_D*, R_N* refit") {
  if (!std::filesystem::exists(kDatablations)) {
    MESSAGE("skipped: " << kDatablations << " is absent (huggingface/datablations runs)");
    return;
  }
  DataConstrainedLaw law;
  const io::Table t = io::Table::read(kDatablations);
  const LawData d = law_data_from_table(law, t, ColumnMap{}, true);
  REQUIRE(d.loss.size() == 182);
  // Truth: datablations parametric_fit notebook — objective 0.0158259, R^2 0.7722.
  const Eigen::VectorXd p = published_dc();
  CHECK(huber_objective(law, d, p, 1e-3) == doctest::Approx(0.01582594).epsilon(1e-6));
  const Eigen::ArrayXd pred = law.predict(p.data(), d);
  const double r2 = 1 - (d.loss - pred).square().sum() / (d.loss - d.loss.mean()).square().sum();
  CHECK(r2 == doctest::Approx(0.7722).epsilon(1e-4));
  // Their step 2: base fixed, R_D*, R_N* from the 4 x 4 grid.  Published 15.39 / 5.31;
  // tolerance R_D* 1% (flat direction), R_N* 0.5%, objective 1e-6 relative.
  FitOptions opt;
  for (int k = 0; k < 5; ++k) opt.fixed[law.param_names()[static_cast<std::size_t>(k)]] = p[k];
  const auto r = fit_law(law, d, opt);
  CHECK(r.params[5] == doctest::Approx(15.39).epsilon(0.01));
  CHECK(r.params[6] == doctest::Approx(5.31).epsilon(0.005));
  CHECK(r.objective == doctest::Approx(0.0158259).epsilon(1e-5));
  CHECK(r.objective <= 0.01582594);
}

TEST_CASE("fit: start grids, fixed parameters and grid parsing") {
  ChinchillaLaw law;
  FitOptions opt;
  CHECK(make_start_grid(law, opt).size() == 4500);
  opt.fixed["alpha"] = 0.3;
  CHECK(make_start_grid(law, opt).size() == 900);
  const auto ax = parse_grid_axis("beta=0:2:0.5");
  CHECK(ax.values == std::vector<double>{0, 0.5, 1, 1.5, 2});
  CHECK(parse_grid_axis("e=1|2.5").values == std::vector<double>{1, 2.5});
  CHECK_THROWS(parse_grid_axis("e=1:0:1"));
  CHECK_THROWS(parse_grid_axis("nonsense"));
  opt.grid = {{"zeta", {1}}};
  CHECK_THROWS(make_start_grid(law, opt));
}

TEST_CASE("fit: the multistart result does not depend on the thread count") {
  ChinchillaLaw law;
  LawData d = rows({{1e8, 2e9}, {7e9, 1.4e11}, {4e5, 1e7}, {3e8, 6e9}, {2e9, 1e10}, {5e7, 1e11}});
  d.loss = Eigen::ArrayXd(6);
  d.loss << 3.1, 2.2, 5.0, 2.9, 2.6, 3.0;
  FitOptions opt;
  opt.grid = {{"a", {0, 10}}, {"b", {0, 10}}, {"e", {0}}};
  omp_set_num_threads(1);
  const auto r1 = fit_law(law, d, opt);
  omp_set_num_threads(2);
  const auto r2 = fit_law(law, d, opt);
  CHECK(r1.best_start == r2.best_start);
  CHECK((r1.params - r2.params).cwiseAbs().maxCoeff() == 0.0);
}
