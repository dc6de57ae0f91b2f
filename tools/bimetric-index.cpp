// bimetric-index: build a Vamana (DiskANN) graph or a cover tree with the proxy metric d only
// (Xu, Silwal & Indyk, "A Bi-metric Framework for Fast Similarity Search") and save it to HDF5.
#include <fmt/core.h>

#include <filesystem>

#include "ann/cli_options.hpp"
#include "ann/shard.hpp"
#include "cli/array_task.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/memory.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  ann::SharedFlags f;
  std::string output, array_task, merge_cut = "prune";
  std::vector<std::string> parts;
  int shards = 0, overlap = 2;
  bool no_check = false;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "bimetric-index",
      "Build a nearest-neighbour index over the items with the cheap proxy metric d only: a Vamana /\n"
      "DiskANN graph (RobustPrune with --alpha, max degree -R, build list -L, two passes alpha = 1 then\n"
      "alpha as the paper, or one pass at alpha with --passes 1 as DiskANN's library; medoid entry) or a\n"
      "cover tree (nesting, covering and separation invariants, checked after the build for up to 20,000\n"
      "items).  The index (structure, parameters, and the data it was built\n"
      "from) goes to an HDF5 file for bimetric-search; a JSON summary goes to stdout.\n"
      "Sharded builds (DiskANN's recipe, issue 42): --shards S splits the items by k-means (on d's vectors, a seeded\n"
      "sample of 50,000 at most) into S clusters, each item joining its --shard-overlap (2) nearest centres, builds a\n"
      "Vamana graph per shard and merges them: an item's list is the union of its shards' lists, cut to R by\n"
      "RobustPrune (--merge-cut prune, the default) or to the R nearest (truncate; DiskANN's merge keeps R at random).\n"
      "With --array-task i/S only shard i is built and written to -o as a part (one job-array task: its graph's working\n"
      "set is one shard's, though every task reads all the vectors); --parts P0 P1 ... then merges the S parts into the\n"
      "index -o (the same data and build flags given again; parts of another build or plan are refused).  The summary\n"
      "gives each shard's items, seconds and working bytes, a part its task's peak RSS.",
      "  bimetric-index ../shared/data/vectors/digits.csv.gz --no-header --label-last --holdout 200 --proxy pool:2 -R 32 -L 64 -o digits.h5\n"
      "  bimetric-index items.fbin --proxy-file proxy.fbin --metric cosine -R 64 -L 125 --alpha 1.2 -o idx.h5\n"
      "  bimetric-index ann.h5 --proxy pca:16 --index-type cover-tree -o tree.h5 | jq .invariants\n"
      "  bimetric-index items.fbin --shards 8 --array-task $SLURM_ARRAY_TASK_ID/8 -o part-$SLURM_ARRAY_TASK_ID.h5\n"
      "  bimetric-index items.fbin --shards 8 --parts part-*.h5 -o idx.h5\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        ann::add_shared_flags(app, f);
        app.add_option("-o,--output", output, "Index file (*.h5)")->required();
        app.add_flag("--no-check", no_check, "cover tree: skip the O(n^2) invariant check");
        app.add_option("--shards", shards, "Sharded Vamana build: S k-means shards, built apart and merged (DiskANN)")->check(CLI::Range(1, 1 << 20));
        app.add_option("--shard-overlap", overlap, "Sharded build: the nearest centres each item joins")->capture_default_str()->check(CLI::Range(1, 64));
        app.add_option("--merge-cut", merge_cut, "Sharded build: how a merged list longer than R is cut: prune (RobustPrune with --alpha) or truncate (the R nearest)")->capture_default_str();
        app.add_option("--array-task", array_task, "Sharded build: i/S builds shard i only and writes it to -o as a part (one job-array task)");
        app.add_option("--parts", parts, "Sharded build: merge these parts (one per shard, from --array-task) into the index -o")->expected(1, -1);
      },
      [&](cli::Context& ctx) {
        io::require_output_extension(output, "-o", {".h5", ".hdf5"}, "the index is HDF5");
        set_threads(ctx.common.threads);
        for (const char* flag : {"--shard-overlap", "--merge-cut", "--array-task", "--parts"})
          if (app_ptr->count(flag) > 0 && shards == 0) throw UsageError(fmt::format("{} needs --shards", flag), flag);
        if (shards > 0 && f.index_type != "vamana") throw UsageError("sharded builds make Vamana graphs", "--shards");
        if (!array_task.empty() && !parts.empty()) throw UsageError("give --array-task (build one part) or --parts (merge them), not both", "--parts");
        const ann::MergeCut cut = ann::parse_merge_cut(merge_cut, "--merge-cut");
        std::pair<int, int> task{-1, 0};
        if (!array_task.empty()) {
          task = cli::parse_array_task(array_task);
          if (task.second != shards)
            throw UsageError(fmt::format("--array-task {} has {} tasks for --shards {}: one task per shard", array_task, task.second, shards), "--array-task");
        }
        const ann::DataOptions o = ann::finish_shared_flags(f, ctx.common.seed);
        ann::BimetricData data = ann::load_bimetric_data(o, false, ctx.prov);
        nlohmann::json description = ann::build_description(data, f, ctx.common.seed);
        Stopwatch sw;
        ann::Index idx;
        nlohmann::json shard_info;
        if (shards > 0) {  // DiskANN's sharded build
          description["shards"] = shards;
          description["shard_overlap"] = std::min(overlap, shards);  // what the plan uses
          description["merge_cut"] = merge_cut;
          ann::VamanaParams params = f.vamana;
          params.seed = ctx.common.seed;
          // parts and merge share the data and build flags: compared by this hash (the merge cut aside)
          // (paths left out, so a merge may name the files otherwise; the proxy vectors by their bytes)
          nlohmann::json base = description;
          base.erase("merge_cut");
          base.erase("query_source");
          base["proxy"] = base["proxy"].get<std::string>().rfind("file ", 0) == 0 ? nlohmann::json("file") : base["proxy"];
          const auto& dv = data.d.vectors().data;
          base["proxy_sha256"] = io::sha256_hex(std::string_view(reinterpret_cast<const char*>(dv.data()), dv.size() * sizeof(float)));
          const std::string build_sha = io::sha256_hex(base.dump());
          // the merge takes the plan from its parts (each task computed it; they must agree)
          const ann::ShardPlan plan = parts.empty() ? ann::plan_shards(data.d, shards, overlap, ctx.common.seed) : ann::ShardPlan();
          const double plan_seconds = sw.seconds();
          auto describe_shard = [](const ann::ShardGraph& g) {
            return nlohmann::json{{"shard", g.shard}, {"items", g.members.size()}, {"seconds", g.seconds}, {"working_bytes", g.working_bytes}};
          };
          if (task.first >= 0) {  // one array task: one part
            const ann::ShardGraph g = ann::build_shard(data.d, plan, task.first, params);
            ann::save_shard(output, g, plan, build_sha, params.R, ctx.prov);
            nlohmann::json out = describe_shard(g);
            out["shards"] = shards;
            out["plan_seconds"] = plan_seconds;
            out["peak_rss_bytes"] = peak_rss_bytes();
            out["part"] = output;
            out["meta"] = ctx.prov.to_json();
            io::write_json("-", out);
            return;
          }
          std::vector<ann::ShardGraph> graphs;
          if (!parts.empty()) {  // the merge step of an array job
            std::vector<std::string> seen(static_cast<std::size_t>(shards));
            for (const auto& part : parts) {
              ann::ShardGraph g = ann::load_shard(part, shards, build_sha);
              if (!graphs.empty() && g.plan_sha256 != graphs.front().plan_sha256)
                throw InputError(fmt::format("the part's shard plan differs from {}'s: tasks of other --shards, --shard-overlap "
                                             "or --seed, or nodes whose CPUs rounded the k-means differently",
                                             seen[std::size_t(graphs.front().shard)]),
                                 part);
              if (!seen[std::size_t(g.shard)].empty())
                throw InputError(fmt::format("shard {} given twice (also in {})", g.shard, seen[std::size_t(g.shard)]), part);
              seen[std::size_t(g.shard)] = part;
              ctx.prov.add_input(part, io::sha256_file(part));
              graphs.push_back(std::move(g));
            }
            for (int i = 0; i < shards; ++i)
              if (seen[std::size_t(i)].empty())
                throw InputError(fmt::format("no part of shard {} of {} among the {} given (each task's -o)", i, shards, parts.size()), "--parts");
          } else {
            for (int i = 0; i < shards; ++i) graphs.push_back(ann::build_shard(data.d, plan, i, params));
          }
          Stopwatch merge_clock;
          idx.params = params;
          idx.graph = ann::merge_shards(data.d, graphs, params, cut);
          shard_info = nlohmann::json{{"shards", nlohmann::json::array()}, {"plan_seconds", plan_seconds}, {"merge_seconds", merge_clock.seconds()},
                                      {"merge_cut", merge_cut}, {"overlap", overlap}};
          std::int64_t most = 0;
          for (const auto& g : graphs) {
            shard_info["shards"].push_back(describe_shard(g));
            most = std::max(most, g.working_bytes);
          }
          shard_info["max_shard_working_bytes"] = most;
        } else {
          idx = ann::build_index(data.d, f, ctx.common.seed);
        }
        const double seconds = sw.seconds();
        nlohmann::json out;
        if (!shard_info.is_null()) out["sharded"] = shard_info;
        out["index_type"] = idx.type();
        out["build_seconds"] = seconds;
        out["data"] = data.describe;
        if (idx.graph) {
          std::size_t mx = 0, sum = 0;
          for (std::size_t i = 0; i < idx.graph->size(); ++i) {
            mx = std::max<std::size_t>(mx, idx.graph->degree(i));
            sum += idx.graph->degree(i);
          }
          out["R"] = f.vamana.R;
          out["L"] = f.vamana.L;
          out["alpha"] = io::float_for_json(f.vamana.alpha);
          out["passes"] = f.vamana.passes;
          out["pass_seconds"] = idx.graph->pass_seconds();
          out["max_degree"] = mx;
          out["mean_degree"] = static_cast<double>(sum) / static_cast<double>(idx.graph->size());
          out["medoid"] = idx.graph->medoid();
        } else {
          std::size_t dups = 0;
          int lo = idx.tree->level(idx.tree->root());
          for (std::size_t i = 0; i < idx.tree->size(); ++i) {
            dups += idx.tree->is_duplicate(i);
            lo = std::min(lo, idx.tree->level(i));
          }
          out["duplicates"] = dups;
          out["top_level"] = idx.tree->level(idx.tree->root());
          out["bottom_level"] = lo;
          if (no_check || idx.tree->size() > 20000) {
            out["invariants"] = no_check ? "not checked (--no-check)" : "not checked (more than 20,000 items)";
          } else {
            const auto bad = idx.tree->check_invariants(data.d);
            if (!bad.empty()) throw RuntimeError("cover-tree invariant violated: " + bad.front(), output);
            out["invariants"] = "ok (nesting, covering, separation)";
          }
        }
        ctx.prov.extra["build"] = description;
        ann::save_index(output, idx, ctx.prov, description.dump());
        out["meta"] = ctx.prov.to_json();
        io::write_json("-", out);
      });
}
