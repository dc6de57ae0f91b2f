// Training-free early exit for greedy decoding (issue 28): WAVE and the baselines it is compared
// with, on lm::LayerwiseForward.
//
//   - wave (Kim, Lee & Kim, ICML 2026; only the abstract is public, the rest follows its verified
//     precedents DVP and CALM): after window_start blocks the full LM head runs once and keeps the
//     top proxy_k token ids (the proxy head); at every depth l in [window_start, window_end] the
//     confidence is the top-2 softmax gap over those K logits, and the token exits with the argmax
//     over K when it reaches the threshold; past window_end the full model runs.
//   - calm (Schuster et al. 2022): the full head at every depth from min_layer, top-2 softmax gap
//     against a threshold, optionally decaying with the step: clip(0.9 lambda + 0.1 exp(-tau t / N)).
//   - dvp (Vincenti et al. 2024, fixed pruning): the vocabulary pruned once at dvp_layer to the top
//     proxy_k ids, confidence exits at every later depth (no window end).
//   - skipdecode (Del Corro et al. 2023): token t of N runs the top n_t blocks, n_t falling
//     linearly from skip_max to skip_min (a warm-up block always runs first); the lower blocks
//     are bypassed, so no later token attends them and their K/V is not computed.
//   - layerskip (Elhoushi et al. 2024, its fixed-exit draft): exit after exit_layer blocks.
//   - full: every block, the full head.
// Depths count blocks run (1..n_layers).  An exit fills the K/V of the blocks not run by state
// copying (LayerwiseForward::copy_state), so later tokens attend a complete cache.
#pragma once

#include <string>
#include <vector>

#include "lm/kv_cache.hpp"
#include "lm/model.hpp"

namespace icmlkit::decode {

/// An early-exit method.
enum class ExitMethod { full, wave, calm, dvp, skipdecode, layerskip };

/// Parses "full" | "wave" | "calm" | "dvp" | "skipdecode" | "layerskip"; throws UsageError naming `flag`.
ExitMethod parse_exit_method(const std::string& name, const std::string& flag = "--method");
/// The name parse_exit_method reads.
const char* exit_method_name(ExitMethod m) noexcept;

/// The settings of one early-exit run.
struct ExitConfig {
  ExitMethod method = ExitMethod::full;
  int window_start = 1;     ///< wave: depth of the proxy head's selection and the first check
  int window_end = 1;       ///< wave: last depth checked
  int proxy_k = 128;        ///< wave, dvp: proxy vocabulary size
  double threshold = 0.9;   ///< wave, calm, dvp: top-2 softmax gap needed to exit (> 1: never)
  int min_layer = 1;        ///< calm: first depth checked
  double decay_tau = 0;     ///< calm: threshold decay rate (0: constant)
  int max_new = 128;        ///< calm (decay), skipdecode (schedule): tokens to generate, N
  int dvp_layer = 2;        ///< dvp: depth of the pruning
  int skip_min = 1, skip_max = 1;  ///< skipdecode: blocks run by the last and the first token
  int skip_warmup = 1;      ///< skipdecode: lowest blocks always run
  int exit_layer = 1;       ///< layerskip: fixed exit depth

