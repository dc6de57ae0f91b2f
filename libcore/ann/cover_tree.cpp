#include "ann/cover_tree.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/core.h>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "ann/h5matrix.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::ann {

double metric_distance(Metric m, float raw) noexcept {
  const double r = std::max(0.0, static_cast<double>(raw));
  if (m == Metric::l2) return std::sqrt(r);
  if (m == Metric::cosine) return std::sqrt(2.0 * r);
  return raw;
}

namespace {
double pow2(int i) { return std::ldexp(1.0, i); }
using Entry = std::pair<std::uint32_t, double>;  // item, metric distance to the point
}  // namespace

void CoverTree::index_children() {
  const std::size_t n = size();
  children_.assign(n, {});
  dups_.assign(n, {});
  min_level_ = level_.empty() ? 0 : level_[root_];
  for (std::size_t i = 0; i < n; ++i) {
    if (i == root_) continue;
    if (dup_[i]) dups_[parent_[i]].push_back(static_cast<std::uint32_t>(i));
    else {
      children_[parent_[i]].push_back({level_[i], static_cast<std::uint32_t>(i)});
      min_level_ = std::min(min_level_, level_[i]);
    }
  }
  for (auto& c : children_) std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
}

CoverTree CoverTree::build(const Space& d) {
  if (d.metric() == Metric::ip) throw UsageError("the cover tree needs a metric: use l2 or cosine, not ip", "--index-type cover-tree");
  const std::size_t n = d.size();
  const Metric m = d.metric();
  CoverTree t;
  t.metric_ = m;
  t.level_.assign(n, 0);
  t.parent_.assign(n, 0);
  t.dup_.assign(n, 0);
  t.children_.assign(n, {});
  t.dups_.assign(n, {});
  const auto md = [&](std::uint32_t a, std::uint32_t b) { return metric_distance(m, d.item_distance(a, b)); };
  double maxd = 0;
  for (std::uint32_t p = 1; p < n; ++p) maxd = std::max(maxd, md(0, p));
  const int top = maxd > 0 ? static_cast<int>(std::ceil(std::log2(maxd))) : 0;
  t.root_ = 0;
  t.level_[0] = top;
  t.min_level_ = top;
  // Exact duplicates (identical d-vectors) are found by their bytes first.
  std::unordered_map<std::string_view, std::uint32_t> seen;
  const auto bytes = [&](std::uint32_t i) {
    return std::string_view(reinterpret_cast<const char*>(d.vectors().row(i)), d.dim() * sizeof(float));
  };
  seen.emplace(bytes(0), 0);
  std::vector<std::vector<Entry>> Qs;
  std::vector<Entry> Q;
  for (std::uint32_t p = 1; p < n; ++p) {
    const auto [it, fresh] = seen.emplace(bytes(p), p);
    std::int64_t dup_of = fresh ? -1 : static_cast<std::int64_t>(it->second);
    while (dup_of >= 0 && t.dup_[static_cast<std::size_t>(dup_of)]) dup_of = t.parent_[static_cast<std::size_t>(dup_of)];
    if (dup_of < 0) {
      Qs.clear();
      Qs.push_back({{0u, md(0, p)}});
      int i = top;
      while (true) {  // frame Insert(p, Q_i, i)
        Q = Qs.back();
        for (const Entry& e : Qs.back())
          for (const auto& [lev, c] : t.children_[e.first])
            if (lev == i - 1) Q.push_back({c, md(c, p)});
        double best = std::numeric_limits<double>::infinity();
        for (const Entry& e : Q) {
          if (e.second <= 0.0) dup_of = e.first;  // distance 0: a duplicate under d
          best = std::min(best, e.second);
        }
        if (dup_of >= 0 || best > pow2(i)) break;
        std::vector<Entry> next;
        for (const Entry& e : Q)
          if (e.second <= pow2(i)) next.push_back(e);
        Qs.push_back(std::move(next));
        --i;
      }
      if (dup_of < 0) {
        // The failing frame is Qs.back() (level i); attach under the lowest earlier frame j
        // with m(p, Q_j) <= 2^j, at level j - 1, to the closest such q.
        for (std::size_t idx = Qs.size() - 1; idx-- > 0;) {
          const int j = top - static_cast<int>(idx);
          const Entry* pick = nullptr;
          for (const Entry& e : Qs[idx])
            if (e.second <= pow2(j) && (!pick || e.second < pick->second)) pick = &e;
          if (!pick) continue;
          t.parent_[p] = pick->first;
          t.level_[p] = j - 1;
          auto& ch = t.children_[pick->first];
          ch.insert(std::upper_bound(ch.begin(), ch.end(), std::pair<int, std::uint32_t>{j - 1, 0},
                                     [](const auto& a, const auto& b) { return a.first > b.first; }),
                    {j - 1, p});
          t.min_level_ = std::min(t.min_level_, j - 1);
          break;
        }
        continue;
      }
    }
    const auto node = static_cast<std::uint32_t>(dup_of);
    t.dup_[p] = 1;
    t.parent_[p] = node;
    t.level_[p] = t.level_[node];
    t.dups_[node].push_back(p);
  }
  return t;
}

