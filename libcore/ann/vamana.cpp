#include "ann/vamana.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fmt/core.h>
#include <mutex>
#include <utility>
#include <omp.h>

#include "ann/h5matrix.hpp"
#include "io/table.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace icmlkit::ann {

void SearchScratch::reset(std::size_t n) {
  const std::size_t words = (n + 63) / 64;
  if (seen.size() != words || touched.size() > words / 4) {  // wiping the words is then cheaper
    seen.assign(words, 0);
  } else {
    for (const std::uint32_t u : touched) seen[u >> 6] = 0;
  }
  touched.clear();
  beam.clear();
  pool.clear();
  visited.clear();
}

namespace {

// RobustPrune's occlusion test on raw distances of a metric space (l2: squared L2, cosine:
// 1 - cos; ip never reaches it, see mips_space): is candidate c dropped because of the kept
// neighbour k?  (d_kc = d(k, c), d_pc = d(p, c).)  alpha d_kc < d_pc (DiskANN: occlude factor
// d_pc / d_kc > alpha); a zero d_kc (identical vectors under l2, the same direction under
// cosine: the same point of the space) always occludes, so duplicates never fill a list.
bool occludes(float alpha, float d_kept_cand, float d_p_cand) noexcept {
  return d_kept_cand <= 0.0f || alpha * d_kept_cand < d_p_cand;
}

// The (distance, id) order of Neighbor as one unsigned 64-bit key: the float's bits made
// monotone (sign bit flipped for positives, all bits for negatives; -0 taken as +0), then
// the id.
inline std::uint64_t order_key(float dist, std::uint32_t id) noexcept {
  std::uint32_t u;
  dist += 0.0f;  // -0 -> +0 (they compare equal as floats)
  std::memcpy(&u, &dist, sizeof u);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (std::uint64_t{u} << 32) | id;
}

// Inserts c into the sorted list of capacity L (ordered by distance, then id, as
// Neighbor); returns the position or L when it did not enter.  The position is found by a
// branch-free binary search on order_key (the comparisons are unpredictable).
std::size_t pool_insert(SearchScratch& s, const Neighbor& c, std::size_t L) {
  std::vector<BeamEntry>& b = s.beam;
  const std::uint64_t key = order_key(c.dist, c.id);
  if (b.size() == L && key >= order_key(b.back().dist, b.back().id)) return L;
  // pos = the number of entries before c.
  const BeamEntry* lo = b.data();
  std::size_t len = b.size();
  while (len > 0) {
    const std::size_t half = len / 2;
    const bool right = order_key(lo[half].dist, lo[half].id) < key;
    lo = right ? lo + half + 1 : lo;
    len = right ? len - half - 1 : half;
  }
  const std::size_t pos = static_cast<std::size_t>(lo - b.data());
  if (b.size() == L) b.pop_back();
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), BeamEntry{c.id, c.dist, 0});
  return pos;
}

// DiskANN GreedySearch: expand the closest unexpanded candidate, keep the best L seen.
// `row(id)` returns node id's out-list as {pointer, degree} (the build reads a live list
// through relaxed atomic loads, see build(); a query reads the frozen graph), and
// `prefetch_row(id)` asks the cache for that list: while a node's neighbours are evaluated,
// the list of the next candidate in line to be expanded is fetched.
template <class Row, class PrefetchRow>
void greedy(std::size_t n, std::uint32_t start, QueryDistance& q, std::size_t L, SearchScratch& s, const Row& row,
            const PrefetchRow& prefetch_row) {
  s.reset(n);
  s.visit(start);
  pool_insert(s, {start, q(start)}, L);
  std::size_t cursor = 0;
  while (cursor < s.beam.size()) {
    if (s.beam[cursor].expanded) {
      ++cursor;
      continue;
    }
    s.beam[cursor].expanded = 1;
    const Neighbor cur{s.beam[cursor].id, s.beam[cursor].dist};
    s.visited.push_back(cur);
    for (std::size_t nx = cursor + 1; nx < s.beam.size(); ++nx)
      if (!s.beam[nx].expanded) {
        prefetch_row(s.beam[nx].id);
        break;
      }
    // Gather the unvisited neighbours, then evaluate them as one prefetched batch.
    const auto [nb, deg] = row(cur.id);
    s.ids.clear();
    for (std::uint32_t m = 0; m < deg; ++m) {
      const std::uint32_t u = __atomic_load_n(nb + m, __ATOMIC_RELAXED);
      if (s.visit(u)) s.ids.push_back(u);
    }
    s.dists.resize(s.ids.size());
    q.batch(s.ids.data(), s.ids.size(), s.dists.data());
    std::size_t best = s.beam.size();
    for (std::size_t t = 0; t < s.ids.size(); ++t) {
      const std::size_t pos = pool_insert(s, {s.ids[t], s.dists[t]}, L);
      if (pos < best) best = pos;
    }
    if (best < cursor) cursor = best;
  }
}

