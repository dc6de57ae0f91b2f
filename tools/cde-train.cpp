// cde-train: train a neural CDE classifier (cubic/linear/rectilinear spline, kernel or GP
// path) or the multi-view MV-CDE / MVC-CDE of Serov, Kuleshov & Zaytsev (ICML 2026) on a UEA
// .ts file or the spirals toy; JSON Lines log per epoch and an HDF5 checkpoint.
#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cde/data.hpp"
#include "cde/model.hpp"
#include "cde/train.hpp"
#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/ts.hpp"
#include "nn/adamw.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {
struct Args {
  std::string train, val, test, output = "cde.h5", log, path = "cubic", model = "cde", kernel = "gaussian", solver = "dopri5";
  int spirals = 0, spirals_length = 100, hidden = 32, width = 128, epochs = 30, batch = 32;
  double bandwidth = 0.1, length_scale = 1.0, noise = 0.01, rtol = 1e-4, atol = 1e-6, step = 1.0, lr = 1e-3,
         weight_decay = 0.0, drop_rate = 0.0, val_fraction = 0.0, dt = 1.0;
  std::vector<double> bandwidths;
  bool time_channel = false;
  long max_steps = 100000;
};

nlohmann::json epoch_json(int epoch, const cde::EpochStats& e, const std::optional<cde::EvalStats>& val) {
  nlohmann::json j{{"epoch", epoch},           {"loss", e.loss},       {"train_accuracy", e.train_accuracy},
                   {"nfe", e.nfe},             {"nfe_backward", e.nfe_backward}, {"seconds", e.seconds}};
  if (val) {
    j["val_accuracy"] = val->accuracy;
    j["val_loss"] = val->loss;
    j["val_nfe"] = val->nfe;
  }
  return j;
}
}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "cde-train",
      "Train a neural controlled differential equation classifier dz = f(z) dX(t) (Kidger et al. 2020) on a\n"
      "UEA .ts file or the spirals toy.  The control path X is a Hermite cubic spline with backward\n"
      "differences (torchcde's default), a linear or rectilinear interpolation, a Nadaraya-Watson kernel\n"
      "smoother or a GP posterior mean; mv-cde/mvc-cde (Serov, Kuleshov & Zaytsev, ICML 2026) build one\n"
      "attention-weighted smoother per bandwidth in --bandwidths (learnable queries, or a small convolution)\n"
      "and solve the heads' CDEs as one system.  Solvers: dopri5 (adaptive, --rtol/--atol) or rk4 (--step);\n"
      "gradients by backpropagation through the solver steps.  Observations are at t = j * --dt; features\n"
      "are standardised with training statistics; --drop-rate removes interior observations per series.",
      "  cde-train --spirals 128 --time-channel --hidden 8 --epochs 10 -o spirals.h5 --log spirals.jsonl\n"
      "  cde-train ../shared/data/timeseries/BasicMotions_TRAIN.ts --path gp --length-scale 2 --epochs 30 -o bm.h5\n"
      "  cde-train BasicMotions_TRAIN.ts --model mv-cde --path kernel --bandwidths 0.5,1,2,4 --drop-rate 0.3 -o mv.h5\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("train", a.train, "training cases, UEA .ts (- = stdin); omit with --spirals");
        app.add_option("--spirals", a.spirals, "generate N spirals (torchcde example) instead of reading a file; 20% held out for validation unless --val-fraction")
            ->check(cli::int_range(4, 10000000));
        app.add_option("--spirals-length", a.spirals_length, "points per spiral")->capture_default_str()->check(cli::int_range(3, 100000));
        app.add_option("--val", a.val, "validation cases (.ts), evaluated after every epoch");
        app.add_option("--val-fraction", a.val_fraction, "hold out this fraction of the training cases (seeded) for validation")
            ->capture_default_str()->check(CLI::Range(0.0, 0.9));
        app.add_option("--path", a.path, "cubic, linear, rectilinear, kernel or gp")->capture_default_str();
        app.add_option("--model", a.model, "cde, mv-cde or mvc-cde")->capture_default_str();
        app.add_option("--kernel", a.kernel, "kernel path: gaussian, laplacian, cauchy, epanechnikov, tricube")->capture_default_str();
        app.add_option("--bandwidth", a.bandwidth, "kernel path: bandwidth b (time units)")->capture_default_str()->check(cli::positive());
        app.add_option("--length-scale", a.length_scale, "gp path: RBF length-scale (time units)")->capture_default_str()->check(cli::positive());
        app.add_option("--noise", a.noise, "gp path: observation noise std sigma")->capture_default_str()->check(cli::non_negative());
        app.add_option("--bandwidths", a.bandwidths, "mv-cde/mvc-cde: one bandwidth (kernel) or length-scale (gp) per head, comma-separated")
            ->delimiter(',')->check(cli::positive());
        app.add_option("--hidden", a.hidden, "CDE state size (per head)")->capture_default_str()->check(cli::int_range(1, 4096));
        app.add_option("--width", a.width, "cde: hidden width of the vector field MLP (heads use --hidden)")->capture_default_str()->check(cli::int_range(1, 65536));
        app.add_option("--solver", a.solver, "dopri5 or rk4")->capture_default_str();
        app.add_option("--rtol", a.rtol, "dopri5 relative tolerance")->capture_default_str()->check(cli::positive());
        app.add_option("--atol", a.atol, "dopri5 absolute tolerance")->capture_default_str()->check(cli::positive());
        app.add_option("--step", a.step, "rk4 step (time units)")->capture_default_str()->check(cli::positive());
        app.add_option("--max-steps", a.max_steps, "solver steps per series before failing")->capture_default_str()->transform(cli::count(1, 1000000000));
        app.add_option("--epochs", a.epochs, "training epochs")->capture_default_str()->check(cli::int_range(1, 1000000));
        app.add_option("--batch-size", a.batch, "series per Adam step")->capture_default_str()->check(cli::int_range(1, 1000000));
        app.add_option("--lr", a.lr, "Adam learning rate")->capture_default_str()->check(cli::positive());
        app.add_option("--weight-decay", a.weight_decay, "decoupled weight decay (AdamW)")->capture_default_str()->check(cli::non_negative());
        app.add_option("--drop-rate", a.drop_rate, "drop this fraction of interior observations per series (seeded)")->capture_default_str()->check(CLI::Range(0.0, 0.99));
        app.add_option("--dt", a.dt, "time between consecutive observations")->capture_default_str()->check(cli::positive());
        app.add_flag("--time-channel", a.time_channel, "prepend time as channel 0 (needed by rectilinear)");
        app.add_option("-o,--output", a.output, "checkpoint, *.h5")->capture_default_str();
        app.add_option("--log", a.log, "per-epoch JSON Lines (*.jsonl): a {\"meta\"} line, then epoch, loss, train/val accuracy, nfe, nfe_backward, seconds");
      },
      [&](cli::Context& ctx) {
        io::require_output_extension(a.output, "-o", {".h5", ".hdf5"}, "the checkpoint is HDF5");
        if (!a.log.empty()) io::require_output_extension(a.log, "--log", {".jsonl"}, "the log is JSON Lines");
        if (a.train.empty() == (a.spirals == 0)) throw UsageError("give either a training .ts file or --spirals N", "train");
        cde::ModelConfig mc;
        mc.kind = cde::parse_model_kind(a.model, "--model");
        mc.path = cde::parse_path_kind(a.path, "--path");
        mc.smooth.kernel = cde::parse_kernel_kind(a.kernel, "--kernel");
        mc.smooth.bandwidth = a.bandwidth;
        mc.smooth.length_scale = a.length_scale;
        mc.smooth.noise_std = a.noise;
        mc.bandwidths = a.bandwidths;
        mc.hidden = a.hidden;
        mc.width = a.width;
        if (mc.kind == cde::ModelKind::cde && !a.bandwidths.empty())
          throw UsageError("--bandwidths is for mv-cde/mvc-cde (use --bandwidth or --length-scale)", "--bandwidths");
        if (mc.path == cde::PathKind::rectilinear && !a.time_channel && a.spirals == 0)
          throw UsageError("the rectilinear path needs --time-channel", "--path rectilinear");
        cde::SolveOptions so;
        so.method = cde::parse_method(a.solver, "--solver");
        so.rtol = a.rtol;
        so.atol = a.atol;
        so.step = a.step;
        so.max_steps = a.max_steps;
        cde::TimeOptions to{a.dt, a.time_channel};

        cde::Dataset train, val;
        bool have_val = false;
        if (a.spirals > 0) {
          to = {1.0, true};  // spirals carry their own time channel on [0, 4 pi]
          const cde::Dataset all = cde::spirals(a.spirals, a.spirals_length, derive_seed(ctx.common.seed, 1));
          cde::split(all, a.val_fraction > 0 ? a.val_fraction : 0.2, derive_seed(ctx.common.seed, 2), train, val);
          have_val = true;
        } else {
          std::string sha;
          const auto ts = io::read_ts(a.train, &sha);
          ctx.prov.add_input(a.train, sha);
          const cde::Dataset all = cde::from_ts(ts, to);
          if (a.val_fraction > 0) {
            cde::split(all, a.val_fraction, derive_seed(ctx.common.seed, 2), train, val);
            have_val = true;
          } else {
            train = all;
          }
        }
        if (!a.val.empty()) {
          if (have_val) throw UsageError("give --val or --val-fraction, not both", "--val");
          std::string sha;
          const auto ts = io::read_ts(a.val, &sha);
          ctx.prov.add_input(a.val, sha);
          val = cde::from_ts(ts, to);
          if (val.channels != train.channels)
            throw InputError(fmt::format("validation cases have {} dimensions, training cases {}", val.channels, train.channels), a.val);
          cde::remap_labels(val, train.class_names, a.val);
          have_val = true;
        }
        cde::drop_observations(train, a.drop_rate, derive_seed(ctx.common.seed, 3));
        if (have_val) cde::drop_observations(val, a.drop_rate, derive_seed(ctx.common.seed, 4));
        const auto norm = cde::Standardizer::fit(train);
        norm.apply(train);
        if (have_val) norm.apply(val);
        for (size_t i = 0; i < train.series.size(); ++i)
          if (train.series[i].x.rows() < 2) throw InputError("a series needs at least 2 observations", fmt::format("training case {}", i + 1));
        mc.channels = train.channels;
        mc.classes = static_cast<int>(train.class_names.size());
        cde::Model model(mc);
        Rng rng(derive_seed(ctx.common.seed, 5));
        model.init(rng);
        nn::ViewAdamW opt(model.params(), a.lr, nn::AdamWOptions{0.9, 0.999, 1e-8, a.weight_decay});  // torch.optim.Adam's betas

        std::optional<io::AtomicFile> log_file;
        std::ofstream log;
        if (!a.log.empty()) {
          log_file.emplace(a.log);
          log.open(log_file->temp_path());
          if (!log) throw RuntimeError("cannot create log file", a.log);
          log << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump() << "\n";
        }
        const int T = threads();
        Stopwatch total;
        cde::EpochStats last;
        std::optional<cde::EvalStats> last_val;
        double train_seconds = 0;
        Rng shuffle(derive_seed(ctx.common.seed, 6));
        for (int ep = 1; ep <= a.epochs; ++ep) {
          last = cde::train_epoch(model, opt, train, a.batch, so, shuffle, T);
          train_seconds += last.seconds;
          if (!std::isfinite(last.loss)) throw RuntimeError("training loss became non-finite", fmt::format("epoch {}", ep));
          if (have_val) last_val = cde::evaluate(model, val, so, T);
          const auto line = epoch_json(ep, last, last_val);
          if (log_file) log << line.dump() << "\n";
          // A readable line on stderr; the JSON record goes to --log.
          log::info("epoch {}/{}: loss {:.4f}, train accuracy {:.3f}{}, NFE {:.1f} fwd / {:.1f} bwd, {:.2f}s", ep, a.epochs, last.loss,
                    last.train_accuracy,
                    last_val ? fmt::format(", val accuracy {:.3f}, val loss {:.4f}", last_val->accuracy, last_val->loss) : std::string(),
                    last.nfe, last.nfe_backward, last.seconds);
        }
        if (log_file) {
          log.close();
          if (!log) throw RuntimeError("cannot write log file", a.log);
        }
        nlohmann::json summary{{"model", a.model},
                               {"path", a.path},
                               {"epochs", a.epochs},
                               {"train_cases", train.series.size()},
                               {"parameters", model.num_params()},
                               {"final_loss", last.loss},
                               {"train_accuracy", last.train_accuracy},
                               {"nfe", last.nfe},
                               {"nfe_backward", last.nfe_backward},
                               {"train_seconds", train_seconds},
                               {"seconds_per_epoch", train_seconds / a.epochs},
                               {"drop_rate", a.drop_rate}};
        if (last_val) {
          summary["val_accuracy"] = last_val->accuracy;
          summary["val_cases"] = last_val->n;
          summary["val_nfe"] = last_val->nfe;
        }
        cde::CheckpointInfo ci{mc, so, to, norm, train.class_names, summary};
        save_checkpoint(a.output, model, ci, ctx.prov);
        if (log_file) log_file->commit();
        summary["checkpoint"] = a.output;
        summary["meta"] = ctx.prov.to_json();
        io::write_json("-", summary);
      });
}
