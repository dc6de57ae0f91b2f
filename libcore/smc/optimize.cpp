#include "smc/optimize.hpp"

#include <cmath>
#include <stdexcept>

#include "smc/moves.hpp"

namespace icmlkit::smc {

Eigen::VectorXd Problem::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  Eigen::VectorXd g = Eigen::VectorXd::Zero(dim_theta());
  for (Eigen::Index i = 0; i < xs.rows(); ++i) g -= w[i] * grad_theta(theta, xs.row(i).transpose());
  return g;
}

SmcResult maximise_marginal_likelihood(const Problem& p, const Eigen::VectorXd& theta0, const Eigen::VectorXd& x0,
                                       const SmcOptions& opt, const std::function<void(const SmcStep&)>& on_step) {
  if (opt.particles < 1 || opt.steps < 1 || !(opt.learning_rate > 0) || !(opt.step_size > 0) || opt.inner_steps < 1)
    throw std::invalid_argument("particles, steps, inner steps, learning rate and step size must be positive");
  const int N = opt.method == Method::soul ? 1 : opt.particles;
  Rng rng(opt.seed);
  SmcResult res;
  res.population.x = x0.transpose().replicate(N, 1);
  res.population.logw = Eigen::ArrayXd::Zero(N);
  Eigen::VectorXd theta = theta0;
  double gamma = opt.step_size;
  Population& pop = res.population;
  // Adam state.
  Eigen::VectorXd m1 = Eigen::VectorXd::Zero(theta.size()), m2 = Eigen::VectorXd::Zero(theta.size());
  auto step_of = [&](const Eigen::VectorXd& g, double lr, int k) -> Eigen::VectorXd {
    if (opt.optimizer == Optimizer::sgd || opt.method == Method::pgd) return lr * g;
    m1 = 0.9 * m1 + 0.1 * g;
    m2 = 0.999 * m2 + 0.001 * g.cwiseAbs2();
    const Eigen::VectorXd mh = m1 / (1 - std::pow(0.9, k + 1)), vh = m2 / (1 - std::pow(0.999, k + 1));
    return lr * (mh.array() / (vh.array().sqrt() + 1e-8)).matrix();
  };
  for (int k = 0; k < opt.steps; ++k) {
    SmcStep row;
    row.step = k + 1;
    if (opt.method == Method::soul) {
      // One chain: inner_steps ULA moves; the gradient uses the chain's states, equally weighted.
      Eigen::MatrixXd chain(opt.inner_steps, p.dim_x());
      Eigen::VectorXd x = pop.x.row(0).transpose();
      for (int s = 0; s < opt.inner_steps; ++s) {
        x = ula_step(p, theta, x, gamma, rng);
        chain.row(s) = x.transpose();
      }
      pop.x.row(0) = x.transpose();
      theta += step_of(p.gradient(theta, chain, Eigen::ArrayXd::Constant(opt.inner_steps, 1.0 / opt.inner_steps)),
                       opt.learning_rate, k);
      row.ess = 1;
    } else {
      // 1. theta update from the (weighted) particle estimate of E[-dU/dtheta].
      const Eigen::ArrayXd w = opt.method == Method::sosmc ? pop.weights()
                                                           : Eigen::ArrayXd::Constant(N, 1.0 / N);
      const Eigen::VectorXd g = p.gradient(theta, pop.x, w);
      // PGD (Kuntz et al.) takes the theta step with the Langevin step h itself.
      const double lr = opt.method == Method::pgd ? gamma : opt.learning_rate;
      const Eigen::VectorXd theta_next = theta + step_of(g, lr, k);
      // 2-3. move under theta_k and reweight.
      for (int i = 0; i < N; ++i) {
        const Eigen::VectorXd x = pop.x.row(i).transpose();
        Eigen::VectorXd xn;
        if (opt.method == Method::sosmc && opt.move != Move::ula) {
          // Invariant moves under theta_k; the increment only depends on the theta change.
          xn = opt.move == Move::mala  ? mala_step(p, theta, x, gamma, rng)
               : opt.move == Move::rwm ? rwm_step(p, theta, x, gamma, rng)
                                       : hmc_step(p, theta, x, gamma, opt.leapfrog, rng);
          pop.logw[i] += invariant_increment(p, theta, theta_next, xn);
        } else {
          xn = ula_step(p, theta, x, gamma, rng);
          if (opt.method == Method::sosmc) pop.logw[i] += ula_increment(p, theta, theta_next, x, xn, gamma);
        }
        pop.x.row(i) = xn.transpose();
      }
      theta = theta_next;
      if (opt.method == Method::sosmc) {
        // 4. resample on low ESS; 5. adapt gamma on the ESS.
        row.ess = pop.ess();
        if (row.ess < opt.resample_threshold * N) {
          resample(pop, opt.resampling, rng);
          row.resampled = true;
        }
        if (opt.adapt_step) gamma = std::clamp(row.ess < 0.95 * N ? gamma / 1.01 : gamma * 1.01, opt.gamma_min, opt.gamma_max);
      } else {
        row.ess = N;
      }
    }
    row.theta = theta;
    row.gamma = gamma;
    if (on_step) on_step(row);
    res.trajectory.push_back(std::move(row));
  }
  res.theta = theta;
  return res;
}

}  // namespace icmlkit::smc