// Prefetches the `count` ids from `p` (the cache lines they span).
inline void prefetch_ids(const std::uint32_t* p, std::size_t count) noexcept {
  for (std::size_t b = 0; b < count * sizeof(std::uint32_t); b += 64) __builtin_prefetch(reinterpret_cast<const char*>(p) + b);
}

void greedy(const VamanaGraph& g, QueryDistance& q, std::size_t L, SearchScratch& s) {
  greedy(
      g.size(), g.medoid(), q, L, s, [&g](std::uint32_t id) { return std::pair{g.neighbors(id), g.degree(id)}; },
      [&g](std::uint32_t id) { prefetch_ids(g.neighbors(id), g.degree(id)); });
}

}  // namespace

namespace {

// Buffers of one RobustPrune call, kept per thread so the build does not allocate per insert.
struct PruneScratch {
  std::vector<std::uint32_t> ids;  // the candidates still alive (not kept, not occluded), by distance to p
  std::vector<float> dp;           // their distances to p
  std::vector<float> dists;        // their distances to the last kept one
};

// RobustPrune (see robust_prune) into `out`.  The alive candidates are kept compacted in
// order; the distances from each kept p* to all of them are evaluated as one batch (rows
// prefetched), and the ones p* occludes are dropped in the same sweep.
void prune(const Space& d, std::uint32_t p, std::vector<Neighbor>& cand, float alpha, int R, PruneScratch& b,
           std::vector<std::uint32_t>& out) {
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end(), [](const Neighbor& x, const Neighbor& y) { return x.id == y.id; }), cand.end());
  out.clear();
  b.ids.clear();
  b.dp.clear();
  for (const Neighbor& c : cand)
    if (c.id != p) {
      b.ids.push_back(c.id);
      b.dp.push_back(c.dist);
    }
  const float* base = d.vectors().data.data();
  const std::size_t dim = d.dim();
  std::size_t alive = b.ids.size(), first = 0;  // alive candidates: ids[first, alive)
  while (first < alive) {
    const std::uint32_t kept = b.ids[first++];
    out.push_back(kept);
    if (out.size() >= static_cast<std::size_t>(R)) break;
    const std::size_t m = alive - first;
    b.dists.resize(m);
    raw_distances(d.metric(), d.vectors().row(kept), base, dim, b.ids.data() + first, m, b.dists.data());
    std::size_t w = first;
    for (std::size_t t = 0; t < m; ++t) {
      if (occludes(alpha, b.dists[t], b.dp[first + t])) continue;
      b.ids[w] = b.ids[first + t];
      b.dp[w] = b.dp[first + t];
      ++w;
    }
    alive = w;
  }
}

// Appends (u, d(p, u)) for the `count` items `ids` to `cand` (one batch).
void add_candidates(const Space& d, std::uint32_t p, const std::uint32_t* ids, std::size_t count, std::vector<Neighbor>& cand,
                    std::vector<float>& buf) {
  buf.resize(count);
  raw_distances(d.metric(), d.vectors().row(p), d.vectors().data.data(), d.dim(), ids, count, buf.data());
  for (std::size_t t = 0; t < count; ++t) cand.push_back({ids[t], buf[t]});
}

// Everything one build thread reuses from insert to insert.
struct BuildScratch {
  SearchScratch search;
  PruneScratch prune;
  std::vector<Neighbor> cand;
  std::vector<std::uint32_t> kept, list, out;
  std::vector<float> buf;
};

}  // namespace

