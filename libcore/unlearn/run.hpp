// A recorded training run as the unlearning algorithms see it (issue 34): a sequence of optimizer
// steps s = 0 .. end_step() - 1, each on its recorded batch with its learning rate, whose
// parameters theta[s] can be rebuilt, and whose per-step curvature can be queried.  LMCleaner
// (lmcleaner.hpp) and the retrain baseline are written against this interface only; the LM's
// trajectory store (lm_run.hpp) and a least-squares problem with exact answers
// (least_squares.hpp) implement it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace icmlkit::unlearn {

/// How a step's curvature-vector product H_s v is formed (LMCleaner Algorithm 1 line 6 and the
/// reference's alternatives):
///  - fisher: the rank-one empirical Fisher g_s (g_s^T v), g_s the step's mean batch gradient at
///    theta[s] (the paper's Algorithm 1);
///  - ggn: the generalised Gauss-Newton J^T H_out J v, H_out the loss's Hessian in the model's
///    outputs (exact for least squares; for cross-entropy diag(p) - p p^T per predicted position);
///  - exact: the Hessian of the mean batch loss times v.
enum class HvpMode { fisher, ggn, exact };

/// "fisher", "ggn" or "exact".
const char* hvp_mode_name(HvpMode m) noexcept;
/// Parses hvp_mode_name's names; throws UsageError (--hvp) for another.
HvpMode parse_hvp_mode(const std::string& name);

/// A training run whose steps can be replayed.  Vectors are flat parameter vectors of dim()
/// doubles in the run's own parameter order.  A Run has a position at(): the parameters it holds
/// are theta[at()], and the "current step" is step at() (its batch and learning rate).
class Run {
 public:
  virtual ~Run() = default;
  /// Number of trainable parameters p.
  virtual std::size_t dim() const = 0;
  /// tau: the steps recorded (the run's parameters after them are theta[end_step()]).
  virtual std::int64_t end_step() const = 0;
  /// eta_s, the learning rate step s used (0 <= s < end_step()).
  virtual double lr(std::int64_t s) const = 0;
  /// Moves to theta[s] (0 <= s <= end_step()): bit-identical replay of the recorded steps from the
  /// nearest stored state at or before s (or onwards from the current position when that is
  /// nearer).  Throws InputError when the store cannot rebuild theta[s].
  virtual void seek(std::int64_t s) = 0;
  /// The current position.
  virtual std::int64_t at() const noexcept = 0;
  /// Takes the current step (its recorded batch, learning rate and optimizer), or with `skip`
  /// leaves the parameters and optimizer moments as they are (the step's batch deleted: the
  /// counterfactual no-op step, the schedule not shifted); the position becomes at() + 1.
  virtual void advance(bool skip = false) = 0;
  /// The current parameters theta[at()] (or as last set by set_params).
  virtual void params(std::vector<double>& theta) = 0;
  /// Replaces the current parameters (the position is kept; a baseline's starting point).
  virtual void set_params(const std::vector<double>& theta) = 0;
  /// The linearised step map's product:  out = J_s v  with  J_s = d u_s / d theta  at the current
  /// parameters, u_s the current step's update (theta[s+1] - theta[s]), H_s formed by `mode`.
  /// SGD: J_s v = -eta_s (H_s v + lambda v) (lambda the weight decay where it applies).  Other
  /// optimizers state their linearisation (assumption()).  Fisher products reuse the step's
  /// gradient across calls at the same position.
  virtual void jacobian_product(HvpMode mode, const std::vector<double>& v, std::vector<double>& out) = 0;
  /// The step map's actual difference:  out = u_s(theta) - u_s(theta - v)  at the current
  /// parameters theta (the same batch, learning rate and frozen optimizer state): what
  /// jacobian_product linearises, for the linearisation probe.  Leaves the parameters as they were.
  virtual void update_difference(const std::vector<double>& v, std::vector<double>& out) = 0;
  /// The mean loss gradient at the current parameters over the current step's batch (no
  /// clipping, no update).
  virtual void gradient(std::vector<double>& g) = 0;
  /// One line: what the linearisation assumes for this run's optimizer (for the certificate).
  virtual std::string assumption() const = 0;
  /// Model FLOP of one training step (forward + backward) and of one product by `mode`
  /// (for cost reports; 0 when unknown).
  virtual double step_flop() const { return 0; }
  virtual double hvp_flop(HvpMode) const { return 0; }
};

}  // namespace icmlkit::unlearn
