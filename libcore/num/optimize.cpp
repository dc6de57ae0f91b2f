#include "num/optimize.hpp"

#include <ceres/gradient_problem.h>
#include <ceres/gradient_problem_solver.h>

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
  explicit CeresAdapter(const Objective& f) : f_(f) {}
  bool Evaluate(const double* x, double* cost, double* grad) const override {
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
  ceres::GradientProblem problem(new CeresAdapter(f));
  ceres::GradientProblemSolver::Options o;
  o.line_search_direction_type = ceres::LBFGS;
  o.max_lbfgs_rank = opt.memory;
  o.max_num_iterations = opt.max_iterations;
  o.function_tolerance = opt.function_tolerance;
  o.gradient_tolerance = opt.gradient_tolerance;
  o.parameter_tolerance = opt.parameter_tolerance;
  o.logging_type = ceres::SILENT;
  o.minimizer_progress_to_stdout = false;
  ceres::GradientProblemSolver::Summary s;
  ceres::Solve(o, problem, r.x.data(), &s);
  r.converged = s.termination_type == ceres::CONVERGENCE;
  r.iterations = static_cast<int>(s.iterations.size());
  r.message = s.message;
  double fx = 0;
  r.f = f.evaluate(r.x.data(), &fx, nullptr) && std::isfinite(fx) ? fx : std::numeric_limits<double>::quiet_NaN();
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
