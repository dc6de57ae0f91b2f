// bimetric-search: answer queries to the accuracy of the expensive metric D with at most Q
// D-calls per query, on an index built with the proxy d (Xu, Silwal & Indyk, "A Bi-metric
// Framework for Fast Similarity Search"), against rerank and brute-force baselines.
#include <fmt/core.h>
#include <omp.h>

#include <filesystem>
#include <limits>

#include "ann/cli_options.hpp"
#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  ann::SharedFlags f;
  std::string output = "-", index_path, mode = "bimetric", truth_source = "auto";
  std::vector<std::uint64_t> quotas{100};
  CLI::Option* quota_opt = nullptr;       // -Q: refused outside the quota modes
  CLI::Option* index_type_opt = nullptr;  // --index-type: must match a loaded --index
  CLI::App* app_ptr = nullptr;
  std::vector<int> search_L{5000};
  int k = 10, seeds = -1;
  double c_bound = 0;
  std::size_t distortion_pairs = 20000;
  bool summary_only = false;
  cli::ToolInfo info{
      "bimetric-search",
      "Nearest-neighbour search with a cheap proxy metric d and an expensive true metric D.\n"
      "--mode bimetric: search the index with d (beam width --search-L), then seed a best-first search\n"
      "under D on the same graph with the best d-results (--seeds, default min(max(100, Q/2), list)),\n"
      "expanding the best unexpanded node and evaluating its neighbours under D until Q D-calls are spent\n"
      "(seeds count); return the top k by D.  On a cover tree: the tree's k-NN descent under D with the\n"
      "pruning radius 2^i scaled by --distortion-bound c, stopped at Q D-calls.  --mode rerank: the top\n"
      "Q proxy results reranked by D.  --mode proxy: the index under d only.  exact-d / exact-D: brute\n"
      "force.  Reports per query the ids, distances and d-/D-call counts, and per (Q, search-L) the\n"
      "recall@k (against an ann-benchmarks file's /neighbors when it has them, else exact-D; --truth),\n"
      "D-calls per query and queries/s, plus the measured distortion D/d.  The metric of an\n"
      "ann-benchmarks file comes from its distance attribute (angular = cosine).",
      "  bimetric-search ../shared/data/vectors/digits.csv.gz --no-header --label-last --holdout 200 --proxy pool:2 -Q 20,50,100 --summary-only\n"
      "  bimetric-search items.fbin --proxy-file proxy.fbin --queries q.fbin --proxy-queries qp.fbin --index idx.h5 --mode rerank -Q 200\n"
      "  bimetric-search ann.h5 --proxy same --mode proxy --search-L 20,40,80 --summary-only | jq '.results[] | [.search_L, .recall_at_k]'\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        ann::add_shared_flags(app, f);
        index_type_opt = app.get_option("--index-type");
        app_ptr = &app;
        app.add_option("--index", index_path, "Index from bimetric-index (default: build one in memory with the build flags)");
        app.add_option("--queries", f.data.queries, "Query vectors in the true representation (default: /test of an HDF5 ITEMS, or --holdout)");
        app.add_option("--proxy-queries", f.data.proxy_queries, "The queries' proxy vectors (with --proxy-file and --queries)");
        app.add_option("--mode", mode, "bimetric, rerank, proxy, exact-d, exact-D")->capture_default_str()
            ->check(CLI::IsMember({"bimetric", "rerank", "proxy", "exact-d", "exact-D"}));
        app.add_option("-k", k, "Neighbours per query")->capture_default_str()->check(cli::int_range(1, 100000));
        quota_opt = app.add_option("-Q,--quota", quotas, "D-call quota Q per query; a comma list sweeps")->delimiter(',')->check(cli::int_range(1, 1000000000));
        app.add_option("--search-L", search_L, "Proxy-stage beam width on the graph; a comma list sweeps")->delimiter(',')
            ->check(cli::int_range(1, 10000000));
        app.add_option("--seeds", seeds, "bimetric on a graph: seeds from the proxy list (default: the paper's min(max(100, Q/2), list))")
            ->check(cli::int_range(1, 100000000));
        app.add_option("--distortion-bound", c_bound, "bimetric on a cover tree: bound c on D/d between items (default: the measured maximum)")
            ->check(cli::positive());
        app.add_option("--distortion-pairs", distortion_pairs, "Random pairs for the D/d distortion measurement")->capture_default_str()
            ->check(cli::int_range(0, 100000000));
        app.add_option("--truth", truth_source,
                       "Recall@k against: file (an ann-benchmarks file's /neighbors, for its /test queries), exact (brute force "
                       "under D), auto (file when it has /neighbors)")
            ->capture_default_str()->check(CLI::IsMember({"auto", "file", "exact"}));
        app.add_flag("--summary-only", summary_only, "Omit the per-query records");
        app.add_option("-o,--output", output, "Result, *.json (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        set_threads(ctx.common.threads);
        const ann::Mode m = ann::parse_mode(mode, "--mode");
        if (quota_opt->count() > 0 && m != ann::Mode::bimetric && m != ann::Mode::rerank)
          throw UsageError("only --mode bimetric and rerank spend a D-call quota", "-Q");
        const ann::DataOptions o = ann::finish_shared_flags(f, ctx.common.seed);
        const ann::BimetricData data = ann::load_bimetric_data(o, true, ctx.prov);
        const std::size_t n = data.D.size(), nq = data.qD.size();
        if (static_cast<std::size_t>(k) > n) throw InputError(fmt::format("k = {} exceeds the {} items", k, n), "-k");
        if ((m == ann::Mode::bimetric || m == ann::Mode::rerank))
          for (const auto q : quotas)
            if (q < static_cast<std::uint64_t>(k)) throw UsageError(fmt::format("Q = {} is below k = {}: the top k by D needs k D-calls", q, k), "-Q");
        // Index: loaded (checked against the data) or built in memory.
        ann::Index idx;
        double build_seconds = 0;
        const bool needs_index = m == ann::Mode::bimetric || m == ann::Mode::rerank || m == ann::Mode::proxy;
        if (!index_path.empty()) {
          std::string saved;
          idx = ann::load_index(index_path, n, &saved);
          if (index_type_opt->count() > 0 && f.index_type != idx.type())
            throw UsageError(fmt::format("the index file holds a {} index, not {}", idx.type(), f.index_type), "--index-type");
          // The build flags would be silently ignored: the loaded index is already built.
          for (const char* flag : {"-R", "-L", "--alpha", "--passes"})
            if (app_ptr->count(flag) > 0)
              throw UsageError(fmt::format("{} is a build parameter; the --index given is already built (drop one of them)", flag), flag);
          ctx.prov.add_input(index_path, io::sha256_file(index_path));
          nlohmann::json b = nlohmann::json::parse(saved, nullptr, false);
          const nlohmann::json want = ann::build_description(data, f, ctx.common.seed);
          for (const char* key : {"items_sha256", "items", "proxy", "proxy_dim", "proxy_metric", "holdout"})
            if (b.is_discarded() || !b.contains(key) || b[key] != want[key])
              throw InputError(b.is_discarded() || !b.contains(key)
                                   ? fmt::format("the index has no build record of '{}'", key)
                                   : fmt::format("the index was built with {} = {}, this run has {} (other data or proxy flags)", key,
                                                 b[key].dump(), want[key].dump()),
                               index_path);
          if (o.holdout && b.value("seed", std::uint64_t{0}) != ctx.common.seed)
            throw InputError("the index was built with another --seed (the holdout split differs)", index_path);
        } else if (needs_index) {
          Stopwatch sw;
          idx = ann::build_index(data.d, f, ctx.common.seed);
          build_seconds = sw.seconds();
        }
        // Ground truth: the file's /neighbors, or brute force under D (not counted in the reported
        // calls).  Either way a query's recall threshold is the D-distance of its k-th true
        // neighbour (the largest of the first k), so ties at the boundary count as hits.
        const bool have_file_truth = !data.file_neighbors.empty();
        if (truth_source == "file" && !have_file_truth)
          throw UsageError("no /neighbors for these queries: --truth file needs an ann-benchmarks HDF5 file searched with its /test queries",
                           "--truth");
        const bool enough = have_file_truth && data.file_neighbors[0].size() >= static_cast<std::size_t>(k);
        if (truth_source == "auto" && have_file_truth && !enough)
          log::info("the file's /neighbors holds {} ids per query, fewer than k = {}: recall against brute force (--truth exact)",
                    data.file_neighbors[0].size(), k);
        const bool file_truth = truth_source == "file" || (truth_source == "auto" && enough);
        std::vector<float> kth_true(nq);
        if (file_truth) {
          for (std::size_t qi = 0; qi < nq; ++qi) {
            const auto& nb = data.file_neighbors[qi];
            if (nb.size() < static_cast<std::size_t>(k))
              throw UsageError(fmt::format("the file's /neighbors holds {} ids per query, fewer than k = {} (use --truth exact)", nb.size(), k),
                               "--truth");
            float worst = -std::numeric_limits<float>::infinity();
            for (int j = 0; j < k; ++j)
              worst = std::max(worst, ann::raw_distance(data.D.metric(), data.qD[qi].data(),
                                                        data.D.vectors().row(static_cast<std::size_t>(nb[static_cast<std::size_t>(j)])), data.D.dim()));
            kth_true[qi] = worst;
          }
        } else {
#pragma omp parallel for schedule(dynamic, 8)
          for (std::ptrdiff_t qi = 0; qi < static_cast<std::ptrdiff_t>(nq); ++qi) {
            ann::QueryDistance Dq(data.D, data.qD[static_cast<std::size_t>(qi)].data());
            kth_true[static_cast<std::size_t>(qi)] = ann::brute_force(Dq, k).back().dist;
          }
        }
        const ann::Distortion dist = ann::measure_distortion(data.d, data.D, data.qd, data.qD, distortion_pairs, distortion_pairs, ctx.common.seed);
        if (idx.tree && m == ann::Mode::bimetric && !(c_bound > 0) && !(dist.max_item_ratio > 0))
          throw UsageError("the cover tree's bi-metric search needs the distortion bound c: give --distortion-bound, or --distortion-pairs > 0 to measure it",
                           "--distortion-pairs");
        const double c = c_bound > 0 ? c_bound : std::max(1.0, dist.max_item_ratio);
        const bool quota_mode = m == ann::Mode::bimetric || m == ann::Mode::rerank;
        const bool uses_L = idx.graph && (quota_mode || m == ann::Mode::proxy);
        const std::vector<std::uint64_t> qs = quota_mode ? quotas : std::vector<std::uint64_t>{0};
        const std::vector<int> ls = uses_L ? search_L : std::vector<int>{0};
        nlohmann::json results = nlohmann::json::array(), per_query = nlohmann::json::array();
        std::vector<ann::QueryResult> res(nq);
        std::vector<double> rec(nq);
        for (const auto Q : qs)
          for (const int L : ls) {
            ann::SearchSettings s;
            s.mode = m;
            s.k = k;
            s.quota = Q;
            s.search_L = L;
            s.seeds = seeds;
            s.c = c;
            Stopwatch sw;
#pragma omp parallel
            {
              ann::SearchScratch scratch;
#pragma omp for schedule(dynamic, 4)
              for (std::ptrdiff_t qi = 0; qi < static_cast<std::ptrdiff_t>(nq); ++qi) {
                const auto i = static_cast<std::size_t>(qi);
                res[i] = ann::search_one(idx, data.d, data.D, data.qd[i].data(), data.qD[i].data(), s, scratch);
              }
            }
            const double secs = sw.seconds();
            double sum_rec = 0, sum_D = 0, sum_d = 0;
            std::uint64_t max_D = 0;
            for (std::size_t i = 0; i < nq; ++i) {
              std::vector<float> found;
              for (const auto id : res[i].ids) found.push_back(ann::raw_distance(data.D.metric(), data.qD[i].data(), data.D.vectors().row(id), data.D.dim()));
              rec[i] = ann::recall_at_k(found, kth_true[i], k);
              sum_rec += rec[i];
              sum_D += static_cast<double>(res[i].D_calls);
              sum_d += static_cast<double>(res[i].d_calls);
              max_D = std::max(max_D, res[i].D_calls);
              if (!summary_only)
                per_query.push_back({{"query", i}, {"Q", quota_mode ? nlohmann::json(Q) : nlohmann::json()},
                                     {"search_L", uses_L ? nlohmann::json(L) : nlohmann::json()}, {"ids", res[i].ids},
                                     {"distances", res[i].dist}, {"d_calls", res[i].d_calls}, {"D_calls", res[i].D_calls},
                                     {"recall", rec[i]}});
            }
            const double dn = static_cast<double>(nq);
            results.push_back({{"Q", quota_mode ? nlohmann::json(Q) : nlohmann::json()},
                               {"search_L", uses_L ? nlohmann::json(L) : nlohmann::json()},
                               {"recall_at_k", sum_rec / dn}, {"D_calls_per_query", sum_D / dn}, {"D_calls_max", max_D},
                               {"d_calls_per_query", sum_d / dn}, {"queries_per_second", secs > 0 ? dn / secs : 0.0},
                               {"seconds", secs}});
            log::info("{} Q={} L={}: recall@{} {:.4f}, {:.1f} D-calls/query", mode, Q, L, k, sum_rec / dn, sum_D / dn);
          }
        nlohmann::json out;
        out["meta"] = ctx.prov.to_json();
        out["mode"] = mode;
        out["index_type"] = needs_index ? nlohmann::json(idx.type()) : nlohmann::json();
        out["index_file"] = index_path.empty() ? nlohmann::json() : nlohmann::json(index_path);
        out["build_seconds"] = build_seconds;
        out["k"] = k;
        out["truth"] = file_truth ? "file /neighbors" : "exact (brute force under D)";
        out["threads"] = threads();
        out["data"] = data.describe;
        nlohmann::json dq = nlohmann::json::object();
        for (std::size_t i = 0; i < dist.probs.size(); ++i) dq[fmt::format("q{}", dist.probs[i] * 100)] = dist.quantiles[i];
        out["distortion"] = {{"ratio", "D/d (reported distances), random query-item pairs"}, {"pairs", dist.pairs}, {"quantiles", dq},
                             {"item_pairs_min", dist.max_item_ratio > 0 ? nlohmann::json(dist.min_item_ratio) : nlohmann::json()},
                             {"item_pairs_max", dist.max_item_ratio > 0 ? nlohmann::json(dist.max_item_ratio) : nlohmann::json()},
                             {"C", dist.min_item_ratio > 0 ? nlohmann::json(dist.max_item_ratio / dist.min_item_ratio) : nlohmann::json()}};
        if (idx.tree && m == ann::Mode::bimetric) out["distortion_bound_c"] = c;
        out["results"] = results;
        if (!summary_only) out["queries"] = per_query;
        io::write_json(output, out);
      });
}
