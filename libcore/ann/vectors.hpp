// Vector files for nearest-neighbour search and the proxy transforms that derive a cheap
// representation d from the true one D (Xu, Silwal & Indyk, bi-metric framework).
//
// Formats (by extension):
//   .h5/.hdf5   ann-benchmarks layout: 2-D float datasets /train [n, dim] and, when present,
//               /test [m, dim], /neighbors [m, k] (the true ids) and the root attribute
//               `distance` (angular, euclidean, ...); "file.h5:/path" reads one 2-D dataset
//               as the items
//   .fvecs      per vector: int32 dim, then dim float32 (little endian)
//   .fbin       uint32 n, uint32 dim, then n*dim float32
//   .csv/.tsv   one vector per row (optionally .gz); header row unless no_header; the last
//               column is dropped when label_last (scikit-learn's digits keep the class there)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ann/metric.hpp"

namespace icmlkit::ann {

/// How to read a vector file.
struct VectorReadOptions {
  bool no_header = false;   ///< CSV: no header row
  bool label_last = false;  ///< CSV: drop the last column (a class label)
  int skip_lines = 0;       ///< CSV: lines skipped before the header/data
};

/// Items and, for ann-benchmarks HDF5 files that have one, the /test queries.
struct VectorFile {
  Vectors items;        ///< /train or the whole file
  Vectors queries;      ///< /test (n = 0 when absent)
  std::string sha256;   ///< of the file's bytes
  /// ann-benchmarks: the root attribute `distance` as stored ("angular", "euclidean", ...;
  /// empty when absent).
  std::string distance;
  /// ann-benchmarks: /neighbors, the true nearest ids of each /test query in order
  /// [queries.n][k] (empty when absent).  Ids are checked against items.n.
  std::vector<std::vector<std::int64_t>> neighbors;
};

/// The metric of an ann-benchmarks `distance` attribute: angular -> cosine, euclidean -> l2,
/// dot / ip / inner_product -> ip.  Throws InputError naming `where` for one this toolkit
/// does not search (jaccard, hamming, ...).
Metric metric_of_distance(const std::string& distance, const std::string& where);

/// Reads a vector file.  Throws InputError naming the file (and row/vector/dataset) when it is
/// missing, empty, truncated, ragged, non-numeric or has a non-finite value.
VectorFile read_vectors(const std::string& path, const VectorReadOptions& opt = {});

/// Writes vectors as .fbin (for benchmarks and peers).  Throws RuntimeError.
void write_fbin(const std::string& path, const Vectors& v);

/// A proxy transform fitted on the items and applied to items and queries alike.
///   pca:K       projection on the top-K principal components of the items (centred)
///   pool:F      F x F average pooling of each vector seen as a square s x s image
///               (dim = s^2, s divisible by F; digits: pool:2 -> 16 coordinates)
///   pool1d:F    mean of each run of F consecutive coordinates (dim divisible by F)
///   quantize:B  uniform scalar quantisation to 2^B levels over the items' [min, max],
///               values kept in the original units
///   same        the true vectors themselves (d = D)
class ProxyTransform {
 public:
  /// Parses the spec and fits it on `items`.  Throws UsageError naming `flag` for a bad spec
  /// or one that does not fit the dimension.
  ProxyTransform(const std::string& spec, const Vectors& items, const std::string& flag);
  /// Applies the transform (row by row).
  Vectors apply(const Vectors& x) const;
  /// The spec as given.
  const std::string& spec() const noexcept { return spec_; }

 private:
  std::string spec_, kind_;
  int param_ = 0;
  std::size_t dim_ = 0;
  std::vector<double> mean_;        // pca
  std::vector<double> components_;  // pca, row-major [K, dim]
  double lo_ = 0, step_ = 1;        // quantize
};

}  // namespace icmlkit::ann
