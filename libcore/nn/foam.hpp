// FOAM, the Folded Optimizer with Approximate Moments (Wen, Wang, Luo, Li & Sun, ICML 2026,
// arXiv 2512.07112; reference code zqOuO/FOAM, foam_torch/foam_adam.py).  Adam whose first and
// second moments of a matrix are kept per block of 2^l consecutive entries along its last
// dimension (the input dimension of a [out, in] weight): the gradient is folded to block means,
// the folded moments are updated, and at every step the residual R = g - unfold(fold(g)) is added
// back (m = unfold(m~) + s R, v = unfold(v~) + s^2 R^2) without being stored.  The state of a
// folded [m, n] matrix is 2 m ceil(n / 2^l) floats instead of Adam's 2 m n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// FOAM's hyperparameters (defaults: the reference class's; its pretraining scripts use level 2,
/// scale 0.25, lr 1e-2, and betas (0.9, 0.999) because the scripts' beta2 is never passed).
struct FoamOptions {
  int level = 2;             ///< l: block of 2^l entries along the last dimension (0 = Adam)
  double scale = 0.25;       ///< alpha: multiplies the folded matrices' update (the reference's `scale`)
  double res_scale = 1.0;    ///< s: weight of the residual in both moments
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;   ///< decoupled, after the update (p -= lr wd p), on Param::decay tensors
  /// The folded second-moment input: false = the reference code's mean(g^2) per block, true =
  /// the paper's (mean g)^2.
  bool paper_second_moment = false;
};

/// Whether FOAM folds the parameter `name` of `shape`: every matrix (2-D) but the token
/// embedding and the LM head (token_embd.weight, output.weight), as the reference folds every
/// 2-D parameter but embed_tokens and lm_head.
bool foam_folds(const std::string& name, const std::vector<int>& shape);

/// Throws UsageError (--foam-level) when `level` is outside [0, 16] or, for a tensor FOAM folds,
/// makes blocks wider than its `shape[1]` columns (naming the tensor).
void foam_check_level(int level, const std::string& name, const std::vector<int>& shape);

/// Columns of a folded matrix with `cols` columns: ceil(cols / 2^level) (the last block zero-padded).
std::size_t foam_folded_cols(int cols, int level);

/// One FOAM update of a folded matrix w [rows, cols] from its gradient g, with folded moments
/// mf, vf [rows, foam_folded_cols(cols, level)], at step t (from 1).  Per row and block of
/// f = 2^l entries (the last one zero-padded, so its mean divides by f as the reference's padded
/// mean does): mean = sum(g) / f, q = sum(g^2) / f (paper: mean^2); mf = b1 mf + (1 - b1) mean,
/// vf = b2 vf + (1 - b2) q; per entry r = g - mean, m = mf + s r, v = vf + s^2 r^2,
/// w -= lr sqrt(1 - b2^t) / (1 - b1^t) * scale m / (sqrt(v) + eps); then w -= lr wd w when `decay`.
template <class T>
void foam_update(T* w, const T* g, T* mf, T* vf, int rows, int cols, std::int64_t t, double lr, const FoamOptions& opt,
                 bool decay);

/// The reference's update of the parameters it does not fold (Adam with the bias correction in
/// the step size and eps outside it, as transformers' AdamW; then decoupled decay):
/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps),
/// w -= lr wd w when `decay`.  FOAM at level 0 with scale 1 is this update, bit for bit (FMA
/// contraction aside).
template <class T>
void foam_adam_update(T* w, const T* g, T* m, T* v, std::size_t n, std::int64_t t, double lr, const FoamOptions& opt,
                      bool decay);

/// FOAM over the LM trainer's parameter store: folded matrices by foam_update, the rest by
/// foam_adam_update.  State buffers "m/<name>", "v/<name>" (folded shapes for folded tensors).
/// Throws UsageError for a level outside [0, 16], negative scale, res_scale or eps, or betas
/// outside [0, 1).
class Foam final : public CountedOptimizer {
 public:
  Foam(const ParamStore<float>& store, FoamOptions opt);
  std::string name() const override { return "foam"; }
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override;

 private:
  FoamOptions opt_;
  std::vector<std::string> names_;
  std::vector<char> folded_;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace icmlkit::nn
