// cde-eval: accuracy, NFE per series and seconds of a cde-train checkpoint on a test split.
#include <fmt/core.h>

#include "cde/data.hpp"
#include "cde/model.hpp"
#include "cde/train.hpp"
#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/ts.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string ckpt, test, output = "-", solver;
  int spirals = 0, spirals_length = 100;
  double drop_rate = 0.0, rtol = 0, atol = 0, step = 0;
  bool predictions = false;
  cli::ToolInfo info{
      "cde-eval",
      "Evaluate a cde-train checkpoint on test cases (UEA .ts, prepared exactly as in training: time grid,\n"
      "standardisation with the training statistics, optional --drop-rate) or on freshly generated spirals.\n"
      "Prints JSON: accuracy, mean NFE per series (forward), seconds, cases.  --solver/--rtol/--atol/--step\n"
      "override the checkpoint's solver settings.",
      "  cde-eval bm.h5 ../shared/data/timeseries/BasicMotions_TEST.ts | jq .accuracy\n"
      "  cde-eval spirals.h5 --spirals 128 --seed 7\n"
      "  cde-eval mv.h5 BasicMotions_TEST.ts --drop-rate 0.3 --rtol 1e-3 --atol 1e-3 -o eval.json\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("checkpoint", ckpt, "checkpoint written by cde-train (*.h5)")->required();
        app.add_option("test", test, "test cases, UEA .ts (- = stdin); omit with --spirals");
        app.add_option("--spirals", spirals, "evaluate on N freshly generated spirals (seeded by --seed)")->transform(cli::count(1, 10000000));
        app.add_option("--spirals-length", spirals_length, "points per spiral")->capture_default_str()->check(cli::int_range(3, 100000));
        app.add_option("--drop-rate", drop_rate, "drop this fraction of interior observations per series (seeded)")->capture_default_str()->check(CLI::Range(0.0, 0.99));
        app.add_option("--solver", solver, "override: dopri5 or rk4");
        app.add_option("--rtol", rtol, "override: dopri5 relative tolerance")->check(cli::positive());
        app.add_option("--atol", atol, "override: dopri5 absolute tolerance")->check(cli::positive());
        app.add_option("--step", step, "override: rk4 step")->check(cli::positive());
        app.add_flag("--predictions", predictions, "also list the predicted class of every case");
        app.add_option("-o,--output", output, "result, *.json (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        if (test.empty() == (spirals == 0)) throw UsageError("give either a test .ts file or --spirals N", "test");
        cde::CheckpointInfo ci;
        cde::Model model = cde::load_checkpoint(ckpt, ci);
        ctx.prov.add_input(ckpt, io::sha256_file(ckpt));
        cde::SolveOptions so = ci.solve;
        if (!solver.empty()) so.method = cde::parse_method(solver, "--solver");
        if (rtol > 0) so.rtol = rtol;
        if (atol > 0) so.atol = atol;
        if (step > 0) so.step = step;
        cde::Dataset d;
        if (spirals > 0) {
          if (ci.model.channels != 3 || !ci.time.time_channel) throw UsageError("this checkpoint was not trained on spirals", "--spirals");
          d = cde::spirals(spirals, spirals_length, derive_seed(ctx.common.seed, 11));
          cde::remap_labels(d, ci.class_names, "spirals");
        } else {
          std::string sha;
          const auto ts = io::read_ts(test, &sha);
          ctx.prov.add_input(test, sha);
          d = cde::from_ts(ts, ci.time);
          if (d.channels != ci.model.channels)
            throw InputError(fmt::format("test cases have {} channels, the model {}", d.channels, ci.model.channels), test);
          cde::remap_labels(d, ci.class_names, test);
        }
        cde::drop_observations(d, drop_rate, derive_seed(ctx.common.seed, 12));
        ci.norm.apply(d);
        const auto ev = cde::evaluate(model, d, so, threads());
        nlohmann::json out{{"accuracy", ev.accuracy},
                           {"loss", ev.loss},
                           {"nfe", ev.nfe},
                           {"seconds", ev.seconds},
                           {"cases", ev.n},
                           {"model", cde::to_string(ci.model.kind)},
                           {"path", cde::to_string(ci.model.path)},
                           {"drop_rate", drop_rate},
                           {"solve", cde::to_json(so)}};
        if (predictions) {
          std::vector<std::string> names;
          for (int p : ev.predictions) names.push_back(ci.class_names[static_cast<size_t>(p)]);
          out["predictions"] = names;
        }
        out["meta"] = ctx.prov.to_json();
        io::write_json(output, out);
      });
}
