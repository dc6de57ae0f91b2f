#include "smc/optimize.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "smc/moves.hpp"
#include "smc/simd.hpp"

namespace icmlkit::smc {
namespace {
// Particles per parallel work item of the ULA move and of batched evaluations (fixed: results
// do not depend on the thread count).
constexpr Eigen::Index kMoveBlock = 2048;
}  // namespace

Eigen::VectorXd Problem::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  Eigen::VectorXd g = Eigen::VectorXd::Zero(dim_theta());
  for (Eigen::Index i = 0; i < xs.rows(); ++i) g -= w[i] * grad_theta(theta, xs.row(i).transpose());
  return g;
}

void Evaluation::gather(const std::vector<Eigen::Index>& idx) {
  const auto n = static_cast<Eigen::Index>(idx.size());
  Eigen::VectorXd e2(n);
  Eigen::MatrixXd g2(n, g.cols()), a2(n, aux.cols());
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index j = idx[static_cast<std::size_t>(i)];
    e2[i] = e[j];
    g2.row(i) = g.row(j);
    a2.row(i) = aux.row(j);
  }
  e.swap(e2);
  g.swap(g2);
  aux.swap(a2);
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

void Problem::evaluate_rows(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n,
                            Evaluation& ev) const {
  const Eigen::MatrixXd xb = xs.middleRows(lo, n);
  Eigen::VectorXd e;
  Eigen::MatrixXd g;
  energy_grad_x_batch(theta, xb, e, g);
  ev.e.segment(lo, n) = e;
  ev.g.middleRows(lo, n) = g;
}

