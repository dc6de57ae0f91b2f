#include "ann/cli_options.hpp"

#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "util/error.hpp"

namespace icmlkit::ann {

void add_shared_flags(CLI::App& app, SharedFlags& f) {
  app.add_option("items", f.data.items, "True vectors of the items (D): .h5 (ann-benchmarks /train, /test), .fvecs, .fbin, .csv[.gz]")->required();
  app.add_option("--proxy", f.data.proxy, "Proxy transform giving d: pca:K, pool:F (F x F image pooling), pool1d:F, quantize:B, same")->capture_default_str();
  app.add_option("--proxy-file", f.data.proxy_file, "Proxy vectors (d) of the same items, same order (a second embedding model)");
  app.add_option("--metric", f.metric,
                 "True metric D: l2 (Euclidean), ip (-<x,y>), cosine (1 - cos, zero vectors rejected).  Default: an ann-benchmarks "
                 "file's distance attribute (angular = cosine, euclidean = l2), else l2; a contradicting --metric is refused")
      ->check(CLI::IsMember({"l2", "ip", "cosine"}));
  app.add_option("--proxy-metric", f.proxy_metric, "Proxy metric d (default: --metric)")->check(CLI::IsMember({"l2", "ip", "cosine"}));
  app.add_option("--holdout", f.data.holdout, "Take N random rows of ITEMS (seeded by --seed) as queries; the rest are the items")
      ->check(cli::int_range(0, 100000000));
  cli::add_header_flags(app, f.header, "Each CSV file");
  app.add_flag("--label-last", f.data.read.label_last, "CSV: the last column of the items and query files is a class label, not a coordinate (proxy files are read whole)");
  app.add_option("--skip-lines", f.data.read.skip_lines, "CSV lines to skip first")->check(cli::int_range(0, 1000000));
  app.add_option("--index-type", f.index_type, "vamana (DiskANN graph) or cover-tree")->capture_default_str()
      ->check(CLI::IsMember({"vamana", "cover-tree"}));
  app.add_option("-R", f.vamana.R, "Vamana: maximum out-degree R")->capture_default_str()->check(cli::int_range(1, 4096));
  app.add_option("-L", f.vamana.L, "Vamana: build search list size L")->capture_default_str()->check(cli::int_range(1, 100000));
  app.add_option("--alpha", f.vamana.alpha, "Vamana: RobustPrune slack of the second pass (>= 1; on squared L2 as DiskANN)")
      ->capture_default_str()->check(CLI::Range(1.0, 100.0));
  app.add_option("--passes", f.vamana.passes,
                 "Vamana: 2 = the paper's two passes (alpha = 1, then --alpha); 1 = one pass at --alpha (as DiskANN's library)")
      ->capture_default_str()->check(CLI::IsMember({1, 2}));
}

DataOptions finish_shared_flags(SharedFlags& f, std::uint64_t seed) {
  DataOptions o = f.data;
  o.read.no_header = !f.header;
  o.metric_given = !f.metric.empty();
  o.metric = o.metric_given ? parse_metric(f.metric, "--metric") : Metric::l2;
  o.proxy_metric_given = !f.proxy_metric.empty();
  o.proxy_metric = o.proxy_metric_given ? parse_metric(f.proxy_metric, "--proxy-metric") : o.metric;
  o.seed = seed;
  return o;
}

Index build_index(const Space& d, const SharedFlags& f, std::uint64_t seed) {
  Index idx;
  if (f.index_type == "vamana") {
    idx.params = f.vamana;
    idx.params.seed = seed;
    idx.graph = VamanaGraph::build(d, idx.params);
  } else if (f.index_type == "cover-tree") {
    idx.tree = CoverTree::build(d);
  } else {
    throw UsageError("unknown index type " + f.index_type, "--index-type");
  }
  return idx;
}

nlohmann::json build_description(const BimetricData& data, const SharedFlags& f, std::uint64_t seed) {
  nlohmann::json j = data.describe;
  j["items_sha256"] = data.items_sha256;
  j["seed"] = seed;
  j["index_type"] = f.index_type;
  if (f.index_type == "vamana") {
    j["R"] = f.vamana.R;
    j["L"] = f.vamana.L;
    j["alpha"] = io::float_for_json(f.vamana.alpha);
    j["passes"] = f.vamana.passes;
  }
  return j;
}

}  // namespace icmlkit::ann
