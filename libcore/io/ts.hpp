// Reader for the UEA/UCR time-series archive's `.ts` format (sktime/aeon): a header of
// @-keys (@problemName, @timeStamps, @missing, @univariate, @dimensions, @equalLength,
// @seriesLength, @classLabel true <labels...>), then @data and one case per line:
// dimensions separated by ':', values by ',', the class label last; '?' or "NaN" is missing.
#pragma once

#include <Eigen/Dense>
#include <string>
#include <vector>

namespace icmlkit::io {

/// The cases of one .ts file.
struct TsData {
  std::string problem;                   ///< @problemName (may be empty)
  std::vector<std::string> class_names;  ///< from @classLabel, in header order
  std::vector<Eigen::MatrixXd> series;   ///< per case [length, dimensions] (NaN = missing)
  std::vector<int> labels;               ///< per case, index into class_names
  int dimensions = 0;
};

/// Reads a .ts file ("-" = stdin).  `sha256`, when not null, receives the digest of the bytes.
/// Throws InputError naming the file and line for: a missing/duplicated/unknown header key,
/// @timeStamps true (not supported), @classLabel false or without labels, data before
/// @data or no cases, a case whose dimension count differs from @dimensions or the first
/// case, dimensions of unequal length within a case (ragged), a non-numeric value, a label
/// not declared in @classLabel, a dimension with no observed value, and a length that
/// contradicts @equalLength/@seriesLength.
TsData read_ts(const std::string& path, std::string* sha256 = nullptr);

}  // namespace icmlkit::io
