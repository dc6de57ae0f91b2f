#include "smc/moves.hpp"

#include <algorithm>
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

void NormalStream::fill(double* out, Eigen::Index n) {
  // Batches of K candidates; accepted pairs are packed branch-free (every pair is written at
  // the fill position, which only advances on acceptance).
  constexpr Eigen::Index K = 256;
  alignas(64) std::array<double, K> v1, v2, f, acc;
  std::array<double, 2 * K + 2> buf;
  Eigen::Index filled = 0;
  while (filled < n) {
    polar_candidates(key_, counter_, K, v1.data(), v2.data(), f.data(), acc.data());
    counter_ += K;
    Eigen::Index m = 0;
    for (std::size_t k = 0; k < static_cast<std::size_t>(K); ++k) {
      const double r = f[k];
      buf[static_cast<std::size_t>(m)] = v1[k] * r;
      buf[static_cast<std::size_t>(m) + 1] = v2[k] * r;
      m += 2 * static_cast<Eigen::Index>(acc[k]);
    }
    const Eigen::Index take = std::min(m, n - filled);
    std::copy(buf.begin(), buf.begin() + take, out + filled);
    filled += take;
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
