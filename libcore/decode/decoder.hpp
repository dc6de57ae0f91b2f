// Lossless multi-token decoding on the CPU engine: AR, Prompt Lookup Decoding, Lookahead
// Decoding, Self-Speculative Decoding and FAFO, in one harness.
//
// Every method decodes in steps.  A step is one forward batch (self-spec: several draft
// passes, then one) whose row 0 is the input token at position n_past with the full view.
// Candidate continuations (from the n-gram pool, the prompt or the draft) form a trie whose
// nodes are verification rows with the full view, each attending row 0 and its ancestors.
// Lookahead / FAFO add the Jacobi window's rows (drafting rows), which attend the full view
// (lookahead) or the compressor's keep sets (FAFO).  Acceptance walks the trie from the root:
// greedy takes the argmax at each node and descends while a child carries it; sampling runs
// speculative acceptance for deterministic drafts (each distinct child token x is accepted with
// probability p'(x), the residual p' losing x on rejection; a rejected or leaf node draws the
// bonus token from p').  Only the input row and the accepted verification rows are committed;
// the engine's batch invariance makes their K/V, and so the output, those of AR decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/policy.hpp"
#include "lm/engine.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"

namespace icmlkit::decode {

/// A decoding method.
enum class Method { ar, prompt_lookup, lookahead, self_spec, fafo };

/// Parses "ar" | "prompt-lookup" | "lookahead" | "self-spec" | "fafo"; UsageError otherwise.
Method parse_method(const std::string& name);
/// The name parse_method() reads.
const char* method_name(Method m) noexcept;

/// The layers a self-speculative draft skips: per layer, attention and MLP sublayers.
struct SkipSet {
  std::vector<char> attn, mlp;  ///< [n_layers] each, 1 = skipped
  /// Number of skipped sublayers.
  int count() const;
  /// JSON text {"attn": [layer ids], "mlp": [layer ids], ...meta}.
  std::string to_json(const std::string& meta_json = "{}") const;
  /// Reads the JSON written by to_json for a model of n_layers; InputError on a bad file.
  static SkipSet from_json(const std::string& text, int n_layers, const std::string& where);
};

/// Settings of one generation.
struct DecodeConfig {
  Method method = Method::ar;
  int max_new_tokens = 128;      ///< >= 1
  bool stop_at_eos = true;       ///< stop right after the model's eos token
  lm::SamplerConfig sampler;     ///< temperature 0 = greedy
  // Lookahead / FAFO: Jacobi window W, n-gram size N, guesses verified per step G.
  int window = 7, ngram = 5, guesses = 7;
  // Prompt lookup: match the last max..min tokens, draft k.
  int pld_max_ngram = 3, pld_min_ngram = 1, pld_draft = 10;
  // Self-speculative: skipped sublayers, at most draft_max tokens, stop when the draft's top
  // probability falls below draft_stop.
  SkipSet skip;
  int draft_max = 8;
  double draft_stop = 0.8;
  // FAFO: the compressor of the drafting rows' view.
  kv::PolicyConfig kv;
  /// FAFO: choose each step's shape (lookahead W, N, G and prompt-match draft pld_draft, at most
  /// window / ngram / guesses; AR included) from the engine's calibrated pass costs and the running
  /// acceptance (decode/adaptive.hpp); false: every step is the fixed (W, N, G) of the paper.
  bool adaptive = false;
  /// Adaptive FAFO: the pass-cost cache file ("" = measure every run, keep nothing).
  std::string pass_cost_cache;
  bool time_attention = true;    ///< measure attention CPU time per row kind
  /// Throws UsageError for out-of-range settings (W, N, G, budget, draft lengths).
  void validate(const lm::ModelConfig& model) const;
};

/// One decode step.
struct StepRecord {
  int step = 0;
  int n_past = 0;           ///< committed cache slots before the step
  int rows = 0;             ///< forward rows of the verifying pass (input + drafting + verification)
  int draft_rows = 0;       ///< lookahead/FAFO window rows (self-spec: draft passes)
  int verify_rows = 0;      ///< candidate-trie rows
  int candidates = 0;       ///< candidate continuations offered
  int accepted = 0;         ///< tokens emitted this step (accepted drafts + 1)
  /// Adaptive FAFO: the arm run (index into DecodeResult::schedule's arms; -1 otherwise) and
  /// the prompt-match tokens it drafted.
  int arm = -1;
  int prompt_draft = 0;
  /// Accepted draft tokens (accepted - 1) by who proposed them: a prompt match only, the n-gram
  /// pool (filled by the lookahead rows) only, or both.
  int from_prompt = 0, from_lookahead = 0, from_both = 0;
  double wall_s = 0.0;
  /// Seconds of wall_s spent inside the engine's calls (forward, commit, truncate): the rest,
  /// wall_s - engine_s, is the decoder's own host work (trie, window, n-gram pool, compressor),
  /// which a GPU does not hide.
  double engine_s = 0.0;
  double draft_attn_cpu_s = 0.0;   ///< attention CPU seconds of drafting rows
  double verify_attn_cpu_s = 0.0;  ///< attention CPU seconds of the input and verification rows
};

/// Result of one generation.
struct DecodeResult {
  std::vector<int> tokens;        ///< generated ids (the prompt excluded)
  std::vector<StepRecord> steps;  ///< decode steps (the prefill excluded)
  double prefill_s = 0.0;
  double decode_s = 0.0;
  int forward_passes = 0;         ///< decode forward calls (self-spec counts draft passes)
  /// Whether the engine measured attention CPU time (the CPU engine does; the CUDA engine not):
  /// without it the steps' *_attn_cpu_s are 0 and mean nothing.
  bool attention_timed = false;
  bool eos = false;               ///< stopped at the eos token
  bool context_full = false;      ///< stopped because the context was full
  /// Adaptive FAFO: the arms with their steps and estimates, the pass costs and where they came
  /// from ("measured" or "cache"); null otherwise.
  nlohmann::json schedule;
};

/// Called with each generated token as soon as it is accepted (for streaming output).
using TokenSink = std::function<void(int token)>;

/// Generates from `prompt` (token ids, non-empty, shorter than n_ctx) on the CPU.  `on_token`,
/// when set, sees every generated token in order as it is accepted (inside the timed decode).
/// Throws InputError for an empty prompt or one that fills the context, UsageError for bad
/// settings.
DecodeResult generate(const lm::Model& model, const std::vector<int>& prompt, const DecodeConfig& config,
                      const TokenSink& on_token = {});
/// The same on any engine (CPU or CUDA, lm/engine.hpp); the engine's cache is cleared first.
/// Outputs are those of the engine's forward(): on the CPU bitwise the overload above.
/// Throws what the engine throws for options it lacks (CUDA: FAFO compressors other than
/// streaming need attention records, which the CUDA engine refuses).
DecodeResult generate(lm::Engine& engine, const std::vector<int>& prompt, const DecodeConfig& config,
                      const TokenSink& on_token = {});

/// Greedy search for a self-speculative skip set on calibration prompts: starting from no
/// skips, repeatedly adds the sublayer whose skipping maximises the modelled speed
/// accepted_tokens / (1 + draft_passes * (1 - skipped / (2 n_layers))) per verifying pass,
/// measured by greedy self-spec decoding of `new_tokens` tokens per prompt; stops when no
/// addition improves it or `max_skips` is reached.  Returns the set and writes the objective
/// trace to `trace` (one value per accepted addition, starting with the empty set).
SkipSet search_skip_set(const lm::Model& model, const std::vector<std::vector<int>>& prompts, int new_tokens,
                        const DecodeConfig& base, int max_skips, std::vector<double>* trace = nullptr);

}  // namespace icmlkit::decode
