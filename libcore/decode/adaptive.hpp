// FAFO's adaptive step shape on an engine whose multi-row passes are not free (issue 37).
//
// On a GPU a k-row pass costs about one row up to large k, so FAFO's fixed W x (N-1) window
// and G guesses pay; on a CPU the cost c(k) = time(k rows) / time(1 row) grows with k and a
// fixed large step loses to AR.  The adaptive schedule picks, before every step, a shape: AR,
// AR plus a prompt match of d tokens (d chosen per step), or one of the lookahead windows (W3
// N3 G3 and the configured W, N, G, with the prompt match), by the tokens per second each is
// expected to give at the engine's measured pass costs (AdaptiveSchedule below).  AR is one of
// the shapes, so the schedule falls back to AR when no drafting pays.  Which shape ran never
// changes the output: every one verifies with full-cache rows and commits only what AR would.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lm/engine.hpp"

namespace icmlkit::decode {

/// Measured seconds of a k-row decode pass of one engine, at a few k, interpolated between.
struct PassCost {
  std::vector<int> ks;           ///< measured row counts, increasing, ks[0] = 1
  std::vector<double> seconds;   ///< median seconds of a pass of ks[i] rows
  /// Seconds of a k-row pass (k >= 1): linear between measured k, extended linearly past the
  /// last.  Throws std::logic_error when nothing was measured.
  double at(int k) const;
  /// c(k) = at(k) / at(1).
  double c(int k) const { return at(k) / at(1); }
  /// {"k": [...], "seconds": [...], "c_k": {k: c(k)}}.
  nlohmann::json to_json() const;
  /// Reads to_json()'s form; false (and *this unchanged) when it is not that.
  bool from_json(const nlohmann::json& j);
};

/// Times passes of k rows for k in {1, 4, 12} (those <= kmax; `reps` rounds over all k after one
/// untimed pass of the largest, the fastest of each, made non-decreasing in k; larger k are extrapolated, a pass being linear in its rows
/// there) extending the engine's committed cache of n_past tokens with `token` at position
/// n_past; the rows are never committed (the next forward() replaces them).  A few milliseconds
/// on the demo model: the schedule's prompt-match drafts have at most 11 rows.
PassCost measure_pass_cost(lm::Engine& engine, int n_past, int token, int kmax, int reps = 3);

/// The key of a pass-cost measurement: what the cost depends on — the model's shapes and block
/// types, the engine's device and settings (weight precision), the threads, the kernel path and
/// the CPU model ("<16 hex digits> <description>").  Not the context length: the level the
/// context adds is learnt while decoding (the schedule's time correction).
std::string pass_cost_key(const lm::Engine& engine);

/// The default pass-cost cache file: $XDG_CACHE_HOME/icmlkit/pass-cost.json (an absolute
/// XDG_CACHE_HOME), else $HOME/.cache/icmlkit/pass-cost.json ("" when neither is set).
std::string default_pass_cost_cache();

/// Looks `key` up in the cache file `path` (absent, unreadable or malformed: false).
bool load_pass_cost(const std::string& path, const std::string& key, PassCost& out);
/// Stores `cost` under `key` in the cache file (atomically: a temporary file renamed over it;
/// directories created).  Only an absent or empty file or one in the cache's own format is
/// written: any other file (a model, a prompt, a directory) is left alone.  A failure is not an
/// error for generation: returns false, with the reason in `why`.
bool save_pass_cost(const std::string& path, const std::string& key, const std::string& description,
                    const PassCost& cost, std::string* why = nullptr);

/// One step shape.  window = 0: no lookahead rows; guesses = 0: no pool n-grams.  The
/// prompt-match draft length is chosen per step (AdaptiveSchedule::Choice::draft).
struct Arm {
  std::string name;
  int window = 0, ngram = 0, guesses = 0;
  /// Rows of the step before any candidate: the input row and the window's W (N-1) - 1 rows.
  int base_rows() const noexcept { return 1 + (window > 0 ? window * (ngram - 1) - 1 : 0); }
  nlohmann::json to_json() const;
};

/// The running choice of each step's shape (see the file comment).
///
/// Arm 0 has no lookahead window: its step is AR (draft 0) or AR plus a prompt match of `draft`
/// tokens, the draft length chosen from shadow acceptance — every step, whatever ran, the
/// prompt match is computed and later compared with the tokens actually generated, so the
/// tokens a draft of d would have had accepted are known for every d at no cost (greedy: exact;
/// sampling: the greedy-match estimate).  Arms 1.. add a lookahead window (W3 N3 G3 and the
/// configured W, N, G, pool guesses included); their acceptance can only be seen by running
/// them, so an arm whose calibrated bound beats the best estimate gets a trial of N + 1 steps,
/// and arms close to the best (or not run for long) are re-tried now and then; while a window
/// leads, an AR step is re-measured every 24 steps.  Time per step is the measured wall time of
/// earlier steps with as many rows, else the calibrated pass time of its rows times a
/// correction learnt from every step's wall time (host work, load), so estimates follow the
/// machine as it is even when the calibration was off.
class AdaptiveSchedule {
 public:
  /// The step to run: an arm and the prompt-match draft length (0 = none).
  struct Choice {
    int arm = 0;
    int draft = 0;
  };
  /// Largest window (W, N, G) and prompt-match draft `max_draft` (>= 0); `cost` calibrated.
  AdaptiveSchedule(int window, int ngram, int guesses, int max_draft, PassCost cost);
  /// The next step's shape, given the length of the prompt match available now (tokens after
  /// the input that an earlier occurrence of the context's suffix offers, <= max_draft).
  Choice choose(int match_available);
  /// Records the step: the prompt match it was offered (its tokens, possibly not drafted), the
  /// tokens it emitted, its rows and wall seconds.
  void observe(const Choice& c, const std::vector<int>& match, const std::vector<int>& emitted, int rows,
               double seconds);
  const std::vector<Arm>& arms() const noexcept { return arms_; }
  const Arm& arm(int i) const { return arms_.at(static_cast<std::size_t>(i)); }
  /// Why the last choose() picked its shape ("measure AR", "best", "trial", "recheck", "recheck AR").
  const std::string& reason() const noexcept { return reason_; }
  /// Per arm: steps, accepted tokens, mean rows, estimated and bound tokens/s; the prompt
  /// match's shadow statistics and chosen draft; the learnt time correction.
  nlohmann::json to_json() const;

