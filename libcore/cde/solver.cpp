#include "cde/solver.hpp"

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::cde {

namespace {

struct Tableau {
  int s;                 // stages used by the solution
  double c[7];
  double a[7][7];
  double b[7];           // solution weights
  double e[7];           // error weights (b - bhat), dopri5 only (7 stages with FSAL)
  int order;
};

// Kutta's 3/8 rule (torchdiffeq rk4_alt_step_func).
const Tableau kRk4{4, {0, 1. / 3, 2. / 3, 1}, {{0}, {1. / 3}, {-1. / 3, 1}, {1, -1, 1}}, {1. / 8, 3. / 8, 3. / 8, 1. / 8}, {0}, 4};

// Dormand-Prince 5(4) (torchdiffeq _DORMAND_PRINCE_SHAMPINE_TABLEAU).
const Tableau kDopri5{
    6,
    {0, 1. / 5, 3. / 10, 4. / 5, 8. / 9, 1, 1},
    {{0},
     {1. / 5},
     {3. / 40, 9. / 40},
     {44. / 45, -56. / 15, 32. / 9},
     {19372. / 6561, -25360. / 2187, 64448. / 6561, -212. / 729},
     {9017. / 3168, -355. / 33, 46732. / 5247, 49. / 176, -5103. / 18656},
     {35. / 384, 0, 500. / 1113, 125. / 192, -2187. / 6784, 11. / 84}},
    {35. / 384, 0, 500. / 1113, 125. / 192, -2187. / 6784, 11. / 84, 0},
    {35. / 384 - 1951. / 21600, 0, 500. / 1113 - 22642. / 50085, 125. / 192 - 451. / 720,
     -2187. / 6784 + 12231. / 42400, 11. / 84 - 649. / 6300, -1. / 60},
    5};

inline int stage_side(double c) { return c >= 1.0 ? -1 : +1; }

double rms(const Eigen::Ref<const Eigen::VectorXd>& v) { return std::sqrt(v.squaredNorm() / static_cast<double>(v.size())); }

}  // namespace

Method parse_method(const std::string& s, const std::string& flag) {
  if (s == "rk4") return Method::rk4;
  if (s == "dopri5") return Method::dopri5;
  throw UsageError("unknown solver '" + s + "' (rk4, dopri5)", flag);
}

SolveStats solve(VectorField& f, Eigen::Ref<Eigen::VectorXd> z, double t0, double t1, const SolveOptions& opt,
                 Tape* tape) {
  const int n = f.dim();
  const Tableau& T = opt.method == Method::rk4 ? kRk4 : kDopri5;
  const int nst = opt.method == Method::rk4 ? 4 : 7;
  SolveStats st;
  if (tape) {
    tape->clear();
    tape->dim = n;
    tape->stages = T.s;
  }
  Eigen::MatrixXd k(n, nst);
  Eigen::VectorXd y(n), znew(n), err(n), scale(n);
  // Jump times strictly inside (t0, t1).
  std::vector<double> jumps;
  for (double j : opt.jump_times)
    if (j > t0 && j < t1) jumps.push_back(j);
  std::sort(jumps.begin(), jumps.end());
  jumps.erase(std::unique(jumps.begin(), jumps.end()), jumps.end());  // several heads may share knots
  size_t next_jump = 0;

  auto stage = [&](double t, double h, int i) {
    y = z;
    for (int j = 0; j < i; ++j)
      if (T.a[i][j] != 0.0) y.noalias() += (h * T.a[i][j]) * k.col(j);
    f.eval(t + T.c[i] * h, stage_side(T.c[i]), y.data(), k.col(i).data());
    ++st.nfe;
  };
  auto record = [&](double t, double h) {
    if (!tape) return;
    tape->t.push_back(t);
    tape->h.push_back(h);
    for (int i = 0; i < T.s; ++i) {
      y = z;
      for (int j = 0; j < i; ++j)
        if (T.a[i][j] != 0.0) y.noalias() += (h * T.a[i][j]) * k.col(j);
      tape->y.insert(tape->y.end(), y.data(), y.data() + n);
    }
  };

  double t = t0;
  if (opt.method == Method::rk4) {
    if (!(opt.step > 0)) throw UsageError("rk4 step must be > 0", "--step");
    // torchdiffeq's fixed grid: t0, t0 + step, ..., with the last point moved onto t1.
    const double span = t1 - t0;
    const long nsteps = std::max(1L, static_cast<long>(std::ceil(span / opt.step - 1e-9)));
    if (nsteps > opt.max_steps) throw RuntimeError("more than max_steps solver steps", "rk4");
    for (long i = 0; i < nsteps; ++i) {
      t = t0 + static_cast<double>(i) * opt.step;
      const double tn = i + 1 == nsteps ? t1 : t0 + static_cast<double>(i + 1) * opt.step;
      const double h = tn - t;
      for (int s = 0; s < 4; ++s) stage(t, h, s);
      record(t, h);
      z.noalias() += h * (k * Eigen::Map<const Eigen::Vector4d>(T.b));
      ++st.accepted;
      if (!z.allFinite()) throw RuntimeError("the CDE state became non-finite", "rk4, t=" + std::to_string(tn));
    }
    return st;
  }

  if (!(opt.rtol > 0) || !(opt.atol > 0)) throw UsageError("solver tolerances must be > 0", "--rtol/--atol");
  // Initial step (Hairer, Norsett & Wanner II.4; torchdiffeq _select_initial_step).
  f.eval(t, +1, z.data(), k.col(0).data());
  ++st.nfe;
  scale = (opt.atol + opt.rtol * z.array().abs()).matrix();
  const double d0 = rms(z.cwiseQuotient(scale)), d1 = rms(k.col(0).cwiseQuotient(scale));
  const double h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
  y = z + h0 * k.col(0);
  f.eval(t + h0, +1, y.data(), k.col(1).data());
  ++st.nfe;
  const double d2 = rms((k.col(1) - k.col(0)).cwiseQuotient(scale)) / h0;
  const double h1 = (d1 <= 1e-15 && d2 <= 1e-15) ? std::max(1e-6, h0 * 1e-3) : std::pow(0.01 / std::max(d1, d2), 1.0 / 6.0);
  double h = std::min(100 * h0, h1);
  bool have_k1 = true;

  while (t < t1) {
    if (st.accepted + st.rejected > opt.max_steps) throw RuntimeError("more than max_steps solver steps", "dopri5");
    double tend = t1;
    if (next_jump < jumps.size()) tend = jumps[next_jump];
    bool lands = false;
    double hs = h;
    if (t + hs >= tend - 1e-12 * std::max(1.0, std::fabs(tend))) {
      hs = tend - t;
      lands = true;
    }
    if (!(hs > 1e-14 * std::max(1.0, std::fabs(t)))) throw RuntimeError("solver step size underflow", "dopri5, t=" + std::to_string(t));
    if (!have_k1) {
      f.eval(t, +1, z.data(), k.col(0).data());
      ++st.nfe;
      have_k1 = true;
    }
    for (int i = 1; i < 7; ++i) stage(t, hs, i);
    // stage 6 (index 6) input is the 5th-order solution
    znew = z;
    for (int j = 0; j < 6; ++j) znew.noalias() += (hs * T.b[j]) * k.col(j);
    err.setZero();
    for (int j = 0; j < 7; ++j) err.noalias() += (hs * T.e[j]) * k.col(j);
    scale = (opt.atol + opt.rtol * z.array().abs().max(znew.array().abs())).matrix();
    double ratio = rms(err.cwiseQuotient(scale));
    if (!std::isfinite(ratio)) ratio = 1e10;
    const bool accept = ratio <= 1.0;
    // torchdiffeq _optimal_step_size
    double factor;
    if (ratio == 0.0) factor = 10.0;
    else {
      const double dfac = ratio < 1.0 ? 1.0 : 0.2;
      factor = std::min(10.0, std::max(0.9 * std::pow(ratio, -1.0 / 5.0), dfac));
    }
    if (accept) {
      record(t, hs);
      z = znew;
      if (!z.allFinite()) throw RuntimeError("the CDE state became non-finite", "dopri5, t=" + std::to_string(t));
      t = lands ? tend : t + hs;
      ++st.accepted;
      if (lands && tend < t1) {
        ++next_jump;
        have_k1 = false;  // derivative jumps here: re-evaluate F on the right side
      } else {
        k.col(0) = k.col(6);  // FSAL
      }
      if (lands && tend >= t1) t = t1;
    } else {
      ++st.rejected;
    }
    h = hs * factor;
  }
  return st;
}

long backprop(VectorField& f, const Tape& tape, const SolveOptions& opt, Eigen::Ref<Eigen::VectorXd> g) {
  const Tableau& T = opt.method == Method::rk4 ? kRk4 : kDopri5;
  const int n = tape.dim, s = tape.stages;
  Eigen::MatrixXd gk(n, s);
  Eigen::VectorXd gy(n);
  long nvjp = 0;
  for (size_t step = tape.t.size(); step-- > 0;) {
    const double t = tape.t[step], h = tape.h[step];
    const double* ybase = tape.y.data() + step * static_cast<size_t>(s) * static_cast<size_t>(n);
    // z_{n+1} = z_n + h sum b_i k_i;  Y_i = z_n + h sum_{j<i} a_ij k_j;  k_i = F(Y_i)
    for (int i = 0; i < s; ++i) gk.col(i) = (h * T.b[i]) * g;
    Eigen::VectorXd gz = g;
    for (int i = s - 1; i >= 0; --i) {
      if (gk.col(i).isZero(0.0)) continue;  // stage with no weight (dopri5 k2)
      f.vjp(t + T.c[i] * h, stage_side(T.c[i]), ybase + static_cast<size_t>(i) * static_cast<size_t>(n), gk.col(i).data(), gy.data());
      ++nvjp;
      gz += gy;
      for (int j = 0; j < i; ++j)
        if (T.a[i][j] != 0.0) gk.col(j).noalias() += (h * T.a[i][j]) * gy;
    }
    g = gz;
  }
  return nvjp;
}

}  // namespace icmlkit::cde