namespace {

// The MIPS-to-L2 reduction (Bachrach et al., RecSys 2014; what DiskANN does for inner
// product): each item x becomes x' = (x, sqrt(M^2 - |x|^2)) with M the largest norm, so
// |x'| = M for all items and, for a query q' = (q, 0), |x' - q'|^2 = M^2 + |q|^2 - 2<x, q>:
// the order by squared L2 in the augmented space is the order by -<x, q>.  A graph built
// with the L2 rules on x' therefore serves ip queries unchanged (greedy search only compares
// distances to one query), while RobustPrune gets a true metric between items (-<x, y> is
// not one: it is negative, and an item is not its own nearest neighbour).
Space mips_space(const Space& d) {
  const std::size_t n = d.size(), dim = d.dim();
  std::vector<double> sq(n);
  double max_sq = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double acc = 0.0;
    for (std::size_t k = 0; k < dim; ++k) acc += static_cast<double>(d.vectors().row(i)[k]) * d.vectors().row(i)[k];
    sq[i] = acc;
    max_sq = std::max(max_sq, acc);
  }
  Vectors a;
  a.n = n;
  a.dim = dim + 1;
  a.data.resize(n * a.dim);
  for (std::size_t i = 0; i < n; ++i) {
    std::copy(d.vectors().row(i), d.vectors().row(i) + dim, a.row(i));
    a.row(i)[dim] = static_cast<float>(std::sqrt(std::max(0.0, max_sq - sq[i])));
  }
  return Space(std::move(a), Metric::l2, "ip (augmented)");
}

}  // namespace

Space VamanaGraph::prune_space(const Space& d) { return d.metric() == Metric::ip ? mips_space(d) : Space(); }

std::uint32_t VamanaGraph::medoid_of(const Space& d) {
  if (d.metric() == Metric::ip) return medoid_of(mips_space(d));  // build() works in the augmented space
  const std::size_t n = d.size();
  std::vector<double> c(d.dim(), 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < d.dim(); ++k) c[k] += d.vectors().row(i)[k];
  std::vector<float> cf(d.dim());
  for (std::size_t k = 0; k < d.dim(); ++k) cf[k] = static_cast<float>(c[k] / static_cast<double>(std::max<std::size_t>(n, 1)));
  float best = 0;
  std::uint32_t medoid = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = raw_distance(Metric::l2, cf.data(), d.vectors().row(i), d.dim());
    if (i == 0 || v < best) best = v, medoid = static_cast<std::uint32_t>(i);
  }
  return medoid;
}

VamanaGraph VamanaGraph::from_lists(int R, std::uint32_t medoid, const std::vector<std::vector<std::uint32_t>>& lists) {
  const std::size_t n = lists.size();
  if (R < 1) throw UsageError("must be >= 1", "-R");
  if (n > 0 && medoid >= n) throw InputError(fmt::format("entry point {} outside {} items", medoid, n));
  VamanaGraph g;
  g.R_ = R;
  g.stride_ = static_cast<std::size_t>(R);
  g.medoid_ = medoid;
  g.degree_.assign(n, 0);
  g.nbrs_.assign(n * g.stride_, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (lists[i].size() > g.stride_) throw InputError(fmt::format("item {} has {} out-neighbours, more than R = {}", i, lists[i].size(), R));
    for (const std::uint32_t v : lists[i])
      if (v >= n) throw InputError(fmt::format("item {}: neighbour {} outside {} items", i, v, n));
    std::copy(lists[i].begin(), lists[i].end(), g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * g.stride_));
    g.degree_[i] = static_cast<std::uint32_t>(lists[i].size());
  }
  return g;
}

std::vector<std::uint32_t> VamanaGraph::robust_prune(const Space& d, std::uint32_t p, std::vector<Neighbor>& cand, float alpha, int R) {
  PruneScratch b;
  std::vector<std::uint32_t> out;
  if (d.metric() == Metric::ip) {  // prune in the augmented L2 space, as build() does
    const Space aug = mips_space(d);
    for (Neighbor& c : cand) c.dist = aug.item_distance(p, c.id);
    prune(aug, p, cand, alpha, R, b, out);
    return out;
  }
  prune(d, p, cand, alpha, R, b, out);
  return out;
}

