#include "fit/law.hpp"

#include <fmt/core.h>

#include <cmath>

#include "util/error.hpp"

namespace icmlkit::fit {
namespace {

std::vector<double> range(double lo, double hi, double step) {
  std::vector<double> v;
  for (int i = 0;; ++i) {
    const double x = lo + step * i;
    if (x > hi + 1e-9 * std::abs(step)) break;
    v.push_back(x);
  }
  return v;
}

// log(exp(t1) + exp(t2) + exp(t3)) and the softmax weights.
inline double lse3(double t1, double t2, double t3, double& w1, double& w2, double& w3) {
  const double m = std::max(t1, std::max(t2, t3));
  const double e1 = std::exp(t1 - m), e2 = std::exp(t2 - m), e3 = std::exp(t3 - m);
  const double s = e1 + e2 + e3;
  w1 = e1 / s;
  w2 = e2 / s;
  w3 = e3 / s;
  return m + std::log(s);
}

// ln x of the inputs: the cached copy, or a per-thread buffer computed now.
const Eigen::ArrayXXd& input_logs(const LawData& d) {
  if (d.log_x.rows() == d.x.rows() && d.log_x.cols() == d.x.cols()) return d.log_x;
  thread_local Eigen::ArrayXXd tmp;
  tmp = d.x.log();
  return tmp;
}

}  // namespace

// ---- shared -------------------------------------------------------------------------

nlohmann::json Law::to_json(const double* p) const {
  nlohmann::json j = nlohmann::json::object();
  const auto names = param_names();
  for (std::size_t i = 0; i < names.size(); ++i) j[names[i]] = p[i];
  for (const char* k : {"a", "b", "e"})
    if (j.contains(k)) j[std::string(1, static_cast<char>(std::toupper(k[0])))] = std::exp(j[k].get<double>());
  return j;
}

Eigen::VectorXd Law::from_json(const nlohmann::json& j, const std::string& where) const {
  const auto names = param_names();
  Eigen::VectorXd p(static_cast<Eigen::Index>(names.size()));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const std::string natural = (n == "a" || n == "b" || n == "e") ? std::string(1, static_cast<char>(std::toupper(n[0]))) : "";
    if (j.contains(n) && j[n].is_number()) {
      p[static_cast<Eigen::Index>(i)] = j[n].get<double>();
    } else if (!natural.empty() && j.contains(natural) && j[natural].is_number()) {
      const double v = j[natural].get<double>();
      if (!(v > 0)) throw InputError(fmt::format("parameter {} must be > 0", natural), where);
      p[static_cast<Eigen::Index>(i)] = std::log(v);
    } else {
      throw InputError(fmt::format("missing numeric parameter '{}'{}", n, natural.empty() ? "" : " (or '" + natural + "')"), where);
    }
    if (!std::isfinite(p[static_cast<Eigen::Index>(i)]))
      throw InputError(fmt::format("parameter '{}' is not finite", n), where);
  }
  return p;
}

std::vector<std::string> law_names() { return {"chinchilla", "data-constrained", "infolaw"}; }  // infolaw: see infolaw.hpp

std::unique_ptr<Law> make_law(const std::string& name) {
  if (name == "chinchilla") return std::make_unique<ChinchillaLaw>();
  if (name == "data-constrained") return std::make_unique<DataConstrainedLaw>();
  throw UsageError(fmt::format("unknown law '{}' (known: chinchilla, data-constrained, infolaw)", name), "--law");
}

ComputeOptimum compute_optimal(double A, double B, double E, double alpha, double beta, double flops) {
  if (!(flops > 0)) throw InputError("compute budget must be > 0 FLOPs", "--compute");
  const double G = std::pow(alpha * A / (beta * B), 1.0 / (alpha + beta));
  const double nd = flops / 6.0;
  ComputeOptimum o;
  o.flops = flops;
  o.params = G * std::pow(nd, beta / (alpha + beta));
  o.tokens = nd / o.params;
  o.loss = E + A / std::pow(o.params, alpha) + B / std::pow(o.tokens, beta);
  return o;
}

// ---- Chinchilla -----------------------------------------------------------------------

std::vector<GridAxis> ChinchillaLaw::default_grid() const {
  // Epoch AI replication of approach 3: 6 x 6 x 5 x 5 x 5 = 4,500 starts.
  return {{"a", range(0, 25, 5)}, {"b", range(0, 25, 5)}, {"e", range(-1, 1, 0.5)},
          {"alpha", range(0, 2, 0.5)}, {"beta", range(0, 2, 0.5)}};
}

Eigen::ArrayXd ChinchillaLaw::predict(const double* p, const LawData& d) const {
  const double A = std::exp(p[0]), B = std::exp(p[1]), E = std::exp(p[2]);
  return E + A / d.x.col(0).pow(p[3]) + B / d.x.col(1).pow(p[4]);
}

bool ChinchillaLaw::log_predict(const double* p, const LawData& d, Eigen::ArrayXd& out, Eigen::ArrayXXd* jac) const {
  // The hot loop of the 4,500-start fit: vectorised over rows (Eigen packet exp/log), no
  // allocation once the per-thread buffers have their size.
  const Eigen::Index n = d.x.rows();
  const double a = p[0], b = p[1], e = p[2], alpha = p[3], beta = p[4];
  const Eigen::ArrayXXd& lx = input_logs(d);
  thread_local Eigen::ArrayXd t1, t2, m, e1, e2, e3, s;
  t1 = a - alpha * lx.col(0);
  t2 = b - beta * lx.col(1);
  m = t1.max(t2).max(e);
  e1 = (t1 - m).exp();
  e2 = (t2 - m).exp();
  e3 = (e - m).exp();
  s = e1 + e2 + e3;
  out = m + s.log();
  if (jac) {
    jac->resize(n, 5);
    s = s.inverse();
    jac->col(0) = e1 * s;
    jac->col(1) = e2 * s;
    jac->col(2) = e3 * s;
    jac->col(3) = -jac->col(0) * lx.col(0);
    jac->col(4) = -jac->col(1) * lx.col(1);
  }
  return true;
}