std::vector<std::string> CoverTree::check_invariants(const Space& d, std::size_t max_report) const {
  std::vector<std::string> bad;
  const auto add = [&](std::string s) {
    if (bad.size() < max_report) bad.push_back(std::move(s));
  };
  const std::size_t n = size();
  if (d.size() != n) return {fmt::format("tree has {} items, space has {}", n, d.size())};
  const auto md = [&](std::size_t a, std::size_t b) { return metric_distance(d.metric(), d.item_distance(a, b)); };
  std::vector<std::size_t> nodes;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == root_) {
      if (dup_[i]) add("root is marked duplicate");
      nodes.push_back(i);
      continue;
    }
    const std::size_t q = parent_[i];
    if (q >= n) {
      add(fmt::format("item {}: parent {} out of range", i, q));
      continue;
    }
    if (dup_[i]) {
      if (dup_[q]) add(fmt::format("duplicate {} points to duplicate {}", i, q));
      if (md(i, q) != 0.0) add(fmt::format("duplicate {} is at distance {} from its node {}", i, md(i, q), q));
      continue;
    }
    nodes.push_back(i);
    if (dup_[q]) add(fmt::format("node {} has a duplicate as parent", i));
    if (level_[q] <= level_[i]) add(fmt::format("nesting: node {} at level {} has parent {} at level {}", i, level_[i], q, level_[q]));
    if (md(i, q) > pow2(level_[i] + 1))
      add(fmt::format("covering: node {} at level {} is {} from its parent (> 2^{})", i, level_[i], md(i, q), level_[i] + 1));
  }
  // Separation at every level: p, q both in C_i for i <= min(level) needs m(p, q) > 2^i for
  // the largest such i, i.e. m(p, q) > 2^min(level(p), level(q)).
  for (std::size_t a = 0; a < nodes.size(); ++a)
    for (std::size_t b = a + 1; b < nodes.size(); ++b) {
      const int lv = std::min(level_[nodes[a]], level_[nodes[b]]);
      const double dist = md(nodes[a], nodes[b]);
      if (!(dist > pow2(lv))) add(fmt::format("separation: nodes {} and {} in C_{} at distance {}", nodes[a], nodes[b], lv, dist));
    }
  return bad;
}

namespace {

// Shared best-first search for knn (c = 1, no quota, duplicates share the node's distance)
// and the bi-metric query (radius scaled by c, quota, duplicates evaluated).  A node q of
// level l has all its descendants within sum_{j <= l} 2^j = 2^(l+1) of q under d, hence
// within c 2^(l+1) under D when D <= c d; its subtree is skipped when
// dist(query, q) - c 2^(l+1) > dist_k (the k-th best so far, an upper bound on the true one).
std::vector<Neighbor> descend(const CoverTree& t, const std::vector<std::vector<std::pair<int, std::uint32_t>>>& children,
                              const std::vector<std::vector<std::uint32_t>>& dups, Metric m, QueryDistance& q, double c,
                              std::uint64_t quota, bool eval_dups, int k, SearchScratch& s) {
  s.reset(t.size());
  std::vector<Neighbor>& all = s.visited;  // every point with a distance
  const std::uint64_t start = q.calls();
  const auto left = [&] { return quota - std::min(quota, q.calls() - start); };
  std::vector<double> topk;  // max-heap of the k best metric distances
  const auto note = [&](std::uint32_t id, float raw) {
    all.push_back({id, raw});
    const double md = metric_distance(m, raw);
    if (topk.size() < static_cast<std::size_t>(k)) {
      topk.push_back(md);
      std::push_heap(topk.begin(), topk.end());
    } else if (md < topk.front()) {
      std::pop_heap(topk.begin(), topk.end());
      topk.back() = md;
      std::push_heap(topk.begin(), topk.end());
    }
    return md;
  };
  const auto kth = [&] { return topk.size() == static_cast<std::size_t>(k) ? topk.front() : std::numeric_limits<double>::infinity(); };
  // Frontier: (metric distance, node), smallest first.
  std::vector<Entry> heap;
  const auto cmp = [](const Entry& a, const Entry& b) { return a.second > b.second; };
  const auto visit = [&](std::uint32_t id) {  // evaluates a node and its duplicates
    const float raw = q(id);
    heap.push_back({id, note(id, raw)});
    std::push_heap(heap.begin(), heap.end(), cmp);
    for (const std::uint32_t dd : dups[id]) {
      if (!eval_dups) note(dd, raw);
      else if (left() > 0) note(dd, q(dd));
    }
  };
  if (left() == 0 || t.size() == 0) return {};
  visit(t.root());
  while (!heap.empty() && left() > 0) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Entry e = heap.back();
    heap.pop_back();
    // Every descendant of e is within 2^(level(e)+1) of e under d (covering, summed down).
    if (e.second - c * pow2(t.level(e.first) + 1) > kth()) continue;
    for (const auto& [lev, ch] : children[e.first]) {
      if (left() == 0) break;
      visit(ch);
    }
  }
  const std::size_t kk = std::min(all.size(), static_cast<std::size_t>(k));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end());
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk)};
}

}  // namespace

