// Running LoRA jobs to the end on a PackedLoraTrainer: groups of jobs packed per step, per-job
// logs and held-out evaluation, optional successive halving (Jamieson & Talwalkar 2016; as
// hyperparameter tuners run it), a callback when a job is done.  lm-train --lora runs one group of
// one job through it, plora-train the groups of a schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/plora.hpp"

namespace icmlkit::nn {

/// One job of a run: its data and where its records go.
struct LoraRunJob {
  const std::vector<int>* val = nullptr;            ///< held-out tokens (null or empty: no validation)
  std::function<void(const nlohmann::json&)> log;   ///< its JSON Lines records (may be empty)
};

/// How a run proceeds.
struct LoraRunOptions {
  std::int64_t log_every = 10;    ///< a record every N of a job's steps (and at its last)
  std::int64_t eval_every = 0;    ///< validation every N of a job's steps (0: at its end only)
  std::int64_t eval_tokens = 0;   ///< validation tokens per evaluation (0: all)
  int eval_batch = 0;             ///< windows per evaluation forward (0: the job's batch, so evaluation
                                  ///< holds no more activations than its training steps)
  /// Successive halving (eta >= 2 and rungs given): every job first trains to rungs[0] steps; then
  /// the ceil(n / eta) with the lowest validation loss (on eval_tokens) go on to rungs[1], and so
  /// on; the last round trains the survivors to their full steps.  The others stop at their rung
  /// (their adapter saved there).  Needs validation data for every job.
  int halving_eta = 0;
  std::vector<std::int64_t> rungs;
};

/// What happened to one job.
struct LoraJobResult {
  std::int64_t steps = 0, tokens = 0;
  double train_loss = std::numeric_limits<double>::quiet_NaN();  ///< its last step's
  double val_loss = std::numeric_limits<double>::quiet_NaN();    ///< at its end (NaN without data)
  bool stopped_early = false;                                    ///< halved out at a rung
  bool diverged = false;  ///< a non-finite loss or gradient ended it (its adapter: the last finite state)
  double start_s = 0, end_s = 0;  ///< wall seconds since the run's start of its first and last step
  double busy_s = 0;              ///< wall seconds of the packed steps it took part in
};

/// One executed group.
struct LoraGroupRecord {
  int round = 0;
  std::vector<int> jobs;
  double start_s = 0, end_s = 0;
  std::int64_t packed_steps = 0;  ///< passes over the base
};

/// The whole run.
struct LoraRunSummary {
  std::vector<LoraJobResult> jobs;      ///< per job of the trainer
  std::vector<LoraGroupRecord> groups;  ///< in execution order
  double seconds = 0;                   ///< wall time of the run (the makespan on one worker)
  std::int64_t tokens = 0;              ///< training tokens of every job together
};

/// Given the jobs still to train (trainer indices) and the step each must reach in this round (the
/// lesser of it and its own steps), the groups to run, in order: a partition of those jobs.
using LoraPlanner = std::function<std::vector<std::vector<int>>(const std::vector<int>& jobs, std::int64_t until)>;

/// Trains the jobs `order` of `trainer` (each exactly once to its end or its halving rung) in the
/// groups `plan` returns, one packed step after another; `jobs[i]` describes trainer job i.
/// `on_done(job, result)` runs when a job ends (save its adapter there); the trainer then releases
/// it.  A job that diverges (a non-finite loss or gradient) ends there, marked, and the others go
/// on.  The activation buffers are freed after each group.  Throws UsageError for a plan that is
/// not a partition of the jobs it was given, InputError for halving without validation data.
LoraRunSummary run_lora_jobs(PackedLoraTrainer& trainer, const std::vector<LoraRunJob>& jobs,
                             const std::vector<int>& order, const LoraPlanner& plan, const LoraRunOptions& opt,
                             const std::function<void(int, const LoraJobResult&)>& on_done);

}  // namespace icmlkit::nn