// ---- data-constrained -----------------------------------------------------------------

std::vector<GridAxis> DataConstrainedLaw::default_grid() const {
  // Base parameters: a coarser cut of the Chinchilla grid (alpha, beta > 0 because G needs
  // them).  R_D*, R_N*: Muennighoff et al.'s linspace(0, 20, 4) without 0, which is outside
  // the domain (their starts at 0 give NaN and are discarded).  On the 182 datablations runs
  // with the published base fixed this lands on R_D* = 15.37, R_N* = 5.315; starts near
  // R_N* = 0 reach a lower basin (R_D* ~ 47, R_N* ~ 2.3, objective 0.015807 < 0.015826).
  const std::vector<double> r_star = {20.0 / 3, 40.0 / 3, 20};
  return {{"a", range(0, 25, 5)},      {"b", range(0, 25, 5)},  {"e", {-1, 0, 1}},
          {"alpha", {0.25, 0.5, 1.0}}, {"beta", {0.25, 0.5, 1.0}},
          {"rd_star", r_star},         {"rn_star", r_star}};
}

Eigen::ArrayXd DataConstrainedLaw::predict(const double* p, const LawData& d) const {
  // Written in the same operation order as the reference implementation's scaling_law(),
  // so published predictions reproduce to the last bits.
  const double a = p[0], b = p[1], e = p[2], alpha = p[3], beta = p[4], rd = p[5], rn = p[6];
  const double A = std::exp(a), B = std::exp(b), E = std::exp(e);
  const double G = std::pow((alpha * A) / (beta * B), 1 / (alpha + beta));
  Eigen::ArrayXd out(d.x.rows());
  for (Eigen::Index i = 0; i < d.x.rows(); ++i) {
    const double N = d.x(i, 0), D = d.x(i, 1), U = d.x(i, 2);
    const double RD = std::max((D / U) - 1, 0.0);
    const double UN = std::min(N, std::pow(U * G, beta / alpha) * G);
    const double RN = std::max((N / UN) - 1, 0.0);
    out[i] = E + A / std::pow(UN + UN * rn * (1 - std::exp(-1 * RN / rn)), alpha) +
             B / std::pow(U + U * rd * (1 - std::exp(-1 * RD / rd)), beta);
  }
  return out;
}

bool DataConstrainedLaw::log_predict(const double* p, const LawData& d, Eigen::ArrayXd& out,
                                     Eigen::ArrayXXd* jac) const {
  const double a = p[0], b = p[1], e = p[2], alpha = p[3], beta = p[4], rd = p[5], rn = p[6];
  if (!(alpha > 0 && beta > 0 && rd > 0 && rn > 0)) return false;
  const Eigen::Index n = d.x.rows();
  out.resize(n);
  if (jac) jac->resize(n, 7);
  // log N_opt(U) = (log alpha + a - log beta - b)/alpha + (beta/alpha) log U, and its gradient.
  const double c = std::log(alpha) + a - std::log(beta) - b;
  const double g_a = 1 / alpha, g_b = -1 / alpha;
  const Eigen::ArrayXXd& lx = input_logs(d);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double N = d.x(i, 0), D = d.x(i, 1), U = d.x(i, 2);
    const double ln_u = lx(i, 2);
    const double ln_nopt = c / alpha + (beta / alpha) * ln_u;
    const bool binding = ln_nopt < lx(i, 0);  // U_N = N_opt < N
    const double UN = binding ? std::exp(ln_nopt) : N;
    const double RN = std::max(N / UN - 1, 0.0);
    const double en = std::exp(-RN / rn);
    const double Np = UN * (1 + rn * (1 - en));
    const double RD = std::max(D / U - 1, 0.0);
    const double ed = std::exp(-RD / rd);
    const double Dp = U * (1 + rd * (1 - ed));
    const double ln_np = std::log(Np), ln_dp = std::log(Dp);
    double w1, w2, w3;
    out[i] = lse3(a - alpha * ln_np, b - beta * ln_dp, e, w1, w2, w3);
    if (!jac) continue;
    // s = d log N' / d log U_N (zero when U_N = N does not depend on the parameters).
    const double s = binding ? (1 + rn * (1 - en) - en * (RN + 1)) * UN / Np : 0.0;
    const double g_alpha = (1 - c - beta * ln_u) / (alpha * alpha);
    const double g_beta = (-1 / beta + ln_u) / alpha;
    (*jac)(i, 0) = w1 * (1 - alpha * s * g_a);
    (*jac)(i, 1) = w2 - w1 * alpha * s * g_b;
    (*jac)(i, 2) = w3;
    (*jac)(i, 3) = w1 * (-ln_np - alpha * s * g_alpha);
    (*jac)(i, 4) = -w2 * ln_dp - w1 * alpha * s * g_beta;
    (*jac)(i, 5) = -w2 * beta * U * ((1 - ed) - ed * RD / rd) / Dp;
    (*jac)(i, 6) = -w1 * alpha * UN * ((1 - en) - en * RN / rn) / Np;
  }
  return true;
}

}  // namespace icmlkit::fit
