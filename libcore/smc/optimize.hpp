// Maximum marginal likelihood by SMC optimisation (SOSMC, Cuin et al., ICML 2026) and the
// baselines it is compared with, on one `Problem`:
//   sosmc    one weighted population: update theta with the weighted gradient estimate, move
//            (ULA or MALA), reweight by the SMC-sampler increment, resample when the ESS falls
//            below a threshold, adapt the step size on the ESS (the reference code's rule:
//            gamma /= c when ESS < 0.95 N, else gamma *= c, clipped; c = adapt_factor)
//   impdiff  equal weights, one ULA step per update (no reweighting, no resampling)
//   pgd      particle gradient descent (Kuntz, Lim & Johansen 2023): equal weights, one ULA
//            step of size h per update and the theta step h times the gradient (ImpDiff with
//            learning rate = step size)
//   soul     one chain, `inner_steps` ULA steps per update, gradient averaged over them
// theta is updated by gradient ascent on l(theta) with learning rate `learning_rate`.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "smc/particles.hpp"
#include "smc/problem.hpp"

namespace icmlkit::smc {

/// Which algorithm.
enum class Method { sosmc, impdiff, pgd, soul };
/// How theta follows the gradient estimate g: plain ascent theta += lr g, or Adam
/// (Kingma & Ba 2015; beta1 0.9, beta2 0.999, eps 1e-8) on the ascent direction.
enum class Optimizer { sgd, adam };
/// Which particle move (sosmc only; the baselines use ULA as their papers do).
enum class Move { ula, mala, rwm, hmc };

/// Options of `maximise_marginal_likelihood`.
struct SmcOptions {
  Method method = Method::sosmc;
  Move move = Move::ula;
  int particles = 100;            ///< N (soul: ignored, one chain)
  int steps = 400;                ///< theta updates K
  double learning_rate = 0.01;    ///< theta step
  Optimizer optimizer = Optimizer::sgd;  ///< pgd always takes plain steps of size h
  double step_size = 0.01;        ///< initial Langevin step gamma
  double gamma_min = 1e-5, gamma_max = 1.0;  ///< clip range of the adapted gamma
  bool adapt_step = true;         ///< sosmc: ESS-based gamma adaptation
  /// sosmc: gamma /= adapt_factor when ESS < 0.95 N, else gamma *= adapt_factor.  1.01 is what
  /// every experiment of the reference code passes (its sosmc_ula's own default, 1.0, disables
  /// adaptation).
  double adapt_factor = 1.01;
  double resample_threshold = 0.9;  ///< resample when ESS < threshold * N
  Resampling resampling = Resampling::multinomial;
  int inner_steps = 10;           ///< soul: Langevin steps per update
  int leapfrog = 5;               ///< hmc: leapfrog steps per move
  std::uint64_t seed = 0;
};

/// One row of the trajectory.
struct SmcStep {
  int step = 0;
  Eigen::VectorXd theta;
  double ess = 0;       ///< before resampling
  double estimate = std::numeric_limits<double>::quiet_NaN();  ///< Problem::estimate on the particles the theta step used
  double gamma = 0;
  bool resampled = false;
};

/// Result of a run.
struct SmcResult {
  Eigen::VectorXd theta;             ///< final parameter
  std::vector<SmcStep> trajectory;   ///< one entry per update
  Population population;             ///< final particles
};

/// Runs the chosen method from theta0 with particles initialised at x0 (broadcast to every
/// particle).  `on_step` (may be empty) sees each trajectory row as it is produced.  Throws
/// std::invalid_argument for non-positive particle counts, steps or step sizes.
SmcResult maximise_marginal_likelihood(const Problem& p, const Eigen::VectorXd& theta0, const Eigen::VectorXd& x0,
                                       const SmcOptions& opt, const std::function<void(const SmcStep&)>& on_step = {});

/// The same from an initial population `x_init` [N, dim_x] (soul: row 0 starts the chain).
/// Throws std::invalid_argument when x_init has the wrong shape.
SmcResult maximise_marginal_likelihood_from(const Problem& p, const Eigen::VectorXd& theta0, const Eigen::MatrixXd& x_init,
                                            const SmcOptions& opt, const std::function<void(const SmcStep&)>& on_step = {});

}  // namespace icmlkit::smc
