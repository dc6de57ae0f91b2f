// Fitting a `MixLaw`: mean squared error on raw loss over masked entries (Dai & Zheng's
// objective), minimised by L-BFGS in a bounded reparametrisation from several seeded starts,
// each followed by basin hopping (perturb, re-minimise, Metropolis accept), as their
// scipy.optimize.basinhopping + L-BFGS-B procedure does.  Plus the metrics of their tables.
//
// Regularisers for the noise term of the capacity-noise law, which a few rows of a rare
// domain cannot pin down (issue 43): a ridge penalty on the noise amplitudes A_i (`l2`), a cap
// on evaluations per local solve (`max_evals`, the reference's implicit early stop), early
// stopping on held-in training rows (`early_stop`), and the choice among starts by an inner
// K-fold cross-validation (`cv_folds`) instead of the lowest training objective.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  /// Ridge penalty l2 * sum_i A_i^2 on the noise amplitudes (parameters named "A[...]"),
  /// added to the objective; 0 = none.  Laws without a noise term ignore it.  Negative =
  /// choose it from `l2_grid` by `l2_folds`-fold cross-validation on the training rows: each
  /// candidate is fitted from start 0 with no hops on K-1 folds and scored by the held-out
  /// fold's squared error per row; the largest l2 within one standard error (over folds) of
  /// the lowest error is chosen (the one-standard-error rule).
  double l2 = 0;
  std::vector<double> l2_grid{0.0, 0.01, 0.1, 1.0};  ///< candidates of the cross-validated l2
  int l2_folds = 5;                                  ///< folds of that cross-validation
  /// Cap on objective evaluations per local solve (value and gradient count one); 0 = none.
  int max_evals = 0;
  /// Early stopping: this fraction of the training rows (seeded) is held in, every start's
  /// path (its solve and hops, iteration by iteration) is run on the other rows and scored
  /// by the held-in rows' MSE; the path is then rerun on all training rows for the number of
  /// iterations that scored best (at least one).  0 = off; else in (0, 1) and leaving rows on both sides.
  double early_stop = 0;
  /// Choose the start by K-fold cross-validation on the training rows (each start refitted
  /// on K-1 folds; the held-out rows' squared errors pooled over folds, per row) instead of by
  /// the lowest training objective.  0 = off; else 2 <= K <= rows.
  int cv_folds = 0;
  /// Rows scored at every iteration of the final fits into `MixFitResult::trace` (the
  /// validation split; never fitted).  Null = none.
  const MixData* monitor = nullptr;
  bool trace = false;  ///< record `MixFitResult::trace`
  num::LbfgsOptions lbfgs;
};

/// One iteration of a start's optimisation path (`MixFitOptions::trace`).
struct MixTracePoint {
  int start = 0;      ///< start index
  int solve = 0;      ///< 0 = the start's first local solve, h = its h-th hop
  int iteration = 0;  ///< iteration within the solve (0 = its starting point)
  int step = 0;       ///< iterations along the whole path so far
  bool held_in_phase = false;  ///< true: early stopping's run on the rows not held in
  double objective = 0;        ///< objective minimised (penalty included)
  double held_in_mse = 0;      ///< MSE of the held-in rows (NaN when early stopping is off)
  double monitor_mre = 0;      ///< MRE of `monitor` (NaN when there is none)
};

/// Result of `fit_mixlaw`.
struct MixFitResult {
  Eigen::VectorXd params;  ///< all parameters, law layout
  double objective = 0;    ///< objective minimised at params: train MSE + penalty
  double mse = 0;          ///< train MSE at params (sum over masked entries / rows)
  int local_solves = 0;    ///< L-BFGS runs done, all phases and folds included
  int best_start = 0;
  std::string selection;   ///< how the start was chosen: "objective", "held-in", "cv"
  std::vector<double> start_scores;  ///< the score each start was chosen by (lower is better)
  double l2 = 0;                     ///< the penalty used (the chosen one when cross-validated)
  std::vector<double> l2_scores;     ///< cross-validated: mean held-out SSE per row, per l2_grid entry
  std::vector<double> l2_score_se;   ///< and its standard error over the folds
  int early_stop_step = 0;  ///< early stopping: path iterations run on all rows (0 = off)
  std::vector<MixTracePoint> trace;  ///< with `trace`, in start order
};

/// Fits `law` to `train`.  Throws RuntimeError when nothing finite is found, UsageError for
/// options the data cannot serve (too few rows for early_stop or cv_folds, unknown --fix).
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
