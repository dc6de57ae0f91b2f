// Sharded Vamana builds (issue 42): the k-means plan and the merge, against truth computed here:
// every item in exactly `overlap` shards, the union of an item's shard lists, and the R nearest
// of that union for the truncating cut.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "ann/shard.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using namespace icmlkit::ann;

namespace {

Space blobs(std::size_t n, std::size_t dim, std::uint64_t seed) {
  Rng rng(seed);
  Vectors v;
  v.n = n;
  v.dim = dim;
  v.data.resize(n * dim);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < dim; ++k) v.row(i)[k] = static_cast<float>(double(i % 4) * 3.0 + rng.normal());
  return Space(std::move(v), Metric::l2, "blobs");
}

}  // namespace

TEST_CASE("ann shards: every item joins its `overlap` nearest centres, the plan depends on the seed only") {
  const Space d = blobs(400, 6, 3);
  const ShardPlan a = plan_shards(d, 5, 2, 11), b = plan_shards(d, 5, 2, 11), c = plan_shards(d, 5, 2, 12);
  CHECK(a.sha256() == b.sha256());
  CHECK(a.sha256() != c.sha256());
  std::vector<int> count(d.size(), 0);
  for (const auto& m : a.members) {
    CHECK(std::is_sorted(m.begin(), m.end()));
    CHECK(std::adjacent_find(m.begin(), m.end()) == m.end());
    for (auto i : m) ++count[i];
  }
  CHECK(std::all_of(count.begin(), count.end(), [](int k) { return k == 2; }));
  // each item's shards are its two nearest centres (truth: all centre distances, sorted here)
  for (std::uint32_t i = 0; i < d.size(); i += 37) {
    std::vector<std::pair<float, int>> dist;
    for (int s = 0; s < a.shards(); ++s) dist.emplace_back(raw_distance(Metric::l2, d.vectors().row(i), a.centres.data() + std::size_t(s) * d.dim(), d.dim()), s);
    std::sort(dist.begin(), dist.end());
    for (int s = 0; s < a.shards(); ++s) {
      const bool in = std::binary_search(a.members[std::size_t(s)].begin(), a.members[std::size_t(s)].end(), i);
      CHECK(in == (s == dist[0].second || s == dist[1].second));
    }
  }
  CHECK(plan_shards(d, 3, 9, 1).overlap == 3);  // no more than the shards
  CHECK(plan_shards(d, 1, 2, 1).members[0].size() == d.size());
  CHECK_THROWS_AS(plan_shards(d, 401, 2, 1), UsageError);
  CHECK_THROWS_AS(plan_shards(d, 0, 2, 1), UsageError);
  CHECK_THROWS_AS(plan_shards(d, 2, 0, 1), UsageError);
}

TEST_CASE("ann shards: the merge is each item's union of shard lists, cut to R by RobustPrune or the R nearest") {
  set_threads(1);
  const Space d = blobs(300, 5, 8);
  const ShardPlan plan = plan_shards(d, 3, 2, 4);
  VamanaParams p;
  p.R = 8;
  p.L = 16;
  p.seed = 2;
  std::vector<ShardGraph> parts;
  for (int s = 0; s < 3; ++s) parts.push_back(build_shard(d, plan, s, p));
  // truth: the union of each item's lists, by distance
  std::vector<std::set<std::uint32_t>> uni(d.size());
  for (const auto& g : parts)
    for (std::size_t i = 0; i < g.members.size(); ++i)
      for (auto v : g.lists[i])
        if (v != g.members[i]) uni[g.members[i]].insert(v);
  const VamanaGraph t = merge_shards(d, parts, p, MergeCut::truncate);
  const VamanaGraph r = merge_shards(d, parts, p, MergeCut::prune);
  std::size_t cut = 0;
  for (std::uint32_t i = 0; i < d.size(); ++i) {
    std::vector<Neighbor> want;
    for (auto v : uni[i]) want.push_back({v, d.item_distance(i, v)});
    std::sort(want.begin(), want.end());
    if (want.size() > std::size_t(p.R)) {
      want.resize(std::size_t(p.R));
      ++cut;
    }
    REQUIRE(t.degree(i) == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) CHECK(t.neighbors(i)[k] == want[k].id);
    CHECK(r.degree(i) <= std::uint32_t(p.R));
    for (std::uint32_t k = 0; k < r.degree(i); ++k) CHECK(uni[i].count(r.neighbors(i)[k]) == 1);  // pruning only removes
  }
  CHECK(cut > 0);  // some lists were over R: the cut was exercised
  CHECK(t.medoid() == VamanaGraph::build(d, p).medoid());  // the single build's entry point
  {  // and under ip, where the single build works in the MIPS-to-L2 augmented space
    Vectors v = d.vectors();
    const Space ip(std::move(v), Metric::ip, "ip");
    const ShardPlan ip_plan = plan_shards(ip, 2, 2, 4);
    std::vector<ShardGraph> ip_parts;
    for (int s = 0; s < 2; ++s) ip_parts.push_back(build_shard(ip, ip_plan, s, p));
    CHECK(merge_shards(ip, ip_parts, p, MergeCut::prune).medoid() == VamanaGraph::build(ip, p).medoid());
  }
  // the parts' order does not matter
  std::vector<ShardGraph> reversed(parts.rbegin(), parts.rend());
  const VamanaGraph r2 = merge_shards(d, reversed, p, MergeCut::prune);
  for (std::uint32_t i = 0; i < d.size(); ++i)
    CHECK(std::equal(r.neighbors(i), r.neighbors(i) + r.degree(i), r2.neighbors(i), r2.neighbors(i) + r2.degree(i)));
  // an item in no part: the first part without its first member
  parts[0].members.erase(parts[0].members.begin());
  parts[0].lists.erase(parts[0].lists.begin());
  parts.resize(1);
  CHECK_THROWS_AS(merge_shards(d, parts, p, MergeCut::prune), InputError);
  set_threads(0);
}
