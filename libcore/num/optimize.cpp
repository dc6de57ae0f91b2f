#include "num/optimize.hpp"

#include <ceres/gradient_problem.h>
#include <ceres/gradient_problem_solver.h>
#include <ceres/iteration_callback.h>

#include <glog/logging.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "util/progress.hpp"

namespace icmlkit::num {
namespace {

// Non-owning adapter from our Objective to Ceres' FirstOrderFunction.
class CeresAdapter final : public ceres::FirstOrderFunction {
 public:
  explicit CeresAdapter(const Objective& f, int* count) : f_(f), count_(count) {}
  bool Evaluate(const double* x, double* cost, double* grad) const override {
    ++*count_;
    if (!f_.evaluate(x, cost, grad)) return false;
    if (!std::isfinite(*cost)) return false;
    if (grad)
      for (int i = 0; i < f_.dim(); ++i)
        if (!std::isfinite(grad[i])) return false;
    return true;
  }
  int NumParameters() const override { return f_.dim(); }

 private:
  const Objective& f_;
  int* count_;  // evaluations made (one solve runs on one thread)
};

// Applies LbfgsOptions::max_evaluations and on_iteration after each iteration; Ceres has
// updated the parameters in place by then (update_state_every_iteration).
class IterationHook final : public ceres::IterationCallback {
 public:
  IterationHook(const LbfgsOptions& opt, const Eigen::VectorXd& x, const int& count) : opt_(opt), x_(x), count_(count) {}
  ceres::CallbackReturnType operator()(const ceres::IterationSummary& s) override {
    last_iteration = s.iteration;
    last_x = x_;
    if (opt_.on_iteration && !opt_.on_iteration(x_, s.iteration, s.cost)) return ceres::SOLVER_TERMINATE_SUCCESSFULLY;
    if (opt_.max_evaluations > 0 && count_ >= opt_.max_evaluations) return ceres::SOLVER_TERMINATE_SUCCESSFULLY;
    return ceres::SOLVER_CONTINUE;
  }
  int last_iteration = -1;  ///< the last iteration the hook saw (-1: none)
  Eigen::VectorXd last_x;   ///< and its point

 private:
  const LbfgsOptions& opt_;
  const Eigen::VectorXd& x_;
  const int& count_;
};

// Ceres logs through glog; its line-search warnings are noise on stderr for our users.
void quiet_glog() {
  static std::once_flag once;
  std::call_once(once, [] {
    FLAGS_minloglevel = google::GLOG_ERROR;
    FLAGS_logtostderr = true;
    if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging("icmlkit");
  });
}

}  // namespace

LbfgsResult minimize_lbfgs(const Objective& f, const Eigen::VectorXd& x0, const LbfgsOptions& opt) {
  LbfgsResult r;
  r.x = x0;
  double f0 = 0;
  if (!f.evaluate(x0.data(), &f0, nullptr) || !std::isfinite(f0)) {
    r.f = std::numeric_limits<double>::quiet_NaN();
    r.message = "start outside the domain";
    return r;
  }
  quiet_glog();
  int count = 0;
  ceres::GradientProblem problem(new CeresAdapter(f, &count));
  ceres::GradientProblemSolver::Options o;
  o.line_search_direction_type = ceres::LBFGS;
  o.max_lbfgs_rank = opt.memory;
  o.max_num_iterations = opt.max_iterations;
  o.function_tolerance = opt.function_tolerance;
  o.gradient_tolerance = opt.gradient_tolerance;
  o.parameter_tolerance = opt.parameter_tolerance;
  o.logging_type = ceres::SILENT;
  o.minimizer_progress_to_stdout = false;
  IterationHook hook(opt, r.x, count);
  if (opt.on_iteration || opt.max_evaluations > 0) {
    o.update_state_every_iteration = true;
    o.callbacks.push_back(&hook);
  }
  ceres::GradientProblemSolver::Summary s;
  ceres::Solve(o, problem, r.x.data(), &s);
  r.evaluations = count;
  // A stop asked for by the hook ends as USER_SUCCESS: not convergence.
  r.converged = s.termination_type == ceres::CONVERGENCE;
  r.iterations = static_cast<int>(s.iterations.size());
  r.message = s.message;
  double fx = 0;
  r.f = f.evaluate(r.x.data(), &fx, nullptr) && std::isfinite(fx) ? fx : std::numeric_limits<double>::quiet_NaN();
  // Ceres skips the callbacks of the iteration that converges (and of a start that already
  // meets the tolerances): the hook still sees the point returned, as the last iteration.
  if (opt.on_iteration && (hook.last_iteration < 0 || hook.last_x != r.x))
    opt.on_iteration(r.x, hook.last_iteration + 1, r.f);
  return r;
}

std::vector<LbfgsResult> minimize_multistart(const Objective& f, const std::vector<Eigen::VectorXd>& starts,
                                             const LbfgsOptions& opt, Progress* progress) {
  std::vector<LbfgsResult> out(starts.size());
  const long n = static_cast<long>(starts.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (long i = 0; i < n; ++i) {
    out[static_cast<std::size_t>(i)] = minimize_lbfgs(f, starts[static_cast<std::size_t>(i)], opt);
    if (progress) progress->tick();
  }
  return out;
}

int best_result(const std::vector<LbfgsResult>& results) {
  int best = -1;
  bool any_converged = false;
  for (const auto& r : results) any_converged |= r.converged && std::isfinite(r.f);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (!std::isfinite(r.f) || (any_converged && !r.converged)) continue;
    if (best < 0 || r.f < results[static_cast<std::size_t>(best)].f) best = static_cast<int>(i);
  }
  return best;
}

}  // namespace icmlkit::num
