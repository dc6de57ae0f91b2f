// Explicit Runge-Kutta solvers for dz/dt = F(t, z) with exact counts of function evaluations
// (NFE), and backpropagation through the accepted steps (discretise-then-optimise).
//
// RK4 is torchdiffeq's "rk4" (Kutta's 3/8 rule, fixed step); Dormand-Prince 5(4) follows
// torchdiffeq's "dopri5": FSAL, RMS error norm with tolerance atol + rtol max(|z_n|, |z_n+1|),
// Hairer's initial step selection (2 NFE, the first reused as k1), step factor
// min(10, max(0.2, 0.9 err^(-1/5))), and jump times the steps land on exactly (FSAL is
// refreshed after a jump).
#pragma once

#include <Eigen/Dense>
#include <string>
#include <vector>

namespace icmlkit::cde {

/// The right-hand side and its vector-Jacobian product.  `side` says which one-sided limit a
/// path derivative takes at a kink (+1 right, -1 left), see Path::derivative.
class VectorField {
 public:
  virtual ~VectorField() = default;
  /// State dimension.
  virtual int dim() const = 0;
  /// dz [dim] = F(t, z).
  virtual void eval(double t, int side, const double* z, double* dz) = 0;
  /// g_z [dim] = (dF/dz)^T g_dz at (t, z); also accumulates the parameter gradients
  /// (dF/dtheta)^T g_dz wherever the field keeps them.
  virtual void vjp(double t, int side, const double* z, const double* g_dz, double* g_z) = 0;
};

enum class Method { rk4, dopri5 };
/// "rk4" | "dopri5"; throws UsageError naming `flag`.
Method parse_method(const std::string& s, const std::string& flag);

/// Solver settings.
struct SolveOptions {
  Method method = Method::dopri5;
  double step = 0.1;      ///< rk4 step (time units); the last step is shortened to land on t1
  double rtol = 1e-4;     ///< dopri5 relative tolerance (torchcde default)
  double atol = 1e-6;     ///< dopri5 absolute tolerance
  long max_steps = 100000;  ///< RuntimeError beyond this many (accepted + rejected) steps
  std::vector<double> jump_times;  ///< sorted; steps land on each one inside (t0, t1)
};

/// What the backward pass needs: per accepted step its size and stage inputs.
struct Tape {
  int dim = 0, stages = 0;
  std::vector<double> t, h;  ///< per accepted step
  std::vector<double> y;     ///< stage inputs Y_i, [steps][stages][dim]
  void clear() { t.clear(); h.clear(); y.clear(); }
};

/// Counts of one solve.
struct SolveStats {
  long nfe = 0;       ///< evaluations of F (including rejected steps and step selection)
  long accepted = 0;  ///< accepted steps
  long rejected = 0;  ///< rejected steps
};

/// Integrates from t0 to t1 (t1 > t0), overwriting z [dim] with z(t1).  When `tape` is not
/// null it records the accepted steps for backprop().  Throws RuntimeError when the step
/// size underflows, the state becomes non-finite or max_steps is exceeded.
SolveStats solve(VectorField& f, Eigen::Ref<Eigen::VectorXd> z, double t0, double t1, const SolveOptions& opt,
                 Tape* tape = nullptr);

/// Backpropagates dL/dz(t1) = g [dim] through the taped steps (step sizes held fixed); on
/// return g holds dL/dz(t0).  Parameter gradients accumulate through f.vjp.  Returns the
/// number of VJP evaluations (backward NFE).
long backprop(VectorField& f, const Tape& tape, const SolveOptions& opt, Eigen::Ref<Eigen::VectorXd> g);

}  // namespace icmlkit::cde