void Problem::evaluate(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Evaluation& ev) const {
  const Eigen::Index N = xs.rows(), nb = (N + kMoveBlock - 1) / kMoveBlock;
  ev.resize(N, xs.cols(), aux_cols());
#pragma omp parallel for schedule(static) if (nb > 1)
  for (Eigen::Index b = 0; b < nb; ++b) {
    const Eigen::Index lo = b * kMoveBlock;
    evaluate_rows(theta, xs, lo, std::min(kMoveBlock, N - lo), ev);
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
  if (!(opt.adapt_factor >= 1) || !(opt.gamma_min > 0) || !(opt.gamma_max >= opt.gamma_min))
    throw std::invalid_argument("need adapt_factor >= 1 and 0 < gamma_min <= gamma_max");
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
  const Eigen::Index d = p.dim_x();
  Eigen::MatrixXd x_new(N, d);
  // `cur` evaluates (theta, pop.x) when `have_cur`; `nxt` the moved particles under theta_next.
  Evaluation cur, nxt;
  bool have_cur = false;
  // Adam state.
  Eigen::VectorXd m1 = Eigen::VectorXd::Zero(theta.size()), m2 = Eigen::VectorXd::Zero(theta.size());
  auto step_of = [&](const Eigen::VectorXd& g, double lr, int k) -> Eigen::VectorXd {
    if (opt.optimizer == Optimizer::sgd || opt.method == Method::pgd) return lr * g;
    m1 = 0.9 * m1 + 0.1 * g;
    m2 = 0.999 * m2 + 0.001 * g.cwiseAbs2();
    const Eigen::VectorXd mh = m1 / (1 - std::pow(0.9, k + 1)), vh = m2 / (1 - std::pow(0.999, k + 1));
    return lr * (mh.array() / (vh.array().sqrt() + 1e-8)).matrix();
  };
  // Normalised weights of the population (softmax of logw), kept in step with logw.
  Eigen::ArrayXd w = Eigen::ArrayXd::Constant(N, 1.0 / N);
  const bool ula = opt.method != Method::sosmc || opt.move == Move::ula;
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
      // ULA needs U and grad U at (theta_k, x); the previous step's evaluation of the moved
      // particles under theta_k is exactly that, so only the first step evaluates here.
      if (ula && !have_cur) p.evaluate(theta, pop.x, cur);
      const Evaluation& ev = ula ? cur : nxt;  // invariant moves: an empty evaluation
      if (!ula) nxt = Evaluation{};
      // 1. theta update from the (weighted) particle estimate of E[-dU/dtheta].
      const Eigen::VectorXd g = p.gradient_at(theta, pop.x, w, ev);
      row.estimate = p.estimate_at(theta, pop.x, w, ev);
      // PGD (Kuntz et al.) takes the theta step with the Langevin step h itself.
      const double lr = opt.method == Method::pgd ? gamma : opt.learning_rate;
      const Eigen::VectorXd theta_next = theta + step_of(g, lr, k);
      // 2-3. move under theta_k and reweight.
      if (!ula) {
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
        // One pass over fixed blocks of particles (one parallel region per step), each block:
        // ULA x' = x - gamma grad U(x) + sqrt(2 gamma) xi with its own noise stream derived
        // from one draw of the seeded generator; U and grad U of x' under theta_{k+1} (the
        // SOSMC increment needs them, and they are the next step's (theta, x) evaluation for
        // every method); sosmc: the increment a(x, x'; U_k) - a(x', x; U_{k+1}) (ula_increment
        // with U and grad U computed once).  Results do not depend on the thread count.
        const std::uint64_t step_seed = rng.bits();
        const double sq = std::sqrt(2 * gamma);
        const Eigen::Index nb = (N + kMoveBlock - 1) / kMoveBlock;
        nxt.resize(N, d, p.aux_cols());
        const bool reweight = opt.method == Method::sosmc;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (Eigen::Index b = 0; b < nb; ++b) {
          const Eigen::Index lo = b * kMoveBlock, n = std::min<Eigen::Index>(kMoveBlock, N - lo);
          NormalStream noise(derive_seed(step_seed, static_cast<std::uint64_t>(b)));
          for (Eigen::Index j = 0; j < d; ++j) {
            double* out = x_new.col(j).data() + lo;
            noise.fill(out, n);
            Eigen::Map<Eigen::ArrayXd> xn(out, n);
            xn = pop.x.col(j).segment(lo, n).array() - gamma * cur.g.col(j).segment(lo, n).array() + sq * xn;
          }
          p.evaluate_rows(theta_next, x_new, lo, n, nxt);
          if (reweight) {
            auto lw = pop.logw.segment(lo, n);
            lw += (cur.e.segment(lo, n) - nxt.e.segment(lo, n)).array();
            for (Eigen::Index j = 0; j < d; ++j) {
              const auto gx = cur.g.col(j).segment(lo, n).array(), gn = nxt.g.col(j).segment(lo, n).array();
              lw += 0.5 * (x_new.col(j).segment(lo, n) - pop.x.col(j).segment(lo, n)).array() * (gx + gn) +
                    0.25 * gamma * (gx.square() - gn.square());
            }
          }
        }
        pop.x.swap(x_new);
        std::swap(cur, nxt);
        have_cur = true;
      }
      theta = theta_next;
      if (opt.method == Method::sosmc) {
        // 4. resample on low ESS; 5. adapt gamma on the ESS.
        pop.logw -= pop.logw.maxCoeff();  // keep log-weights near 0 (the reference does the same)
        exp_nonpositive(pop.logw.data(), w.data(), N);
        w /= w.sum();
        row.ess = 1.0 / w.square().sum();
        if (row.ess < opt.resample_threshold * N) {
          const auto idx = resample_indices(w, opt.resampling, rng);
          for (Eigen::Index j = 0; j < d; ++j)
            for (Eigen::Index i = 0; i < N; ++i) x_new(i, j) = pop.x(idx[static_cast<std::size_t>(i)], j);
          pop.x.swap(x_new);
          if (have_cur) cur.gather(idx);
          pop.logw.setZero();
          w.setConstant(1.0 / N);
          row.resampled = true;
        }
        if (opt.adapt_step)
          gamma = std::clamp(row.ess < 0.95 * N ? gamma / opt.adapt_factor : gamma * opt.adapt_factor, opt.gamma_min,
                             opt.gamma_max);
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
