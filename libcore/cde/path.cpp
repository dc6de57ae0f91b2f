#include "cde/path.hpp"

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::cde {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Index i of the interval [t_i, t_{i+1}] holding t, clamped to [0, L-2]; at a knot, side +1
// picks the interval starting there, -1 the one ending there.
inline Eigen::Index interval_index(const std::vector<double>& knots, double t, int side) {
  const auto n = static_cast<Eigen::Index>(knots.size());
  auto it = side >= 0 ? std::upper_bound(knots.begin(), knots.end(), t) : std::lower_bound(knots.begin(), knots.end(), t);
  Eigen::Index i = static_cast<Eigen::Index>(it - knots.begin()) - 1;
  return std::clamp<Eigen::Index>(i, 0, n - 2);
}

void check_times(const std::vector<double>& t, Eigen::Index rows, const std::string& where) {
  if (t.size() < 2) throw InputError("a path needs at least 2 observation times", where);
  if (static_cast<Eigen::Index>(t.size()) != rows) throw InputError("times and values differ in length", where);
  for (size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t[i])) throw InputError("non-finite observation time", where);
    if (i > 0 && !(t[i] > t[i - 1])) throw InputError("observation times are not strictly increasing", where);
  }
}

// ---------------------------------------------------------------------------------------------
// Hermite cubic with backward differences (torchcde.hermite_cubic_coefficients_with_backward_differences).
class CubicPath final : public Path {
 public:
  CubicPath(const std::vector<double>& t, const Eigen::MatrixXd& xf) : t_(t) {
    const Eigen::Index L = xf.rows(), C = xf.cols();
    channels_ = static_cast<int>(C);
    t0_ = t.front();
    t1_ = t.back();
    a_ = xf.topRows(L - 1);
    b_.resize(L - 1, C);
    c_.resize(L - 1, C);
    d_.resize(L - 1, C);
    for (Eigen::Index i = 0; i + 1 < L; ++i) {
      const double dt = t[i + 1] - t[i];
      for (Eigen::Index k = 0; k < C; ++k) {
        const double m = (xf(i + 1, k) - xf(i, k)) / dt;                              // slope m_i
        const double mp = i == 0 ? m : (xf(i, k) - xf(i - 1, k)) / (t[i] - t[i - 1]);  // m_{i-1}, m_{-1} = m_0
        b_(i, k) = mp;
        c_(i, k) = 2.0 * (m - mp) / dt;
        d_(i, k) = (mp - m) / (dt * dt);
      }
    }
  }
  void value(double t, double* x) const override {
    const Eigen::Index i = interval_index(t_, t, +1);
    const double s = t - t_[i];
    for (int k = 0; k < channels_; ++k) x[k] = a_(i, k) + s * (b_(i, k) + s * (c_(i, k) + s * d_(i, k)));
  }
  void derivative(double t, int side, double* dx) const override {
    const Eigen::Index i = interval_index(t_, t, side);
    const double s = t - t_[i];
    for (int k = 0; k < channels_; ++k) dx[k] = b_(i, k) + s * (2.0 * c_(i, k) + 3.0 * s * d_(i, k));
  }

 private:
  std::vector<double> t_;
  Eigen::MatrixXd a_, b_, c_, d_;  // [L-1, C]: X = a + b s + c s^2 + d s^3 on interval i
};

