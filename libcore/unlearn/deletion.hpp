// Deletion requests (issue 34): which training data to forget, resolved against a trajectory to
// the windows deleted, the steps (batches) that trained on them, and the benign windows of those
// batches to re-queue (LMCleaner's deferred re-learning).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "unlearn/trajectory.hpp"

namespace icmlkit::unlearn {

/// What to forget; any mix of the four.
struct DeletionRequest {
  std::string id;                       ///< a name for logs ("" = none)
  std::vector<std::int64_t> documents;  ///< training document ids (0-based, the training split's order)
  std::vector<std::string> texts;       ///< texts matched exactly to training documents (every copy)
  std::vector<std::int64_t> windows;    ///< window ids of the training stream
  std::vector<std::int64_t> steps;      ///< batch ids: exactly those steps' batches (the windows' other uses stay)
  /// A request object {"id", "documents", "texts", "windows", "steps", ...}; other keys are kept
  /// in `settings` (the online mode's per-request LMCleaner settings).  Throws InputError
  /// (naming `where`) for a non-object, a mistyped field or a request that names nothing.
  static DeletionRequest from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json settings = nlohmann::json::object();
};

/// Checks a request's online settings (at_step, K, hvp, epsilon, delta, noise, rank, beta, gamma,
/// c_lin, probe, seed, delta_prime): types and ranges, no unknown key.  Throws InputError naming
/// the field and `where`.  DeletionRequest::from_json runs it.
void check_request_settings(const nlohmann::json& settings, const std::string& where);

/// A request resolved against the first `tau` steps of a run.
struct ResolvedDeletion {
  std::vector<std::int64_t> windows;    ///< the windows of every deleted step's forgotten data, increasing (forget loss)
  /// The data to forget (from documents, texts and windows; not from batch ids): windows that are
  /// never trained on again (online mode) and must have been trained on before tau.
  std::vector<std::int64_t> data_windows;
  std::vector<std::int64_t> steps;      ///< steps < tau whose batch holds a deleted window, increasing
  std::vector<std::int64_t> requeue;    ///< the other windows of those batches, in step order, each once
  std::vector<std::int64_t> untrained;  ///< data windows that no step < tau trained on
  std::vector<std::int64_t> documents;  ///< the training documents named (ids and matched texts), increasing
};

/// Resolves `r` for a run of `meta` whose first tau = steps.size() steps are `steps`; `train_docs`
/// are the training documents (for texts; may be empty when no text is given).  Throws
/// InputError for a document id or window outside the run, a step >= tau, or a text that is not
/// a training document (quoting its start).
ResolvedDeletion resolve_deletion(const DeletionRequest& r, const TrajectoryMeta& meta, const std::vector<StepRecord>& steps,
                                  const std::vector<std::string>& train_docs);

/// The windows of training document `d`.  Throws InputError for d outside the documents.
std::vector<std::int64_t> document_windows(const TrajectoryMeta& meta, std::int64_t d);

}  // namespace icmlkit::unlearn
