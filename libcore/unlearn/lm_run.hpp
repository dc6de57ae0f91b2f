// The LM training run of a trajectory store (trajectory.hpp) as an unlearning Run (run.hpp):
// replay on the trainer's float path (bit-identical to the recorded run, checked against each
// replayed step's recorded loss), curvature products on a float (default) or double copy of the
// weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lm/model.hpp"
#include "nn/llama_train.hpp"
#include "nn/trainer.hpp"
#include "unlearn/run.hpp"
#include "unlearn/trajectory.hpp"

namespace icmlkit::unlearn {

/// A trajectory's run.  Products at theta[s] with step s's batch B_s (mean loss over its
/// targets), on a float copy of the weights (the trainer's kernels) or with
/// set_double_products on a double one:
///  - fisher: g (g^T v), g the batch gradient (double, unclipped);
///  - exact: (g(theta + h v) - g(theta - h v)) / 2h, h = 1e-2 ||theta|| / ||v|| in float
///    (1e-4 in double; central differences: truncation O(h^2));
///  - ggn: J^T H_out J v with J v by central differences of the logits (same h), H_out per
///    predicted position diag(p) - p p^T (softmax cross-entropy), J^T by the backward.
/// The step map's linearisation: SGD exactly  J_s v = -eta_s (H_s v + wd v)  (wd on tensors with
/// decay); AdamW with its moments frozen along the recorded trajectory:  J_s v = -eta_s
/// ((1 - beta1) / (1 - beta1^t) D_s H_s v + wd v),  D_s = 1 / (sqrt(v_hat_t) + eps) the step's
/// preconditioner (momentum's carrying of the deviation and v's dependence on it ignored).
/// Gradient clipping is not linearised: steps that clipped are counted (clipped_steps_in).
/// Online corrections (Trajectory::corrections): arriving at such a position on the recorded
/// trajectory loads its corrected checkpoint, so theta[s] is the state step s ran on; a deviation
/// carried across it passes unchanged, and u of the step right before it includes the correction
/// (deleting that one batch later is the one case this does not separate).
class LmRun final : public Run {
 public:
  /// `traj` must outlive the run; `stream` is the training stream rebuilt from the corpus (its
  /// token count is checked against the trajectory's).  Loads ckpt-<first>.h5 for the shape and
  /// tokenizer.  Throws InputError for a stream or checkpoint that does not match the trajectory.
  LmRun(const Trajectory& traj, std::vector<int> stream);

  std::size_t dim() const override { return dim_; }
  std::int64_t end_step() const override { return static_cast<std::int64_t>(traj_.steps.size()); }
  double lr(std::int64_t s) const override;
  void seek(std::int64_t s) override;
  std::int64_t at() const noexcept override { return at_; }
  void advance(bool skip = false) override;
  void params(std::vector<double>& theta) override;
  void set_params(const std::vector<double>& theta) override;
  void jacobian_product(HvpMode mode, const std::vector<double>& v, std::vector<double>& out) override;
  void update_difference(const std::vector<double>& v, std::vector<double>& out) override;
  void gradient(std::vector<double>& g) override;
  std::string assumption() const override;
  double step_flop() const override;
  double hvp_flop(HvpMode mode) const override;

  /// The mean loss gradient (double) over `windows` (a multiple of the batch size is not needed:
  /// any non-empty list) at the current parameters; returns the mean loss.  The baselines'
  /// forget and retain gradients.
  double windows_gradient(const std::vector<std::int64_t>& windows, std::vector<double>& g);
  /// The current weights as a model (the trajectory's shape and tokenizer).
  lm::Model model();
  /// The float parameter store at the current parameters (evaluation).
  nn::LlamaParams<float>& float_params() { return trainer_.params(); }
  /// Steps in [a, b) whose recorded gradient was clipped.
  std::int64_t clipped_steps_in(std::int64_t a, std::int64_t b) const;
  /// Training steps replayed so far (by seek and advance; no-op steps not counted).
  std::int64_t steps_replayed() const noexcept { return replayed_; }
  /// Curvature products and probe gradients in double precision (default float, on the trainer's
  /// fast kernels: central differences then take a step 100x larger, h = 1e-2 ||theta|| / ||v||).
  void set_double_products(bool on) noexcept { double_ = on; grad_ok_ = false; }

 private:
  /// A copy of the weights in T for the curvature products (float: the trainer's fast kernels;
  /// double: Eigen products and plain loops), with its activation store.
  template <class T>
  struct Mirror {
    explicit Mirror(const lm::ModelConfig& config) : p(config) {}
    nn::LlamaParams<T> p;
    nn::TrainCache<T> c;
    std::vector<int> in, tg;
    /// Copies theta (and `from`'s frozen tensors) in.
    void load(const nn::LlamaParams<float>& from, const std::vector<double>& theta);
    /// The mean loss gradient over `windows` at the loaded weights, flattened; returns the loss.
    double gradient(const nn::Windows& src, const std::vector<std::int64_t>& windows, int B, std::vector<double>& g,
                    std::size_t dim);
    /// hv += the Gauss-Newton product over `w` at theta (J v by central differences of step h).
    void ggn(const nn::LlamaParams<float>& from, const nn::Windows& src, const std::vector<std::int64_t>& w, int B,
             const std::vector<double>& theta, const std::vector<double>& v, double h, std::vector<double>& hv);
  };
  double gradient_at(const std::vector<double>& theta, const std::vector<std::int64_t>& windows, std::vector<double>& g);
  void hvp(HvpMode mode, const std::vector<double>& v, std::vector<double>& hv);
  void current_theta(std::vector<double>& theta);                      // cached theta at the position
  void adam_direction(const std::vector<double>& g, std::vector<double>& dir, bool linear);
  const std::vector<std::int64_t>& batch() const;

  const Trajectory& traj_;
  nn::TrainOptions opt_;
  nn::Trainer trainer_;
  Mirror<double> dbl_;
  Mirror<float> flt_;
  bool double_ = false;              // products on the double mirror
  std::size_t dim_ = 0;
  std::vector<char> decay_;          // per flat entry: weight decay applies
  std::int64_t at_ = 0, replayed_ = 0;
  bool off_trajectory_ = false;      // set_params moved the weights off the recorded trajectory
  std::vector<double> theta_, grad_;  // caches at the current position
  bool theta_ok_ = false, grad_ok_ = false;
};

/// The trainable tensors of `store` as one flat vector in store order (a Run's parameter vector).
std::vector<double> flatten_trainable(const nn::ParamStore<float>& store);
/// Writes a flat vector of flatten_trainable's layout back into `store` (rounded to float).  Throws
/// UsageError when its size is not the trainable entries'.
void assign_trainable(nn::ParamStore<float>& store, const std::vector<double>& theta);

/// Per document: the mean next-token cross-entropy (nats) of its tokens (bos first when
/// bos_id >= 0), in chunks of at most seq_len predictions, each chunk starting fresh (the
/// membership-inference score and the forget loss).  A document of no token gets NaN.
std::vector<double> document_losses(nn::LlamaParams<float>& params, const lm::Tokenizer& tok,
                                    const std::vector<std::string>& docs, int bos_id, int seq_len);

/// The mean cross-entropy (nats per target) of windows `ids` of `windows` (retain and forget
/// losses over training windows), batch windows per forward.
double windows_loss(nn::LlamaParams<float>& params, const nn::Windows& windows, const std::vector<std::int64_t>& ids,
                    int batch);

}  // namespace icmlkit::unlearn