// Piecewise linear through the knots (also the rectilinear path, over its own parameter).
class LinearPath final : public Path {
 public:
  LinearPath(std::vector<double> t, const Eigen::MatrixXd& xf) : t_(std::move(t)), x_(xf) {
    channels_ = static_cast<int>(xf.cols());
    t0_ = t_.front();
    t1_ = t_.back();
    slope_.resize(xf.rows() - 1, xf.cols());
    for (Eigen::Index i = 0; i + 1 < xf.rows(); ++i) slope_.row(i) = (xf.row(i + 1) - xf.row(i)) / (t_[i + 1] - t_[i]);
  }
  void value(double t, double* x) const override {
    const Eigen::Index i = interval_index(t_, t, +1);
    for (int k = 0; k < channels_; ++k) x[k] = x_(i, k) + (t - t_[i]) * slope_(i, k);
  }
  void derivative(double t, int side, double* dx) const override {
    const Eigen::Index i = interval_index(t_, t, side);
    for (int k = 0; k < channels_; ++k) dx[k] = slope_(i, k);
  }
  std::vector<double> jump_times() const override { return {t_.begin() + 1, t_.end() - 1}; }

 private:
  std::vector<double> t_;
  Eigen::MatrixXd x_, slope_;
};

// Shared parts of the smoothers: times, zero-filled values, masks, the time channel.
struct SmoothData {
  Eigen::VectorXd t;   // [L]
  Eigen::MatrixXd x;   // [L, C], NaN -> 0, time column zero
  Eigen::MatrixXd m;   // [L, C], 1 observed / 0 missing, time column zero
  Eigen::MatrixXd mx;  // m .* x
  bool time_channel = false;

  SmoothData(const Series& s, const std::string& where) {
    const Eigen::Index L = s.x.rows(), C = s.x.cols();
    t = Eigen::Map<const Eigen::VectorXd>(s.t.data(), L);
    x = s.x;
    m.resize(L, C);
    time_channel = s.time_channel;
    for (Eigen::Index k = 0; k < C; ++k) {
      bool any = false;
      for (Eigen::Index i = 0; i < L; ++i) {
        const bool obs = std::isfinite(x(i, k));
        m(i, k) = obs ? 1.0 : 0.0;
        if (!obs) x(i, k) = 0.0;
        any = any || obs;
      }
      if (!any && !(time_channel && k == 0)) throw InputError(fmt_channel(k) + " has no observed value", where);
    }
    if (time_channel) {
      x.col(0).setZero();
      m.col(0).setZero();
    }
    mx = m.cwiseProduct(x);
  }
  static std::string fmt_channel(Eigen::Index k) { return "channel " + std::to_string(k); }
};

// Nadaraya-Watson smoother X(t) = sum_i K_b(t - t_i) w_i m_i x_i / sum_i K_b(t - t_i) w_i m_i,
// per channel with its own mask; derivative (N'D - N D')/D^2 (D clamped at 1e-9, D^2 at 1e-20).
class KernelPath final : public Path {
 public:
  KernelPath(const Series& s, const SmoothOptions& o, const Eigen::VectorXd* w, const std::string& where)
      : d_(s, where), kind_(o.kernel), bw_(o.bandwidth) {
    const Eigen::Index L = d_.t.size(), C = d_.x.cols();
    channels_ = static_cast<int>(C);
    t0_ = d_.t(0);
    t1_ = d_.t(L - 1);
    weighted_ = w != nullptr;
    w_ = weighted_ ? *w : Eigen::VectorXd::Ones(L);
    gw_ = Eigen::VectorXd::Zero(L);
    k_.resize(L); dk_.resize(L); kw_.resize(L); dkw_.resize(L);
    D_.resize(C); N_.resize(C); dD_.resize(C); dN_.resize(C); X_.resize(C); dX_.resize(C); a_.resize(C); tmp_.resize(C);
    u_.resize(L);
  }
  void value(double t, double* x) const override {
    eval(t, false);
    out(t, x, false);
  }
  void derivative(double t, int side, double* dx) const override {
    eval(t, true);
    out(t, dx, true);
  }
  bool weighted() const override { return weighted_; }
  void backward_value(double t, const double* g) override {
    eval(t, false);
    // dX_c/dw_i = k_i m_ic (x_ic - X_c) / D_c
    spread(g);
    gw_ += k_.cwiseProduct(u_);
  }
  void backward_derivative(double t, int side, const double* g) override {
    eval(t, true);
    // dX'_c/dw_i = k'_i m_ic (x_ic - X_c)/D_c - (k_i m_ic / D_c)(X'_c + (x_ic - X_c) D'_c/D_c)
    spread(g);
    gw_ += dk_.cwiseProduct(u_);
    const Eigen::VectorXd& r = dD_;  // r_c = D'_c / D_c, formed below into tmp_
    tmp_ = a_.cwiseProduct(r.cwiseQuotient(D_));
    u_.noalias() = d_.mx * tmp_;
    tmp_ = tmp_.cwiseProduct(X_) - a_.cwiseProduct(dX_);
    u_.noalias() -= d_.m * tmp_;
    gw_ -= k_.cwiseProduct(u_);
  }
  Eigen::VectorXd weight_gradient() override { return weighted_ ? gw_ : Eigen::VectorXd(); }

