// Distilling a Llama teacher into the hybrid xLSTM student of "Effective Distillation to Hybrid
// xLSTM Architectures" (Hauzenberger et al., arXiv 2603.15590; issue 35): the student's
// initialisation, Stage I (layer-wise hidden-state alignment), Stage II's sparse top-k
// knowledge-distillation loss (a logits hook for the Trainer) and Stage III (the weighted merge
// of experts).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lm/model.hpp"
#include "nn/adamw.hpp"
#include "nn/llama_train.hpp"

namespace icmlkit::nn {

/// The student of `teacher` (paper sec. 3.1): every block becomes mlstm-hybrid with `mixer`,
/// keeping the teacher's embeddings, norms, W_q, W_k, W_v, W_o and MLP; n_ctx becomes `n_ctx`
/// (the student has no position limit of its own: its cache is a window and a state).  The new
/// tensors (the paper gives no initial values [I]): Hedgehog maps F = I (phi = softmax of q, k);
/// input gate W = 0, b = 0; forget gate W = 0, b from 3 to 6 across heads (xLSTM's
/// initialisation: f = 0.95 .. 0.9975); output gate W = 0, b = 0 (o = 1/2).  Throws UsageError
/// for a teacher with other than llama blocks, InputError for a bad mixer config.
lm::Model make_student(const lm::Model& teacher, const lm::MlstmConfig& mixer, int n_ctx);

/// Whether store tensor `name` is one of an mlstm-hybrid block's mixer tensors (feature maps and
/// gates: what Stage I trains).
bool is_mixer_tensor(const std::string& name) noexcept;

/// Stage I's settings.
struct AlignOptions {
  int seq_len = 256;             ///< tokens per window
  int batch = 8;                 ///< windows per step
  std::int64_t steps = 100;      ///< optimizer steps
  double lr = 1e-2, min_lr = 1e-5;  ///< cosine from lr to min_lr (the paper's Stage I schedule)
  double clip = 1.0;             ///< global gradient-norm limit (0 = off)
  AdamWOptions adam{0.9, 0.95, 1e-8, 0.0};  ///< no weight decay on the maps and gates
  std::uint64_t seed = 0;        ///< data order
};

/// One Stage I step.
struct AlignStep {
  std::int64_t step = 0;         ///< steps done after this one
  double mse = 0;                ///< mean over blocks of the mean squared error per element
  std::vector<double> block_mse; ///< per block [n_layers]
  double lr = 0, grad_norm = 0;
};

/// Stage I: min sum_l ||h^l - h^l_student||^2 (paper sec. 3.2): block l of the student is fed the
/// teacher's residual entering block l, and its output is matched to the teacher block's output
/// (mean squared error per element, averaged over blocks); only the mixer tensors (feature maps
/// and gates) train, by AdamW on a cosine schedule.  `student` is updated in place;
/// `on_step` sees every step.  The stream's windows are drawn in a seeded epoch order.  Throws
/// InputError when the stream holds no window or the two models' shapes differ, RuntimeError on
/// a non-finite loss.
void align_layers(const lm::Model& teacher, lm::Model& student, const std::vector<int>& stream, const AlignOptions& opt,
                  const std::function<void(const AlignStep&)>& on_step);

/// Stage II's sparse knowledge-distillation loss as a TrainCache logits hook:
/// per position gamma CE(y) + beta KL(p_T^(k) || p_S^(k)) (sec. 3.2: gamma 0.9, beta 0.1, k 256), p^(k) the softmax over the teacher's
/// k largest logits only (renormalised on that set, for both models).  The hook runs the
/// frozen teacher on the batch (the trainer's float forward), scales the cross-entropy gradient
/// by gamma and adds beta grad_scale (p_S^(k) - p_T^(k)) on the k entries; it returns the summed
/// KL (nats).  Copyable handle sharing one teacher and buffers.
class TopKDistillLoss {
 public:
  /// Throws UsageError for k < 1 or > vocab, negative weights, or both weights 0.
  TopKDistillLoss(const lm::Model& teacher, int seq_len, int k, double ce_weight, double kl_weight);
  /// The hook (TrainCache<float>::logits_hook's signature).
  double operator()(const std::vector<int>& tokens, const float* logits, int N, int V, float* dlogits, double grad_scale);

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// Stage III (paper eq. 14): theta = sum_i lambda_i theta_i over experts of one architecture.
/// Throws UsageError when the weights are negative, do not sum to 1 (within 1e-6) or their count
/// differs from the experts', InputError (naming the expert) when configs, tensor shapes or
/// tokenizers differ.
lm::Model merge_experts(const std::vector<lm::Model>& experts, const std::vector<double>& weights,
                        const std::vector<std::string>& names);

}  // namespace icmlkit::nn
