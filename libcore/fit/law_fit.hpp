// Fitting a `Law` like Chinchilla approach 3 (and the Epoch AI replication): Huber loss on
// log L, L-BFGS from every point of a start grid in parallel, best converged start kept;
// optional bootstrap that refits each resample warm-started from the optimum.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fit/law.hpp"
#include "num/optimize.hpp"

namespace icmlkit {
class Progress;
}

namespace icmlkit::fit {

/// Options of `fit_law`.
struct FitOptions {
  double huber_delta = 1e-3;                ///< Huber threshold on log-loss residuals
  std::map<std::string, double> fixed;      ///< parameters held at a value (fitted names: a, b, e, ...)
  std::vector<GridAxis> grid;               ///< overrides of the law's default start grid, by axis name
  num::LbfgsOptions lbfgs;                  ///< local solver tolerances
  int bootstrap = 0;                        ///< number of bootstrap resamples (0 = none)
  /// The resamples k in [bootstrap_begin, bootstrap_end) are refitted (end -1: to `bootstrap`):
  /// one job-array task's share (issue 42).  Resample k draws from derive_seed(seed, k) whoever
  /// fits it, so the shares of N tasks together are one process's resamples.
  int bootstrap_begin = 0, bootstrap_end = -1;
  std::uint64_t seed = 0;                   ///< seeds the bootstrap resamples
};

/// Result of `fit_law`.
struct FitResult {
  Eigen::VectorXd params;       ///< all parameters (fixed ones included), law order
  double objective = 0;         ///< sum of Huber losses at params
  int best_start = -1;          ///< index of the winning start in grid order
  Eigen::VectorXd best_start_point;  ///< the winning start (all parameters)
  int n_starts = 0, n_converged = 0, n_failed = 0;  ///< failed = start outside the domain or non-finite
  bool converged = false;       ///< the winning start converged
  int iterations = 0;           ///< L-BFGS iterations of the winning start
  Eigen::MatrixXd bootstrap;    ///< [n_ok, n_params] refitted parameters, one row per resample
  std::vector<int> bootstrap_k;      ///< the resample index k of each row of `bootstrap`
  std::vector<int> bootstrap_failed; ///< resamples whose refit was not finite (no row)
};

/// The Huber objective sum_i w_i Huber_delta(log L_hat_i - log L_i) with analytic gradient,
/// over the free parameters only (fixed ones are held at their values).
class HuberLogObjective final : public num::Objective {
 public:
  /// `full` holds every parameter; entries where `free_mask` is false are held fixed.
  /// `weights` [n] multiplies each row's loss (bootstrap counts); empty = all ones.
  HuberLogObjective(const Law& law, const LawData& data, double delta, Eigen::VectorXd full,
                    std::vector<bool> free_mask, Eigen::ArrayXd weights = {});
  int dim() const override { return n_free_; }
  bool evaluate(const double* x, double* f, double* grad) const override;
  /// Expands a free-parameter vector to the full vector.
  Eigen::VectorXd expand(const double* x) const;
  /// Extracts the free entries of a full vector.
  Eigen::VectorXd restrict(const Eigen::VectorXd& full) const;

 private:
  const Law& law_;
  LawData data_;  // own copy with ln x cached
  double delta_;
  Eigen::VectorXd full_;
  std::vector<bool> free_;
  Eigen::ArrayXd log_loss_, weights_;
  int n_free_ = 0;
};

/// Cartesian product of the grid axes over the law's parameters (law order; fixed
/// parameters take their fixed value).  Throws UsageError for an unknown axis name.
std::vector<Eigen::VectorXd> make_start_grid(const Law& law, const FitOptions& opt);

/// Fits `law` to `data`.  Throws RuntimeError when no start gives a finite objective.
FitResult fit_law(const Law& law, const LawData& data, const FitOptions& opt, Progress* progress = nullptr);

/// Sum of Huber losses of log predictions at `params` (all parameters).
double huber_objective(const Law& law, const LawData& data, const Eigen::VectorXd& params, double delta);

/// Parses a grid axis "name=lo:hi:step" (inclusive), "name=v" or "name=v1|v2|v3".
/// Throws UsageError naming --grid on malformed text.
GridAxis parse_grid_axis(const std::string& text);

}  // namespace icmlkit::fit
