#include "fit/mixlaw.hpp"

#include <fmt/core.h>

#include <Eigen/QR>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "util/error.hpp"

namespace icmlkit::fit {

// ---- data ---------------------------------------------------------------------------------

MixData MixData::rows(const std::vector<Eigen::Index>& idx) const {
  MixData o;
  o.domains = domains;
  const Eigen::Index n = static_cast<Eigen::Index>(idx.size()), K = h.cols();
  o.h.resize(n, K);
  o.loss.resize(n, K);
  o.mask.resize(n, K);
  o.params.resize(n);
  o.tokens.resize(n);
  for (Eigen::Index r = 0; r < n; ++r) {
    o.h.row(r) = h.row(idx[static_cast<std::size_t>(r)]);
    o.loss.row(r) = loss.row(idx[static_cast<std::size_t>(r)]);
    o.mask.row(r) = mask.row(idx[static_cast<std::size_t>(r)]);
    o.params[r] = params[idx[static_cast<std::size_t>(r)]];
    o.tokens[r] = tokens[idx[static_cast<std::size_t>(r)]];
  }
  return o;
}

void MixData::set_mask(double min_weight) {
  mask = ((h > min_weight) && loss.isFinite()).cast<double>();
}

// ---- KKT allocation ----------------------------------------------------------------------

Allocation allocate_capacity(const Eigen::ArrayXd& h, const Eigen::ArrayXd& c, const Eigen::ArrayXd& b, double H,
                             double N) {
  const Eigen::Index K = h.size();
  if (!(N > H) || !(H > 0)) throw std::invalid_argument("capacity allocation needs 0 < H < N");
  const double total = N + static_cast<double>(K - 1) * H;
  // x_i(u) = exp((g_i - u) / (b_i + 1)), g_i = ln(h_i b_i c_i); domains with h_i = 0 sit at H.
  Eigen::ArrayXd g(K);
  double u_hi = -std::numeric_limits<double>::infinity(), u_lo = std::numeric_limits<double>::infinity();
  const double lnH = std::log(H), lnT = std::log(total);
  bool any = false;
  for (Eigen::Index i = 0; i < K; ++i) {
    if (h[i] > 0) {
      g[i] = std::log(h[i] * b[i] * c[i]);
      u_hi = std::max(u_hi, g[i] - (b[i] + 1) * lnH);  // every x_i <= H: sum = K H < total
      u_lo = std::min(u_lo, g[i] - (b[i] + 1) * lnT);  // some x_i >= total: sum > total
      any = true;
    } else {
      g[i] = -std::numeric_limits<double>::infinity();
    }
  }
  if (!any) throw std::invalid_argument("capacity allocation needs a positive weight");
  auto excess = [&](double u, double* slope) {
    double s = 0, ds = 0;
    for (Eigen::Index i = 0; i < K; ++i) {
      const double xi = h[i] > 0 ? std::exp((g[i] - u) / (b[i] + 1)) : 0.0;
      if (xi > H) {
        s += xi;
        ds -= xi / (b[i] + 1);
      } else {
        s += H;
      }
    }
    if (slope) *slope = ds;
    return s - total;
  };
  // Safeguarded Newton on the decreasing, convex-in-pieces function excess(u).
  double lo = u_lo, hi = u_hi, u = 0.5 * (lo + hi);
  for (int it = 0; it < 200; ++it) {
    double slope = 0;
    const double e = excess(u, &slope);
    if (e > 0) lo = u;
    else hi = u;
    if (std::abs(e) <= 1e-14 * total || hi - lo <= 1e-15 * std::max(1.0, std::abs(u))) break;
    double next = slope < 0 ? u - e / slope : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    u = next;
  }
  Allocation a;
  a.x.resize(K);
  a.free.resize(K);
  for (Eigen::Index i = 0; i < K; ++i) {
    const double xi = h[i] > 0 ? std::exp((g[i] - u) / (b[i] + 1)) : 0.0;
    a.free[i] = xi > H;
    a.x[i] = a.free[i] ? xi : H;
  }
  a.log_lambda = u;
  return a;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNoiseFloor = 1e-4;  // h_i floor inside the noise term (Dai & Zheng)

// ---- capacity / capacity-noise -------------------------------------------------------------

class CapacityLaw final : public MixLaw {
 public:
  explicit CapacityLaw(bool noise) : noise_(noise) {}
  std::string name() const override { return noise_ ? "capacity-noise" : "capacity"; }
  std::string equation() const override {
    return noise_ ? "L_i = c_i x_i*(h,N)^(-b_i) + A_i (D h_i)^(-a_i) + E_i; x* = argmin sum h_i c_i x_i^(-b_i), "
                    "sum x_i = N + (K-1)H, x_i >= H"
                  : "L_i = c_i x_i*(h,N)^(-b_i) + E_i; x* = argmin sum h_i c_i x_i^(-b_i), sum x_i = N + (K-1)H, x_i >= H";
  }
  std::string source() const override {
    return noise_ ? "Dai & Zheng, Explaining Data Mixing Scaling Laws (ICML 2026), eq. 3"
                  : "Dai & Zheng, Explaining Data Mixing Scaling Laws (ICML 2026), eq. 1";
  }
  int groups() const { return noise_ ? 5 : 3; }
  std::vector<std::string> param_names(const std::vector<std::string>& dom) const override {
    std::vector<std::string> n;
    const std::vector<std::string> g = noise_ ? std::vector<std::string>{"c", "b", "a", "E", "A"}
                                              : std::vector<std::string>{"c", "b", "E"};
    for (const auto& p : g)
      for (const auto& d : dom) n.push_back(p + "[" + d + "]");
    n.push_back("H");
    return n;
  }
  void bounds(int K, Eigen::VectorXd& lo, Eigen::VectorXd& hi) const override {
    // The reference fit's boxes (fitting_17domains_eq3 / law2init): c in [0, 20], b and a in
    // [0.01, 0.8], E in [0, 5], A in [0, 500]; H > 0 (and < N, checked per row).
    const int P = groups() * K + 1;
    lo.resize(P);
    hi.resize(P);
    auto set = [&](int grp, double l, double u) {
      lo.segment(grp * K, K).setConstant(l);
      hi.segment(grp * K, K).setConstant(u);
    };
    set(0, 0.0, 20.0);
    set(1, 0.01, 0.8);
    if (noise_) {
      set(2, 0.01, 0.8);
      set(3, 0.0, 5.0);
      set(4, 0.0, 500.0);
    } else {
      set(2, 0.0, 5.0);
    }
    lo[P - 1] = 0.0;
    hi[P - 1] = kInf;
  }

  struct View {
    Eigen::Map<const Eigen::ArrayXd> c, b, a, E, A;
    double H;
  };
  View view(const double* p, Eigen::Index K) const {
    if (noise_)
      return {Eigen::Map<const Eigen::ArrayXd>(p, K), Eigen::Map<const Eigen::ArrayXd>(p + K, K),
              Eigen::Map<const Eigen::ArrayXd>(p + 2 * K, K), Eigen::Map<const Eigen::ArrayXd>(p + 3 * K, K),
              Eigen::Map<const Eigen::ArrayXd>(p + 4 * K, K), p[5 * K]};
    return {Eigen::Map<const Eigen::ArrayXd>(p, K), Eigen::Map<const Eigen::ArrayXd>(p + K, K),
            Eigen::Map<const Eigen::ArrayXd>(p, 0), Eigen::Map<const Eigen::ArrayXd>(p + 2 * K, K),
            Eigen::Map<const Eigen::ArrayXd>(p, 0), p[3 * K]};
  }
  bool valid(const View& v, const MixData& d) const {
    if (!(v.H > 0) || !(v.c > 0).all() || !(v.b > 0).all()) return false;
    if (noise_ && !(v.a > 0).all()) return false;
    return (d.params > v.H).all();
  }

  // Per-row loss and (optionally) the row's gradient contributions; `w` [K] multiplies dL_i.
  void row(const View& v, const Eigen::ArrayXd& h, double N, double D, Allocation& al, Eigen::ArrayXd& L,
           const Eigen::ArrayXd* w, double* grad, Eigen::Index K) const {
    al = allocate_capacity(h, v.c, v.b, v.H, N);
    L.resize(K);
    for (Eigen::Index i = 0; i < K; ++i) {
      L[i] = v.c[i] * std::pow(al.x[i], -v.b[i]) + v.E[i];
      if (noise_) L[i] += v.A[i] * std::pow(D * std::max(h[i], kNoiseFloor), -v.a[i]);
    }
    if (!w || !grad) return;
    const int gE = noise_ ? 3 : 2;
    double S = 0, W = 0;
    int nfree = 0;
    Eigen::ArrayXd s(K), u(K);
    for (Eigen::Index i = 0; i < K; ++i) {
      const double xb = std::pow(al.x[i], -v.b[i]);
      const double wi = (*w)[i];
      // explicit partials
      grad[i] += wi * xb;                                       // c_i
      grad[K + i] += wi * (-v.c[i] * xb * std::log(al.x[i]));   // b_i
      grad[gE * K + i] += wi;                                   // E_i
      if (noise_) {
        const double base = D * std::max(h[i], kNoiseFloor);
        const double pw = std::pow(base, -v.a[i]);
        grad[2 * K + i] += wi * (-v.A[i] * pw * std::log(base));  // a_i
        grad[4 * K + i] += wi * pw;                                // A_i
      }
      u[i] = wi * (-v.b[i] * v.c[i] * xb / al.x[i]);  // coefficient of dx_i
      s[i] = al.free[i] ? al.x[i] / (v.b[i] + 1) : 0.0;
      if (al.free[i]) {
        S += s[i];
        W += u[i] * s[i];
        ++nfree;
      }
    }
    // Implicit differentiation of the active-set KKT solution (see mixlaw.hpp).
    double gH = 0;
    for (Eigen::Index i = 0; i < K; ++i) {
      if (al.free[i]) {
        const double shift = u[i] - W / S;
        grad[i] += (s[i] / v.c[i]) * shift;                                       // via c_i
        grad[K + i] += al.x[i] * (1 / v.b[i] - std::log(al.x[i])) / (v.b[i] + 1) * shift;  // via b_i
      } else {
        gH += u[i];
      }
    }
    gH += W * (nfree - 1) / S;
    grad[groups() * K] += gH;
  }

  bool predict(const double* p, const MixData& d, Eigen::ArrayXXd& out) const override {
    const Eigen::Index K = d.h.cols(), n = d.h.rows();
    const View v = view(p, K);
    if (!valid(v, d)) return false;
    out.resize(n, K);
    Allocation al;
    Eigen::ArrayXd L;
    for (Eigen::Index r = 0; r < n; ++r) {
      row(v, d.h.row(r).transpose(), d.params[r], d.tokens[r], al, L, nullptr, nullptr, K);
      out.row(r) = L.transpose();
    }
    return out.allFinite();
  }

  bool objective(const double* p, const MixData& d, double* f, double* grad) const override {
    const Eigen::Index K = d.h.cols(), n = d.h.rows();
    const View v = view(p, K);
    if (!valid(v, d)) return false;
    const int P = groups() * static_cast<int>(K) + 1;
    if (grad) std::fill(grad, grad + P, 0.0);
    double total = 0;
    Allocation al;
    Eigen::ArrayXd L, w(K);
    for (Eigen::Index r = 0; r < n; ++r) {
      const Eigen::ArrayXd h = d.h.row(r).transpose();
      row(v, h, d.params[r], d.tokens[r], al, L, nullptr, nullptr, K);
      for (Eigen::Index i = 0; i < K; ++i) {
        const double res = d.mask(r, i) > 0 ? L[i] - d.loss(r, i) : 0.0;
        total += res * res;
        w[i] = 2 * res / static_cast<double>(n);
      }
      if (grad) row(v, h, d.params[r], d.tokens[r], al, L, &w, grad, K);
    }
    *f = total / static_cast<double>(n);
    return std::isfinite(*f);
  }

  Eigen::VectorXd initial(const MixData& d) const override {
    const Eigen::Index K = d.h.cols();
    Eigen::VectorXd p(groups() * K + 1);
    // Mid-box values; E starts at half the mean observed loss so the capacity term has room.
    double mean_loss = 0;
    int cnt = 0;
    for (Eigen::Index r = 0; r < d.loss.rows(); ++r)
      for (Eigen::Index i = 0; i < K; ++i)
        if (d.mask(r, i) > 0) { mean_loss += d.loss(r, i); ++cnt; }
    mean_loss = cnt ? mean_loss / cnt : 2.0;
    p.segment(0, K).setConstant(1.0);
    p.segment(K, K).setConstant(0.2);
    if (noise_) {
      p.segment(2 * K, K).setConstant(0.3);
      p.segment(3 * K, K).setConstant(std::min(4.0, 0.5 * mean_loss));
      p.segment(4 * K, K).setConstant(0.5);
    } else {
      p.segment(2 * K, K).setConstant(std::min(4.0, 0.5 * mean_loss));
    }
    p[groups() * K] = std::min(0.3, 0.1 * d.params.minCoeff() / static_cast<double>(K));
    return p;
  }

  double weighted_loss_grad(const double* p, const Eigen::ArrayXd& h, double N, double D, const Eigen::ArrayXd& v,
                            Eigen::ArrayXd* grad_h) const override {
    const Eigen::Index K = h.size();
    const View w = view(p, K);
    if (!(w.H > 0 && N > w.H && (w.c > 0).all() && (w.b > 0).all() && (!noise_ || (w.a > 0).all())))
      return std::numeric_limits<double>::quiet_NaN();  // outside the law's domain
    const Allocation al = allocate_capacity(h, w.c, w.b, w.H, N);
    double total = 0, S = 0, W = 0;
    Eigen::ArrayXd s(K), u(K);
    if (grad_h) grad_h->setZero(K);
    for (Eigen::Index i = 0; i < K; ++i) {
      const double xb = std::pow(al.x[i], -w.b[i]);
      double Li = w.c[i] * xb + w.E[i];
      if (noise_) {
        const double base = D * std::max(h[i], kNoiseFloor);
        const double pw = std::pow(base, -w.a[i]);
        Li += w.A[i] * pw;
        if (grad_h && h[i] > kNoiseFloor) (*grad_h)[i] += v[i] * (-w.a[i] * w.A[i] * pw / h[i]);
      }
      total += v[i] * Li;
      u[i] = v[i] * (-w.b[i] * w.c[i] * xb / al.x[i]);
      s[i] = al.free[i] ? al.x[i] / (w.b[i] + 1) : 0.0;
      if (al.free[i]) { S += s[i]; W += u[i] * s[i]; }
    }
    if (grad_h)
      for (Eigen::Index j = 0; j < K; ++j)
        if (al.free[j] && h[j] > 0) (*grad_h)[j] += (s[j] / h[j]) * (u[j] - W / S);
    return total;
  }

 private:
  bool noise_;
};

// ---- exponential (Ye et al.) ---------------------------------------------------------------

class ExponentialLaw final : public MixLaw {
 public:
  std::string name() const override { return "exponential"; }
  bool uses_scale() const override { return false; }
  std::string equation() const override { return "L_i = c_i + k_i exp(sum_j t_ij h_j)"; }
  std::string source() const override { return "Ye et al., Data Mixing Laws (ICLR 2025), eq. 6 (multi-domain form)"; }
  int block_size(int K) const override { return K + 2; }
  std::vector<std::string> param_names(const std::vector<std::string>& dom) const override {
    std::vector<std::string> n;
    for (const auto& i : dom) {
      n.push_back("c[" + i + "]");
      n.push_back("k[" + i + "]");
      for (const auto& j : dom) n.push_back("t[" + i + "][" + j + "]");
    }
    return n;
  }
  void bounds(int K, Eigen::VectorXd& lo, Eigen::VectorXd& hi) const override {
    // c, k > 0 (Ye et al. fit log c, log k); t free.
    lo = Eigen::VectorXd::Constant(K * (K + 2), -kInf);
    hi = Eigen::VectorXd::Constant(K * (K + 2), kInf);
    for (int i = 0; i < K; ++i) lo[i * (K + 2)] = lo[i * (K + 2) + 1] = 0.0;
  }
  bool predict(const double* p, const MixData& d, Eigen::ArrayXXd& out) const override {
    const Eigen::Index K = d.h.cols();
    out.resize(d.h.rows(), K);
    for (Eigen::Index i = 0; i < K; ++i) {
      const double* q = p + i * (K + 2);
      const Eigen::Map<const Eigen::VectorXd> t(q + 2, K);
      out.col(i) = q[0] + q[1] * (d.h.matrix() * t).array().exp();
    }
    return out.allFinite();
  }
  bool objective(const double* p, const MixData& d, double* f, double* grad) const override {
    const Eigen::Index K = d.h.cols(), n = d.h.rows();
    double total = 0;
    if (grad) std::fill(grad, grad + K * (K + 2), 0.0);
    for (Eigen::Index i = 0; i < K; ++i) {
      const double* q = p + i * (K + 2);
      const Eigen::Map<const Eigen::VectorXd> t(q + 2, K);
      const Eigen::ArrayXd ex = (d.h.matrix() * t).array().exp();
      // Unmasked entries (possibly NaN losses) contribute exactly zero.
      const Eigen::ArrayXd clean = (d.mask.col(i) > 0).select(q[0] + q[1] * ex - d.loss.col(i), 0.0);
      total += clean.square().sum();
      if (grad) {
        const Eigen::ArrayXd w = 2 * clean / static_cast<double>(n);
        double* g = grad + i * (K + 2);
        g[0] = w.sum();
        g[1] = (w * ex).sum();
        const Eigen::VectorXd gt = d.h.matrix().transpose() * (w * q[1] * ex).matrix();
        for (Eigen::Index j = 0; j < K; ++j) g[2 + j] = gt[j];
      }
    }
    *f = total / static_cast<double>(n);
    return std::isfinite(*f);
  }
  Eigen::VectorXd initial(const MixData& d) const override {
    const Eigen::Index K = d.h.cols();
    Eigen::VectorXd p = Eigen::VectorXd::Zero(K * (K + 2));
    for (Eigen::Index i = 0; i < K; ++i) {
      double m = 0;
      int cnt = 0;
      for (Eigen::Index r = 0; r < d.loss.rows(); ++r)
        if (d.mask(r, i) > 0) { m += d.loss(r, i); ++cnt; }
      m = cnt ? m / cnt : 2.0;
      p[i * (K + 2)] = 0.5 * m;
      p[i * (K + 2) + 1] = 0.5 * m;
      p[i * (K + 2) + 2 + i] = -0.5;  // own domain lowers its loss
    }
    return p;
  }
  double weighted_loss_grad(const double* p, const Eigen::ArrayXd& h, double, double, const Eigen::ArrayXd& v,
                            Eigen::ArrayXd* grad_h) const override {
    const Eigen::Index K = h.size();
    double total = 0;
    if (grad_h) grad_h->setZero(K);
    for (Eigen::Index i = 0; i < K; ++i) {
      const double* q = p + i * (K + 2);
      const Eigen::Map<const Eigen::ArrayXd> t(q + 2, K);
      const double ex = std::exp((t * h).sum());
      total += v[i] * (q[0] + q[1] * ex);
      if (grad_h) *grad_h += v[i] * q[1] * ex * t;
    }
    return total;
  }
};

// ---- linear (RegMix-style) -----------------------------------------------------------------

class LinearLaw final : public MixLaw {
 public:
  std::string name() const override { return "linear"; }
  bool uses_scale() const override { return false; }
  std::string equation() const override { return "L_i = sum_j beta_ij h_j (least squares; weights sum to 1, so no intercept)"; }
  std::string source() const override { return "RegMix (Liu et al., ICLR 2025), linear-regression variant"; }
  int block_size(int K) const override { return K; }
  std::vector<std::string> param_names(const std::vector<std::string>& dom) const override {
    std::vector<std::string> n;
    for (const auto& i : dom)
      for (const auto& j : dom) n.push_back("beta[" + i + "][" + j + "]");
    return n;
  }
  void bounds(int K, Eigen::VectorXd& lo, Eigen::VectorXd& hi) const override {
    lo = Eigen::VectorXd::Constant(K * K, -kInf);
    hi = Eigen::VectorXd::Constant(K * K, kInf);
  }
  bool predict(const double* p, const MixData& d, Eigen::ArrayXXd& out) const override {
    const Eigen::Index K = d.h.cols();
    const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> B(p, K, K);
    out = (d.h.matrix() * B.transpose()).array();
    return out.allFinite();
  }
  bool objective(const double* p, const MixData& d, double* f, double* grad) const override {
    const Eigen::Index K = d.h.cols(), n = d.h.rows();
    Eigen::ArrayXXd pred;
    predict(p, d, pred);
    const Eigen::ArrayXXd res = (d.mask > 0).select(pred - d.loss, 0.0);
    *f = res.square().sum() / static_cast<double>(n);
    if (grad) {
      const Eigen::MatrixXd G = 2.0 / static_cast<double>(n) * res.matrix().transpose() * d.h.matrix();  // [K, K]
      for (Eigen::Index i = 0; i < K; ++i)
        for (Eigen::Index j = 0; j < K; ++j) grad[i * K + j] = G(i, j);
    }
    return std::isfinite(*f);
  }
  Eigen::VectorXd initial(const MixData& d) const override {
    // The exact least-squares solution per domain (minimum-norm where rank-deficient).
    const Eigen::Index K = d.h.cols();
    Eigen::VectorXd p(K * K);
    for (Eigen::Index i = 0; i < K; ++i) {
      std::vector<Eigen::Index> rows;
      for (Eigen::Index r = 0; r < d.h.rows(); ++r)
        if (d.mask(r, i) > 0) rows.push_back(r);
      Eigen::MatrixXd X(static_cast<Eigen::Index>(rows.size()), K);
      Eigen::VectorXd y(static_cast<Eigen::Index>(rows.size()));
      for (std::size_t k = 0; k < rows.size(); ++k) {
        X.row(static_cast<Eigen::Index>(k)) = d.h.row(rows[k]).matrix();
        y[static_cast<Eigen::Index>(k)] = d.loss(rows[k], i);
      }
      Eigen::VectorXd beta = rows.empty() ? Eigen::VectorXd::Zero(K)
                                          : Eigen::VectorXd(X.completeOrthogonalDecomposition().solve(y));
      p.segment(i * K, K) = beta;
    }
    return p;
  }
  double weighted_loss_grad(const double* p, const Eigen::ArrayXd& h, double, double, const Eigen::ArrayXd& v,
                            Eigen::ArrayXd* grad_h) const override {
    const Eigen::Index K = h.size();
    const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> B(p, K, K);
    const Eigen::VectorXd g = B.transpose() * v.matrix();
    if (grad_h) *grad_h = g.array();
    return (g.array() * h).sum();
  }
};

}  // namespace

std::vector<std::string> mixlaw_names() { return {"capacity-noise", "capacity", "exponential", "linear"}; }

std::unique_ptr<MixLaw> make_mixlaw(const std::string& name) {
  if (name == "capacity-noise") return std::make_unique<CapacityLaw>(true);
  if (name == "capacity") return std::make_unique<CapacityLaw>(false);
  if (name == "exponential") return std::make_unique<ExponentialLaw>();
  if (name == "linear") return std::make_unique<LinearLaw>();
  throw UsageError(fmt::format("unknown law '{}' (known: capacity-noise, capacity, exponential, linear)", name), "--law");
}

}  // namespace icmlkit::fit
