#include "ann/vamana.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/core.h>
#include <omp.h>

#include "ann/h5matrix.hpp"
#include "io/table.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::ann {

void SearchScratch::reset(std::size_t n) {
  if (tag.size() != n) {
    tag.assign(n, 0);
    epoch = 0;
  }
  if (++epoch == 0) {  // wrapped: clear the tags once every 2^32 searches
    std::fill(tag.begin(), tag.end(), 0);
    epoch = 1;
  }
  pool.clear();
  expanded.clear();
  visited.clear();
}

namespace {

bool occludes(float alpha, float d_kept_cand, float d_p_cand) noexcept {
  if (d_kept_cand <= 0.0f) return true;  // a duplicate of a kept neighbour
  return d_p_cand >= 0.0f ? alpha * d_kept_cand < d_p_cand : d_kept_cand < d_p_cand;
}

// Inserts c into the sorted pool of capacity L (with its expanded flag); returns the
// position or L when it did not enter.
std::size_t pool_insert(SearchScratch& s, const Neighbor& c, std::size_t L) {
  if (s.pool.size() == L && !(c < s.pool.back())) return L;
  const auto it = std::upper_bound(s.pool.begin(), s.pool.end(), c);
  const std::size_t pos = static_cast<std::size_t>(it - s.pool.begin());
  if (s.pool.size() == L) {
    s.pool.pop_back();
    s.expanded.pop_back();
  }
  s.pool.insert(s.pool.begin() + static_cast<std::ptrdiff_t>(pos), c);
  s.expanded.insert(s.expanded.begin() + static_cast<std::ptrdiff_t>(pos), 0);
  return pos;
}

// DiskANN GreedySearch: expand the closest unexpanded candidate, keep the best L seen.
void greedy(const VamanaGraph& g, QueryDistance& q, std::size_t L, SearchScratch& s) {
  s.reset(g.size());
  const std::uint32_t start = g.medoid();
  s.tag[start] = s.epoch;
  pool_insert(s, {start, q(start)}, L);
  std::size_t cursor = 0;
  while (cursor < s.pool.size()) {
    if (s.expanded[cursor]) {
      ++cursor;
      continue;
    }
    s.expanded[cursor] = 1;
    const Neighbor cur = s.pool[cursor];
    s.visited.push_back(cur);
    const std::uint32_t* nb = g.neighbors(cur.id);
    const std::uint32_t deg = g.degree(cur.id);
    std::size_t best = s.pool.size();
    for (std::uint32_t m = 0; m < deg; ++m) {
      const std::uint32_t u = nb[m];
      if (s.tag[u] == s.epoch) continue;
      s.tag[u] = s.epoch;
      const std::size_t pos = pool_insert(s, {u, q(u)}, L);
      if (pos < best) best = pos;
    }
    if (best < cursor) cursor = best;
  }
}

}  // namespace

std::vector<std::uint32_t> VamanaGraph::robust_prune(const Space& d, std::uint32_t p, std::vector<Neighbor>& cand, float alpha, int R) {
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end(), [](const Neighbor& a, const Neighbor& b) { return a.id == b.id; }), cand.end());
  std::vector<std::uint32_t> out;
  out.reserve(static_cast<std::size_t>(R));
  std::vector<std::uint8_t> gone(cand.size(), 0);
  for (std::size_t i = 0; i < cand.size() && out.size() < static_cast<std::size_t>(R); ++i) {
    if (gone[i] || cand[i].id == p) continue;
    out.push_back(cand[i].id);
    for (std::size_t j = i + 1; j < cand.size(); ++j) {
      if (gone[j] || cand[j].id == p) continue;
      if (occludes(alpha, d.item_distance(cand[i].id, cand[j].id), cand[j].dist)) gone[j] = 1;
    }
  }
  return out;
}

