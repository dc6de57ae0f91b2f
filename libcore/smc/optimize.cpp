#include "smc/optimize.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "smc/moves.hpp"

namespace icmlkit::smc {

Eigen::VectorXd Problem::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  Eigen::VectorXd g = Eigen::VectorXd::Zero(dim_theta());
  for (Eigen::Index i = 0; i < xs.rows(); ++i) g -= w[i] * grad_theta(theta, xs.row(i).transpose());
  return g;
}

void Problem::energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                                  Eigen::MatrixXd& g) const {
  e.resize(xs.rows());
  g.resize(xs.rows(), xs.cols());
  // Threads only for large populations: a parallel region per step costs more than small N saves.
#pragma omp parallel if (xs.rows() >= 2048)
  {
    Eigen::VectorXd x(xs.cols()), gi(xs.cols());
#pragma omp for schedule(static)
    for (Eigen::Index i = 0; i < xs.rows(); ++i) {
      x = xs.row(i).transpose();
      e[i] = energy_grad_x(theta, x, gi);
      g.row(i) = gi.transpose();
    }
  }
}

SmcResult maximise_marginal_likelihood(const Problem& p, const Eigen::VectorXd& theta0, const Eigen::VectorXd& x0,
                                       const SmcOptions& opt, const std::function<void(const SmcStep&)>& on_step) {
  const int N = opt.method == Method::soul ? 1 : std::max(opt.particles, 1);
  return maximise_marginal_likelihood_from(p, theta0, x0.transpose().replicate(N, 1), opt, on_step);
}

SmcResult maximise_marginal_likelihood_from(const Problem& p, const Eigen::VectorXd& theta0, const Eigen::MatrixXd& x_init,
                                            const SmcOptions& opt, const std::function<void(const SmcStep&)>& on_step) {
  if (opt.particles < 1 || opt.steps < 1 || !(opt.learning_rate > 0) || !(opt.step_size > 0) || opt.inner_steps < 1)
    throw std::invalid_argument("particles, steps, inner steps, learning rate and step size must be positive");
  const int N = opt.method == Method::soul ? 1 : opt.particles;
  if (x_init.rows() < N || x_init.cols() != p.dim_x())
    throw std::invalid_argument("initial particles must be [N, dim_x]");
  Rng rng(opt.seed);
  SmcResult res;
  res.population.x = x_init.topRows(N);
  res.population.logw = Eigen::ArrayXd::Zero(N);
  Eigen::VectorXd theta = theta0;
  double gamma = opt.step_size;
  Population& pop = res.population;
  Eigen::MatrixXd noise(N, p.dim_x()), x_new, g_x, g_n;
  Eigen::VectorXd e_x, e_n;
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
      row.estimate = p.estimate(theta, pop.x, w);
      // PGD (Kuntz et al.) takes the theta step with the Langevin step h itself.
      const double lr = opt.method == Method::pgd ? gamma : opt.learning_rate;
      const Eigen::VectorXd theta_next = theta + step_of(g, lr, k);
      // 2-3. move under theta_k and reweight.
      if (opt.method == Method::sosmc && opt.move != Move::ula) {
        // Invariant moves under theta_k (sequential: each draws its own accept/reject
        // randomness); the increment only depends on the theta change.
        for (int i = 0; i < N; ++i) {
          const Eigen::VectorXd x = pop.x.row(i).transpose();
          const Eigen::VectorXd xn = opt.move == Move::mala  ? mala_step(p, theta, x, gamma, rng)
                                     : opt.move == Move::rwm ? rwm_step(p, theta, x, gamma, rng)
                                                             : hmc_step(p, theta, x, gamma, opt.leapfrog, rng);
          pop.logw[i] += invariant_increment(p, theta, theta_next, xn);
          pop.x.row(i) = xn.transpose();
        }
      } else {
        // ULA: the Gaussian noise is drawn in particle order from the one seeded stream, then
        // particles move (and, for sosmc, reweight) in parallel; the result does not depend
        // on the thread count.
        for (Eigen::Index i = 0; i < noise.rows(); ++i)
          for (Eigen::Index j = 0; j < noise.cols(); ++j) noise(i, j) = rng.normal();
        const bool weigh = opt.method == Method::sosmc;
        p.energy_grad_x_batch(theta, pop.x, e_x, g_x);
        x_new = pop.x - gamma * g_x + std::sqrt(2 * gamma) * noise;
        if (weigh) {
          // a(x, x'; U_k) - a(x', x; U_{k+1}) per particle (ula_increment, with U and grad U
          // computed once per batch).
          p.energy_grad_x_batch(theta_next, x_new, e_n, g_n);
          const Eigen::MatrixXd dx = x_new - pop.x;
          pop.logw += (e_x - e_n).array() + 0.5 * ((dx.cwiseProduct(g_x + g_n)).rowwise().sum()).array() +
                      0.25 * gamma * (g_x.rowwise().squaredNorm() - g_n.rowwise().squaredNorm()).array();
        }
        pop.x.swap(x_new);
      }
      theta = theta_next;
      if (opt.method == Method::sosmc) {
        // 4. resample on low ESS; 5. adapt gamma on the ESS.
        pop.logw -= pop.logw.maxCoeff();  // keep log-weights near 0 (the reference does the same)
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
