// A forward pass run one block step at a time: the CPU engine's forward() is this class run to the
// end, so every partial run is bitwise a prefix of forward().  Early-exit decoding (WAVE, CALM,
// DVP, LayerSkip, SkipDecode; issue 28) reads the residual stream after each step, applies the
// final norm and the full or a proxy LM head to it (logit lens), and either continues or stops;
// the cache layers of the steps it does not run get their K/V by state copying (CALM, Schuster et
// al. 2022, sec. 3.2: the exit hidden state goes through each later block's own attention norm,
// K/V projections and RoPE), so later tokens attend a complete cache.
#pragma once

#include <vector>

#include "lm/block.hpp"
#include "lm/forward.hpp"

namespace icmlkit::lm {

/// One batch's forward, step by step.  Borrowed: the model, the caches and the batch must outlive it.
class LayerwiseForward {
 public:
  /// Checks the batch as forward() does (InputError), embeds its rows and opens the caches'
  /// pending areas.  `options` as forward()'s, except stop_after (the caller decides).
  LayerwiseForward(const Model& model, const std::vector<KvCache*>& caches, const Batch& batch, const ForwardOptions& options = {});
  LayerwiseForward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options = {});
  LayerwiseForward(const LayerwiseForward&) = delete;
  LayerwiseForward& operator=(const LayerwiseForward&) = delete;

  /// Block steps of the full pass (n_layers, or the schedule's length).
  int steps() const noexcept { return n_steps_; }
  /// Steps done so far (run, skipped or state-copied).
  int done() const noexcept { return done_; }

  /// Runs the next `n` steps (each block's forward: residual update, K/V to the pending area).
  /// Throws InputError past the last step.
  void run(int n = 1);
  /// Starts the pass after `n` steps computed elsewhere: `residual` [R, d_model] is the stream
  /// after them, and the caller has written their K/V to the pending area (KvCache::pending_key
  /// / pending_value of cache layers 0..n-1).  When both come from earlier passes over the same
  /// rows at the same positions and context (as a self-speculative verifier reuses its drafts'
  /// lower layers, LayerSkip), the result is bitwise that of run(n): a row's arithmetic does
  /// not depend on its batch.  Throws InputError unless no step is done yet, for a residual of
  /// the wrong size, with the hidden-state option, or for caches with recurrent state.
  void resume(int n, const std::vector<float>& residual);
  /// Passes the next `n` steps without running them: the residual is unchanged and those cache
  /// layers get their K/V by state copying from it, or, with copy false, zeros (SkipDecode's
  /// bypassed lower layers, which no later row attends).
  void skip(int n, bool copy = true);
  /// Fills the K/V of every step not yet done from the current residual by state copying, and
  /// ends the pass (done() == steps()).  The rows may then be committed.
  void copy_state();

  /// The residual stream [R, d_model] (row-major) after done() steps.
  const std::vector<float>& residual() const noexcept { return x_; }
  /// The residual stream, writable (recurrent-depth models set it between their phases).
  std::vector<float>& residual() noexcept { return x_; }
  /// Runs block `block` on the residual with cache layer `cache_layer`, outside the step count
  /// (recurrent-depth models walk prelude, core iterations and coda themselves, lm/recdepth.hpp).
  /// Throws InputError for a block or cache layer outside the model or cache.
  void run_block(int block, int cache_layer);
  /// Final RMSNorm + LM head on the current residual of `rows` (the full head, or the proxy head
  /// of `vocab_ids`: each logit bitwise the full head's, apply_head).  [rows.size(), V or K].
  Matrix head(const std::vector<int>& rows, const std::vector<int>& vocab_ids = {}) const;

  /// forward()'s result after done() steps: logits of the options' rows (with greedy tokens and
  /// probabilities when asked), hidden states and attention records of the steps run.  Ends the
  /// object's use (the result is moved out).
  ForwardResult finish();

 private:
  BlockStep step(int cl) const;

  const Model& model_;
  std::vector<KvCache*> caches_;
  const Batch& batch_;
  ForwardOptions opt_;
  int n_steps_ = 0, done_ = 0;
  std::vector<float> x_, cs_, sn_;
  std::vector<int> local_, parent_;
  std::vector<std::vector<int>> inbatch_;
  BlockWork work_;
  ForwardResult res_;
};

}  // namespace icmlkit::lm