 private:
  // a = g / D (time channel zeroed); u_i = sum_c a_c m_ic (x_ic - X_c).
  void spread(const double* g) {
    a_ = Eigen::Map<const Eigen::VectorXd>(g, channels_).cwiseQuotient(D_);
    if (d_.time_channel) a_(0) = 0.0;
    u_.noalias() = d_.mx * a_;
    tmp_ = a_.cwiseProduct(X_);
    u_.noalias() -= d_.m * tmp_;
  }
  void eval(double t, bool deriv) const {
    const Eigen::Index L = d_.t.size();
    for (Eigen::Index i = 0; i < L; ++i) {
      const double u = t - d_.t(i);
      k_(i) = kernel_value(kind_, u, bw_);
      if (deriv) dk_(i) = kernel_derivative(kind_, u, bw_);
    }
    kw_ = k_.cwiseProduct(w_);
    D_.noalias() = d_.m.transpose() * kw_;
    N_.noalias() = d_.mx.transpose() * kw_;
    D_ = D_.cwiseMax(1e-9);
    X_ = N_.cwiseQuotient(D_);
    if (deriv) {
      dkw_ = dk_.cwiseProduct(w_);
      dD_.noalias() = d_.m.transpose() * dkw_;
      dN_.noalias() = d_.mx.transpose() * dkw_;
      dX_ = (dN_.cwiseProduct(D_) - N_.cwiseProduct(dD_)).cwiseQuotient(D_.cwiseProduct(D_).cwiseMax(1e-20));
    }
  }
  void out(double t, double* x, bool deriv) const {
    for (int k = 0; k < channels_; ++k) x[k] = deriv ? dX_(k) : X_(k);
    if (d_.time_channel) x[0] = deriv ? 1.0 : t;
  }

  SmoothData d_;
  KernelKind kind_;
  double bw_;
  bool weighted_ = false;
  Eigen::VectorXd w_, gw_;
  mutable Eigen::VectorXd k_, dk_, kw_, dkw_, D_, N_, dD_, dN_, X_, dX_, a_, tmp_, u_;
};