VamanaGraph VamanaGraph::build(const Space& d, const VamanaParams& p) {
  if (p.R < 1) throw UsageError("must be >= 1", "-R");
  if (p.L < 1) throw UsageError("must be >= 1", "-L");
  if (!(p.alpha >= 1.0f)) throw UsageError("must be >= 1", "--alpha");
  const std::size_t n = d.size();
  VamanaGraph g;
  g.R_ = p.R;
  g.stride_ = static_cast<std::size_t>(std::ceil(1.3 * p.R));
  const std::size_t cap = g.stride_;
  g.degree_.assign(n, 0);
  g.nbrs_.assign(n * cap, 0);
  // Medoid: the item closest (L2) to the centroid of the d-vectors.
  {
    std::vector<double> c(d.dim(), 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < d.dim(); ++k) c[k] += d.vectors().row(i)[k];
    std::vector<float> cf(d.dim());
    for (std::size_t k = 0; k < d.dim(); ++k) cf[k] = static_cast<float>(c[k] / static_cast<double>(n));
    float best = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = raw_distance(Metric::l2, cf.data(), d.vectors().row(i), d.dim());
      if (i == 0 || v < best) best = v, g.medoid_ = static_cast<std::uint32_t>(i);
    }
  }
  // Batched insertion (prefix doubling, as ParlayANN): the points of a batch search the
  // frozen graph and prune in parallel; their lists and the back edges, grouped by target
  // and sorted, are then applied in a fixed order.  No locks, and the graph depends on the
  // seed only, not on the thread count.
  Rng rng(derive_seed(p.seed, 0x7a3a));
  std::vector<std::uint32_t> order(n);
  const std::size_t max_batch = std::max<std::size_t>(1, n / 50);
  std::vector<std::vector<std::uint32_t>> lists;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> back;  // (target j, new in-neighbour)
  std::vector<std::size_t> group;                              // starts of the groups of `back`
  for (const float a : {1.0f, p.alpha}) {
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    for (std::size_t done = 0, batch = 1; done < n; done += batch, batch = std::min(2 * batch, max_batch)) {
      batch = std::min(batch, n - done);
      lists.assign(batch, {});
      // Small batches run on one thread: a parallel region costs more than their work.
#pragma omp parallel if (batch >= 16)
      {
        SearchScratch s;
        std::vector<Neighbor> cand;
#pragma omp for schedule(dynamic, 1)
        for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(batch); ++t) {
          const std::uint32_t pt = order[done + static_cast<std::size_t>(t)];
          QueryDistance q(d, d.vectors().row(pt));
          greedy(g, q, static_cast<std::size_t>(std::max(p.L, p.R)), s);
          cand.assign(s.visited.begin(), s.visited.end());
          const std::uint32_t* nb = g.neighbors(pt);
          for (std::uint32_t j = 0; j < g.degree_[pt]; ++j) cand.push_back({nb[j], d.item_distance(pt, nb[j])});
          lists[static_cast<std::size_t>(t)] = robust_prune(d, pt, cand, a, p.R);
        }
      }
      back.clear();
      for (std::size_t t = 0; t < batch; ++t) {
        const std::uint32_t pt = order[done + t];
        std::copy(lists[t].begin(), lists[t].end(), g.nbrs_.begin() + static_cast<std::ptrdiff_t>(pt * cap));
        g.degree_[pt] = static_cast<std::uint32_t>(lists[t].size());
        for (const std::uint32_t j : lists[t]) back.push_back({j, pt});
      }
      std::sort(back.begin(), back.end());
      group.clear();
      for (std::size_t i = 0; i < back.size(); ++i)
        if (i == 0 || back[i].first != back[i - 1].first) group.push_back(i);
      group.push_back(back.size());
      const auto ngroups = static_cast<std::ptrdiff_t>(group.size()) - 1;
#pragma omp parallel if (ngroups >= 256)
      {
        std::vector<Neighbor> cj;
#pragma omp for schedule(dynamic, 16)
        for (std::ptrdiff_t gi = 0; gi < ngroups; ++gi) {
          const std::uint32_t j = back[group[static_cast<std::size_t>(gi)]].first;
          std::uint32_t* nb = g.nbrs_.data() + j * cap;
          std::uint32_t deg = g.degree_[j];
          cj.clear();
          bool full = false;
          for (std::size_t e = group[static_cast<std::size_t>(gi)]; e < group[static_cast<std::size_t>(gi) + 1]; ++e) {
            const std::uint32_t pt = back[e].second;
            if (std::find(nb, nb + deg, pt) != nb + deg) continue;
            if (!full && deg < cap) {
              nb[deg++] = pt;
            } else {
              full = true;
              cj.push_back({pt, d.item_distance(j, pt)});
            }
          }
          g.degree_[j] = deg;
          if (full) {  // over the slack: prune the union down to R
            for (std::uint32_t m = 0; m < deg; ++m) cj.push_back({nb[m], d.item_distance(j, nb[m])});
            const std::vector<std::uint32_t> kj = robust_prune(d, j, cj, a, p.R);
            std::copy(kj.begin(), kj.end(), nb);
            g.degree_[j] = static_cast<std::uint32_t>(kj.size());
          }
        }
      }
    }
    // End of pass: lists that grew past R (slack) are pruned to R.
#pragma omp parallel if (n >= 1024)
    {
      std::vector<Neighbor> cand;
#pragma omp for schedule(dynamic, 256)
      for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(n); ++t) {
        const auto j = static_cast<std::uint32_t>(t);
        if (g.degree_[j] <= static_cast<std::uint32_t>(p.R)) continue;
        std::uint32_t* nb = g.nbrs_.data() + j * cap;
        cand.clear();
        for (std::uint32_t m = 0; m < g.degree_[j]; ++m) cand.push_back({nb[m], d.item_distance(j, nb[m])});
        const std::vector<std::uint32_t> kj = robust_prune(d, j, cand, a, p.R);
        std::copy(kj.begin(), kj.end(), nb);
        g.degree_[j] = static_cast<std::uint32_t>(kj.size());
      }
    }
  }
  // Compact to R slots per node.
  for (std::size_t i = 0; i < n; ++i)
    std::copy(g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * cap), g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * cap + g.degree_[i]),
              g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(p.R)));
  g.nbrs_.resize(n * static_cast<std::size_t>(p.R));
  g.nbrs_.shrink_to_fit();
  g.stride_ = static_cast<std::size_t>(p.R);
  return g;
}

