// The training trajectory store of issue 34 (`lm-train --trajectory DIR`): what LMCleaner and the
// retrain baseline need to rebuild any theta[s] of a run by bit-identical replay.
//
//   DIR/trajectory.json   the run: train options, corpus (its reading options and SHA-256),
//                         windows, checkpoint interval C, each training document's first stream
//                         position (document ids -> windows)
//   DIR/steps.jsonl       one line per optimizer step s (0-based): its learning rate, the batch's
//                         window ids (batch x accum), loss, gradient norm, whether clipping acted,
//                         and the deletions applied after it (online mode); appended and flushed
//                         as the run goes
//   DIR/ckpt-<s>.h5       training checkpoints (weights, optimizer state, data position) at
//                         s = 0, C, 2C, ... and the last step; theta[s] = replay from the one before s
//   DIR/corrections.jsonl online mode: the positions where a deletion replaced the live weights
//                         (the corrected state is ckpt-<s>.h5, which replay loads on arriving at s)
//
// Storing every update u[t] is not offered (about 26 MB a step for kjv7m): checkpoints plus the
// recorded batches rebuild any state at (at most) C steps of training cost.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/provenance.hpp"
#include "nn/corpus.hpp"
#include "nn/trainer.hpp"

namespace icmlkit::unlearn {

/// One recorded optimizer step.
struct StepRecord {
  std::int64_t step = 0;               ///< 0-based index (the step taken when `step` steps were done)
  double lr = 0;                       ///< eta_s
  std::vector<std::int64_t> windows;   ///< the batch: window ids, micro-batch by micro-batch
  double loss = 0, grad_norm = 0;      ///< the step's mean loss (nats) and gradient norm before clipping
  bool clipped = false;                ///< the gradient was clipped (the update is then not -eta g)
  bool skipped = false;                ///< a no-op step (every window of the batch deleted before it ran)
};

/// The run a trajectory records (trajectory.json).
struct TrajectoryMeta {
  nlohmann::json train_options;                ///< nn::TrainOptions::to_json()
  nn::CorpusOptions corpus;                    ///< how the corpus was read
  std::string corpus_sha256;                   ///< of the corpus file's bytes
  std::int64_t checkpoint_every = 0;           ///< C
  std::int64_t windows = 0;                    ///< training windows in the stream
  int seq_len = 0;
  std::vector<std::int64_t> doc_starts;        ///< per training document its first stream position
  std::int64_t stream_tokens = 0;              ///< tokens in the training stream
  std::string kernels = "fast";                ///< the trainer's kernels (nn::TrainKernels), which replay must use
  nlohmann::json to_json() const;
  /// Throws InputError (naming `where`) for a missing or mistyped field.
  static TrajectoryMeta from_json(const nlohmann::json& j, const std::string& where);
};

/// The train options of a trajectory's JSON (the fields TrainOptions::to_json writes for the
/// optimizers a trajectory supports).  Throws InputError for a missing field.
nn::TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& where);

/// Refuses what a trajectory cannot record: an optimizer other than sgd or adamw, sparse
/// training, the early-exit loss, mixture-of-experts blocks.  Throws UsageError (--trajectory).
void check_trajectory_options(const nn::TrainOptions& opt, const lm::ModelConfig& config);

/// The windows (ids) whose inputs or targets touch stream positions [begin, end).
std::vector<std::int64_t> windows_touching(std::int64_t begin, std::int64_t end, int seq_len, std::int64_t windows);

/// Writes a trajectory while a run trains (lm-train).
class TrajectoryWriter {
 public:
  /// Creates `dir` (which must not exist or be empty; with `overwrite` an existing trajectory's
  /// files are removed first) and writes trajectory.json.  Throws InputError when `dir` cannot be
  /// created or holds other files.
  TrajectoryWriter(std::string dir, const TrajectoryMeta& meta, bool overwrite);
  /// Appends step `st` (clip limit `clip`: 0 = off) to steps.jsonl and flushes; `extra` (optional
  /// JSON object) is merged into the line (online deletions).
  void record(const nn::StepStats& st, double clip, const nlohmann::json& extra = {});
  /// Appends a no-op step (a batch all of whose windows were deleted).
  void record_skip(std::int64_t step, double lr);
  /// Whether the state after `steps_done` steps is one the store checkpoints (multiples of C).
  bool due(std::int64_t steps_done) const noexcept;
  /// Writes ckpt-<steps_done>.h5 from the trainer (atomic).
  void checkpoint(nn::Trainer& trainer, const io::Provenance& prov);
  /// Bytes of every file written so far.
  std::int64_t bytes() const;
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
  std::int64_t every_;
  std::ofstream steps_;
};

/// A trajectory read back.
struct Trajectory {
  std::string dir;
  TrajectoryMeta meta;
  std::vector<StepRecord> steps;           ///< steps[s].step == s
  std::vector<std::int64_t> checkpoints;   ///< steps with a ckpt file, increasing
  /// Online deletions: the positions s where the live weights were replaced by a correction
  /// (ckpt-<s>.h5 holds the corrected state that step s ran on; corrections.jsonl), increasing.
  std::vector<std::int64_t> corrections;
  std::int64_t bytes = 0;                  ///< of every file in the store
  /// Reads `dir`.  Throws InputError for a missing or malformed file (file and line named), a
  /// step line out of order, or no checkpoint.
  static Trajectory read(const std::string& dir);
  /// The path of ckpt-<s>.h5.
  std::string checkpoint_path(std::int64_t s) const;
  /// The latest checkpointed step <= s; throws InputError when there is none.
  std::int64_t checkpoint_before(std::int64_t s) const;
};

}  // namespace icmlkit::unlearn
