// Neural CDE classifiers (Kidger et al. 2020) and the multi-view MV-CDE / MVC-CDE of Serov,
// Kuleshov & Zaytsev (ICML 2026), with forward and backward per sample.
//
//   z0 = Linear(X(t0))                                 [hidden]
//   dz = f(z) dX(t),  f(z) = tanh(W2 relu(W1 z + b1) + b2) reshaped [hidden, channels]
//   logits = Linear(z(t1))
//
// cde: one path, f has width --width (torchcde example / reference NeuralCDE: 128).
// mv-cde ("QFormer" in the reference code): H learnable queries q_h [channels]; attention
//   a_h = softmax_i(q_h . x_i / sqrt(channels)) over observed rows; head h smooths with
//   weights a_h and its own bandwidth (kernel: K_b(t - t_i) a_hi; GP: noise sigma^2/(a_hi + 1e-5),
//   length-scale b_h); each head has its own f (width = hidden); the H CDEs are solved as
//   one system and their final states concatenated for the readout [H hidden -> classes].
// mvc-cde ("ConvCDE"): the scores come from Conv1d(C->hidden, 3) - ReLU - Conv1d(hidden->hidden, 3)
//   - ReLU - Linear(hidden->H) (replicate padding), the rest as mv-cde.
// Gradients: backprop through the solver steps (solver.hpp), the paths' weight gradients,
// the softmax and the score networks.
#pragma once

#include <Eigen/Dense>
#include <string>
#include <vector>

#include "cde/path.hpp"
#include "cde/solver.hpp"
#include "nn/linear.hpp"
#include "util/rng.hpp"

namespace icmlkit::cde {

enum class ModelKind { cde, mv_cde, mvc_cde };
/// "cde" | "mv-cde" | "mvc-cde"; throws UsageError naming `flag`.
ModelKind parse_model_kind(const std::string& s, const std::string& flag);
std::string to_string(ModelKind k);

/// Architecture.
struct ModelConfig {
  ModelKind kind = ModelKind::cde;
  PathKind path = PathKind::cubic;
  SmoothOptions smooth;             ///< kernel, bandwidth, GP length-scale and noise (single-view)
  std::vector<double> bandwidths;   ///< per head (mv/mvc): kernel bandwidth or GP length-scale
  int channels = 0;                 ///< input channels C (including the time channel)
  int hidden = 32;                  ///< CDE state size per head
  int width = 128;                  ///< hidden width of f (cde only; heads use `hidden`)
  int classes = 2;
  int heads() const { return kind == ModelKind::cde ? 1 : static_cast<int>(bandwidths.size()); }
};

/// Result of one sample.
struct SampleOutput {
  Eigen::VectorXd logits;  ///< [classes]
  double loss = 0;         ///< cross-entropy (when a label was given)
  long nfe = 0;            ///< forward evaluations of f (joint system of all heads)
  long nfe_backward = 0;   ///< VJP evaluations in the backward pass
};

/// The parameters and the per-sample computation.  Copy a model to get a per-thread replica
/// with its own gradient buffers.
class Model {
 public:
  Model() = default;
  /// Allocates the layers for `cfg` (validated: channels, hidden, width, classes >= 1; mv/mvc
  /// need kernel or gp paths and >= 1 bandwidth).  Throws UsageError.
  explicit Model(ModelConfig cfg);
  const ModelConfig& config() const { return cfg_; }
  /// PyTorch-default initialisation (Linear/Conv1d uniform(+-1/sqrt(fan_in)), queries N(0, 1)).
  void init(Rng& rng);
  /// Views of every parameter with its gradient (stable order; used by Adam and checkpoints).
  std::vector<nn::ParamRef> params();
  void zero_grad();
  /// Adds another replica's gradients into this one.
  void add_grad(Model& other);
  /// Total number of scalar parameters.
  long num_params();

  /// Runs one series.  label >= 0: also backpropagates the cross-entropy loss, accumulating
  /// into this model's gradients.  `where` names the series in errors.  Throws InputError on
  /// a bad series and RuntimeError when the solver fails.
  SampleOutput run(const Series& s, int label, const SolveOptions& opt, const std::string& where = {});

  /// The attention weights [H, L] this model gives a series (mv/mvc; empty for cde).
  Eigen::MatrixXd attention(const Series& s);

 private:
  friend class CdeField;
  void scores(const Series& s, Eigen::MatrixXd& xz, Eigen::MatrixXd& S, std::vector<Eigen::MatrixXd>* acts);
  ModelConfig cfg_;
  nn::Linear initial_, readout_;
  std::vector<nn::Linear> f1_, f2_;
  Eigen::MatrixXd q_, gq_;                   // mv-cde queries [H, C]
  nn::Linear conv1_, conv2_, to_heads_;      // mvc-cde
};

}  // namespace icmlkit::cde
