// Online unlearning during training (issue 34; LMCleaner's setting): `lm-train --trajectory DIR
// --unlearn-requests FILE` reads deletion requests at step boundaries and applies each without
// stopping the run: LMCleaner's correction on the trajectory recorded so far, theta <- theta -
// v + noise on the live weights, a checkpoint of the corrected state (so later replays pass
// through it), the deleted windows never drawn again and the benign windows of the deleted
// batches re-queued for later training.
#pragma once

#include <cstdint>
#include <deque>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/provenance.hpp"
#include "nn/trainer.hpp"
#include "unlearn/deletion.hpp"
#include "unlearn/lmcleaner.hpp"
#include "unlearn/trajectory.hpp"

namespace icmlkit::unlearn {

/// The lines appended to a request file since the last poll (complete lines only; a line still
/// being written waits for its newline).
class RequestFeed {
 public:
  /// `path` need not exist yet (requests may come later).
  explicit RequestFeed(std::string path) : path_(std::move(path)) {}
  /// New requests, in file order.  Throws InputError (file and line named) for a malformed line.
  std::vector<DeletionRequest> poll();

 private:
  std::string path_;
  std::streamoff offset_ = 0;
  std::int64_t line_ = 0;
};

/// A trajectory-recording training loop's batches and online deletions.
class OnlineRun {
 public:
  /// `trainer` at step 0, `writer` the open store (meta as written), `stream` the training
  /// stream (copied for LMCleaner's replays), `train_docs` for text requests.
  OnlineRun(nn::Trainer& trainer, TrajectoryWriter& writer, TrajectoryMeta meta, std::vector<int> stream,
            std::vector<std::string> train_docs, io::Provenance prov);
  /// One training step: the next batch (re-queued windows first, deleted windows skipped),
  /// recorded with a checkpoint when due.  Returns the step's stats.
  nn::StepStats step();
  /// Applies `r` now (between steps): resolves it, corrects the live weights when a past step
  /// used its windows (the request's settings: K (default 16; "inf" or < 0 = to the end), hvp
  /// (fisher), epsilon (1), delta (1e-5), noise (none), rank (100), beta (0.1), gamma, c_lin,
  /// probe (true), seed (the request's index), delta_prime (1e-5: the composition's); lm-train
  /// also reads at_step, the step boundary it waits for), checkpoints the corrected state, excludes the
  /// windows from future batches, re-queues the benign ones.  Returns the log line (event
  /// "unlearn": windows, deleted steps, lag in steps, re-queued windows, the certificate, the
  /// composed epsilon over every request with noise so far (advanced and basic), seconds).  Throws InputError for a bad
  /// request, RuntimeError when the correction cannot be certified as asked.
  nlohmann::json apply(const DeletionRequest& r);
  /// Requests applied so far.
  std::int64_t requests() const noexcept { return applied_; }

 private:
  std::vector<std::int64_t> next_batch();
  nlohmann::json apply_checked(const DeletionRequest& r);
  nn::Trainer& trainer_;
  TrajectoryWriter& writer_;
  TrajectoryMeta meta_;
  std::vector<int> stream_;
  std::vector<std::string> docs_;
  io::Provenance prov_;
  std::vector<StepRecord> steps_;
  std::deque<std::int64_t> requeue_, drawn_;
  std::set<std::int64_t> deleted_;
  std::vector<double> eps_, delta_;  // the (epsilon, delta) of each request with noise, for the composition
  std::int64_t applied_ = 0;
};

}  // namespace icmlkit::unlearn
