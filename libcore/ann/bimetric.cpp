#include "ann/bimetric.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/core.h>
#include <limits>

#include "io/atomic_file.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::ann {

Mode parse_mode(const std::string& s, const std::string& flag) {
  if (s == "bimetric") return Mode::bimetric;
  if (s == "rerank") return Mode::rerank;
  if (s == "proxy") return Mode::proxy;
  if (s == "exact-d") return Mode::exact_d;
  if (s == "exact-D") return Mode::exact_D;
  throw UsageError(fmt::format("unknown mode '{}' (bimetric, rerank, proxy, exact-d, exact-D)", s), flag);
}

std::string mode_name(Mode m) {
  switch (m) {
    case Mode::bimetric: return "bimetric";
    case Mode::rerank: return "rerank";
    case Mode::proxy: return "proxy";
    case Mode::exact_d: return "exact-d";
    default: return "exact-D";
  }
}

std::vector<Neighbor> brute_force(QueryDistance& q, int k) {
  const std::size_t n = q.space().size();
  std::vector<Neighbor> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = {static_cast<std::uint32_t>(i), q(i)};
  const std::size_t kk = std::min(n, static_cast<std::size_t>(std::max(0, k)));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end());
  all.resize(kk);
  return all;
}

namespace {
// Evaluates `ids` under D (counted) and returns the best k, sorted.
std::vector<Neighbor> rerank_ids(QueryDistance& D, const std::vector<std::uint32_t>& ids, int k) {
  std::vector<Neighbor> r;
  r.reserve(ids.size());
  for (const std::uint32_t id : ids) r.push_back({id, D(id)});
  const std::size_t kk = std::min(r.size(), static_cast<std::size_t>(k));
  std::partial_sort(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(kk), r.end());
  r.resize(kk);
  return r;
}
}  // namespace

QueryResult search_one(const Index& index, const Space& d, const Space& D, const float* qd, const float* qD,
                       const SearchSettings& s, SearchScratch& scratch) {
  QueryDistance dq(d, qd), Dq(D, qD);
  std::vector<Neighbor> out;
  bool under_D = true;
  const auto Q = s.quota;
  switch (s.mode) {
    case Mode::exact_d:
      out = brute_force(dq, s.k);
      under_D = false;
      break;
    case Mode::exact_D:
      out = brute_force(Dq, s.k);
      break;
    case Mode::proxy:
      under_D = false;
      if (index.graph) {
        out = index.graph->beam_search(dq, std::max(s.search_L, s.k), scratch);
        if (out.size() > static_cast<std::size_t>(s.k)) out.resize(static_cast<std::size_t>(s.k));
      } else {
        out = index.tree->knn(dq, s.k, scratch);
      }
      break;
    case Mode::rerank:
    case Mode::bimetric: {
      std::vector<std::uint32_t> list;  // proxy-stage ranking under d
      const int need = s.mode == Mode::rerank ? static_cast<int>(std::min<std::uint64_t>(Q, d.size())) : s.search_L;
      if (index.graph) {
        for (const Neighbor& nb : index.graph->beam_search(dq, std::max({s.search_L, s.k, need}), scratch)) list.push_back(nb.id);
      } else if (s.mode == Mode::rerank) {
        for (const Neighbor& nb : index.tree->knn(dq, std::max(need, 1), scratch)) list.push_back(nb.id);
      }
      if (s.mode == Mode::rerank) {
        if (list.size() > Q) list.resize(static_cast<std::size_t>(Q));
        out = rerank_ids(Dq, list, s.k);
      } else if (index.graph) {
        std::size_t ns = s.seeds >= 0 ? static_cast<std::size_t>(s.seeds)
                                      : std::min<std::size_t>(std::max<std::uint64_t>(100, Q / 2), list.size());
        ns = std::min<std::size_t>({ns, list.size(), static_cast<std::size_t>(std::min<std::uint64_t>(Q, list.size()))});
        list.resize(ns);
        out = index.graph->quota_search(Dq, list, Q, s.k, scratch);
      } else {
        out = index.tree->bimetric_knn(Dq, s.c, Q, s.k, scratch);
      }
      break;
    }
  }
  QueryResult r;
  for (const Neighbor& nb : out) {
    r.ids.push_back(nb.id);
    r.dist.push_back(report_distance(under_D ? D.metric() : d.metric(), nb.dist));
  }
  r.d_calls = dq.calls();
  r.D_calls = Dq.calls();
  return r;
}

