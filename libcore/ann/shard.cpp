#include "ann/shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ann/h5matrix.hpp"
#include "io/atomic_file.hpp"
#include "io/hdf5.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace icmlkit::ann {
namespace {

/// The `want` nearest of the k centres to `item` under squared L2, into `out` (ties by centre
/// index).
void nearest_centres(const Space& d, const std::vector<float>& centres, int k, std::uint32_t item, int want,
                     std::vector<std::pair<float, int>>& buf, std::vector<int>& out) {
  buf.clear();
  for (int c = 0; c < k; ++c)
    buf.emplace_back(raw_distance(Metric::l2, d.vectors().row(item), centres.data() + std::size_t(c) * d.dim(), d.dim()), c);
  std::partial_sort(buf.begin(), buf.begin() + want, buf.end());
  out.clear();
  for (int i = 0; i < want; ++i) out.push_back(buf[std::size_t(i)].second);
}

}  // namespace

std::string ShardPlan::sha256() const {
  std::string bytes = fmt::format("dim {} overlap {} shards {};", dim, overlap, members.size());
  for (const auto& m : members) {
    bytes += fmt::format(";{}:", m.size());
    bytes.append(reinterpret_cast<const char*>(m.data()), m.size() * sizeof(std::uint32_t));
  }
  return io::sha256_hex(bytes);
}

ShardPlan plan_shards(const Space& d, int shards, int overlap, std::uint64_t seed, int iterations, std::size_t sample) {
  const std::size_t n = d.size(), dim = d.dim();
  if (shards < 1) throw UsageError(fmt::format("{} shards: give at least 1", shards), "--shards");
  if (static_cast<std::size_t>(shards) > n)
    throw UsageError(fmt::format("{} shards for {} items: give at most one shard per item", shards, n), "--shards");
  if (overlap < 1) throw UsageError(fmt::format("overlap {}: each item must join at least one shard", overlap), "--shard-overlap");
  ShardPlan plan;
  plan.dim = dim;
  plan.overlap = std::min(overlap, shards);
  // the k-means sample: a seeded subset (partial Fisher-Yates), in increasing item order
  Rng rng(derive_seed(seed, 0x5a4d));
  std::vector<std::uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  const std::size_t m = std::min(n, std::max<std::size_t>(sample, static_cast<std::size_t>(shards)));
  for (std::size_t i = 0; i < m && m < n; ++i) std::swap(ids[i], ids[i + rng.below(n - i)]);
  ids.resize(m);
  std::sort(ids.begin(), ids.end());
  // k-means++ seeding: each next centre drawn with probability proportional to its squared
  // distance from the nearest centre so far
  plan.centres.assign(std::size_t(shards) * dim, 0.0f);
  std::vector<double> near(m, std::numeric_limits<double>::infinity());
  std::size_t pick = rng.below(m);
  for (int c = 0; c < shards; ++c) {
    std::copy(d.vectors().row(ids[pick]), d.vectors().row(ids[pick]) + dim, plan.centres.begin() + std::ptrdiff_t(std::size_t(c) * dim));
    double total = 0;
    for (std::size_t i = 0; i < m; ++i) {
      near[i] = std::min(near[i], double(raw_distance(Metric::l2, d.vectors().row(ids[i]), plan.centres.data() + std::size_t(c) * dim, dim)));
      total += near[i];
    }
    if (c + 1 == shards) break;
    if (!(total > 0)) {  // every sample point is on a centre: the next sample point (clusters may end up empty)
      pick = std::min(m - 1, pick + 1);
      continue;
    }
    double u = rng.uniform() * total;
    pick = m - 1;
    for (std::size_t i = 0; i < m; ++i) {
      u -= near[i];
      if (u < 0) {
        pick = i;
        break;
      }
    }
  }
  // Lloyd's rounds on the sample (assignments in parallel, sums in item order)
  std::vector<int> label(m, 0);
  for (int it = 0; it < iterations; ++it) {
#pragma omp parallel
    {
      std::vector<std::pair<float, int>> buf;
      std::vector<int> best;
#pragma omp for schedule(static)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(m); ++i) {
        nearest_centres(d, plan.centres, shards, ids[std::size_t(i)], 1, buf, best);
        label[std::size_t(i)] = best[0];
      }
    }
    std::vector<double> sum(std::size_t(shards) * dim, 0.0);
    std::vector<std::size_t> count(std::size_t(shards), 0);
    for (std::size_t i = 0; i < m; ++i) {
      const float* x = d.vectors().row(ids[i]);
      double* s = sum.data() + std::size_t(label[i]) * dim;
      for (std::size_t k = 0; k < dim; ++k) s[k] += x[k];
      ++count[std::size_t(label[i])];
    }
    for (int c = 0; c < shards; ++c)
      if (count[std::size_t(c)] > 0)  // an empty cluster keeps its centre
        for (std::size_t k = 0; k < dim; ++k)
          plan.centres[std::size_t(c) * dim + k] = static_cast<float>(sum[std::size_t(c) * dim + k] / double(count[std::size_t(c)]));
  }
  // every item joins its `overlap` nearest centres
  std::vector<int> joined(n * std::size_t(plan.overlap));
