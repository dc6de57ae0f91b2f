// LayerSkip's early-exit loss (Elhoushi et al. 2024, "LayerSkip: Enabling Early Exit Inference
// and Self-Speculative Decoding", sec. 4.2; torchtune's early_exit_loss and its curricula): the
// shared final RMSNorm and LM head applied to the residual stream after intermediate blocks,
// each exit's cross-entropy weighted by a scale rising with depth, so the early layers learn to
// predict the next token and early exit (issue 28: WAVE, --lossless) accepts more drafts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace icmlkit::nn {

/// Which intermediate exits are trained at a given optimizer step.
enum class ExitCurriculum {
  all,         ///< every exit of the --exit-every set, every step
  rotational,  ///< LayerSkip's C_rot,R: the set of every R-th layer shifted by one layer per step
  gradual,     ///< LayerSkip's C_grad: exits enabled from the last layer down, all on at half the run
};

/// How each active exit's loss is weighted before normalisation (torchtune's loss_scale types).
enum class ExitWeights {
  sum_l,  ///< cumulative sum of (layer + 1) over the active exits (LayerSkip's default: quadratic in depth)
  l,      ///< layer + 1
  one,    ///< uniform
};

/// The early-exit loss settings of a training run (stored in the checkpoint's options).
struct ExitLossOptions {
  double scale = 0;        ///< e_scale: multiplies every intermediate exit's weight; 0 = off
  int every = 1;           ///< R: exits after blocks l with (l + 1) % R == 0 (rotated by the curriculum)
  ExitCurriculum curriculum = ExitCurriculum::rotational;
  ExitWeights weights = ExitWeights::sum_l;
  bool enabled() const noexcept { return scale > 0; }
  /// {"exit_loss": scale, "exit_every": R, "exit_curriculum": ..., "exit_weights": ...}.
  nlohmann::json to_json() const;
};

/// Parses "all" | "rot" | "gradual" (UsageError otherwise, naming --exit-curriculum).
ExitCurriculum parse_exit_curriculum(const std::string& s);
/// Parses "sum_l" | "l" | "one" (UsageError otherwise, naming --exit-weights).
ExitWeights parse_exit_weights(const std::string& s);
const char* to_string(ExitCurriculum c) noexcept;
const char* to_string(ExitWeights w) noexcept;

/// One forward's exits: the block steps after which the head is applied, each loss's weight,
/// and (filled by llama_loss) each exit's summed cross-entropy.  The final layer's weight is
/// `final_weight` (its loss is llama_loss's return value).  Weights sum to 1.
struct ExitPlan {
  std::vector<int> steps;        ///< block steps (0-based, increasing, all < the last step)
  std::vector<double> weights;   ///< weight of each step's mean loss
  double final_weight = 1;       ///< weight of the final layer's loss
  std::vector<double> losses;    ///< out: summed cross-entropy at each exit (llama_loss)
};

/// The exits trained at optimizer step `step` (0-based) of a run of `total_steps`, for a forward
/// of `n_steps` block steps: the --exit-every set (shifted by `step` under the rotational
/// curriculum, cut from below under the gradual one: block l is on once step / total_steps >=
/// 0.5 (n_steps - l) / n_steps), the final layer always; weights by `opt.weights` over the active
/// exits in depth order, times `opt.scale` for the intermediate ones, normalised to sum 1.
/// Throws UsageError for every < 1 or scale < 0.
ExitPlan exit_loss_plan(const ExitLossOptions& opt, int n_steps, std::int64_t step, std::int64_t total_steps);

}  // namespace icmlkit::nn
