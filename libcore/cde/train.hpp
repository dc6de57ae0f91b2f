// Mini-batch training and evaluation of CDE classifiers (threads over the samples of a batch,
// per-thread gradient replicas summed in a fixed order), and the HDF5 checkpoint.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cde/data.hpp"
#include "cde/model.hpp"
#include "io/provenance.hpp"
#include "nn/adamw.hpp"

namespace icmlkit::cde {

/// Per-epoch figures.
struct EpochStats {
  double loss = 0;            ///< mean cross-entropy over the epoch's samples (before each update)
  double train_accuracy = 0;  ///< from the same forward passes
  double nfe = 0;             ///< mean forward NFE per sample
  double nfe_backward = 0;    ///< mean backward (VJP) NFE per sample
  double seconds = 0;
};

/// Evaluation figures.
struct EvalStats {
  double accuracy = 0, loss = 0, nfe = 0, seconds = 0;
  long n = 0;
  std::vector<int> predictions;
};

/// One epoch of Adam (nn::ViewAdamW) over seeded shuffled mini-batches of `batch` samples (mean loss per batch).
/// Bit-reproducible for a fixed seed and thread count.
EpochStats train_epoch(Model& m, nn::ViewAdamW& opt, const Dataset& d, int batch, const SolveOptions& so, Rng& rng,
                       int threads);
/// Forward pass over a data set (no gradients).
EvalStats evaluate(Model& m, const Dataset& d, const SolveOptions& so, int threads);

/// Everything besides the weights that a checkpoint must carry to rebuild the model and
/// prepare new data the same way.
struct CheckpointInfo {
  ModelConfig model;
  SolveOptions solve;
  TimeOptions time;
  Standardizer norm;
  std::vector<std::string> class_names;
  nlohmann::json extra = nlohmann::json::object();  ///< training summary (epochs, accuracy, ...)
};

/// Writes an HDF5 checkpoint atomically: one float64 dataset per parameter (flattened
/// column-major, shapes in the config attribute), root attribute `config` (JSON) and the
/// provenance attributes.  Throws RuntimeError.
void save_checkpoint(const std::string& path, Model& m, const CheckpointInfo& info, const io::Provenance& prov);
/// Reads a checkpoint written by save_checkpoint.  Throws InputError naming the file and the
/// dataset for a missing/mis-sized parameter or a malformed config.
Model load_checkpoint(const std::string& path, CheckpointInfo& info);

nlohmann::json to_json(const ModelConfig& c);
nlohmann::json to_json(const SolveOptions& s);

}  // namespace icmlkit::cde