// GP posterior mean with an RBF kernel: alpha_c = (K + diag(noise) + 1e6 diag(missing_c))^-1 x_c,
// mu(t) = k(t, T) alpha, mu'(t) = sum_i -(t - t_i)/l^2 k(t, t_i) alpha_i (reference code).
class GpPath final : public Path {
 public:
  GpPath(const Series& s, const SmoothOptions& o, const Eigen::VectorXd* w, const std::string& where)
      : d_(s, where), ell_(o.length_scale), s2_(o.noise_std * o.noise_std) {
    const Eigen::Index L = d_.t.size(), C = d_.x.cols();
    channels_ = static_cast<int>(C);
    t0_ = d_.t(0);
    t1_ = d_.t(L - 1);
    weighted_ = w != nullptr;
    w_ = weighted_ ? *w : Eigen::VectorXd::Ones(L);
    Eigen::MatrixXd K(L, L);
    for (Eigen::Index i = 0; i < L; ++i)
      for (Eigen::Index j = 0; j < L; ++j) {
        const double u = (d_.t(i) - d_.t(j)) / ell_;
        K(i, j) = std::exp(-0.5 * u * u);
      }
    noise_.resize(L);
    for (Eigen::Index i = 0; i < L; ++i) noise_(i) = weighted_ ? s2_ / (w_(i) + 1e-5) : s2_;
    alpha_ = Eigen::MatrixXd::Zero(L, C);
    group_.assign(static_cast<size_t>(C), -1);
    for (Eigen::Index c = d_.time_channel ? 1 : 0; c < C; ++c) {
      int g = -1;
      for (size_t q = 0; q < masks_.size(); ++q)
        if (masks_[q] == d_.m.col(c)) g = static_cast<int>(q);
      if (g < 0) {
        Eigen::MatrixXd A = K;
        for (Eigen::Index i = 0; i < L; ++i) A(i, i) += noise_(i) + 1e6 * (1.0 - d_.m(i, c));
        llt_.emplace_back(A);
        if (llt_.back().info() != Eigen::Success) throw InputError("GP kernel matrix is not positive definite", where);
        masks_.push_back(d_.m.col(c));
        g = static_cast<int>(masks_.size()) - 1;
      }
      group_[static_cast<size_t>(c)] = g;
      alpha_.col(c) = llt_[static_cast<size_t>(g)].solve(d_.x.col(c));
    }
    k_.resize(L);
    out_.resize(C);
    galpha_ = Eigen::MatrixXd::Zero(L, C);
  }
  void value(double t, double* x) const override {
    kvec(t, false);
    out_.noalias() = alpha_.transpose() * k_;
    write(t, x, false);
  }
  void derivative(double t, int side, double* dx) const override {
    kvec(t, true);
    out_.noalias() = alpha_.transpose() * k_;
    write(t, dx, true);
  }
  bool weighted() const override { return weighted_; }
  void backward_value(double t, const double* g) override {
    kvec(t, false);
    galpha_.noalias() += k_ * Eigen::Map<const Eigen::RowVectorXd>(g, channels_);
  }
  void backward_derivative(double t, int side, const double* g) override {
    kvec(t, true);
    galpha_.noalias() += k_ * Eigen::Map<const Eigen::RowVectorXd>(g, channels_);
  }
  Eigen::VectorXd weight_gradient() override {
    if (!weighted_) return {};
    // dL/dA_c = -A_c^-1 G_c alpha_c^T; only the diagonal noise sigma^2/(w+1e-5) depends on w.
    const Eigen::Index L = d_.t.size();
    Eigen::VectorXd gw = Eigen::VectorXd::Zero(L);
    for (Eigen::Index c = d_.time_channel ? 1 : 0; c < alpha_.cols(); ++c) {
      Eigen::VectorXd y = llt_[static_cast<size_t>(group_[static_cast<size_t>(c)])].solve(galpha_.col(c));
      gw += y.cwiseProduct(alpha_.col(c));
    }
    for (Eigen::Index i = 0; i < L; ++i) gw(i) *= s2_ / ((w_(i) + 1e-5) * (w_(i) + 1e-5));
    return gw;
  }

 private:
  void kvec(double t, bool deriv) const {
    const double il2 = 1.0 / (ell_ * ell_);
    for (Eigen::Index i = 0; i < k_.size(); ++i) {
      const double u = t - d_.t(i);
      const double e = std::exp(-0.5 * u * u * il2);
      k_(i) = deriv ? -u * il2 * e : e;
    }
  }
  void write(double t, double* x, bool deriv) const {
    for (int k = 0; k < channels_; ++k) x[k] = out_(k);
    if (d_.time_channel) x[0] = deriv ? 1.0 : t;
  }

