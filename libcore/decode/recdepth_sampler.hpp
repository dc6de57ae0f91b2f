// Samplers for recurrent-depth ("looped") language models (issue 36), on the CPU engine's
// lm::RecurrentDepthForward with the compressed "latest" KV cache (KvCache(config): one layer per
// core block, a committed position keeps its latest iteration's K/V).
//
//   - ar: prefill at recurrence r, then one token per forward, each row iterated r times from the
//     state drawn from (state seed, its position): lm::forward with ForwardOptions::recurrence r.
//   - ar-adaptive: Huginn's per-token adaptive compute (seal-rg/recurrent-pretraining
//     raven_modeling_minimal.py generate_with_adaptive_compute with KLExitEvaluator): one
//     iteration at a time, the coda after each, exit when KL(p_prev || p_cur) < threshold.
//   - diffusion-forcing: the parallel sampler of Geiping, Yang & Su, "Efficient Parallel Samplers
//     for Recurrent-Depth Models and Their Connection to Diffusion Language Models" (arXiv
//     2510.14961; the reference's generate_diffusion_style), with the deviations documented at
//     recdepth_generate.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lm/model.hpp"
#include "lm/sampler.hpp"

namespace icmlkit::decode {

/// A recurrent-depth sampling method.
enum class RecdepthMethod { ar, ar_adaptive, diffusion_forcing };
/// Parses "ar" | "ar-adaptive" | "diffusion-forcing"; throws UsageError naming `flag`.
RecdepthMethod parse_recdepth_method(const std::string& name, const std::string& flag = "--method");
/// The name parse_recdepth_method reads.
const char* recdepth_method_name(RecdepthMethod m) noexcept;

/// When the diffusion-forcing sampler freezes positions (the reference's freeze_strategy).
enum class FreezeRule {
  latent_diff,      ///< delta_i = ||s_i - s_i^prev|| / ||s_i|| < exit_threshold
  token_stability,  ///< the token at i was resampled unchanged in more than r / inner steps
  fixed,            ///< after the first r / inner steps, `headway` positions per step
};
/// Parses "latent-diff" | "token-stability" | "fixed"; throws UsageError naming `flag`.
FreezeRule parse_freeze_rule(const std::string& name, const std::string& flag = "--freeze");
/// The name parse_freeze_rule reads.
const char* freeze_rule_name(FreezeRule f) noexcept;

/// The settings of one recurrent-depth sampling run.
struct RecdepthSampleConfig {
  RecdepthMethod method = RecdepthMethod::ar;
  int recurrence = 0;          ///< r: core iterations (ar), the most per token (ar-adaptive), the prefill's and the per-position cap (diffusion-forcing); 0 = mean_recurrence
  int max_new_tokens = 64;     ///< tokens to generate at most (the prefill's token included)
  bool stop_at_eos = true;     ///< stop after the model's eos token
  lm::SamplerConfig sampler;   ///< greedy by default; its seed seeds the token draws
  std::uint64_t state_seed = 0;  ///< initial latent states (lm::draw_state from (seed, position)), state noise, the random extra tokens of headway > 1
  double kl_threshold = 1e-3;  ///< ar-adaptive: exit when KL(p_prev || p_cur) < this (nats; KLExitEvaluator's "auto")
  int inner_recurrence = 4;    ///< diffusion-forcing: core iterations per forward
  double ema = 0.1;            ///< diffusion-forcing: embedding EMA weight of the previous step, in [0, 1)
  double state_noise = 0.5;    ///< diffusion-forcing: beta0 of the state noise beta_i = beta0 / (1 + n_i), in [0, 1]
  int headway = 1;             ///< diffusion-forcing: new positions appended per forward
  FreezeRule freeze = FreezeRule::latent_diff;
  double exit_threshold = 0.03;  ///< diffusion-forcing latent-diff: freeze when delta_i < this
  int max_wavefront = 128;     ///< diffusion-forcing: most positions in one forward (>= headway)

