// num/: statistics, Huber, L-BFGS.
#include <doctest/doctest.h>

#include <cmath>

#include "num/huber.hpp"
#include "num/optimize.hpp"
#include "num/stats.hpp"

using namespace icmlkit;

TEST_CASE("num: R^2, MAE, MRE, RMSE by hand") {
  // truth [1,2,3], pred [1,2,4]: SS_res = 1, SS_tot = 2.
  Eigen::ArrayXd t(3), p(3);
  t << 1, 2, 3;
  p << 1, 2, 4;
  CHECK(num::r_squared(t, p) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(num::mae(t, p) == doctest::Approx(1.0 / 3).epsilon(1e-15));
  CHECK(num::mre(t, p) == doctest::Approx(1.0 / 9).epsilon(1e-15));
  CHECK(num::rmse(t, p) == doctest::Approx(std::sqrt(1.0 / 3)).epsilon(1e-15));
}

TEST_CASE("num: Spearman with ties equals Pearson of average ranks (hand-computed 8/sqrt(95))") {
  Eigen::ArrayXd x(5), y(5);
  x << 1, 2, 3, 4, 5;
  y << 5, 6, 7, 8, 7;  // ranks 1, 2, 3.5, 5, 3.5
  const Eigen::ArrayXd r = num::average_ranks(y);
  CHECK(r[2] == 3.5);
  CHECK(r[4] == 3.5);
  CHECK(num::spearman(x, y) == doctest::Approx(8 / std::sqrt(95.0)).epsilon(1e-14));
  CHECK(num::spearman(x, -x) == doctest::Approx(-1.0));
  CHECK(std::isnan(num::pearson(x, Eigen::ArrayXd::Constant(5, 2.0))));
}

TEST_CASE("num: Huber loss and its derivative") {
  CHECK(num::huber(0.5e-3, 1e-3) == doctest::Approx(0.125e-6));
  CHECK(num::huber(-3e-3, 1e-3) == doctest::Approx(1e-3 * (3e-3 - 0.5e-3)));
  CHECK(num::huber_grad(5.0, 1.0) == 1.0);
  CHECK(num::huber_grad(-0.25, 1.0) == -0.25);
  // Continuity at |r| = delta.
  CHECK(num::huber(1.0, 1.0) == doctest::Approx(0.5));
}

namespace {
struct Rosenbrock final : num::Objective {
  int dim() const override { return 2; }
  bool evaluate(const double* x, double* f, double* g) const override {
    const double a = 1 - x[0], b = x[1] - x[0] * x[0];
    *f = a * a + 100 * b * b;
    if (g) {
      g[0] = -2 * a - 400 * x[0] * b;
      g[1] = 200 * b;
    }
    return true;
  }
};
struct HalfPlane final : num::Objective {  // domain x > 0
  int dim() const override { return 1; }
  bool evaluate(const double* x, double* f, double* g) const override {
    if (!(x[0] > 0)) return false;
    *f = x[0] - std::log(x[0]);  // minimum at x = 1
    if (g) g[0] = 1 - 1 / x[0];
    return true;
  }
};
}  // namespace

TEST_CASE("num: L-BFGS finds the Rosenbrock minimum (1, 1) and respects domains") {
  Rosenbrock f;
  Eigen::VectorXd x0(2);
  x0 << -1.2, 1.0;
  const auto r = num::minimize_lbfgs(f, x0);
  CHECK(r.converged);
  CHECK(r.x[0] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(r.x[1] == doctest::Approx(1.0).epsilon(1e-6));
  HalfPlane h;
  Eigen::VectorXd y0(1);
  y0 << 20.0;
  CHECK(num::minimize_lbfgs(h, y0).x[0] == doctest::Approx(1.0).epsilon(1e-7));
  y0 << -1.0;  // start outside the domain: reported, not thrown
  const auto bad = num::minimize_lbfgs(h, y0);
  CHECK_FALSE(bad.converged);
  CHECK(std::isnan(bad.f));
}

TEST_CASE("num: multistart picks the lowest converged objective, ties to the lowest index") {
  HalfPlane h;
  std::vector<Eigen::VectorXd> starts;
  for (double v : {-1.0, 3.0, 0.5}) starts.push_back(Eigen::VectorXd::Constant(1, v));
  const auto rs = num::minimize_multistart(h, starts);
  const int b = num::best_result(rs);
  CHECK(b >= 1);
  CHECK(rs[static_cast<std::size_t>(b)].x[0] == doctest::Approx(1.0).epsilon(1e-7));
}

TEST_CASE("num: L-BFGS evaluation cap and per-iteration hook stop the solve early") {
  Rosenbrock f;
  Eigen::VectorXd x0(2);
  x0 << -1.2, 1.0;
  const auto full = num::minimize_lbfgs(f, x0);
  REQUIRE(full.converged);
  REQUIRE(full.evaluations > 30);
  num::LbfgsOptions capped;
  capped.max_evaluations = 12;
  const auto c = num::minimize_lbfgs(f, x0, capped);
  CHECK_FALSE(c.converged);
  CHECK(c.evaluations >= 12);
  CHECK(c.evaluations < full.evaluations);
  CHECK(c.f > full.f);
  // The hook sees iteration 0 (the start, its objective) and then each iteration's point;
  // stopping at iteration 5 returns that very point.
  std::vector<int> seen;
  std::vector<Eigen::VectorXd> points;
  double f_start = -1;
  num::LbfgsOptions hooked;
  hooked.on_iteration = [&](const Eigen::VectorXd& x, int it, double fx) {
    if (it == 0) f_start = fx;
    seen.push_back(it);
    points.push_back(x);
    return it < 5;
  };
  const auto h = num::minimize_lbfgs(f, x0, hooked);
  CHECK_FALSE(h.converged);
  CHECK(f_start == doctest::Approx(24.2));  // (1 + 1.2)^2 + 100 (1 - 1.44)^2
  REQUIRE(seen.size() == 6);
  for (int i = 0; i < 6; ++i) CHECK(seen[static_cast<std::size_t>(i)] == i);
  CHECK((h.x - points.back()).norm() == 0);
  CHECK((points[0] - x0).norm() == 0);
}