  SmoothData d_;
  double ell_, s2_;
  bool weighted_ = false;
  Eigen::VectorXd w_, noise_;
  Eigen::MatrixXd alpha_, galpha_;
  std::vector<Eigen::LLT<Eigen::MatrixXd>> llt_;
  std::vector<Eigen::VectorXd> masks_;
  std::vector<int> group_;
  mutable Eigen::VectorXd k_, out_;
};

}  // namespace

PathKind parse_path_kind(const std::string& s, const std::string& flag) {
  if (s == "cubic") return PathKind::cubic;
  if (s == "linear") return PathKind::linear;
  if (s == "rectilinear") return PathKind::rectilinear;
  if (s == "kernel") return PathKind::kernel;
  if (s == "gp") return PathKind::gp;
  throw UsageError("unknown path '" + s + "' (cubic, linear, rectilinear, kernel, gp)", flag);
}

KernelKind parse_kernel_kind(const std::string& s, const std::string& flag) {
  if (s == "gaussian") return KernelKind::gaussian;
  if (s == "laplacian") return KernelKind::laplacian;
  if (s == "cauchy") return KernelKind::cauchy;
  if (s == "epanechnikov") return KernelKind::epanechnikov;
  if (s == "tricube") return KernelKind::tricube;
  throw UsageError("unknown kernel '" + s + "' (gaussian, laplacian, cauchy, epanechnikov, tricube)", flag);
}

std::string to_string(PathKind k) {
  switch (k) {
    case PathKind::cubic: return "cubic";
    case PathKind::linear: return "linear";
    case PathKind::rectilinear: return "rectilinear";
    case PathKind::kernel: return "kernel";
    case PathKind::gp: return "gp";
  }
  return "?";
}

std::string to_string(KernelKind k) {
  switch (k) {
    case KernelKind::gaussian: return "gaussian";
    case KernelKind::laplacian: return "laplacian";
    case KernelKind::cauchy: return "cauchy";
    case KernelKind::epanechnikov: return "epanechnikov";
    case KernelKind::tricube: return "tricube";
  }
  return "?";
}

double kernel_value(KernelKind k, double u, double b) {
  const double z = u / b;
  switch (k) {
    case KernelKind::gaussian: return std::exp(-0.5 * z * z) / (b * std::sqrt(2.0 * kPi));
    case KernelKind::laplacian: return 0.5 / b * std::exp(-std::fabs(z));
    case KernelKind::cauchy: return 1.0 / (kPi * b * (1.0 + z * z));
    case KernelKind::epanechnikov: return 0.75 / b * std::max(0.0, 1.0 - z * z);
    case KernelKind::tricube: {
      const double a = std::max(0.0, 1.0 - std::pow(std::fabs(z), 3));
      return 70.0 / (81.0 * b) * a * a * a;
    }
  }
  return 0.0;
}

double kernel_derivative(KernelKind k, double u, double b) {
  const double z = u / b;
  switch (k) {
    case KernelKind::gaussian: return -z / b * kernel_value(k, u, b);
    case KernelKind::laplacian: return -0.5 * ((u > 0) - (u < 0)) / (b * b) * std::exp(-std::fabs(z));
    case KernelKind::cauchy: return -2.0 * u / (kPi * b * b * b * (1.0 + z * z) * (1.0 + z * z));
    case KernelKind::epanechnikov: return std::fabs(z) < 1.0 ? -1.5 * u / (b * b * b) : 0.0;
    case KernelKind::tricube: {
      const double az = std::fabs(z);
      if (az >= 1.0) return 0.0;
      const double a = 1.0 - az * az * az;
      // d/du of (70/(81b))(1-|u/b|^3)^3: 630/81 = 70/9.  The reference code has 210/81, a factor 3 short.
      return -(630.0 / (81.0 * b)) * (az * az * ((u > 0) - (u < 0)) / b) * a * a;
    }
  }
  return 0.0;
}