VamanaGraph VamanaGraph::build(const Space& d, const VamanaParams& p) {
  if (p.R < 1) throw UsageError("must be >= 1", "-R");
  if (p.L < 1) throw UsageError("must be >= 1", "-L");
  if (!(p.alpha >= 1.0f)) throw UsageError("must be >= 1", "--alpha");
  if (p.passes != 1 && p.passes != 2) throw UsageError("must be 1 or 2", "--passes");
  if (d.metric() == Metric::ip) return build(mips_space(d), p);
  const std::size_t n = d.size();
  const auto R = static_cast<std::size_t>(p.R);
  VamanaGraph g;
  g.R_ = p.R;
  g.stride_ = static_cast<std::size_t>(std::ceil(1.3 * p.R));
  const std::size_t cap = g.stride_;
  g.degree_.assign(n, 0);
  g.nbrs_.assign(n * cap, 0);
  g.medoid_ = medoid_of(d);
  // Parallel insertion as DiskANN's: one OpenMP loop per pass over a seeded random order;
  // each point searches the live graph, prunes, sets its list, then adds itself to each kept
  // neighbour's list (up to the 1.3 R slack, else that list is pruned to R outside the lock).
  // Writers take the node's lock (striped, at most one held at a time); searches read lists
  // without locks through relaxed atomics, the degree last written with release order, so a
  // reader sees valid ids (old, new or a mix while a list is rewritten, harmless to a
  // search).  With one thread the graph depends on the seed only.
  Rng rng(derive_seed(p.seed, 0x7a3a));
  std::vector<std::uint32_t> order(n);
  std::vector<BuildScratch> scratch(static_cast<std::size_t>(std::max(1, omp_get_max_threads())));
  std::vector<std::mutex> locks(std::min<std::size_t>(std::max<std::size_t>(n, 1), 4096));
  const auto lock_of = [&](std::uint32_t j) -> std::mutex& { return locks[j % locks.size()]; };
  const std::size_t L = static_cast<std::size_t>(std::max(p.L, p.R));
  using AU32 = std::atomic_ref<std::uint32_t>;
  const auto load_degree = [&](std::uint32_t j) { return AU32(g.degree_[j]).load(std::memory_order_acquire); };
  const auto load_id = [&](std::size_t slot) { return AU32(g.nbrs_[slot]).load(std::memory_order_relaxed); };
  // Replaces node j's list; the caller holds j's lock.
  const auto store_list = [&](std::uint32_t j, const std::vector<std::uint32_t>& list) {
    for (std::size_t m = 0; m < list.size(); ++m) AU32(g.nbrs_[j * cap + m]).store(list[m], std::memory_order_relaxed);
    AU32(g.degree_[j]).store(static_cast<std::uint32_t>(list.size()), std::memory_order_release);
  };
  // Copies node j's list into `out` (lock-free read).
  const auto read_list = [&](std::uint32_t j, std::vector<std::uint32_t>& out) {
    const std::uint32_t deg = load_degree(j);
    out.resize(deg);
    for (std::uint32_t m = 0; m < deg; ++m) out[m] = load_id(j * cap + m);
  };
  std::uint32_t* const nbrs = g.nbrs_.data();  // the flat lists and degrees, for the search's row reads
  std::uint32_t* const degs = g.degree_.data();
  std::vector<float> pass_alpha{1.0f, p.alpha};
  if (p.passes == 1) pass_alpha.erase(pass_alpha.begin());
  for (const float a : pass_alpha) {
    const Stopwatch pass_clock;
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
#pragma omp parallel if (n >= 256)
    {
      BuildScratch& bs = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 64)
      for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(n); ++t) {
        const std::uint32_t pt = order[static_cast<std::size_t>(t)];
        QueryDistance q(d, d.vectors().row(pt));
        greedy(
            n, g.medoid_, q, L, bs.search,
            [nbrs, degs, cap](std::uint32_t id) {
              return std::pair{static_cast<const std::uint32_t*>(nbrs + id * cap), __atomic_load_n(degs + id, __ATOMIC_ACQUIRE)};
            },
            [nbrs, degs, cap](std::uint32_t id) {
              __builtin_prefetch(degs + id);
              prefetch_ids(nbrs + id * cap, cap);
            });
        bs.cand.assign(bs.search.visited.begin(), bs.search.visited.end());
        read_list(pt, bs.list);
        add_candidates(d, pt, bs.list.data(), bs.list.size(), bs.cand, bs.buf);
        prune(d, pt, bs.cand, a, p.R, bs.prune, bs.kept);
        {
          std::lock_guard<std::mutex> lk(lock_of(pt));
          store_list(pt, bs.kept);
        }
        bs.out.assign(bs.kept.begin(), bs.kept.end());
        for (const std::uint32_t j : bs.out) {  // back edges j -> pt
          bool full = false;
          {
            std::lock_guard<std::mutex> lk(lock_of(j));
            const std::uint32_t* nb = g.nbrs_.data() + j * cap;  // plain reads: writers hold the lock
            const std::uint32_t deg = g.degree_[j];
            if (std::find(nb, nb + deg, pt) != nb + deg) continue;
            if (deg < cap) {
              AU32(g.nbrs_[j * cap + deg]).store(pt, std::memory_order_relaxed);
              AU32(g.degree_[j]).store(deg + 1, std::memory_order_release);
              continue;
            }
            full = true;
            bs.list.assign(nb, nb + deg);
          }
          if (full) {  // over the slack: prune the list plus pt down to R, outside the lock
            bs.list.push_back(pt);
            bs.cand.clear();
            add_candidates(d, j, bs.list.data(), bs.list.size(), bs.cand, bs.buf);
            prune(d, j, bs.cand, a, p.R, bs.prune, bs.kept);
            std::lock_guard<std::mutex> lk(lock_of(j));
            store_list(j, bs.kept);
          }
        }
      }
      // End of pass (after the loop's barrier): lists past R (slack) are pruned to R.
#pragma omp for schedule(dynamic, 256)
      for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(n); ++t) {
        const auto j = static_cast<std::uint32_t>(t);
        if (g.degree_[j] <= static_cast<std::uint32_t>(p.R)) continue;
        const std::uint32_t* nb = g.nbrs_.data() + j * cap;
        bs.cand.clear();
        add_candidates(d, j, nb, g.degree_[j], bs.cand, bs.buf);
        prune(d, j, bs.cand, a, p.R, bs.prune, bs.kept);
        std::copy(bs.kept.begin(), bs.kept.end(), g.nbrs_.begin() + static_cast<std::ptrdiff_t>(j * cap));
        g.degree_[j] = static_cast<std::uint32_t>(bs.kept.size());
      }
    }
    g.pass_seconds_.push_back(pass_clock.seconds());
  }
  // Compact to R slots per node.
  for (std::size_t i = 0; i < n; ++i)
    std::copy(g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * cap), g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * cap + g.degree_[i]),
              g.nbrs_.begin() + static_cast<std::ptrdiff_t>(i * R));
  g.nbrs_.resize(n * R);
  g.nbrs_.shrink_to_fit();
  g.stride_ = R;
  return g;
}

