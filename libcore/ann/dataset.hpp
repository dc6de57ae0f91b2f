// The two representations of one item set that the bi-metric tools read: the true vectors
// (metric D) and the proxy vectors (metric d), from two files or one file plus a proxy
// transform, and the queries in both representations.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ann/metric.hpp"
#include "ann/vectors.hpp"
#include "io/provenance.hpp"

namespace icmlkit::ann {

/// Where the items, proxies and queries come from.
struct DataOptions {
  std::string items;          ///< true vectors (D): file, or ann-benchmarks HDF5 (/train, /test)
  std::string proxy_file;     ///< proxy vectors (d) of the same items in the same order (optional)
  std::string proxy = "same"; ///< proxy transform when no proxy_file (vectors.hpp ProxyTransform)
  std::string queries;        ///< query file in the true representation (optional)
  std::string proxy_queries;  ///< the queries' proxy vectors, needed with proxy_file + queries
  std::size_t holdout = 0;    ///< take this many random rows of the items file as queries
  VectorReadOptions read;     ///< CSV options, for every file
  Metric metric = Metric::l2, proxy_metric = Metric::l2;
  /// Whether metric / proxy_metric were given (--metric, --proxy-metric).  When not, an
  /// ann-benchmarks file's `distance` attribute decides the metric (l2 without one), and the
  /// proxy metric follows the metric.
  bool metric_given = true, proxy_metric_given = true;
  std::uint64_t seed = 0;     ///< holdout split
};

/// Items and queries in both representations.
struct BimetricData {
  Space D, d;                                  ///< true and proxy spaces over the same items
  std::vector<std::vector<float>> qD, qd;      ///< queries prepared for D and d
  std::string items_sha256;                    ///< identifies the items file (index check)
  nlohmann::json describe;                     ///< sources, counts, dims, metrics and their source, proxy, holdout
  /// The true neighbour ids of each query from the file (ann-benchmarks /neighbors) when the
  /// queries are that file's /test; empty otherwise.
  std::vector<std::vector<std::int64_t>> file_neighbors;
};

/// Reads and checks everything; records each input in `prov`.  Throws InputError (exit 1)
/// for different item counts, dimension mismatches, empty files, NaN, zero vectors under
/// cosine, a file distance this toolkit does not search; UsageError for contradictory options,
/// among them a --metric that contradicts the file's `distance` attribute.  `need_queries`: whether a query source is
/// required (search) or ignored (index build).
BimetricData load_bimetric_data(const DataOptions& o, bool need_queries, io::Provenance& prov);

}  // namespace icmlkit::ann
