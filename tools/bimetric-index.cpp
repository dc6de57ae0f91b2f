// bimetric-index: build a Vamana (DiskANN) graph or a cover tree with the proxy metric d only
// (Xu, Silwal & Indyk, "A Bi-metric Framework for Fast Similarity Search") and save it to HDF5.
#include <fmt/core.h>

#include <filesystem>

#include "ann/cli_options.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  ann::SharedFlags f;
  std::string output;
  bool no_check = false;
  cli::ToolInfo info{
      "bimetric-index",
      "Build a nearest-neighbour index over the items with the cheap proxy metric d only: a Vamana /\n"
      "DiskANN graph (RobustPrune with --alpha, max degree -R, build list -L, two passes alpha = 1 then\n"
      "alpha as the paper, or one pass at alpha with --passes 1 as DiskANN's library; medoid entry) or a\n"
      "cover tree (nesting, covering and separation invariants, checked after the build for up to 20,000\n"
      "items).  The index (structure, parameters, and the data it was built\n"
      "from) goes to an HDF5 file for bimetric-search; a JSON summary goes to stdout.",
      "  bimetric-index ../shared/data/vectors/digits.csv.gz --no-header --label-last --holdout 200 --proxy pool:2 -R 32 -L 64 -o digits.h5\n"
      "  bimetric-index items.fbin --proxy-file proxy.fbin --metric cosine -R 64 -L 125 --alpha 1.2 -o idx.h5\n"
      "  bimetric-index ann.h5 --proxy pca:16 --index-type cover-tree -o tree.h5 | jq .invariants\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        ann::add_shared_flags(app, f);
        app.add_option("-o,--output", output, "Index file (*.h5)")->required();
        app.add_flag("--no-check", no_check, "cover tree: skip the O(n^2) invariant check");
      },
      [&](cli::Context& ctx) {
        io::require_output_extension(output, "-o", {".h5", ".hdf5"}, "the index is HDF5");
        set_threads(ctx.common.threads);
        const ann::DataOptions o = ann::finish_shared_flags(f, ctx.common.seed);
        ann::BimetricData data = ann::load_bimetric_data(o, false, ctx.prov);
        Stopwatch sw;
        const ann::Index idx = ann::build_index(data.d, f, ctx.common.seed);
        const double seconds = sw.seconds();
        nlohmann::json out;
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
        ctx.prov.extra["build"] = ann::build_description(data, f, ctx.common.seed);
        ann::save_index(output, idx, ctx.prov, ann::build_description(data, f, ctx.common.seed).dump());
        out["meta"] = ctx.prov.to_json();
        io::write_json("-", out);
      });
}
