// Smooth minimisation with Ceres' L-BFGS (GradientProblemSolver), one start or many.
//
// Ceres is configured, not re-coded (STYLE.md): this file only adapts our objective
// interface, sets tolerances, and spreads independent starts over threads.  The best
// start is chosen by (converged, objective, start index), so the answer does not depend
// on the thread count.
#pragma once

#include <Eigen/Core>

#include <functional>
#include <string>
#include <vector>

namespace icmlkit {
class Progress;
}

namespace icmlkit::num {

/// A smooth objective f: R^dim -> R with analytic gradient.
class Objective {
 public:
  virtual ~Objective() = default;
  /// Number of free variables.
  virtual int dim() const = 0;
  /// Writes f(x) and, when `grad` is not null, its gradient [dim].  Returns false when x is
  /// outside the domain (the line search then backs off).  Must be thread-safe.
  virtual bool evaluate(const double* x, double* f, double* grad) const = 0;
};

/// Stopping rules (Ceres meanings: relative cost change, max-norm of the gradient,
/// relative step size).
struct LbfgsOptions {
  int max_iterations = 1000;
  double function_tolerance = 1e-13;
  double gradient_tolerance = 1e-12;
  double parameter_tolerance = 1e-12;
  int memory = 10;  ///< L-BFGS history length
  /// Stop once this many objective evaluations (value and gradient together count one) have
  /// been made, checked at the end of each iteration, so a line search may overrun it by a
  /// few; 0 = no cap.  The result then says converged=false.
  int max_evaluations = 0;
  /// Called after every iteration (and once at the start, iteration 0) with the current point
  /// [dim] and its objective, the point returned included (it may come last with the next
  /// iteration number); returning false stops the solve there (converged=false).  Must be
  /// thread-safe when the options are shared by `minimize_multistart`.
  std::function<bool(const Eigen::VectorXd& x, int iteration, double f)> on_iteration;
};

/// Outcome of one local minimisation.
struct LbfgsResult {
  Eigen::VectorXd x;       ///< final point [dim]
  double f = 0;            ///< objective at x (NaN when the start was outside the domain)
  bool converged = false;  ///< Ceres reported CONVERGENCE
  int iterations = 0;      ///< L-BFGS iterations taken
  int evaluations = 0;     ///< objective evaluations made (value and gradient count one)
  std::string message;     ///< Ceres' termination message
};

/// Minimises from `x0`.  Never throws for a bad start: the result says converged=false.
LbfgsResult minimize_lbfgs(const Objective& f, const Eigen::VectorXd& x0, const LbfgsOptions& opt = {});

/// Minimises from every start in parallel (OpenMP, --threads); results in start order.
/// `progress` (may be null) is ticked once per start.
std::vector<LbfgsResult> minimize_multistart(const Objective& f, const std::vector<Eigen::VectorXd>& starts,
                                             const LbfgsOptions& opt = {}, Progress* progress = nullptr);

/// Index of the best result: lowest finite objective among converged starts, or among all
/// finite ones when none converged; ties go to the lowest index.  -1 when none is finite.
int best_result(const std::vector<LbfgsResult>& results);

}  // namespace icmlkit::num