double recall_at_k(const std::vector<float>& found_D, float kth_true, int k) {
  if (k <= 0) return 1.0;
  std::size_t hit = 0;
  for (std::size_t i = 0; i < found_D.size() && i < static_cast<std::size_t>(k); ++i)
    if (found_D[i] <= kth_true) ++hit;
  return static_cast<double>(hit) / k;
}

Distortion measure_distortion(const Space& d, const Space& D, const std::vector<std::vector<float>>& qd,
                              const std::vector<std::vector<float>>& qD, std::size_t query_pairs, std::size_t item_pairs,
                              std::uint64_t seed) {
  Distortion out;
  Rng rng(derive_seed(seed, 0xd157));
  const std::size_t n = d.size();
  if (d.metric() != Metric::ip && D.metric() != Metric::ip && n > 0) {
    std::vector<double> r;
    if (!qd.empty()) {
      for (std::size_t t = 0; t < query_pairs; ++t) {
        const std::size_t qi = rng.below(qd.size()), j = rng.below(n);
        const double dd = report_distance(d.metric(), raw_distance(d.metric(), qd[qi].data(), d.vectors().row(j), d.dim()));
        const double DD = report_distance(D.metric(), raw_distance(D.metric(), qD[qi].data(), D.vectors().row(j), D.dim()));
        if (dd > 0) r.push_back(DD / dd);
      }
    }
    out.pairs = r.size();
    out.probs = {0.0, 0.01, 0.05, 0.5, 0.95, 0.99, 1.0};
    std::sort(r.begin(), r.end());
    for (const double p : out.probs)
      out.quantiles.push_back(r.empty() ? std::numeric_limits<double>::quiet_NaN()
                                        : r[static_cast<std::size_t>(std::llround(p * static_cast<double>(r.size() - 1)))]);
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (std::size_t t = 0; t < item_pairs && n > 1; ++t) {
      const std::size_t a = rng.below(n), b = rng.below(n);
      const double dd = metric_distance(d.metric(), d.item_distance(a, b));
      if (dd <= 0) continue;
      const double ratio = metric_distance(D.metric(), D.item_distance(a, b)) / dd;
      lo = std::min(lo, ratio);
      hi = std::max(hi, ratio);
    }
    out.max_item_ratio = hi;
    out.min_item_ratio = std::isfinite(lo) ? lo : 0.0;
  }
  return out;
}

void save_index(const std::string& path, const Index& index, const io::Provenance& prov, const std::string& extra_json) {
  io::AtomicFile af(path);
  {
    auto f = io::h5::create_file(af.temp_path().string());
    io::h5::write_provenance(f, prov);
    io::h5::write_attr(f, "index_type", index.type());
    io::h5::write_attr(f, "build", extra_json);
    if (index.graph) index.graph->save(f, "/index", index.params);
    else index.tree->save(f, "/index");
    io::h5::close_file(f, path);
  }
  af.commit();
}

Index load_index(const std::string& path, std::size_t n, std::string* extra_json) {
  auto f = io::h5::open_file(path);
  std::string type;
  if (!io::h5::read_attr(f, "index_type", type)) throw InputError("not a bimetric-index file (no 'index_type' attribute)", path);
  if (extra_json && !io::h5::read_attr(f, "build", *extra_json)) *extra_json = "{}";
  Index idx;
  if (type == "vamana") idx.graph = VamanaGraph::load(f, "/index", n, path);
  else if (type == "cover-tree") idx.tree = CoverTree::load(f, "/index", n, path);
  else throw InputError(fmt::format("unknown index type '{}'", type), path);
  return idx;
}

}  // namespace icmlkit::ann