  /// Throws UsageError (naming the flag) for depths outside [1, n_layers] (window_end < n_layers
  /// for wave), a window that ends before it starts, proxy_k outside [2, vocab], a negative
  /// threshold, skip_min > skip_max or a warm-up above skip_min.
  void validate(const lm::ModelConfig& config) const;
};

/// FLOPs of the pieces of one decode step (multiply-adds count 2): a block at a mean attention
/// context, the full head, one head row (the proxy head costs k rows) and a state copy (a block's
/// K/V projections).
struct StepCost {
  double block = 0, head = 0, head_row = 0, state_copy = 0;
  /// For `config` with `context` cached tokens attended on average.
  static StepCost of(const lm::ModelConfig& config, double context);
};

/// What one early-exit decode step did.
struct ExitStep {
  int token = 0;           ///< the emitted token
  int depth = 0;           ///< blocks run (n_layers when it did not exit)
  bool exited = false;     ///< left before the last block
  double confidence = 0;   ///< the last check's top-2 gap (0 when none ran)
  double head_flops = 0;   ///< head FLOPs spent (full and proxy)
  double flops = 0;        ///< all FLOPs of the step (blocks, heads, state copies) by StepCost
  int checks = 0;          ///< exit checks made
};

/// The logits an exit decision emitted from: the full head's [vocab] (ids empty) or a proxy
/// head's over `ids`.
struct ExitLogits {
  std::vector<int> ids;
  std::vector<float> logits;
  /// -log p(token) under the softmax of these logits; +inf when a proxy head leaves `token` out.
  double nll(int token) const;
};

/// The top-2 softmax gap p1 - p2 of `z` [n] and its argmax (lowest index on ties): softmax in double.
double top2_gap(const float* z, int n, int* argmax = nullptr);

/// Decodes one token greedily: `input` at position `pos` (the previous token; the cache holds
/// everything before it), the `t`-th generated token (0-based, for calm's decay and skipdecode's
/// schedule).  Commits the row's K/V (state-copied for blocks not run; zero for skipdecode's
/// bypassed blocks, which no later row attends).  `cost` prices the step.  With `logits`, also the
/// logits the token was chosen from.  Throws InputError from the forward.
/// With `shared`, also the residual [d_model] after shared_depth(cfg) blocks (before any exit).
ExitStep exit_decode_step(const lm::Model& model, lm::KvCache& cache, int input, int pos, int t, const ExitConfig& cfg,
                          const StepCost& cost, ExitLogits* logits = nullptr, std::vector<float>* shared = nullptr);

/// The blocks every decode step of `cfg` runs in full before it may exit or bypass any: full
/// n_layers, wave window_start, calm min_layer, dvp dvp_layer, layerskip exit_layer, skipdecode
/// 0 (its lower blocks are bypassed), capped at n_layers - 1 (a verifier always runs the last
/// block).  A verifier can reuse the drafts' work up to this depth.
int shared_depth(const ExitConfig& cfg, int n_layers) noexcept;

/// What a lossless (self-speculative) run did.
struct LosslessStats {
  int rounds = 0;            ///< verification passes
  int drafted = 0;           ///< draft tokens proposed
  int accepted = 0;          ///< draft tokens accepted
  std::vector<ExitStep> draft_steps;  ///< every draft step (accepted or not)
  std::vector<char> draft_accepted;   ///< per draft step: whether the verifier accepted it
  int reused_depth = 0;      ///< blocks of the drafts' work the verifier reused (0: none)
  double verify_flops = 0;   ///< FLOPs of the verification (StepCost), including the last draft's lower blocks
  /// Mean tokens emitted per verification pass (accepted drafts + the verifier's token).
  double tokens_per_round() const { return rounds ? double(accepted + rounds) / rounds : 0.0; }
};

/// Greedy decoding that is lossless: the early-exit rule `cfg` drafts up to `draft` tokens (each
/// an exit_decode_step, its K/V committed provisionally), then the full model verifies the input
/// token and the drafts in one causal pass over the cache as it was; the drafts that equal the
/// verifier's argmax are accepted, with the verifier's next token, and only the verified rows'
/// K/V (the full model's) stay in the cache.  The output equals full greedy decoding token for
/// token (self-speculative decoding, Zhang et al. 2024; LayerSkip with a fixed exit).  With
/// `reuse` (LayerSkip's KV reuse, generalised to any exit rule): every draft ran the first
/// shared_depth(cfg) blocks exactly, so the verifier takes those blocks' K/V and residuals from
/// the drafts (the last draft runs them once more) and runs only the blocks above: bitwise the
/// same verification at (L - shared) / L of its block cost.  `first` is the token after the
/// prompt (not in the cache, at position `pos`); returns n tokens starting with it.  Throws
/// InputError from the forward, UsageError for draft < 1.
std::vector<int> lossless_generate(const lm::Model& model, lm::KvCache& cache, int first, int pos, int n, int draft,
                                   const ExitConfig& cfg, const StepCost& cost, LosslessStats& stats, bool reuse = true);

/// skipdecode's blocks for token t of N: skip_max falling linearly to skip_min, rounded.
int skipdecode_blocks(const ExitConfig& cfg, int t);

}  // namespace icmlkit::decode
