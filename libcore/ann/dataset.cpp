#include "ann/dataset.hpp"

#include <fmt/core.h>

#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::ann {
namespace {
Vectors take_rows(const Vectors& v, const std::vector<std::size_t>& rows) {
  Vectors out;
  out.n = rows.size();
  out.dim = v.dim;
  out.data.reserve(out.n * out.dim);
  for (const std::size_t r : rows) out.data.insert(out.data.end(), v.row(r), v.row(r) + v.dim);
  return out;
}

std::vector<std::vector<float>> prepare(const Space& s, const Vectors& q, const std::string& label) {
  std::vector<std::vector<float>> out;
  out.reserve(q.n);
  for (std::size_t i = 0; i < q.n; ++i) out.push_back(s.prepare_query(q.row(i), q.dim, fmt::format("{}, query {}", label, i + 1)));
  return out;
}
}  // namespace

BimetricData load_bimetric_data(const DataOptions& o, bool need_queries, io::Provenance& prov) {
  if (!o.proxy_file.empty() && o.proxy != "same")
    throw UsageError("give either a proxy file or a proxy transform, not both", "--proxy");
  if (!o.proxy_queries.empty() && (o.proxy_file.empty() || o.queries.empty()))
    throw UsageError("the queries' proxy vectors go with --proxy-file and --queries (otherwise the proxy queries come from the proxy file or transform)",
                     "--proxy-queries");
  VectorFile items = read_vectors(o.items, o.read);
  prov.add_input(o.items, items.sha256);
  // The metric: --metric, or the ann-benchmarks file's distance attribute, which must agree.
  Metric metric = o.metric, proxy_metric = o.proxy_metric;
  std::string metric_source = o.metric_given ? "--metric" : "default";
  if (!items.distance.empty()) {
    const Metric file_metric = metric_of_distance(items.distance, o.items);
    if (o.metric_given && o.metric != file_metric)
      throw UsageError(fmt::format("{} says distance = {} ({}): --metric {} contradicts it (drop --metric)", o.items, items.distance,
                                   metric_name(file_metric), metric_name(o.metric)),
                       "--metric");
    metric = file_metric;
    metric_source = fmt::format("file distance attribute '{}'", items.distance);
  }
  if (!o.proxy_metric_given) proxy_metric = metric;
  Vectors true_items = std::move(items.items), true_queries = std::move(items.queries);
  std::string query_source = true_queries.n ? o.items + ":/test" : "";
  std::string proxy_query_source;  // where the proxy queries come from, for error messages
  Vectors proxy_items, proxy_queries;
  bool have_proxy_queries = false;
  // Proxy files are embeddings of the same items: every column is a coordinate (--label-last
  // names the class label of the true file and query file only).
  VectorReadOptions proxy_read = o.read;
  proxy_read.label_last = false;
  if (!o.proxy_file.empty()) {
    VectorFile p = read_vectors(o.proxy_file, proxy_read);
    prov.add_input(o.proxy_file, p.sha256);
    if (p.items.n != true_items.n)
      throw InputError(fmt::format("the proxy file has {} vectors, the true file has {}", p.items.n, true_items.n), o.proxy_file);
    if (p.queries.n != true_queries.n)
      throw InputError(fmt::format("the proxy file has {} test vectors, the true file has {}", p.queries.n, true_queries.n), o.proxy_file);
    proxy_items = std::move(p.items);
    proxy_queries = std::move(p.queries);
    proxy_query_source = o.proxy_file + ":/test";
    have_proxy_queries = true;
  }
  if (!o.queries.empty()) {
    if (o.holdout) throw UsageError("give either a query file or --holdout, not both", "--holdout");
    VectorFile q = read_vectors(o.queries, o.read);
    prov.add_input(o.queries, q.sha256);
    if (q.items.dim != true_items.dim)
      throw InputError(fmt::format("queries have {} coordinates, the items have {}", q.items.dim, true_items.dim), o.queries);
    true_queries = std::move(q.items);
    query_source = o.queries;
    if (!o.proxy_file.empty()) {
      if (o.proxy_queries.empty()) throw UsageError("with a proxy file and a query file, give the queries' proxy vectors too", "--proxy-queries");
      VectorFile pq = read_vectors(o.proxy_queries, proxy_read);
      prov.add_input(o.proxy_queries, pq.sha256);
      if (pq.items.n != true_queries.n)
        throw InputError(fmt::format("{} proxy queries for {} queries", pq.items.n, true_queries.n), o.proxy_queries);
      if (pq.items.dim != proxy_items.dim)
        throw InputError(fmt::format("proxy queries have {} coordinates, the proxy vectors have {}", pq.items.dim, proxy_items.dim),
                         o.proxy_queries);
      proxy_queries = std::move(pq.items);
      proxy_query_source = o.proxy_queries;
    }
  }
  if (o.holdout) {
    if (o.holdout >= true_items.n)
      throw InputError(fmt::format("--holdout {} leaves no items of {}", o.holdout, true_items.n), o.items);
    std::vector<std::size_t> perm(true_items.n);
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    Rng rng(derive_seed(o.seed, 0x401d));
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
    std::vector<std::size_t> qrows(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(o.holdout));
    std::vector<std::size_t> irows(perm.begin() + static_cast<std::ptrdiff_t>(o.holdout), perm.end());
    std::sort(qrows.begin(), qrows.end());
    std::sort(irows.begin(), irows.end());
    true_queries = take_rows(true_items, qrows);
    true_items = take_rows(true_items, irows);
    if (have_proxy_queries) {
      proxy_queries = take_rows(proxy_items, qrows);
      proxy_items = take_rows(proxy_items, irows);
      proxy_query_source = fmt::format("{} (holdout {} rows, seed {})", o.proxy_file, o.holdout, o.seed);
    }
    query_source = fmt::format("{} (holdout {} rows, seed {})", o.items, o.holdout, o.seed);
  }
  if (need_queries && true_queries.n == 0)
    throw UsageError("no queries: give --queries FILE, --holdout N, or an HDF5 file with /test", "--queries");
  if (o.proxy_file.empty()) {
    ProxyTransform t(o.proxy, true_items, "--proxy");
    proxy_items = t.apply(true_items);
    proxy_queries = t.apply(true_queries);
    proxy_query_source = query_source + " (proxy " + o.proxy + ")";
  }
  BimetricData out;
  out.describe = {{"items", true_items.n},          {"true_dim", true_items.dim},
                  {"proxy_dim", proxy_items.dim},  {"queries", true_queries.n},
                  {"metric", metric_name(metric)}, {"proxy_metric", metric_name(proxy_metric)},
                  {"metric_source", metric_source},
                  {"proxy", o.proxy_file.empty() ? o.proxy : "file " + o.proxy_file},
                  {"query_source", query_source},  {"holdout", o.holdout}};
  out.items_sha256 = items.sha256;
  if (o.queries.empty() && !o.holdout) out.file_neighbors = std::move(items.neighbors);
  out.D = Space(std::move(true_items), metric, o.items);
  out.d = Space(std::move(proxy_items), proxy_metric, o.proxy_file.empty() ? o.items + " (proxy " + o.proxy + ")" : o.proxy_file);
  out.qD = prepare(out.D, true_queries, query_source);
  out.qd = prepare(out.d, proxy_queries, proxy_query_source);
  return out;
}

}  // namespace icmlkit::ann