std::vector<Neighbor> VamanaGraph::beam_search(QueryDistance& q, int L, SearchScratch& s) const {
  greedy(*this, q, static_cast<std::size_t>(std::max(1, L)), s);
  return s.pool;
}

std::vector<Neighbor> VamanaGraph::quota_search(QueryDistance& D, const std::vector<std::uint32_t>& seeds, std::uint64_t quota, int k,
                                                SearchScratch& s) const {
  s.reset(size());
  std::vector<Neighbor>& heap = s.pool;       // frontier: evaluated, not yet expanded (min-heap)
  std::vector<Neighbor>& done = s.visited;    // every point evaluated under D
  const auto cmp = [](const Neighbor& a, const Neighbor& b) { return b < a; };
  const std::uint64_t start = D.calls();
  for (const std::uint32_t id : seeds) {
    if (D.calls() - start >= quota) break;
    if (s.tag[id] == s.epoch) continue;
    s.tag[id] = s.epoch;
    const Neighbor c{id, D(id)};
    done.push_back(c);
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), cmp);
  }
  while (D.calls() - start < quota && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Neighbor cur = heap.back();
    heap.pop_back();
    const std::uint32_t* nb = neighbors(cur.id);
    for (std::uint32_t m = 0; m < degree(cur.id); ++m) {
      const std::uint32_t u = nb[m];
      if (s.tag[u] == s.epoch) continue;
      if (D.calls() - start >= quota) break;
      s.tag[u] = s.epoch;
      const Neighbor c{u, D(u)};
      done.push_back(c);
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  }
  const std::size_t kk = std::min(done.size(), static_cast<std::size_t>(std::max(0, k)));
  std::partial_sort(done.begin(), done.begin() + static_cast<std::ptrdiff_t>(kk), done.end());
  return {done.begin(), done.begin() + static_cast<std::ptrdiff_t>(kk)};
}

void VamanaGraph::save(const io::h5::Handle& file, const std::string& group, const VamanaParams& p) const {
  auto g = io::h5::create_group(file, group);
  std::vector<std::int32_t> adj(nbrs_.size(), -1);
  for (std::size_t i = 0; i < size(); ++i)
    for (std::uint32_t m = 0; m < degree_[i]; ++m) adj[i * static_cast<std::size_t>(R_) + m] = static_cast<std::int32_t>(neighbors(i)[m]);
  h5_write_ints(g, "neighbors", adj, {size(), static_cast<std::size_t>(R_)});
  io::h5::write_attr(g, "type", "vamana");
  io::h5::write_attr(g, "R", std::to_string(p.R));
  io::h5::write_attr(g, "L", std::to_string(p.L));
  io::h5::write_attr(g, "alpha", fmt::format("{}", p.alpha));
  io::h5::write_attr(g, "medoid", std::to_string(medoid_));
}

VamanaGraph VamanaGraph::load(const io::h5::Handle& file, const std::string& group, std::size_t n_expected, const std::string& label) {
  auto g = io::h5::open_group(file, group, label);
  Shape2 sh;
  const auto adj = h5_read_ints(g, "neighbors", label + ":" + group + "/neighbors", sh);
  if (sh.rows != n_expected)
    throw InputError(fmt::format("index has {} items, the data has {}", sh.rows, n_expected), label);
  if (sh.cols < 1 || sh.cols > 100000) throw InputError(fmt::format("bad maximum degree {}", sh.cols), label);
  std::string med;
  if (!io::h5::read_attr(g, "medoid", med)) throw InputError("missing attribute 'medoid'", label + ":" + group);
  VamanaGraph out;
  out.R_ = static_cast<int>(sh.cols);
  out.stride_ = sh.cols;
  const auto m = io::parse_double(med);
  if (!m || *m < 0 || *m >= static_cast<double>(sh.rows)) throw InputError("bad medoid", label + ":" + group);
  out.medoid_ = static_cast<std::uint32_t>(*m);
  out.degree_.assign(sh.rows, 0);
  out.nbrs_.assign(adj.size(), 0);
  for (std::size_t i = 0; i < sh.rows; ++i) {
    std::uint32_t deg = 0;
    for (std::size_t c = 0; c < sh.cols; ++c) {
      const std::int64_t v = adj[i * sh.cols + c];
      if (v < 0) break;
      if (v >= static_cast<std::int64_t>(sh.rows))
        throw InputError(fmt::format("neighbour id {} out of range", v), fmt::format("{}, item {}", label, i));
      out.nbrs_[i * sh.cols + deg++] = static_cast<std::uint32_t>(v);
    }
    out.degree_[i] = deg;
  }
  return out;
}

}  // namespace icmlkit::ann