std::vector<Neighbor> CoverTree::knn(QueryDistance& q, int k, SearchScratch& s) const {
  return descend(*this, children_, dups_, metric_, q, 1.0, std::numeric_limits<std::uint64_t>::max(), false, k, s);
}

std::vector<Neighbor> CoverTree::bimetric_knn(QueryDistance& D, double c, std::uint64_t quota, int k, SearchScratch& s) const {
  return descend(*this, children_, dups_, D.space().metric(), D, c, quota, true, k, s);
}

void CoverTree::save(const io::h5::Handle& file, const std::string& group) const {
  auto g = io::h5::create_group(file, group);
  std::vector<std::int32_t> parent(parent_.begin(), parent_.end()), level(level_.begin(), level_.end()), dup(dup_.begin(), dup_.end());
  h5_write_ints(g, "parent", parent, {size(), 1});
  h5_write_ints(g, "level", level, {size(), 1});
  h5_write_ints(g, "duplicate", dup, {size(), 1});
  io::h5::write_attr(g, "type", "cover-tree");
  io::h5::write_attr(g, "root", std::to_string(root_));
  io::h5::write_attr(g, "metric", metric_name(metric_));
}

CoverTree CoverTree::load(const io::h5::Handle& file, const std::string& group, std::size_t n, const std::string& label) {
  auto g = io::h5::open_group(file, group, label);
  const std::string where = label + ":" + group;
  Shape2 s1, s2, s3;
  const auto parent = h5_read_ints(g, "parent", where + "/parent", s1);
  const auto level = h5_read_ints(g, "level", where + "/level", s2);
  const auto dup = h5_read_ints(g, "duplicate", where + "/duplicate", s3);
  if (s1.rows != n || s2.rows != n || s3.rows != n)
    throw InputError(fmt::format("index has {} items, the data has {}", s1.rows, n), where);
  std::string root, metric;
  if (!io::h5::read_attr(g, "root", root) || !io::h5::read_attr(g, "metric", metric)) throw InputError("missing attribute 'root' or 'metric'", where);
  const auto r = io::parse_double(root);
  if (!r || *r < 0 || *r >= static_cast<double>(n)) throw InputError("bad root", where);
  CoverTree t;
  t.metric_ = parse_metric(metric, where);
  t.root_ = static_cast<std::uint32_t>(*r);
  t.parent_.resize(n);
  t.level_.resize(n);
  t.dup_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (parent[i] < 0 || parent[i] >= static_cast<std::int64_t>(n) || level[i] < -100000 || level[i] > 100000 || (dup[i] != 0 && dup[i] != 1))
      throw InputError("bad parent, level or duplicate flag", fmt::format("{}, item {}", where, i));
    t.parent_[i] = static_cast<std::uint32_t>(parent[i]);
    t.level_[i] = static_cast<int>(level[i]);
    t.dup_[i] = static_cast<std::uint8_t>(dup[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {  // levels strictly increase towards the root: no cycles
    if (i == t.root_) continue;
    const std::size_t q = t.parent_[i];
    const bool ok = t.dup_[i] ? (!t.dup_[q] && t.level_[i] == t.level_[q]) : (!t.dup_[q] && t.level_[q] > t.level_[i]);
    if (!ok || q == i) throw InputError("inconsistent parent", fmt::format("{}, item {}", where, i));
  }
  if (t.dup_[t.root_]) throw InputError("root is a duplicate", where);
  t.index_children();
  return t;
}

}  // namespace icmlkit::ann