#pragma omp parallel
  {
    std::vector<std::pair<float, int>> buf;
    std::vector<int> best;
#pragma omp for schedule(static)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) {
      nearest_centres(d, plan.centres, shards, static_cast<std::uint32_t>(i), plan.overlap, buf, best);
      std::copy(best.begin(), best.end(), joined.begin() + i * plan.overlap);
    }
  }
  plan.members.assign(std::size_t(shards), {});
  for (std::size_t i = 0; i < n; ++i)
    for (int o = 0; o < plan.overlap; ++o) plan.members[std::size_t(joined[i * std::size_t(plan.overlap) + std::size_t(o)])].push_back(static_cast<std::uint32_t>(i));
  return plan;
}

ShardGraph build_shard(const Space& d, const ShardPlan& plan, int s, const VamanaParams& p) {
  if (s < 0 || s >= plan.shards()) throw UsageError(fmt::format("shard {} outside the plan's {} shards", s, plan.shards()), "--array-task");
  Stopwatch sw;
  ShardGraph g;
  g.shard = s;
  g.members = plan.members[std::size_t(s)];
  const std::size_t m = g.members.size(), dim = d.dim();
  if (m == 0) {  // an empty cluster: nothing to build
    g.seconds = sw.seconds();
    return g;
  }
  Vectors v;
  v.n = m;
  v.dim = dim;
  v.data.resize(m * dim);
  for (std::size_t i = 0; i < m; ++i) std::copy(d.vectors().row(g.members[i]), d.vectors().row(g.members[i]) + dim, v.row(i));
  const Space sub(std::move(v), d.metric(), fmt::format("shard {}", s));
  VamanaParams ps = p;
  ps.seed = derive_seed(p.seed, 0x5a0000u + std::uint64_t(s));
  const VamanaGraph local = VamanaGraph::build(sub, ps);
  g.lists.resize(m);
  for (std::size_t i = 0; i < m; ++i) {
    const std::uint32_t* nb = local.neighbors(i);
    for (std::uint32_t k = 0; k < local.degree(i); ++k) g.lists[i].push_back(g.members[nb[k]]);
  }
  g.working_bytes = static_cast<std::int64_t>(m * dim * sizeof(float) +
                                              m * (static_cast<std::size_t>(std::ceil(1.3 * p.R)) + 1) * sizeof(std::uint32_t));
  g.seconds = sw.seconds();
  return g;
}

MergeCut parse_merge_cut(const std::string& s, const std::string& flag) {
  if (s == "prune") return MergeCut::prune;
  if (s == "truncate") return MergeCut::truncate;
  throw UsageError(fmt::format("unknown merge cut '{}' (prune or truncate)", s), flag);
}

