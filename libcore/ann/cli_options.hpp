// Command-line flags shared by bimetric-index and bimetric-search (one definition, so both
// tools read the same data the same way and an index matches its search).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "ann/bimetric.hpp"
#include "ann/dataset.hpp"

namespace icmlkit::ann {

/// Raw flag values for the data and the index build.
struct SharedFlags {
  DataOptions data;
  /// metric empty = the file's distance attribute, else l2; proxy_metric empty = same as metric
  std::string metric, proxy_metric;
  bool header = true;  ///< CSV files have a header row (--header / --no-header)
  std::string index_type = "vamana";
  VamanaParams vamana;
};

/// Adds the data flags (positional ITEMS, --proxy, --proxy-file, --metric, --proxy-metric,
/// --holdout, --no-header, --label-last, --skip-lines) and the build flags (--index-type,
/// -R, -L, --alpha).
void add_shared_flags(CLI::App& app, SharedFlags& f);
/// Converts flag values to DataOptions (metric parsing, seed).  Throws UsageError.
DataOptions finish_shared_flags(SharedFlags& f, std::uint64_t seed);
/// Builds the index on d only.  Throws UsageError for an unknown type or bad parameters.
Index build_index(const Space& d, const SharedFlags& f, std::uint64_t seed);
/// The build description stored with an index and checked by the search: items hash,
/// counts, proxy, metrics, holdout and seed, index type and parameters.
nlohmann::json build_description(const BimetricData& data, const SharedFlags& f, std::uint64_t seed);

}  // namespace icmlkit::ann
