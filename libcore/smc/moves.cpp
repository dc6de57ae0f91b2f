#include "smc/moves.hpp"

#include <array>
#include <cmath>
#include <cstdint>

#include "smc/simd.hpp"

namespace icmlkit::smc {
namespace {
Eigen::VectorXd gaussian(Eigen::Index n, Rng& rng) {
  Eigen::VectorXd z(n);
  for (Eigen::Index i = 0; i < n; ++i) z[i] = rng.normal();
  return z;
}
// log q(to | from) of the Langevin proposal, up to the constant.
double log_q(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& from, const Eigen::VectorXd& to,
             double gamma) {
  const Eigen::VectorXd mean = from - gamma * p.grad_x(theta, from);
  return -(to - mean).squaredNorm() / (4 * gamma);
}
}  // namespace

void fill_normals(Rng& rng, double* out, Eigen::Index n) {
  // Candidate pairs (v1, v2) uniform on [-1, 1)^2 (32 bits each from one 64-bit draw), kept
  // when 0 < s = v1^2 + v2^2 < 1 (rate pi/4); then v * sqrt(-2 log s / s) are two independent
  // N(0, 1) draws.  The factors of a batch of candidates are computed at once (SIMD).
  constexpr int K = 128;
  std::array<double, K> v1, v2, s, f;
  Eigen::Index filled = 0;
  while (filled < n) {
    for (int k = 0; k < K; ++k) {
      const std::uint64_t b = rng.bits();
      v1[k] = static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(b >> 32))) * 0x1.0p-31;
      v2[k] = static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(b))) * 0x1.0p-31;
      s[k] = v1[k] * v1[k] + v2[k] * v2[k];
    }
    polar_factors(s.data(), f.data(), K);
    for (int k = 0; k < K && filled < n; ++k) {
      if (!(s[k] < 1 && s[k] > 0)) continue;
      const double r = std::sqrt(f[k]);
      out[filled++] = v1[k] * r;
      if (filled < n) out[filled++] = v2[k] * r;
    }
  }
}

double ula_a(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& u, const Eigen::VectorXd& v,
             double gamma) {
  Eigen::VectorXd g;
  const double e = p.energy_grad_x(theta, u, g);
  return ula_a(e, g, u, v, gamma);
}

Eigen::VectorXd ula_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         Rng& rng) {
  return x - gamma * p.grad_x(theta, x) + std::sqrt(2 * gamma) * gaussian(x.size(), rng);
}

Eigen::VectorXd mala_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                          Rng& rng, bool* accepted) {
  const Eigen::VectorXd y = ula_step(p, theta, x, gamma, rng);
  const double log_ratio = -p.energy(theta, y) + p.energy(theta, x) + log_q(p, theta, y, x, gamma) -
                           log_q(p, theta, x, y, gamma);
  const bool ok = std::log(rng.uniform() + 1e-300) < log_ratio;
  if (accepted) *accepted = ok;
  return ok ? y : x;
}

Eigen::VectorXd rwm_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         Rng& rng, bool* accepted) {
  const Eigen::VectorXd y = x + std::sqrt(2 * gamma) * gaussian(x.size(), rng);
  const bool ok = std::log(rng.uniform() + 1e-300) < p.energy(theta, x) - p.energy(theta, y);
  if (accepted) *accepted = ok;
  return ok ? y : x;
}

Eigen::VectorXd hmc_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         int leapfrog, Rng& rng, bool* accepted) {
  const double eps = std::sqrt(gamma);
  Eigen::VectorXd q = x, m = gaussian(x.size(), rng);
  const double h0 = p.energy(theta, x) + 0.5 * m.squaredNorm();
  m -= 0.5 * eps * p.grad_x(theta, q);
  for (int l = 0; l < leapfrog; ++l) {
    q += eps * m;
    if (l + 1 < leapfrog) m -= eps * p.grad_x(theta, q);
  }
  m -= 0.5 * eps * p.grad_x(theta, q);
  const double h1 = p.energy(theta, q) + 0.5 * m.squaredNorm();
  const bool ok = std::isfinite(h1) && std::log(rng.uniform() + 1e-300) < h0 - h1;
  if (accepted) *accepted = ok;
  return ok ? q : x;
}

double ula_increment(const Problem& p, const Eigen::VectorXd& theta_k, const Eigen::VectorXd& theta_next,
                     const Eigen::VectorXd& x, const Eigen::VectorXd& x_new, double gamma) {
  return ula_a(p, theta_k, x, x_new, gamma) - ula_a(p, theta_next, x_new, x, gamma);
}

double invariant_increment(const Problem& p, const Eigen::VectorXd& theta_k, const Eigen::VectorXd& theta_next,
                           const Eigen::VectorXd& x) {
  return -(p.energy(theta_next, x) - p.energy(theta_k, x));
}

}  // namespace icmlkit::smc
