// PLoRA's search space (issue 33): a JSON file listing many LoRA fine-tuning jobs on one frozen base
// (a hyperparameter search), read into one job spec per job for plora-plan and plora-train.
//
// SPACE.json (every key but "seq_len" and one of "grid" / "jobs" is optional; unknown keys are
// refused; relative paths are taken from the space file's directory):
//
//   { "base": "../models/kjv7m.h5",                // the frozen base (the tools also take it as a flag)
//     "seq_len": 256,                              // tokens per window (one batch row)
//     "data": {"path": "../corpus/kjv.tsv.gz",     // the default corpus of every job (nn::CorpusOptions:
//              "format": "auto", "column": 2,      //  format, column, doc_column, field, doc_field, val_every)
//              "doc_column": 1, "val_every": 20,
//              "filter": {"column": 1, "prefix": ["Ruth", "Est"]}},  // keep TSV rows whose key column starts with a prefix
//     "defaults": {"rank": 8, "alpha": 8, "rslora": false, "dropout": 0.0, "targets": ["q", "v"],
//                  "lr": 1e-3, "min_lr": 1e-4, "warmup": 10, "batch": 1, "steps": 100, "seed": 0,
//                  "weight_decay": 0.0, "clip": 1.0},
//     "grid": {"rank": [4, 8, 16, 32], "lr": [1e-4, 3e-4, 1e-3, 3e-3]},  // cartesian product, keys in the
//                                                  // order written, the last key fastest
//     "jobs": [{"name": "extra", "rank": 64, "data": {...}}],  // explicit jobs after the grid's
//     "early_stop": {"eta": 2, "rungs": [25, 50]} }  // successive halving at these steps
//
// The built-in defaults are the values shown under "defaults".  A job is the defaults overridden by
// its grid point or its explicit fields; a job's "data" replaces the whole default data object.  A
// job's name defaults to "j" and its 2-digit index in the job list (grid jobs first); names are
// unique and made of letters, digits, '.', '_' and '-', not ending in .json or .jsonl (plora-train
// names files after them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/corpus.hpp"

namespace icmlkit::sched {

/// The projections a LoRA job may adapt, in canonical order: q, k, v, o (attention), gate, up, down
/// (the llama MLP), PEFT's target names without "_proj".
const std::vector<std::string>& plora_target_names();

/// Keep only the TSV rows whose key column starts with one of `prefixes` (column 0 = no filter).
struct DataFilter {
  int column = 0;                     ///< 1-based key column; 0 = no filter
  std::vector<std::string> prefixes;  ///< non-empty strings, as written
  /// Whether the filter keeps anything out.
  bool active() const noexcept { return column > 0; }
};

/// A job's training data: the corpus file, how to read it and an optional row filter.
struct JobData {
  std::string path;      ///< as written in the space file
  std::string resolved;  ///< `path` relative to the space file's directory (absolute paths kept)
  nn::CorpusOptions corpus;
  DataFilter filter;
};

/// One LoRA fine-tuning job of a search (the hyperparameters of `lm-train --lora`).
struct JobSpec {
  std::string name;
  int rank = 8;                  ///< r >= 1
  double alpha = 8;              ///< lora_alpha > 0; scaling alpha / r (alpha / sqrt r with rslora); PEFT's and lm-train's default
  bool rslora = false;
  double dropout = 0;            ///< in [0, 1), on the adapted projections' inputs
  std::vector<std::string> targets{"q", "v"};  ///< subset of plora_target_names(), canonical order
  double lr = 1e-3;              ///< peak learning rate > 0
  double min_lr = 1e-4;          ///< cosine floor, 0 <= min_lr <= lr
  int warmup = 10;               ///< linear warmup steps >= 0
  int batch = 1;                 ///< windows of seq_len tokens per step >= 1
  int steps = 100;               ///< optimizer steps >= 1
  std::uint64_t seed = 0;        ///< the job's own random streams (A's init, dropout, batches)
  double weight_decay = 0;       ///< AdamW decoupled weight decay >= 0
  double clip = 1.0;             ///< global gradient-norm clip (0 = off) >= 0
  JobData data;
};

/// Successive halving (hyperparameter tuning's early stopping): at each rung (a step count) the
/// ceil(n / eta) jobs with the lowest validation loss go on.  eta = 0: no early stopping.
struct EarlyStop {
  int eta = 0;             ///< >= 2 when enabled
  std::vector<int> rungs;  ///< increasing, each >= 1 and below every job's steps
  /// Whether early stopping is on.
  bool enabled() const noexcept { return eta > 0; }
};

/// A whole search space.
struct SearchSpace {
  std::string base;           ///< the base model as written ("" = not given)
  std::string base_resolved;  ///< relative to the space file's directory
  int seq_len = 0;            ///< tokens per batch row, >= 1
  std::vector<JobSpec> jobs;  ///< grid jobs (in product order), then explicit jobs
  EarlyStop early_stop;
};

/// Builds the search space from its JSON (an ordered_json, so that the grid's key order is the
/// file's).  `where` names the file in errors; relative paths are resolved against `base_dir` ("" =
/// as written).  Throws InputError with one line naming the key and the job ("rank must be an
/// integer >= 1, got 0 (space.json, job 'j03')") for: an unknown key, a value of the wrong type or
/// out of range (rank >= 1, batch >= 1, steps >= 1, 0 <= dropout < 1, lr > 0 finite, min_lr in [0,
/// lr], alpha > 0, warmup, weight_decay, clip >= 0, seq_len >= 1), an unknown or repeated target, a
/// job without data, a duplicate or malformed name, an empty grid axis, no job at all, more than
/// 100000 jobs, eta < 2, rungs not increasing or not below every job's steps.
SearchSpace parse_space(const nlohmann::ordered_json& j, const std::string& where, const std::string& base_dir = "");

/// Reads SPACE.json ("-" = stdin, paths then relative to the working directory) with parse_space;
/// `file_sha256` receives the SHA-256 of the bytes read.  Throws InputError for an unreadable file
/// or malformed JSON (with the byte offset) and whatever parse_space throws.
SearchSpace read_space(const std::string& path, std::string* file_sha256 = nullptr);

/// A job's canonical JSON: every field in a fixed order (name, rank, alpha, rslora, dropout,
/// targets, lr, min_lr, warmup, batch, steps, seed, weight_decay, clip, data), data.path as written,
/// the filter only when active.  Two spaces that spell the same jobs differently give the same text.
nlohmann::ordered_json job_json(const JobSpec& job);

/// The whole space's canonical JSON: base (as written, null when absent), seq_len, jobs (job_json
/// each), early_stop (null when off).
nlohmann::ordered_json space_json(const SearchSpace& space);

/// SHA-256 (hex) of space_json(space).dump(): the identity of a search, independent of how the file
/// spelled it (grid or explicit jobs, key order, spacing).
std::string space_sha256(const SearchSpace& space);

}  // namespace icmlkit::sched