VamanaGraph merge_shards(const Space& d, const std::vector<ShardGraph>& parts, const VamanaParams& p, MergeCut cut) {
  const std::size_t n = d.size();
  std::vector<std::vector<std::uint32_t>> lists(n);
  std::vector<char> held(n, 0);
  for (const ShardGraph& g : parts) {
    if (g.lists.size() != g.members.size()) throw InputError(fmt::format("shard {}: {} lists for {} members", g.shard, g.lists.size(), g.members.size()));
    for (std::size_t i = 0; i < g.members.size(); ++i) {
      const std::uint32_t item = g.members[i];
      if (item >= n) throw InputError(fmt::format("shard {} names item {}, outside the {} items", g.shard, item, n));
      held[item] = 1;
      for (const std::uint32_t v : g.lists[i]) {
        if (v >= n) throw InputError(fmt::format("shard {} names item {}, outside the {} items", g.shard, v, n));
        lists[item].push_back(v);
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!held[i]) throw InputError(fmt::format("item {} is in none of the shards given", i));
  // Distances for the cut: RobustPrune's space (the augmented one under ip, as the build's).
  const Space aug = VamanaGraph::prune_space(d);
  const Space& ps = aug.size() > 0 ? aug : d;
  const auto R = static_cast<std::size_t>(p.R);
#pragma omp parallel
  {
    std::vector<Neighbor> cand;
#pragma omp for schedule(dynamic, 256)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(n); ++t) {
      const auto i = static_cast<std::uint32_t>(t);
      auto& list = lists[i];
      cand.clear();
      for (const std::uint32_t v : list)
        if (v != i) cand.push_back({v, ps.item_distance(i, v)});
      std::sort(cand.begin(), cand.end());
      cand.erase(std::unique(cand.begin(), cand.end(), [](const Neighbor& a, const Neighbor& b) { return a.id == b.id; }), cand.end());
      if (cand.size() > R && cut == MergeCut::prune) {
        list = VamanaGraph::robust_prune(ps, i, cand, p.alpha, p.R);
        continue;
      }
      if (cand.size() > R) cand.resize(R);
      list.clear();
      for (const Neighbor& c : cand) list.push_back(c.id);
    }
  }
  return VamanaGraph::from_lists(p.R, VamanaGraph::medoid_of(d), lists);
}

void save_shard(const std::string& path, const ShardGraph& g, const ShardPlan& plan, const std::string& build_sha256, int R,
                const io::Provenance& prov) {
  io::AtomicFile af(path);
  {
    auto f = io::h5::create_file(af.temp_path().string());
    io::h5::write_provenance(f, prov);
    auto grp = io::h5::create_group(f, "/shard");
    io::h5::write_attr(grp, "shard", std::to_string(g.shard));
    io::h5::write_attr(grp, "shards", std::to_string(plan.shards()));
    io::h5::write_attr(grp, "plan_sha256", plan.sha256());
    io::h5::write_attr(grp, "build_sha256", build_sha256);
    io::h5::write_attr(grp, "R", std::to_string(R));
    io::h5::write_attr(grp, "seconds", fmt::format("{}", g.seconds));
    io::h5::write_attr(grp, "working_bytes", std::to_string(g.working_bytes));
    const std::size_t m = g.members.size(), r = static_cast<std::size_t>(std::max(R, 1));
    std::vector<std::int32_t> members(g.members.begin(), g.members.end()), adj(m * r, -1);
    for (std::size_t i = 0; i < m; ++i) {
      if (g.lists[i].size() > r) throw RuntimeError(fmt::format("shard {}: a list longer than R = {}", g.shard, R));
      std::copy(g.lists[i].begin(), g.lists[i].end(), adj.begin() + std::ptrdiff_t(i * r));
    }
    h5_write_ints(grp, "members", members, {m, 1});
    h5_write_ints(grp, "neighbors", adj, {m, r});
    io::h5::close_file(f, path);
  }
  af.commit();
}

ShardGraph load_shard(const std::string& path, int shards, const std::string& build_sha256) {
  auto f = io::h5::open_file(path);
  if (!h5_exists(f, "shard")) throw InputError("not a shard part of bimetric-index (no /shard group)", path);
  auto grp = io::h5::open_group(f, "/shard", path);
  auto attr = [&](const char* name) {
    std::string v;
    if (!io::h5::read_attr(grp, name, v)) throw InputError(fmt::format("the part has no '{}' attribute", name), path);
    return v;
  };
  if (attr("build_sha256") != build_sha256)
    throw InputError("the part was built from other data or build flags than this merge (--shards, --shard-overlap, --seed, "
                     "-R, -L, --alpha, the proxy or the items differ)",
                     path);
  const auto count = io::parse_double(attr("shards"));
  if (!count || *count != shards) throw InputError(fmt::format("the part is one of {} shards, not {}", attr("shards"), shards), path);
  const auto shard = io::parse_double(attr("shard"));
  if (!shard || *shard < 0 || *shard >= shards || *shard != std::floor(*shard)) throw InputError("bad shard index", path);
  ShardGraph g;
  g.shard = static_cast<int>(*shard);
  g.plan_sha256 = attr("plan_sha256");
  if (const auto s = io::parse_double(attr("seconds"))) g.seconds = *s;
  if (const auto w = io::parse_double(attr("working_bytes"))) g.working_bytes = static_cast<std::int64_t>(*w);
  Shape2 ms, ns;
  const auto members = h5_read_ints(grp, "members", path + ":/shard/members", ms);
  const auto adj = h5_read_ints(grp, "neighbors", path + ":/shard/neighbors", ns);
  if (ns.rows != ms.rows) throw InputError("the part's members and lists differ in count", path);
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || (i > 0 && members[i] <= members[i - 1])) throw InputError("the part's members are not increasing item ids", path);
    g.members.push_back(static_cast<std::uint32_t>(members[i]));
  }
  g.lists.resize(ms.rows);
  for (std::size_t i = 0; i < ms.rows; ++i)
    for (std::size_t c = 0; c < ns.cols; ++c) {
      const std::int64_t v = adj[i * ns.cols + c];
      if (v == -1) break;
      if (v < 0) throw InputError(fmt::format("neighbour id {} is negative", v), path);
      g.lists[i].push_back(static_cast<std::uint32_t>(v));
    }
  return g;
}

}  // namespace icmlkit::ann