std::vector<Neighbor> VamanaGraph::beam_search(QueryDistance& q, int L, SearchScratch& s) const {
  greedy(*this, q, static_cast<std::size_t>(std::max(1, L)), s);
  std::vector<Neighbor> out(s.beam.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {s.beam[i].id, s.beam[i].dist};
  return out;
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
    if (!s.visit(id)) continue;
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
      if (s.visited_item(u)) continue;
      if (D.calls() - start >= quota) break;
      s.visit(u);
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
  io::h5::write_attr(g, "passes", std::to_string(p.passes));
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
      if (v == -1) break;  // -1 pads a list shorter than R
      if (v < 0) throw InputError(fmt::format("neighbour id {} is negative (only -1, padding, may be)", v), fmt::format("{}, item {}", label, i));
      if (v >= static_cast<std::int64_t>(sh.rows))
        throw InputError(fmt::format("neighbour id {} out of range", v), fmt::format("{}, item {}", label, i));
      out.nbrs_[i * sh.cols + deg++] = static_cast<std::uint32_t>(v);
    }
    out.degree_[i] = deg;
  }
  if (sh.rows > 1 && out.degree_[out.medoid_] == 0)
    throw InputError(fmt::format("the entry point (item {}) has no out-neighbours: a search would reach nothing else", out.medoid_),
                     label + ":" + group);
  return out;
}

}  // namespace icmlkit::ann
