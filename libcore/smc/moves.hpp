// Particle moves and the SMC-sampler weight increments that go with them.
#pragma once

#include <Eigen/Core>

#include <cstdint>

#include "smc/problem.hpp"
#include "util/rng.hpp"

namespace icmlkit::smc {

/// A seeded stream of standard normal draws for the hot loops: Marsaglia's polar method over
/// the SplitMix64 sequence started at `key` (smc/simd.hpp polar_candidates; both values of an
/// accepted pair used, in order; a batch's candidates computed at once, SIMD).  Reproducible per
/// key on every platform up to rounding of the last bits (the accept decisions are exact);
/// distinct keys give independent streams.  Not the stream of Rng::normal().
class NormalStream {
 public:
  /// The stream of `key` from its start.
  explicit NormalStream(std::uint64_t key) : key_(key) {}
  /// Writes the next n draws to out[0 .. n).  Draws left over from the last batch of
  /// candidates are dropped, so the values depend on how the stream is split into calls.
  void fill(double* out, Eigen::Index n);

 private:
  std::uint64_t key_, counter_ = 0;
};

/// a(u, v; U) = U(u) + (v - u) . grad U(u) / 2 + (gamma / 4) |grad U(u)|^2, the ULA log-kernel
/// term whose difference gives the SMC-sampler increment with ULA as forward and backward
/// kernel (the |v - u|^2 terms cancel).
double ula_a(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& u, const Eigen::VectorXd& v,
             double gamma);

/// The same a(u, v; U) from U(u) = `energy_u` and grad U(u) = `grad_u` already computed.
inline double ula_a(double energy_u, const Eigen::VectorXd& grad_u, const Eigen::VectorXd& u, const Eigen::VectorXd& v,
                    double gamma) {
  return energy_u + 0.5 * (v - u).dot(grad_u) + 0.25 * gamma * grad_u.squaredNorm();
}

/// One unadjusted Langevin step x' = x - gamma grad_x U_theta(x) + sqrt(2 gamma) xi.
Eigen::VectorXd ula_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         Rng& rng);

/// One Metropolis-adjusted Langevin step (invariant for pi_theta); `accepted` reports the
/// outcome.
Eigen::VectorXd mala_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                          Rng& rng, bool* accepted = nullptr);

/// One random-walk Metropolis step with a N(0, 2 gamma I) proposal (invariant for pi_theta).
Eigen::VectorXd rwm_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         Rng& rng, bool* accepted = nullptr);

/// One Hamiltonian Monte Carlo step: `leapfrog` leapfrog steps of size sqrt(gamma) with a
/// standard-normal momentum, then a Metropolis correction (invariant for pi_theta).
Eigen::VectorXd hmc_step(const Problem& p, const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double gamma,
                         int leapfrog, Rng& rng, bool* accepted = nullptr);

/// Log-weight increment of SOSMC-ULA for a particle moved x -> x' under theta_k, with the
/// parameter then updated to theta_next: a(x, x'; U_k) - a(x', x; U_next).
double ula_increment(const Problem& p, const Eigen::VectorXd& theta_k, const Eigen::VectorXd& theta_next,
                     const Eigen::VectorXd& x, const Eigen::VectorXd& x_new, double gamma);

/// Log-weight increment of an invariant (MALA/RWM/HMC) move: -(U_next(x) - U_k(x)); exactly 0
/// when theta does not change.
double invariant_increment(const Problem& p, const Eigen::VectorXd& theta_k, const Eigen::VectorXd& theta_next,
                           const Eigen::VectorXd& x);

}  // namespace icmlkit::smc