Eigen::MatrixXd fill_linear(const std::vector<double>& t, const Eigen::MatrixXd& x, const std::string& where) {
  Eigen::MatrixXd y = x;
  const Eigen::Index L = x.rows();
  for (Eigen::Index k = 0; k < x.cols(); ++k) {
    Eigen::Index prev = -1;
    for (Eigen::Index i = 0; i < L; ++i) {
      if (!std::isfinite(x(i, k))) continue;
      if (prev < 0) {
        for (Eigen::Index j = 0; j < i; ++j) y(j, k) = x(i, k);
      } else {
        for (Eigen::Index j = prev + 1; j < i; ++j) {
          const double f = (t[j] - t[prev]) / (t[i] - t[prev]);
          y(j, k) = x(prev, k) + f * (x(i, k) - x(prev, k));
        }
      }
      prev = i;
    }
    if (prev < 0) throw InputError("channel " + std::to_string(k) + " has no observed value", where);
    for (Eigen::Index j = prev + 1; j < L; ++j) y(j, k) = x(prev, k);
  }
  return y;
}

Eigen::MatrixXd fill_forward(const Eigen::MatrixXd& x, const std::string& where) {
  Eigen::MatrixXd y = x;
  for (Eigen::Index k = 0; k < x.cols(); ++k) {
    Eigen::Index first = -1;
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      if (std::isfinite(x(i, k))) { first = i; break; }
    if (first < 0) throw InputError("channel " + std::to_string(k) + " has no observed value", where);
    for (Eigen::Index i = 0; i < first; ++i) y(i, k) = x(first, k);
    for (Eigen::Index i = first + 1; i < x.rows(); ++i)
      if (!std::isfinite(x(i, k))) y(i, k) = y(i - 1, k);
  }
  return y;
}

std::unique_ptr<Path> make_path(PathKind kind, const Series& s, const SmoothOptions& opt, const Eigen::VectorXd* weights,
                                const std::string& where) {
  check_times(s.t, s.x.rows(), where);
  if (weights && (kind != PathKind::kernel && kind != PathKind::gp))
    throw UsageError("only kernel and gp paths take observation weights (multi-view models)", where);
  if (weights && weights->size() != s.x.rows()) throw InputError("weights and observations differ in length", where);
  switch (kind) {
    case PathKind::cubic: return std::make_unique<CubicPath>(s.t, fill_linear(s.t, s.x, where));
    case PathKind::linear: return std::make_unique<LinearPath>(s.t, fill_linear(s.t, s.x, where));
    case PathKind::rectilinear: {
      if (!s.time_channel) throw InputError("the rectilinear path needs a time channel", where);
      const Eigen::MatrixXd xf = fill_forward(s.x, where);
      const Eigen::Index L = xf.rows();
      Eigen::MatrixXd p(2 * L - 1, xf.cols());
      std::vector<double> knots(static_cast<size_t>(2 * L - 1));
      for (Eigen::Index i = 0; i < L; ++i) {
        p.row(2 * i) = xf.row(i);
        knots[static_cast<size_t>(2 * i)] = static_cast<double>(2 * i);
        if (i + 1 < L) {
          p.row(2 * i + 1) = xf.row(i);          // time advances first ...
          p(2 * i + 1, 0) = xf(i + 1, 0);        // ... values held
          knots[static_cast<size_t>(2 * i + 1)] = static_cast<double>(2 * i + 1);
        }
      }
      return std::make_unique<LinearPath>(std::move(knots), p);
    }
    case PathKind::kernel:
      if (!(opt.bandwidth > 0)) throw UsageError("kernel bandwidth must be > 0", where);
      return std::make_unique<KernelPath>(s, opt, weights, where);
    case PathKind::gp:
      if (!(opt.length_scale > 0) || !(opt.noise_std >= 0)) throw UsageError("GP length-scale must be > 0 and noise >= 0", where);
      return std::make_unique<GpPath>(s, opt, weights, where);
  }
  throw UsageError("unknown path", where);
}

}  // namespace icmlkit::cde
