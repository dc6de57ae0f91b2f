// cde/ and nn/: paths (Hermite cubic, linear, rectilinear, kernel, GP) with derivatives,
// RK4/Dopri5 with NFE counts, model gradients through the solver, the .ts reader, and the
// NFE(GP) < NFE(cubic) mechanism of Serov, Kuleshov & Zaytsev (ICML 2026).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "cde/data.hpp"
#include "cde/model.hpp"
#include "cde/path.hpp"
#include "cde/solver.hpp"
#include "cde/train.hpp"
#include "io/provenance.hpp"
#include "io/ts.hpp"
#include "nn/adamw.hpp"
#include "nn/linear.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using namespace icmlkit::cde;
namespace fs = std::filesystem;

namespace {

// An irregular series: times with random gaps, channels (t, sin t + noise, cos 2t + noise).
Series noisy_series(int L, double noise, std::uint64_t seed, bool time_channel = true) {
  Rng rng(seed);
  Series s;
  s.time_channel = time_channel;
  double t = 0;
  const int off = time_channel ? 1 : 0;
  s.x.resize(L, 2 + off);
  for (int i = 0; i < L; ++i) {
    t += 0.1 + 0.3 * rng.uniform();
    s.t.push_back(t);
    if (off) s.x(i, 0) = t;
    s.x(i, off) = std::sin(t) + noise * rng.normal();
    s.x(i, off + 1) = std::cos(2 * t) + noise * rng.normal();
  }
  return s;
}

// Central finite difference of the path value, channel by channel.
Eigen::VectorXd fd_derivative(const Path& p, double t, double h = 1e-6) {
  Eigen::VectorXd a(p.channels()), b(p.channels());
  p.value(t + h, a.data());
  p.value(t - h, b.data());
  return (a - b) / (2 * h);
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("icmlkit_unit_cde_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::string ts_error(const std::string& text) {
  const auto p = scratch("bad.ts");
  std::ofstream(p) << text;
  try {
    io::read_ts(p.string());
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

const std::string kHeader = "@problemName T\n@timeStamps false\n@univariate false\n@dimensions 2\n@classLabel true a b\n@data\n";

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST_CASE("cde: Hermite cubic interpolates the knots, is C1, and its derivative matches finite differences") {
  const Series s = noisy_series(12, 0.1, 1);
  const auto p = make_path(PathKind::cubic, s, {});
  Eigen::VectorXd x(3), dl(3), dr(3);
  for (size_t i = 0; i < s.t.size(); ++i) {
    p->value(s.t[i], x.data());
    CHECK((x - s.x.row(static_cast<Eigen::Index>(i)).transpose()).cwiseAbs().maxCoeff() < 1e-12);  // exact at knots
    p->derivative(s.t[i], -1, dl.data());
    p->derivative(s.t[i], +1, dr.data());
    CHECK((dl - dr).cwiseAbs().maxCoeff() < 1e-9);  // C1: one-sided derivatives agree (algebraic identity)
  }
  for (double t = s.t[0] + 0.013; t < s.t.back(); t += 0.17) {
    p->derivative(t, +1, dr.data());
    // central difference error O(h^2 X''') ~ 1e-10 plus rounding 1e-10: tolerance 1e-6
    CHECK((dr - fd_derivative(*p, t)).cwiseAbs().maxCoeff() < 1e-6);
  }
}

TEST_CASE("cde: Hermite cubic with backward differences reproduces a straight line and fills NaN linearly") {
  // Closed form: for x = 2 - 3t every slope is -3, so the path is exactly the line.
  Series s;
  s.t = {0, 0.5, 1.5, 2, 3.25};
  s.x.resize(5, 1);
  for (int i = 0; i < 5; ++i) s.x(i, 0) = 2 - 3 * s.t[static_cast<size_t>(i)];
  s.x(2, 0) = NAN;  // filled by linear interpolation -> still on the line
  const auto p = make_path(PathKind::cubic, s, {});
  double v, d;
  for (double t = 0; t <= 3.25; t += 0.05) {
    p->value(t, &v);
    p->derivative(t, 1, &d);
    CHECK(v == doctest::Approx(2 - 3 * t).epsilon(1e-12));
    CHECK(d == doctest::Approx(-3).epsilon(1e-12));
  }
}

TEST_CASE("cde: linear path, its knots as jump times, and the rectilinear path") {
  Series s;
  s.time_channel = true;
  s.t = {0, 1, 3};
  s.x.resize(3, 2);
  s.x << 0, 1, 1, NAN, 3, 5;
  Eigen::Vector2d x, d;
  make_path(PathKind::linear, s, {})->value(1.0, x.data());
  CHECK(x(1) == doctest::Approx(7.0 / 3.0));  // NaN at t=1 filled linearly in t: 1 + (1/3)(5 - 1)
  s.x(1, 1) = 3;
  const auto lin = make_path(PathKind::linear, s, {});
  lin->value(0.5, x.data());
  CHECK(x(1) == doctest::Approx(2.0));  // midpoint of 1 and 3
  lin->derivative(1.0, -1, d.data());
  CHECK(d(1) == doctest::Approx(2.0));  // left slope (3-1)/1
  lin->derivative(1.0, +1, d.data());
  CHECK(d(1) == doctest::Approx(1.0));  // right slope (5-3)/2
  CHECK(lin->jump_times() == std::vector<double>{1.0});
  // Rectilinear (forward fill): parameter s in [0, 4]; time advances first, then the values.
  const auto rect = make_path(PathKind::rectilinear, s, {});
  CHECK(rect->t1() == doctest::Approx(4.0));
  rect->value(1.0, x.data());
  CHECK(x(0) == doctest::Approx(1.0));
  CHECK(x(1) == doctest::Approx(1.0));  // value held while time moved
  s.x(1, 1) = NAN;
  const auto rect2 = make_path(PathKind::rectilinear, s, {});
  rect2->value(2.0, x.data());
  CHECK(x(1) == doctest::Approx(1.0));  // forward-filled NaN
  rect->value(4.0, x.data());
  CHECK(x(0) == doctest::Approx(3.0));
  CHECK(x(1) == doctest::Approx(5.0));
  s.time_channel = false;
  CHECK_THROWS_AS(make_path(PathKind::rectilinear, s, {}), InputError);
}

TEST_CASE("cde: Nadaraya-Watson smoother equals the brute-force formula, masks NaN, and has the analytic derivative") {
  Series s = noisy_series(15, 0.2, 2);
  for (auto k : {KernelKind::gaussian, KernelKind::laplacian, KernelKind::cauchy, KernelKind::epanechnikov, KernelKind::tricube}) {
    SmoothOptions o;
    o.kernel = k;
    o.bandwidth = 0.7;
    const auto p = make_path(PathKind::kernel, s, o);
    Eigen::VectorXd x(3), d(3);
    for (double t = s.t[0] + 0.031; t < s.t.back(); t += 0.23) {
      p->value(t, x.data());
      // brute force, independent double loop
      for (int c = 1; c < 3; ++c) {
        double num = 0, den = 0;
        for (size_t i = 0; i < s.t.size(); ++i) {
          const double kv = kernel_value(k, t - s.t[i], 0.7);
          num += kv * s.x(static_cast<Eigen::Index>(i), c);
          den += kv;
        }
        CHECK(x(c) == doctest::Approx(num / den).epsilon(1e-12));
      }
      CHECK(x(0) == doctest::Approx(t));
      p->derivative(t, 1, d.data());
      // Central differences of a smooth ratio: error O(h^2) ~ 1e-10; laplacian/epanechnikov/tricube
      // have kinks at |u| = 0 or b only, which t avoids by its irrational offset.
      CHECK((d - fd_derivative(*p, t)).cwiseAbs().maxCoeff() < 1e-5);
      CHECK(d(0) == doctest::Approx(1.0));
    }
    // Kernel derivative vs finite differences of the kernel itself.
    for (double u : {-0.63, -0.2, 0.11, 0.5}) CHECK(kernel_derivative(k, u, 0.7) == doctest::Approx((kernel_value(k, u + 1e-7, 0.7) - kernel_value(k, u - 1e-7, 0.7)) / 2e-7).epsilon(1e-5));
  }
  // NaN rows are ignored: same as deleting the row.
  Series gap = s, del = s;
  gap.x(5, 1) = NAN;
  gap.x(5, 2) = NAN;
  del.t.erase(del.t.begin() + 5);
  Eigen::MatrixXd xr(14, 3);
  xr << s.x.topRows(5), s.x.bottomRows(9);
  del.x = xr;
  const auto pg = make_path(PathKind::kernel, gap, {});
  const auto pd = make_path(PathKind::kernel, del, {});
  Eigen::VectorXd a(3), b(3);
  for (double t = 0.5; t < 3; t += 0.3) {
    pg->derivative(t, 1, a.data());
    pd->derivative(t, 1, b.data());
    CHECK((a - b).cwiseAbs().maxCoeff() < 1e-12);
  }
}

TEST_CASE("cde: GP posterior mean interpolates at small noise, treats NaN as absent, and has the analytic derivative") {
  Series s = noisy_series(12, 0.1, 3);
  SmoothOptions o;
  o.length_scale = 0.15;  // well-conditioned K at gaps 0.1-0.4
  o.noise_std = 1e-4;
  const auto p = make_path(PathKind::gp, s, o);
  Eigen::VectorXd x(3), d(3);
  for (size_t i = 0; i < s.t.size(); ++i) {
    p->value(s.t[i], x.data());
    // noise variance 1e-8 against unit prior variance: the mean passes through the data to ~1e-4
    CHECK((x.tail(2) - s.x.row(static_cast<Eigen::Index>(i)).tail(2).transpose()).cwiseAbs().maxCoeff() < 1e-3);
  }
  o.noise_std = 0.3;
  o.length_scale = 0.8;
  const auto q = make_path(PathKind::gp, s, o);
  {
    // Independent dense formula: mu(t) = k(t, T) (K + sigma^2 I)^-1 x, by full-pivot LU.
    const Eigen::Index L = 12;
    Eigen::MatrixXd K(L, L);
    for (Eigen::Index i = 0; i < L; ++i)
      for (Eigen::Index j = 0; j < L; ++j) K(i, j) = std::exp(-0.5 * std::pow((s.t[i] - s.t[j]) / 0.8, 2)) + (i == j ? 0.09 : 0.0);
    const Eigen::MatrixXd alpha = K.fullPivLu().solve(s.x.rightCols(2));
    Eigen::RowVectorXd k(L);
    for (Eigen::Index i = 0; i < L; ++i) k(i) = std::exp(-0.5 * std::pow((1.3 - s.t[i]) / 0.8, 2));
    q->value(1.3, x.data());
    CHECK((x.tail(2).transpose() - k * alpha).cwiseAbs().maxCoeff() < 1e-10);
  }
  for (double t = s.t[0] + 0.017; t < s.t.back(); t += 0.21) {
    q->derivative(t, 1, d.data());
    CHECK((d - fd_derivative(*q, t)).cwiseAbs().maxCoeff() < 1e-6);
  }
  // Missing = 1e6 noise (reference code) ~ deleting the observation (difference O(1e-6)).
  Series gap = s, del = s;
  gap.x(4, 1) = NAN;
  gap.x(4, 2) = NAN;
  del.t.erase(del.t.begin() + 4);
  Eigen::MatrixXd xr(11, 3);
  xr << s.x.topRows(4), s.x.bottomRows(7);
  del.x = xr;
  const auto pg = make_path(PathKind::gp, gap, o), pd = make_path(PathKind::gp, del, o);
  Eigen::VectorXd a(3), b(3);
  for (double t = 0.5; t < 3; t += 0.3) {
    pg->value(t, a.data());
    pd->value(t, b.data());
    CHECK((a - b).cwiseAbs().maxCoeff() < 1e-4);
  }
}

TEST_CASE("cde: weighted kernel and GP smoothers give weight gradients equal to finite differences") {
  const Series s = noisy_series(9, 0.2, 4);
  Rng rng(5);
  Eigen::VectorXd w(9);
  for (int i = 0; i < 9; ++i) w(i) = 0.05 + rng.uniform() * 0.2;
  const Eigen::Vector3d gx(0.3, -1.2, 0.7), gd(0.0, 0.4, -0.9);
  const double tv = 0.9, td = 1.37;
  for (auto kind : {PathKind::kernel, PathKind::gp}) {
    SmoothOptions o;
    o.bandwidth = 0.4;
    o.length_scale = 0.6;
    o.noise_std = 0.1;
    // L(w) = gx . X(tv) + gd . X'(td)
    auto loss = [&](const Eigen::VectorXd& ww) {
      const auto p = make_path(kind, s, o, &ww);
      Eigen::Vector3d x, d;
      p->value(tv, x.data());
      p->derivative(td, 1, d.data());
      return gx.dot(x) + gd.dot(d);
    };
    auto p = make_path(kind, s, o, &w);
    p->backward_value(tv, gx.data());
    p->backward_derivative(td, 1, gd.data());
    const Eigen::VectorXd g = p->weight_gradient();
    for (int i = 0; i < 9; ++i) {
      Eigen::VectorXd wp = w, wm = w;
      wp(i) += 1e-6;
      wm(i) -= 1e-6;
      const double fd = (loss(wp) - loss(wm)) / 2e-6;
      CHECK(g(i) == doctest::Approx(fd).epsilon(1e-5).scale(1.0));
    }
  }
}

// ---------------------------------------------------------------------------------------------
namespace {
// dz/dt = A z (rotation plus decay), z(t) = expm(A t) z0 in closed form; counts its calls.
struct LinearOde : VectorField {
  long calls = 0;
  int dim() const override { return 2; }
  void eval(double, int, const double* z, double* dz) override {
    ++calls;
    dz[0] = -0.1 * z[0] - 2 * z[1];
    dz[1] = 2 * z[0] - 0.1 * z[1];
  }
  void vjp(double, int, const double*, const double* g, double* gz) override {
    gz[0] = -0.1 * g[0] + 2 * g[1];
    gz[1] = -2 * g[0] - 0.1 * g[1];
  }
  static Eigen::Vector2d exact(double t) {  // z0 = (1, 0)
    return std::exp(-0.1 * t) * Eigen::Vector2d(std::cos(2 * t), std::sin(2 * t));
  }
};
}  // namespace

TEST_CASE("cde: RK4 is fourth order and uses exactly 4 NFE per step") {
  double prev = 0;
  for (int k = 0; k < 4; ++k) {
    const double h = 0.2 / (1 << k);
    LinearOde f;
    Eigen::VectorXd z = Eigen::Vector2d(1, 0);
    SolveOptions o;
    o.method = Method::rk4;
    o.step = h;
    const auto st = solve(f, z, 0, 4, o);
    const double err = (z - LinearOde::exact(4)).norm();
    CHECK(st.nfe == f.calls);
    CHECK(st.nfe == 4 * std::lround(std::ceil(4 / h - 1e-9)));
    if (k > 0) {
      const double order = std::log2(prev / err);  // closed-form truth; asymptotic order 4
      CHECK(order > 3.8);
      CHECK(order < 4.3);
    }
    prev = err;
  }
}

TEST_CASE("cde: Dopri5 meets its tolerance and counts NFE exactly (2 + 6 per attempted step)") {
  for (double tol : {1e-3, 1e-5, 1e-7, 1e-9}) {
    LinearOde f;
    Eigen::VectorXd z = Eigen::Vector2d(1, 0);
    SolveOptions o;
    o.rtol = tol;
    o.atol = tol;
    const auto st = solve(f, z, 0, 5, o);
    const double err = (z - LinearOde::exact(5)).cwiseAbs().maxCoeff();
    // Local error per step is held below tol; over ~tens of steps the global error stays
    // within a small multiple of tol (standard for this controller).
    CHECK(err < 20 * tol);
    CHECK(st.nfe == f.calls);
    CHECK(st.nfe == 2 + 6 * (st.accepted + st.rejected));
  }
}

TEST_CASE("cde: Dopri5 lands on jump times and integrates a kinked field exactly") {
  // dz/dt = +1 before t=1 and -2 after (the side argument picks the limit at t=1):
  // z(3) = 1 - 4 = -3, a piecewise polynomial that the solver integrates exactly once it
  // never steps across the kink.
  struct Kink : VectorField {
    int dim() const override { return 1; }
    void eval(double t, int side, const double*, double* dz) override { dz[0] = (t < 1 || (t == 1 && side < 0)) ? 1.0 : -2.0; }
    void vjp(double, int, const double*, const double*, double* gz) override { gz[0] = 0; }
  } f;
  Eigen::VectorXd z = Eigen::VectorXd::Zero(1);
  SolveOptions o;
  o.jump_times = {1.0};
  Tape tape;
  solve(f, z, 0, 3, o, &tape);
  CHECK(z(0) == doctest::Approx(-3.0).epsilon(1e-12));
  bool hit = false;
  for (size_t i = 0; i < tape.t.size(); ++i) hit = hit || std::fabs(tape.t[i] + tape.h[i] - 1.0) < 1e-14;
  CHECK(hit);
}

TEST_CASE("cde: backprop through RK4 steps equals the exact adjoint of the linear ODE") {
  // For dz/dt = A z the RK4 map is a matrix M; dL/dz0 = M^T g.  Check against finite differences.
  SolveOptions o;
  o.method = Method::rk4;
  o.step = 0.3;
  auto run = [&](Eigen::Vector2d z0) {
    LinearOde f;
    Eigen::VectorXd z = z0;
    solve(f, z, 0, 2, o);
    return z;
  };
  LinearOde f;
  Eigen::VectorXd z = Eigen::Vector2d(0.3, -0.5);
  Tape tape;
  solve(f, z, 0, 2, o, &tape);
  Eigen::VectorXd g = Eigen::Vector2d(1.5, -0.25);
  const long nb = backprop(f, tape, o, g);
  CHECK(nb == 4 * static_cast<long>(tape.t.size()));
  for (int j = 0; j < 2; ++j) {
    Eigen::Vector2d e = Eigen::Vector2d::Zero();
    e(j) = 1e-6;
    const double fd = (Eigen::Vector2d(1.5, -0.25).dot(run(Eigen::Vector2d(0.3, -0.5) + e) - run(Eigen::Vector2d(0.3, -0.5) - e))) / 2e-6;
    CHECK(g(j) == doctest::Approx(fd).epsilon(1e-7));
  }
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("cde: model gradients (cde, mv-cde, mvc-cde over every path) equal finite differences") {
  Series s = noisy_series(8, 0.1, 6);
  s.x(3, 1) = NAN;
  s.x(3, 2) = NAN;
  struct Case {
    ModelKind m;
    PathKind p;
  };
  const Case cases[] = {{ModelKind::cde, PathKind::cubic},       {ModelKind::cde, PathKind::linear},
                        {ModelKind::cde, PathKind::rectilinear}, {ModelKind::cde, PathKind::kernel},
                        {ModelKind::cde, PathKind::gp},          {ModelKind::mv_cde, PathKind::kernel},
                        {ModelKind::mv_cde, PathKind::gp},       {ModelKind::mvc_cde, PathKind::kernel},
                        {ModelKind::mvc_cde, PathKind::gp}};
  for (const auto& c : cases) {
    CAPTURE(to_string(c.m));
    CAPTURE(to_string(c.p));
    ModelConfig cfg;
    cfg.kind = c.m;
    cfg.path = c.p;
    cfg.channels = 3;
    cfg.hidden = 3;
    cfg.width = 5;
    cfg.classes = 3;
    cfg.smooth.bandwidth = 0.3;
    cfg.smooth.length_scale = 0.5;
    cfg.smooth.noise_std = 0.1;
    cfg.bandwidths = {0.2, 0.6};
    Model m(cfg);
    Rng rng(7);
    m.init(rng);
    SolveOptions o;
    o.method = Method::rk4;  // fixed steps: the discrete map is differentiated exactly
    o.step = c.p == PathKind::rectilinear ? 0.5 : 0.25;
    m.zero_grad();
    const auto out = m.run(s, 2, o);
    CHECK(out.nfe > 0);
    CHECK(out.nfe_backward > 0);
    long checked = 0;
    std::vector<std::vector<double>> grads;
    for (auto& p : m.params()) grads.emplace_back(p.grad, p.grad + p.size);
    size_t pi = 0;
    for (auto& p : m.params()) {
      const auto& grad = grads[pi++];
      for (Eigen::Index i = 0; i < p.size; i += std::max<Eigen::Index>(1, p.size / 7)) {
        const double v = p.value[i];
        p.value[i] = v + 1e-6;
        const double lp = m.run(s, 2, o).loss;
        p.value[i] = v - 1e-6;
        const double lm = m.run(s, 2, o).loss;
        p.value[i] = v;
        CAPTURE(p.name);
        // central difference: truncation O(1e-12), rounding ~1e-10/1e-6; 1e-6 absolute / relative
        CHECK(grad[static_cast<size_t>(i)] == doctest::Approx((lp - lm) / 2e-6).epsilon(1e-5).scale(0.1));
        ++checked;
      }
    }
    CHECK(checked > 20);
  }
}

TEST_CASE("cde: with a fixed random vector field, the GP path needs fewer NFE than the cubic path on noisy irregular data") {
  // The paper's mechanism: a Hermite spline through noisy points has large, rapidly varying
  // dX/dt, forcing the adaptive solver into small steps; the GP posterior mean is smooth.
  ModelConfig cfg;
  cfg.channels = 3;
  cfg.hidden = 16;
  cfg.width = 32;
  cfg.classes = 2;
  long nfe_cubic = 0, nfe_gp = 0, nfe_kernel = 0;
  for (int k = 0; k < 10; ++k) {
    Series s = noisy_series(40, 0.3, 100 + static_cast<std::uint64_t>(k));
    SolveOptions o;
    o.rtol = o.atol = 1e-4;
    for (auto p : {PathKind::cubic, PathKind::gp, PathKind::kernel}) {
      cfg.path = p;
      cfg.smooth.length_scale = 1.0;
      cfg.smooth.noise_std = 0.3;
      cfg.smooth.bandwidth = 0.5;
      Model m(cfg);
      Rng rng(11);  // same vector field for every path
      m.init(rng);
      const long n = m.run(s, -1, o).nfe;
      (p == PathKind::cubic ? nfe_cubic : p == PathKind::gp ? nfe_gp : nfe_kernel) += n;
    }
  }
  MESSAGE("NFE over 10 series: cubic " << nfe_cubic << ", gp " << nfe_gp << ", kernel " << nfe_kernel);
  CHECK(nfe_gp < nfe_cubic);
  CHECK(nfe_kernel < nfe_cubic);
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("nn: Linear backward equals finite differences and Adam's first step is lr * sign(g)") {
  Rng rng(1);
  nn::Linear l(3, 2);
  l.init(rng);
  Eigen::MatrixXd X(3, 4), Y(2, 4), G(2, 4), gX(3, 4);
  for (int i = 0; i < 12; ++i) X(i) = rng.normal();
  for (int i = 0; i < 8; ++i) G(i) = rng.normal();
  l.zero_grad();
  Eigen::Ref<Eigen::MatrixXd> gXr(gX);
  l.backward(X, G, &gXr);
  auto L = [&](const nn::Linear& q, const Eigen::MatrixXd& x) {
    Eigen::MatrixXd y(2, 4);
    q.forward(x, y);
    return (y.array() * G.array()).sum();
  };
  for (int i = 0; i < 6; ++i) {
    nn::Linear a = l, b = l;
    a.W(i) += 1e-6;
    b.W(i) -= 1e-6;
    CHECK(l.gW(i) == doctest::Approx((L(a, X) - L(b, X)) / 2e-6).epsilon(1e-7));
  }
  for (int i = 0; i < 12; ++i) {
    Eigen::MatrixXd a = X, b = X;
    a(i) += 1e-6;
    b(i) -= 1e-6;
    CHECK(gX(i) == doctest::Approx((L(l, a) - L(l, b)) / 2e-6).epsilon(1e-7));
  }
  // Adam: first step m/(1-b1) = g, v/(1-b2) = g^2, so p -= lr g/(|g| + eps) (closed form).
  double p[2] = {1.0, -2.0}, g[2] = {0.5, -3.0};
  nn::ViewAdamW opt({{"p", p, g, 2, 2, 1}}, 0.1, nn::AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  opt.step();
  CHECK(p[0] == doctest::Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)));
  CHECK(p[1] == doctest::Approx(-2.0 + 0.1 * 3.0 / (3.0 + 1e-8)));
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("io: .ts reader errors name the line") {
  CHECK(ts_error(kHeader + "1,2,3:4,5,6:a\n1,2:3,4:c\n").find("class label 'c' is not declared") != std::string::npos);
  CHECK(ts_error(kHeader + "1,2,3:4,5:a\n").find("unequal length") != std::string::npos);
  CHECK(ts_error(kHeader + "1,2,3:a\n").find("1 dimensions, expected 2") != std::string::npos);
  CHECK(ts_error(kHeader + "?,?,?:1,2,3:a\n").find("no observed value") != std::string::npos);
  CHECK(ts_error(kHeader + "1,x,3:1,2,3:a\n").find("bad value 'x'") != std::string::npos);
  CHECK(ts_error("@problemName T\n@bogus 3\n@data\n").find("unknown header key @bogus") != std::string::npos);
  CHECK(ts_error("@timeStamps true\n@classLabel true a b\n@data\n").find("not supported") != std::string::npos);
  CHECK(ts_error("@classLabel true a b\n").find("no @data") != std::string::npos);
  CHECK(ts_error("1,2:a\n").find("line 1") != std::string::npos);
  const auto p = scratch("ok.ts");
  std::ofstream(p) << kHeader + "1,?,3:4,5,6:b\n1,2:3,4:a\n";
  const auto d = io::read_ts(p.string());
  CHECK(d.series.size() == 2);
  CHECK(d.labels == std::vector<int>{1, 0});
  CHECK(std::isnan(d.series[0](1, 0)));
  CHECK(d.series[1].rows() == 2);  // variable length
}

TEST_CASE("io: the UEA BasicMotions and JapaneseVowels files read with their published shapes") {
  const std::string dir = std::string(ICMLKIT_SHARED_DATA) + "/timeseries/";
  if (!fs::exists(dir + "BasicMotions_TRAIN.ts")) {
    MESSAGE("skipped: ../shared/data/timeseries absent");
    return;
  }
  // Shapes from the archive's description (data README): 40 x 6 x 100, 4 classes; 270 cases
  // of 12 channels, lengths 7..29, 9 classes.
  const auto bm = io::read_ts(dir + "BasicMotions_TRAIN.ts");
  CHECK(bm.series.size() == 40);
  CHECK(bm.dimensions == 6);
  CHECK(bm.class_names.size() == 4);
  for (const auto& s : bm.series) CHECK(s.rows() == 100);
  const auto jv = io::read_ts(dir + "JapaneseVowels_TRAIN.ts");
  CHECK(jv.series.size() == 270);
  CHECK(jv.dimensions == 12);
  CHECK(jv.class_names.size() == 9);
  Eigen::Index lo = 1000, hi = 0;
  for (const auto& s : jv.series) {
    lo = std::min(lo, s.rows());
    hi = std::max(hi, s.rows());
  }
  CHECK(lo == 7);
  CHECK(hi == 26);
}

TEST_CASE("cde: drops, standardisation and spirals") {
  Dataset d = spirals(20, 50, 3);
  CHECK(d.series.size() == 20);
  long ones = 0;
  for (int l : d.labels) ones += l;
  CHECK(ones == 10);
  drop_observations(d, 0.5, 9);
  for (const auto& s : d.series) {
    long nan = 0;
    for (int i = 0; i < 50; ++i) nan += std::isnan(s.x(i, 1)) ? 1 : 0;
    CHECK(nan == 24);  // floor(0.5 * 48)
    CHECK(std::isfinite(s.x(0, 1)));
    CHECK(std::isfinite(s.x(49, 1)));
    CHECK(std::isfinite(s.x(7, 0)));  // time channel never dropped
  }
  const auto st = Standardizer::fit(d);
  st.apply(d);
  const auto st2 = Standardizer::fit(d);
  CHECK(st2.mean[1] == doctest::Approx(0.0).scale(1.0));
  CHECK(st2.std[1] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(st2.mean[0] == 0.0);  // time channel untouched
}

TEST_CASE("cde: checkpoint round trip gives identical logits, and a bad parameter size is an error") {
  ModelConfig cfg;
  cfg.kind = ModelKind::mvc_cde;
  cfg.path = PathKind::gp;
  cfg.channels = 3;
  cfg.hidden = 4;
  cfg.classes = 3;
  cfg.bandwidths = {0.5, 1.5};
  Model m(cfg);
  Rng rng(3);
  m.init(rng);
  CheckpointInfo ci;
  ci.model = cfg;
  ci.norm.mean = {0, 1, 2};
  ci.norm.std = {1, 2, 3};
  ci.class_names = {"a", "b", "c"};
  io::Provenance prov;
  prov.tool = "test";
  const auto path = scratch("ck.h5").string();
  save_checkpoint(path, m, ci, prov);
  CheckpointInfo back;
  Model m2 = load_checkpoint(path, back);
  const Series s = noisy_series(10, 0.1, 8);
  SolveOptions o;
  const auto a = m.run(s, -1, o), b = m2.run(s, -1, o);
  CHECK((a.logits - b.logits).cwiseAbs().maxCoeff() == 0.0);  // bit-identical weights
  CHECK(back.class_names == ci.class_names);
  CHECK(back.model.bandwidths == cfg.bandwidths);
  // A checkpoint whose config promises a larger model than its datasets hold.
  cfg.hidden = 5;
  ci.model = cfg;
  Model small(ModelConfig{ModelKind::mvc_cde, PathKind::gp, {}, {0.5, 1.5}, 3, 4, 128, 3});
  save_checkpoint(path, small, ci, prov);
  CHECK_THROWS_AS(load_checkpoint(path, back), InputError);
}

TEST_CASE("cde: repeated jump times are visited once") {
  LinearOde f;
  Eigen::VectorXd z = Eigen::Vector2d(1, 0);
  SolveOptions o;
  o.jump_times = {2.0, 1.0, 2.0, 1.0};
  solve(f, z, 0, 3, o);
  CHECK((z - LinearOde::exact(3)).cwiseAbs().maxCoeff() < 1e-3);  // closed form, rtol 1e-4
}

TEST_CASE("cde: MV-CDE attention is a softmax over the observed rows only") {
  // Truth: softmax_i(q_h . x_i / sqrt(C)) computed by hand on the observed rows; 0 on NaN rows.
  Series s = noisy_series(6, 0.1, 12);
  s.x(2, 1) = NAN;
  s.x(2, 2) = NAN;
  ModelConfig cfg;
  cfg.kind = ModelKind::mv_cde;
  cfg.path = PathKind::kernel;
  cfg.channels = 3;
  cfg.hidden = 2;
  cfg.bandwidths = {0.3, 0.9};
  Model m(cfg);
  Rng rng(4);
  m.init(rng);
  const Eigen::MatrixXd A = m.attention(s);
  Eigen::MatrixXd q;
  for (auto& p : m.params())
    if (p.name == "queries") q = Eigen::Map<Eigen::MatrixXd>(p.value, p.rows, p.cols);
  for (int h = 0; h < 2; ++h) {
    double z = 0;
    std::vector<double> e(6, 0.0);
    for (int i = 0; i < 6; ++i)
      if (i != 2) z += (e[static_cast<size_t>(i)] = std::exp(q.row(h).dot(s.x.row(i)) / std::sqrt(3.0)));
    for (int i = 0; i < 6; ++i) CHECK(A(h, i) == doctest::Approx(e[static_cast<size_t>(i)] / z).epsilon(1e-12));
    CHECK(A(h, 2) == 0.0);
  }
}
