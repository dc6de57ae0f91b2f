// Fitting a `MixLaw`: mean squared error on raw loss over masked entries (Dai & Zheng's
// objective), minimised by L-BFGS in a bounded reparametrisation from several seeded starts,
// each followed by basin hopping (perturb, re-minimise, Metropolis accept), as their
// scipy.optimize.basinhopping + L-BFGS-B procedure does.  Plus the metrics of their tables.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fit/mixlaw.hpp"
#include "num/optimize.hpp"

namespace icmlkit {
class Progress;
}

namespace icmlkit::fit {

/// Options of `fit_mixlaw`.
struct MixFitOptions {
  int starts = 4;             ///< independent starts (start 0 = the law's initial point)
  int hops = 6;               ///< basin-hopping steps per start (the reference uses 6 basins)
  double step = 0.5;          ///< hop displacement, uniform in [-step, step] per coordinate (transformed space)
  double temperature = 5e-5;  ///< Metropolis temperature of the hops (reference: 5e-5)
  std::uint64_t seed = 0;
  std::map<std::string, double> fixed;  ///< parameters held fixed, by name ("H")
  num::LbfgsOptions lbfgs;
};

/// Result of `fit_mixlaw`.
struct MixFitResult {
  Eigen::VectorXd params;  ///< all parameters, law layout
  double objective = 0;    ///< train MSE (sum over masked entries / rows)
  int local_solves = 0;    ///< L-BFGS runs done (starts x (1 + hops))
  int best_start = 0;
};

/// Fits `law` to `train`.  Throws RuntimeError when nothing finite is found.
MixFitResult fit_mixlaw(const MixLaw& law, const MixData& train, const MixFitOptions& opt,
                        Progress* progress = nullptr);

/// Metrics over masked entries: overall MRE (fraction), MAE, RMSE, Spearman (pooled), and
/// per domain {mre, mae, spearman, count}.  Domains with no masked entry are omitted.
nlohmann::json mix_metrics(const Eigen::ArrayXXd& pred, const MixData& d);

/// Maps between bounded parameters and the unbounded space L-BFGS works in:
/// p = lo + (hi - lo) sigmoid(z) for a finite box, lo + exp(z) above a finite lower bound,
/// and p = z when unbounded.
struct BoxTransform {
  Eigen::VectorXd lo, hi;
  /// z -> p and dp/dz.
  void to_params(const Eigen::VectorXd& z, Eigen::VectorXd& p, Eigen::VectorXd* dp_dz) const;
  /// p -> z (p is clipped a hair inside its box first).
  Eigen::VectorXd to_free(const Eigen::VectorXd& p) const;
};

}  // namespace icmlkit::fit