 private:
  struct Stats {
    int steps = 0, accepted = 0, last_step = -1;
    long long rows = 0;
    double acc_avg = 0, sec_avg = 0;  ///< running averages (exponential)
  };
  /// Seconds of a step of k rows: the running average of steps of k rows when some ran, else
  /// the calibrated pass time times the learnt correction.
  double step_seconds(double k) const;
  /// Tokens/s of arm 0 with draft d (0 = AR), from the shadow matches.
  double prompt_speed(int d) const;
  /// The draft length of arm 0 with the best prompt_speed, and that speed.
  std::pair<int, double> best_prompt() const;
  double estimate(int arm) const;  ///< tokens/s measured for a window arm (0 if never run)
  double bound(int arm) const;     ///< tokens/s at most for a window arm (calibrated)
  std::vector<Arm> arms_;
  int max_draft_;
  PassCost cost_;
  std::vector<Stats> stats_;
  double scale_ = 1.0;   ///< wall time / calibrated pass time, running average
  bool scaled_ = false;
  // shadow prompt matches: resolved (available, accepted-if-drafted) pairs, newest last
  std::vector<std::pair<int, int>> shadow_;
  struct Pending {
    std::vector<int> match;
    int matched = 0;
  };
  std::vector<Pending> pending_;
  int run_arm_ = 0, run_left_ = 0;  ///< the arm running (a trial: steps left)
  int last_ar_ = 0;                 ///< the last step with one row (AR)
  std::vector<double> measured_ = std::vector<double>(129, 0.0);  ///< seconds of steps of k rows (0: none yet)
  int observed_ = 0, last_recheck_ = 0;
  std::string reason_;
};

}  // namespace icmlkit::decode
