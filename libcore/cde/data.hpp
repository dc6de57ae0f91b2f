// Classification data sets for neural CDEs: UEA .ts cases or the spirals toy, observation
// drops for irregular sampling, and per-channel standardisation, following the MV-CDE
// reference code (main/loading/data_loader.py) and torchcde's spirals example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cde/path.hpp"
#include "io/ts.hpp"

namespace icmlkit::cde {

/// Series with integer labels.
struct Dataset {
  std::vector<Series> series;
  std::vector<int> labels;
  std::vector<std::string> class_names;
  int channels = 0;  ///< including the time channel when present
};

/// How raw cases become series: observation j of a case is at time j * dt; with
/// `time_channel` the time is prepended as channel 0 (reference "add_time").
struct TimeOptions {
  double dt = 1.0;
  bool time_channel = false;
};

/// Converts .ts cases.  Variable-length cases keep their own length.
Dataset from_ts(const io::TsData& d, const TimeOptions& t);
/// Maps the labels of `d` (with its class names) onto `class_names`; throws InputError naming
/// `where` for a label the model does not know.
void remap_labels(Dataset& d, const std::vector<std::string>& class_names, const std::string& where);

/// torchcde's spirals: n series of `length` points on t in [0, 4 pi], (x, y) = (+-cos(s + t),
/// sin(s + t)) / (1 + t/2) + N(0, 0.01^2), s ~ U(0, 2 pi); the first half clockwise (label 1).
/// Channels (t, x, y) with the time channel set; shuffled.
Dataset spirals(int n, int length, std::uint64_t seed);

/// Drops round(down) rate * (L - 2) interior observations of every series (all non-time
/// channels set to NaN), independently per series; the first and last stay (reference
/// apply_drop_rate).  rate in [0, 1).
void drop_observations(Dataset& d, double rate, std::uint64_t seed);

/// Per-channel standardisation statistics (time channel untouched: mean 0, std 1).
struct Standardizer {
  std::vector<double> mean, std;
  /// Mean and unbiased std (+1e-8) of the observed values of each channel.  Throws
  /// InputError when a channel has fewer than 2 observed values.
  static Standardizer fit(const Dataset& d);
  void apply(Dataset& d) const;
};

/// Splits off the last `fraction` of a seeded permutation as validation.
void split(const Dataset& all, double fraction, std::uint64_t seed, Dataset& train, Dataset& val);

}  // namespace icmlkit::cde