  /// r as run on `config`: recurrence, or the model's mean_recurrence when 0.
  int effective_recurrence(const lm::ModelConfig& config) const noexcept;
  /// Throws UsageError naming the flag for a negative recurrence or max_new_tokens, a negative
  /// kl_threshold or exit_threshold, inner_recurrence or headway < 1, max_wavefront < headway,
  /// ema outside [0, 1) or state_noise outside [0, 1], and the sampler's own errors.
  void validate() const;
};

/// Throws InputError "not a recurrent-depth model (its blocks are ...)" naming `where` unless the
/// model's blocks are recdepth-prelude* recdepth-core+ recdepth-coda*.
void require_recdepth(const lm::ModelConfig& config, const std::string& where);

/// What one forward of a sampling run did (a line of recdepth-sample's --steps-log).
struct RecdepthStep {
  int step = 0;              ///< forward index within the run, from 0 (the prefill is not a step)
  int first_pos = 0;         ///< position of the forward's first row
  int wavefront = 0;         ///< rows in the forward (1 for ar and ar-adaptive)
  int frozen = 0;            ///< generated tokens frozen after this step (the prefill's included)
  int committed = 0;         ///< tokens frozen (streamed) by this step
  long long core_iterations = 0;  ///< core-iteration row evaluations: rows x iterations run
  int min_iterations = 0, max_iterations = 0;  ///< least and most iterations a row of the forward has had after it
  double kl = -1;            ///< ar-adaptive: KL of the last check (-1 elsewhere)
  double wall_s = 0;         ///< seconds of the step
};

/// The result of one run on one prompt.
struct RecdepthResult {
  std::vector<int> tokens;   ///< generated ids (the first from the prefill; the eos token included when it stopped there)
  /// Core iterations of the row that predicted each generated token when that token was frozen
  /// [tokens.size()] (the first: the prefill's r).
  std::vector<int> recurrence_per_token;
  std::vector<RecdepthStep> steps;
  int prompt_tokens = 0;
  int recurrence = 0;        ///< r used
  long long forwards = 0;    ///< forwards after the prefill (steps.size())
  long long core_iterations = 0;  ///< core-iteration row evaluations after the prefill (sum over steps)
  long long coda_rows = 0;   ///< rows through the coda and head after the prefill
  double prefill_s = 0;      ///< prefill seconds (first token included)
  double generate_s = 0;     ///< seconds after the prefill
  std::string stop_reason;   ///< "max_new_tokens", "eos" or "n_ctx"
  /// Tokens made after the prefill: tokens.size() - 1 (0 when none).
  int decode_tokens() const noexcept { return tokens.empty() ? 0 : static_cast<int>(tokens.size()) - 1; }
};

/// Called with the tokens each step freezes, in order (streaming).
using FrozenSink = std::function<void(const std::vector<int>&)>;

/// Generates a continuation of `prompt` (token ids, at positions 0..) with `model` (a
/// recurrent-depth model; CPU engine) by cfg.method.  Every method prefills the prompt in one
/// forward at recurrence r (states from (state_seed, position)) and draws the first token from its
/// last row; generation stops after max_new_tokens tokens, at the eos token (stop_at_eos), or when
/// the next position would be n_ctx.
///
/// ar-adaptive: per token, the prelude once, then up to r times one core iteration and the coda
/// and head; it exits after iteration i when KL(p_{i-1} || p_i) < kl_threshold (p_0 uniform; KL
/// in double, clamped at 0, so threshold 0 never exits and equals ar), and the row's K/V of its
/// last iteration is committed.  The prompt always gets r (the reference's do_not_exit_in_prefill).
///
/// diffusion-forcing (reference: generate_diffusion_style, defaults inner 4, ema 0.1, noise 0.5,
/// headway 1, latent-diff 0.03, max_wavefront 128).  Positions < F are frozen (prompt and
/// committed tokens); the cache holds rows < c = F - 1; the wavefront is positions c..c+W-1 (the
/// last frozen token first).  Each step is one RecurrentDepthForward over the wavefront (causal
/// among its rows, full view of the cache):
///   1. the prelude; e = (1 - ema) e_new + ema e_old with e_old the position's mixed embedding of
///      the previous step, taken as 0 for a position new to the wavefront (the reference's
///      arithmetic; the first wavefront position after the prefill keeps e_new, the reference
///      mixing it with itself);
///   2. s = (1 - beta_i) s + beta_i eps, beta_i = state_noise / (1 + n_i), n_i the iterations
///      position i has had, eps = lm::draw_state(per-step seed, i);
///   3. inner_recurrence core iterations, the coda and the head on every row; row i's token for
///      position i + 1 is resampled (every active token);
///   4. freeze: Q = the last frozen position, the largest of c, the latent-diff / token-stability
///      / fixed rule's position (df_freeze_position) and 1 + the last row with n_i >= r; tokens
///      c+1..Q become frozen and rows c..Q-1 are committed (the reference's clear_last_k_entries:
///      the cache keeps k - 1 = Q entries, so the last frozen position stays in the wavefront,
///      its row giving the next token's logits); the unfrozen rows' K/V are dropped;
///   5. the next wavefront: positions Q..c+W-1 (states, counts, embeddings kept), then new
///      positions from c+W, at most headway of them and as many as keep the wavefront within
///      max_wavefront (and at most the last position to generate); position c+W takes the token
///      row c+W-1 just sampled, further new positions a seeded uniformly random id in
///      [0, vocab) (the reference's torch.randint extra_tokens); a new position's state is
///      lm::draw_state(state_seed, position), as in ar.
/// Deviations from the reference, all documented here: (a) the per-position cap at r (a position
/// whose row has had at least r iterations freezes the next one, in step 4; with inner_recurrence
/// not dividing r the last step may take a row past r), which guarantees progress and makes
/// inner_recurrence r, max_wavefront 1, ema 0 and state_noise 0 reproduce ar token for token; (b)
/// the wavefront cap applies after the freeze, not before it (the reference caps the appended
/// positions first, and with max_wavefront 1 never advances); (c) delta_i compares position i
/// with its own state at the start of the step (the reference indexes its previous states from
/// the previous step's first position, which after a freeze is off by the positions frozen);
/// (c') every rule (and the cap) freezes only tokens predicted by rows whose input tokens this
/// step's resampling left unchanged, Q <= c + the first changed position (the reference freezes
/// predictions made from since-replaced random extra tokens: repeated words with headway > 1);
/// (d) n_i counts the iterations run (the reference credits the first generated position with the
/// prefill's r); (e) no position beyond the last token to generate enters the wavefront.
/// Greedy by default; with a temperature every row is sampled with cfg.sampler's generator, in
/// row order.  Throws InputError for a model that is not recurrent-depth, an empty prompt, ids
/// outside the vocabulary or a prompt of n_ctx tokens or more; UsageError from validate().
RecdepthResult recdepth_generate(const lm::Model& model, const std::vector<int>& prompt, const RecdepthSampleConfig& cfg,
                                 const FrozenSink& sink = {});

/// The freeze rule's position (step 4 of the diffusion-forcing sampler, without the cap at r):
/// for a wavefront starting at position c whose rows had delta[i] (latent-diff), stable[i]
/// (token-stability: steps in which the token at c + i was resampled unchanged; entry 0 unused)
/// in forward `step` (0-based), returns latent-diff: c + the last i with delta[i] <
/// exit_threshold; token-stability: c + the last i >= 1 with stable[i] > r / inner_recurrence;
/// fixed: c + min(headway, W) once step > r / inner_recurrence; else c (nothing new frozen).
/// [delta.size() = stable.size() = W].
int df_freeze_position(const RecdepthSampleConfig& cfg, int recurrence, int first_pos, int step,
                       const std::vector<double>& delta, const std::vector<int>& stable);

/// KL(softmax(p) || softmax(q)) in nats for logits p, q [vocab], computed in double; p == nullptr
/// stands for the uniform distribution (KLExitEvaluator's initial p_0).  Clamped at 0.
double kl_logits(const float* p, const float* q, int vocab);

/// The held-out-style score of a continuation: mean negative log-likelihood (nats per token) of
/// `continuation` after `prompt` under one lm::forward over prompt + continuation at recurrence
/// `recurrence` (states from (state_seed, position)), and its perplexity exp(mean_nll).
struct ContinuationScore {
  int tokens = 0;
  double mean_nll = 0;
  double perplexity = 0;
};
/// Throws InputError for an empty prompt or continuation, or more than n_ctx tokens together.
ContinuationScore score_continuation(const lm::Model& model, const std::vector<int>& prompt, const std::vector<int>& continuation,
                                     int recurrence, std::uint64_t state_seed);

/// Fraction of positions i < min(|a|, |b|) with a[i] == b[i] (0 when either is empty).
double agreement(const std::vector<int>& a, const std::vector<int>& b);

}  // namespace icmlkit::decode
