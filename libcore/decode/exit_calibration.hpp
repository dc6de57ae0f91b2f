// Offline calibration of early exit (issue 28; WAVE's exit window scheduling and proxy head).
//
// The full model runs over calibration text; the final RMSNorm and LM head are applied after every
// block (the logit lens).  From the per-token lens the calibration simulates each method's exit
// rule teacher-forced (the full model's hidden states, no state-copy drift) and picks the settings
// with the fewest expected FLOPs per token (decode::StepCost) whose simulated agreement with the
// full model's argmax meets a target:
//   - wave: window [start, end], proxy size K (a grid) and threshold tau;
//   - calm: first checked depth and threshold (full head at every depth);
//   - dvp: threshold and K at a fixed pruning depth;
//   - layerskip: the shallowest fixed exit depth meeting the target.
#pragma once

#include <cstdint>
#include <vector>

#include "decode/early_exit.hpp"
#include "lm/model.hpp"

namespace icmlkit::decode {

/// The logit lens of calibration tokens.  Depths l = 1..L-1 are the exit candidates (L = n_layers).
struct LensData {
  int n_layers = 0, vocab = 0;
  std::vector<int> ks;                    ///< proxy sizes considered, ascending (each <= vocab)
  std::vector<int> final_argmax;          ///< [T] the full model's greedy token
  std::vector<std::vector<int>> argmax;   ///< [L - 1][T] full-head argmax after l blocks
  std::vector<std::vector<float>> gap;    ///< [L - 1][T] full-head top-2 softmax gap after l blocks
  /// Proxy heads chosen at start depth s: [s - 1][k][l - s][T] for l = s..L-1, the top-2 gap over
  /// the top-ks[k] ids of depth s's full head, and whether their argmax is the final token.
  std::vector<std::vector<std::vector<std::vector<float>>>> proxy_gap;
  std::vector<std::vector<std::vector<std::vector<std::uint8_t>>>> proxy_ok;
  double context_sum = 0;                 ///< sum of the tokens' attention context (positions + 1)

  /// Tokens recorded.
  std::size_t tokens() const noexcept { return final_argmax.size(); }
};

/// Empty lens data for `model` with proxy sizes `ks` (clamped to the vocabulary, sorted, unique).
LensData make_lens(const lm::ModelConfig& config, std::vector<int> ks);

/// Runs `model` over one window of `tokens` (positions 0..; at most n_ctx) and appends every row
/// to `lens` (rows whose next token is beyond the window count too: the lens compares argmaxes,
/// not the text).  Throws InputError for an empty or too long window.
void add_lens_window(const lm::Model& model, const std::vector<int>& tokens, LensData& lens);

/// A calibrated setting and what the simulation says it does.
struct ExitChoice {
  ExitConfig config;         ///< method and its settings
  double agreement = 1;      ///< simulated fraction of tokens equal to the full model's
  double mean_depth = 0;     ///< blocks run per token
  double exit_rate = 0;      ///< fraction of tokens that exit
  double flops = 0;          ///< expected FLOPs per token
  double head_flops = 0;     ///< of which in the LM head (full and proxy)
  bool met = false;          ///< the target agreement was reached (else: the most accurate found)
};

/// The thresholds searched: 0.05..0.95 by 0.05, then 0.97, 0.98, 0.99, 0.995, 0.999.
std::vector<double> threshold_grid();

/// The per-depth agreement a_l = P(full-head argmax after l blocks == final), l = 1..L (a_L = 1).
std::vector<double> depth_agreement(const LensData& lens);
/// Histogram over l = 1..L of each token's saturation depth: the earliest l from which the
/// argmax equals the final one at every later depth.
std::vector<std::int64_t> saturation_histogram(const LensData& lens);

/// The cheapest setting of `method` (wave, calm, dvp or layerskip) with simulated agreement >=
/// `target`, by `cost`.  dvp keeps `base.dvp_layer`; calm and wave search their depths.  Throws
/// InputError when the lens is empty; UsageError for another method.
ExitChoice calibrate(const LensData& lens, ExitMethod method, double target, const StepCost& cost, const ExitConfig& base = {});

/// The simulated agreement, depth and cost of a given setting (wave, calm, dvp, layerskip, full).
ExitChoice simulate(const LensData& lens, const ExitConfig& config, const StepCost& cost);

}  // namespace icmlkit::decode
