// mixlaw-fit: fit data-mixing laws (Dai & Zheng's capacity-noise law and the baselines it is
// compared with) to mixture sweeps, on the same train/validation split.
#include <fmt/core.h>

#include <filesystem>
#include <numeric>
#include <optional>
#include <set>

#include "cli/run_tool.hpp"
#include "fit/mix_data.hpp"
#include "fit/mixlaw.hpp"
#include "fit/mixlaw_fit.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "io/table_filter.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

struct Args {
  std::string mixture, losses, output = "-";
  std::string law = "capacity-noise";
  fit::MixColumns cols;
  std::string split_file, extrapolate;
  double val_fraction = 0;
  int starts = 4, hops = 6;
  double step = 0.5, temperature = 5e-5;
  std::vector<std::string> fix;
  bool header = true, predictions = false, drop_incomplete = false;
  std::string long_value_col = "loss";
  std::string test_mixture, test_losses;
  std::vector<std::string> where, test_where;
  std::string l2 = "auto";
  std::vector<double> l2_grid{0.0, 0.01, 0.1, 1.0};
  int l2_folds = 5;
  double early_stop = 0;
  int max_evals = 0, cv_folds = 0, seeds = 0, max_iterations = 1000;
  bool l2_given = false, l2_cv_given = false, remedies_given = false;  // set from the parser, for warnings
  std::string trace;
};

// The numbers of one seed's fit that the spread over seeds is taken of.
struct SeedScore {
  std::uint64_t seed;
  double train_mre, val_mre;
  nlohmann::json l2;  ///< the noise penalty used (capacity-noise), else null
};

nlohmann::json fit_one(const std::string& name, const Args& a, const fit::MixData& train, const fit::MixData* val,
                       const std::vector<std::string>& val_index, std::uint64_t seed, nlohmann::json* trace) {
  const auto law = fit::make_mixlaw(name);
  const bool exact = name == "linear";  // linear: the least-squares start is exact
  fit::MixFitOptions opt;
  opt.starts = exact ? 1 : a.starts;
  opt.hops = exact ? 0 : a.hops;
  opt.step = a.step;
  opt.temperature = a.temperature;
  opt.seed = seed;
  opt.l2 = -1.0;  // auto
  if (a.l2 != "auto") {
    const auto x = io::parse_double(a.l2);
    if (!x || !(*x >= 0) || !std::isfinite(*x)) throw UsageError(fmt::format("must be auto or a number >= 0, got {}", a.l2), "--l2");
    opt.l2 = *x;
  }
  opt.l2_grid = a.l2_grid;
  opt.l2_folds = a.l2_folds;
  opt.lbfgs.max_iterations = a.max_iterations;
  if (!exact) {
    opt.max_evals = a.max_evals;
    opt.early_stop = a.early_stop;
    opt.cv_folds = a.cv_folds;
  }
  opt.monitor = val;
  opt.trace = trace != nullptr;
  if (!a.fix.empty()) {
    std::string joined;
    for (const auto& f : a.fix) joined += (joined.empty() ? "" : ",") + f;
    for (const auto& [k, v] : cli::parse_assignments(joined, "--fix")) {
      const auto x = io::parse_double(v);
      if (!x || !std::isfinite(*x)) throw UsageError(fmt::format("'{}' is not a number", v), "--fix " + k);
      const auto names = law->param_names(train.domains);
      if (std::find(names.begin(), names.end(), k) != names.end()) opt.fixed[k] = *x;
      else if (a.law != "all") throw UsageError(fmt::format("law {} has no parameter '{}'", name, k), "--fix");
    }
  }
  const auto names = law->param_names(train.domains);
  int free_params = static_cast<int>(names.size() - opt.fixed.size());
  if (const int block = law->block_size(static_cast<int>(train.domains.size())); block > 0) {
    // Separable laws: domains never observed have no fitted parameters.
    int observed = 0;
    for (Eigen::Index i = 0; i < train.mask.cols(); ++i) observed += train.mask.col(i).sum() > 0 ? 1 : 0;
    free_params = observed * block;
  }
  Stopwatch sw;
  fit::MixFitResult r;
  {
    Progress bar(static_cast<std::size_t>(opt.starts), name + " starts");
    r = fit::fit_mixlaw(*law, train, opt, &bar);
  }
  const double secs = sw.seconds();
  nlohmann::json params = nlohmann::ordered_json::object();
  nlohmann::ordered_json pj;
  for (std::size_t i = 0; i < names.size(); ++i) pj[names[i]] = r.params[static_cast<Eigen::Index>(i)];
  Eigen::ArrayXXd pred;
  if (!law->predict(r.params.data(), train, pred)) throw RuntimeError(fmt::format("the fitted {} law cannot predict", name));
  nlohmann::json out{{"law", name},
                     {"equation", law->equation()},
                     {"source", law->source()},
                     {"n_params", free_params},
                     {"objective", r.objective},
                     {"objective_kind", "mean over rows of the summed squared loss error of masked entries"
                                        " (+ l2 sum A_i^2 with --l2)"},
                     {"train_mse", r.mse},
                     {"seed", seed},
                     {"selection", r.selection},
                     {"best_start", r.best_start},
                     {"start_scores", r.start_scores},
                     {"train", fit::mix_metrics(pred, train)},
                     {"fit_seconds", secs},
                     {"local_solves", r.local_solves},
                     {"starts", opt.starts},
                     {"hops", opt.hops},
                     {"regularisation", {{"l2", r.l2}, {"l2_from", !r.l2_scores.empty() ? "cross-validation" : name == "capacity-noise" ? "given" : "unused (no noise term)"},
                                         {"max_evals", opt.max_evals}, {"early_stop", opt.early_stop},
                                         {"early_stop_iterations", r.early_stop_step}, {"cv_folds", opt.cv_folds}}}};
  if (name == "capacity-noise") {
    // Noise terms the fit kept: a penalised A_i can shrink to nothing, leaving the capacity law.
    // A term counts when it adds more than 1e-3 (nats) to some training entry's prediction.
    const Eigen::Index K = static_cast<Eigen::Index>(train.domains.size());
    int used = 0;
    for (Eigen::Index i = 0; i < K; ++i) {
      const double amp = r.params[4 * K + i], expo = r.params[2 * K + i];
      double most = 0;
      for (Eigen::Index row = 0; row < train.h.rows(); ++row)
        if (train.mask(row, i) > 0)
          most = std::max(most, amp * std::pow(train.tokens[row] * std::max(train.h(row, i), 1e-4), -expo));
      used += most > 1e-3 ? 1 : 0;
    }
    out["regularisation"]["noise_terms_used"] = used;
  }
  if (!r.l2_scores.empty())
    out["regularisation"]["l2_cv"] = {{"grid", opt.l2_grid}, {"folds", opt.l2_folds}, {"mean_sse_per_row", r.l2_scores}, {"standard_error", r.l2_score_se},
                                       {"rule", "the largest l2 within one standard error of the lowest"}};
  out["params"] = nlohmann::json::parse(pj.dump());
  out["param_order"] = names;
  if (val) {
    Eigen::ArrayXXd vp;
    if (!law->predict(r.params.data(), *val, vp)) throw RuntimeError(fmt::format("the fitted {} law cannot predict the validation rows", name));
    out["val"] = fit::mix_metrics(vp, *val);
    if (a.predictions) {
      nlohmann::json rows = nlohmann::json::array();
      for (Eigen::Index r2 = 0; r2 < vp.rows(); ++r2) {
        nlohmann::json pred_row = nlohmann::json::object();
        for (std::size_t i = 0; i < val->domains.size(); ++i)
          if (train.mask.col(static_cast<Eigen::Index>(i)).sum() > 0)  // only domains the fit observed
            pred_row[val->domains[i]] = vp(r2, static_cast<Eigen::Index>(i));
        nlohmann::json row{{"index", val_index[static_cast<std::size_t>(r2)]}, {"pred", pred_row}};
        rows.push_back(row);
      }
      out["val_predictions"] = rows;
    }
  }
  if (trace)
    for (const auto& t : r.trace)
      trace->push_back({{"law", name}, {"seed", seed}, {"start", t.start}, {"solve", t.solve}, {"iteration", t.iteration},
                        {"step", t.step}, {"phase", t.held_in_phase ? "early-stop" : "fit"}, {"objective", t.objective},
                        {"held_in_mse", std::isfinite(t.held_in_mse) ? nlohmann::json(t.held_in_mse) : nlohmann::json(nullptr)},
                        {"val_mre", std::isfinite(t.monitor_mre) ? nlohmann::json(t.monitor_mre) : nlohmann::json(nullptr)}});
  log::info("{}: {} parameters, train MRE {:.3f}%{} in {:.1f}s", name, free_params,
            100 * out["train"]["mre"].get<double>(),
            val ? fmt::format(", validation MRE {:.3f}%", 100 * out["val"]["mre"].get<double>()) : std::string(), secs);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "mixlaw-fit",
      "Fit data-mixing laws to mixture sweeps and report fit and validation error per law.\n"
      "Laws: capacity-noise (Dai & Zheng, ICML 2026, eq. 3: capacity competition + noise reduction), capacity "
      "(their eq. 1), exponential (Ye et al. 2025), linear (RegMix-style regression); --law all fits every law "
      "on the same split.  Objective: mean squared error on raw loss over entries with h_i > --min-weight, "
      "minimised by L-BFGS in a bounded reparametrisation from seeded starts with basin hopping.",
      "  mixlaw-fit ../shared/data/scaling/pile17_1B.csv --split ../shared/data/scaling/pile17_1B_split.json --params 195.2 --tokens 2500 --fix H=0.3 --law all\n"
      "  mixlaw-fit ../shared/data/scaling/regmix/train_mixture_1m.csv ../shared/data/scaling/regmix/train_pile_loss_1m.csv --test-mixture ../shared/data/scaling/regmix/test_mixture_1m.csv --test-losses ../shared/data/scaling/regmix/test_pile_loss_1m.csv --weight-pattern 'train_the_pile_{}' --loss-pattern 'metric/the_pile_{}_val_loss' --allow-missing-losses --law exponential --params 1 --tokens 1\n"
      "  mixlaw-fit ../shared/data/scaling/dai-zheng/dmsl_llm_slimpajama.csv --weight-pattern 'weight_{}' --loss-pattern '{}_loss' --params-col model_size --params-scale 1e-6 --tokens-col n_tokens --tokens-scale 1e-9 --drop-incomplete --extrapolate params\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("mixture", a.mixture, "Mixture table (wide: weights and losses), or the weights only")->required();
        app.add_option("losses", a.losses,
                       "Loss table joined on --index-col: wide (a column per domain) or long (index, domain, "
                       "--long-value-col rows, e.g. JSON Lines)");
        app.add_option("--long-value-col", a.long_value_col, "Value column of a long loss table")->capture_default_str();
        app.add_option("-o,--output", a.output, "Output JSON file, *.json (- = stdout)")->capture_default_str();
        app.add_option("--law", a.law, "capacity-noise, capacity, exponential, linear, or all")
            ->capture_default_str()
            ->check(CLI::IsMember({"capacity-noise", "capacity", "exponential", "linear", "all"}));
        cli::add_header_flags(app, a.header, "CSV");
        app.add_option("--weight-pattern", a.cols.weight_pattern, "Weight column names, {} = domain")->capture_default_str();
        app.add_option("--loss-pattern", a.cols.loss_pattern, "Loss column names, {} = domain")->capture_default_str();
        app.add_option("--index-col", a.cols.index_col, "Join key and the key of --split files")->capture_default_str();
        auto* pcol = app.add_option("--params-col", a.cols.params_col, "Column of model size N in millions of parameters");
        auto* tcol = app.add_option("--tokens-col", a.cols.tokens_col, "Column of training tokens D in billions");
        app.add_option("--params-scale", a.cols.params_scale, "Multiply the --params-col values by this to get millions")
            ->capture_default_str()->check(cli::positive());
        app.add_option("--tokens-scale", a.cols.tokens_scale, "Multiply the --tokens-col values by this to get billions")
            ->capture_default_str()->check(cli::positive());
        app.add_option("--params", a.cols.params,
                       "Constant N (millions) when there is no column (not needed by exponential/linear)")
            ->check(cli::positive())
            ->excludes(pcol);
        app.add_option("--tokens", a.cols.tokens,
                       "Constant D (billions) when there is no column (not needed by exponential/linear)")
            ->check(cli::positive())
            ->excludes(tcol);
        app.add_option("--min-weight", a.cols.min_weight, "Entries count in fit and metrics when h_i > this")
            ->capture_default_str()
            ->check(cli::non_negative());
        app.add_option("--sum-tolerance", a.cols.sum_tolerance, "Allowed |sum of weights - 1| per row (< 0.5)")
            ->capture_default_str()
            ->check(CLI::Validator(
                [](std::string& v) -> std::string {
                  double x = -1;
                  return CLI::detail::lexical_cast(v, x) && x >= 0 && x < 0.5 ? "" : "must be in [0, 0.5), got " + v;
                },
                "NUMBER in [0, 0.5)"));
        app.add_flag("--allow-missing-losses", a.cols.allow_missing_losses,
                     "Accept domains with weights but no loss column (they are never scored)");
        auto* split = app.add_option("--split", a.split_file, "JSON {\"train_index\": [...], \"val_index\": [...]}");
        auto* frac = app.add_option("--val-fraction", a.val_fraction, "Random validation fraction (seeded by --seed)")
                         ->check(cli::positive());
        auto* extra = app.add_option("--extrapolate", a.extrapolate,
                                     "Fit on smaller N (params) or D (tokens), evaluate on the largest")
                          ->check(CLI::IsMember({"params", "tokens"}));
        auto* test_mix = app.add_option("--test-mixture", a.test_mixture,
                                        "Validate on these mixtures instead of splitting (same layout as the training table)");
        auto* test_loss = app.add_option("--test-losses", a.test_losses, "Loss table of --test-mixture (when separate)");
        test_loss->needs(test_mix);
        split->excludes(frac)->excludes(extra)->excludes(test_mix);
        app.add_option("--where", a.where, "Fit only the rows where COLUMN OP VALUE holds (repeatable; OP: < <= > >= == !=)");
        auto* test_where = app.add_option("--test-where", a.test_where,
                                          "Validate on the rows where COLUMN OP VALUE holds (repeatable; all must hold), taken "
                                          "from every row (they need not pass --where) and never fitted");
        test_where->excludes(split)->excludes(frac)->excludes(extra)->excludes(test_mix);
        frac->excludes(extra)->excludes(test_mix);
        extra->excludes(test_mix);
        app.add_option("--starts", a.starts, "Independent seeded starts per law")->capture_default_str()->check(cli::int_range(1, 100000));
        app.add_option("--hops", a.hops, "Basin-hopping steps per start")->capture_default_str()->check(cli::int_range(0, 100000));
        app.add_option("--hop-step", a.step, "Hop displacement (uniform, per coordinate, reparametrised space)")
            ->capture_default_str()
            ->check(cli::positive());
        app.add_option("--temperature", a.temperature, "Metropolis temperature of the hops")->capture_default_str()->check(cli::positive());
        app.add_option("--fix", a.fix, "Hold parameters fixed: NAME=VALUE,... (e.g. H=0.3)");
        auto* l2_opt = app.add_option("--l2", a.l2,
                       "Ridge penalty L2 * sum_i A_i^2 on the noise amplitudes of capacity-noise: a number >= 0, or "
                       "auto (chosen from --l2-grid by --l2-folds-fold cross-validation on the training rows)")
            ->capture_default_str()
            ->check(CLI::Validator(
                [](std::string& v) -> std::string {
                  double x = -1;
                  const auto y = io::parse_double(v);
                  x = y ? *y : -1;
                  return v == "auto" || (x >= 0 && std::isfinite(x)) ? "" : "must be auto or a number >= 0, got " + v;
                },
                "auto|NUMBER>=0"));
        auto* l2_grid_opt = app.add_option("--l2-grid", a.l2_grid, "Candidates of --l2 auto (comma-separated)")
            ->delimiter(',')->capture_default_str()->check(cli::non_negative());
        auto* l2_folds_opt = app.add_option("--l2-folds", a.l2_folds, "Folds of --l2 auto's cross-validation")->capture_default_str()->check(cli::int_range(2, 1000));
        app.add_option("--max-iterations", a.max_iterations,
                       "Stop each local solve (L-BFGS) after this many iterations if it has not converged")
            ->capture_default_str()->check(cli::int_range(1, 100000000));
        auto* max_evals_opt = app.add_option("--max-evals", a.max_evals,
                       "Stop each local solve after this many objective evaluations (0 = no cap); the "
                       "reference's SciPy cap of 15000 finite-difference evaluations is about 174 here")
            ->capture_default_str()->check(cli::int_range(0, 100000000));
        auto* early_opt = app.add_option("--early-stop", a.early_stop,
                       "Hold in this fraction of the training rows, stop each start's path where their error is "
                       "lowest, then refit all training rows for that many iterations (0 = off)")
            ->capture_default_str()->check(CLI::Range(0.0, 0.9));
        auto* cv_opt = app.add_option("--cv-folds", a.cv_folds,
                       "Choose among starts by K-fold cross-validation on the training rows (0 = lowest objective)")
            ->capture_default_str()->check(cli::int_range(0, 1000));
        app.add_option("--seeds", a.seeds,
                       "Fit each law with seeds --seed, --seed+1, ... and report the spread of its MRE over them "
                       "(default: 5 with --law all and a validation split, else 1)")
            ->check(cli::int_range(1, 1000));
        app.add_option("--trace", a.trace,
                       "Write every iteration of the fits (objective, held-in MSE, validation MRE) as JSON Lines");
        // Remember which regularisation options were given, to warn where a law ignores them.
        l2_opt->each([&a](const std::string&) { a.l2_given = true; });
        for (auto* o : {l2_grid_opt, l2_folds_opt}) o->each([&a](const std::string&) { a.l2_cv_given = true; });
        for (auto* o : {max_evals_opt, early_opt, cv_opt}) o->each([&a](const std::string&) { a.remedies_given = true; });
        app.add_flag("--predictions", a.predictions, "Add per-row validation predictions");
        app.add_flag("--drop-incomplete", a.drop_incomplete,
                     "Drop rows with an empty cell in a weight, loss, N or D column (single-table input)");
      },
      [&](cli::Context& ctx) {
        io::require_json_path(a.output);
        if (!a.trace.empty()) {
          if (io::is_stdout(a.trace) && io::is_stdout(a.output))
            throw UsageError("the trace and the report cannot both go to standard output: give -o or --trace a file", "--trace");
          io::check_output_dir(a.trace);
          io::check_distinct_outputs({{"--output", a.output}, {"--trace", a.trace}},
                                     {a.mixture, a.losses, a.split_file, a.test_mixture, a.test_losses});
        }
        io::TableReadOptions ro;
        ro.header = a.header;
        const bool size_free = a.law != "all" && !fit::make_mixlaw(a.law)->uses_scale();
        if (size_free && a.cols.params_col.empty() && !(a.cols.params > 0)) a.cols.params = 1;  // unused by these laws
        if (size_free && a.cols.tokens_col.empty() && !(a.cols.tokens > 0)) a.cols.tokens = 1;
        std::vector<bool> test_flags;  // rows of the main table that --test-where holds out
        // Reads a mixture table (and an optional wide or long loss table) into MixData.
        auto load = [&](const std::string& mix_path, const std::string& loss_path, std::vector<std::string>* index) {
          io::Table mix = io::Table::read(mix_path, ro);
          ctx.prov.add_input(mix_path, mix.sha256());
          if (index && (!a.where.empty() || !a.test_where.empty())) {
            // --where picks the rows fitted, --test-where the held-out rows (from every row, so
            // they need not pass --where); the table keeps both, in file order.
            const auto fitted = io::filter_rows(mix, a.where);
            std::vector<bool> in_test(mix.rows(), false);
            if (!a.test_where.empty())
              for (auto r : io::filter_rows(mix, a.test_where)) in_test[r] = true;
            std::vector<bool> keep = in_test;
            for (auto r : fitted) keep[r] = true;
            std::vector<std::size_t> rows;
            test_flags.clear();
            for (std::size_t r = 0; r < mix.rows(); ++r)
              if (keep[r]) {
                rows.push_back(r);
                test_flags.push_back(in_test[r]);
              }
            mix = mix.select_rows(rows);
            if (a.test_where.empty()) test_flags.clear();
          }
          if (a.drop_incomplete) {
            const auto keep = io::complete_rows(mix, fit::mix_columns_used(mix, a.cols));
            if (keep.size() < mix.rows()) log::info("dropped {} incomplete rows of {}", mix.rows() - keep.size(), mix.rows());
            mix = mix.select_rows(keep);
            if (!test_flags.empty()) {
              std::vector<bool> kept;
              for (auto k : keep) kept.push_back(test_flags[k]);
              test_flags = kept;
            }
          }
          std::optional<io::Table> loss_table;
          if (!loss_path.empty()) {
            loss_table = io::Table::read(loss_path, ro);
            ctx.prov.add_input(loss_path, loss_table->sha256());
            if (index && (!a.where.empty() || !a.test_where.empty()) && loss_table->has(a.cols.index_col) &&
                mix.has(a.cols.index_col)) {
              // The losses of the mixture rows --where/--test-where kept, no others.
              const auto kept = mix.texts(a.cols.index_col);
              const std::set<std::string> keep(kept.begin(), kept.end());
              const auto ids = loss_table->texts(a.cols.index_col);
              std::vector<std::size_t> rows;
              for (std::size_t r = 0; r < ids.size(); ++r)
                if (keep.count(ids[r])) rows.push_back(r);
              loss_table = loss_table->select_rows(rows);
            }
            if (loss_table->has("domain") && loss_table->has(a.long_value_col) && loss_table->has(a.cols.index_col)) {
              // Long form (index, domain, loss), e.g. JSON Lines: pivot to one column per domain.
              loss_table = fit::pivot_long_losses(*loss_table, a.cols.index_col, "domain", a.long_value_col, a.cols.loss_pattern);
              log::debug("pivoted long loss table {} to {} columns", loss_path, loss_table->cols());
            }
          }
          return fit::mix_data_from_tables(mix, loss_table ? &*loss_table : nullptr, a.cols, index);
        };
        std::vector<std::string> index;
        fit::MixData all = load(a.mixture, a.losses, &index);
        std::optional<fit::MixData> test;
        if (!a.test_mixture.empty()) {
          test = load(a.test_mixture, a.test_losses, nullptr);
          if (test->domains != all.domains)
            throw InputError("the test tables have other domains than the training tables", a.test_mixture);
        }
        fit::MixSplit split;
        if (!a.test_where.empty()) {
          for (std::size_t r = 0; r < test_flags.size(); ++r)
            (test_flags[r] ? split.val : split.train).push_back(static_cast<Eigen::Index>(r));
          if (split.val.empty()) throw InputError("no row matches --test-where", a.mixture);
          if (split.train.empty()) throw InputError("every row matches --test-where: nothing is left to fit", a.mixture);
          std::string w;
          for (const auto& x : a.test_where) w += (w.empty() ? "" : " and ") + x;
          split.how = "--test-where: rows where " + w + " are held out";
        } else if (!a.split_file.empty()) {
          split = fit::split_from_file(a.split_file, index);
          ctx.prov.add_input(a.split_file, io::sha256_file(a.split_file));
        } else if (a.val_fraction > 0) {
          split = fit::split_random(all.h.rows(), a.val_fraction, ctx.common.seed);
        } else if (!a.extrapolate.empty()) {
          split = fit::split_extrapolate(all, a.extrapolate);
        } else if (test) {
          // Separate test tables: train on every training row, validate on the test rows.
          const Eigen::Index n_train = all.h.rows();
          fit::MixData joined = all;
          const Eigen::Index n_test = test->h.rows();
          joined.h.conservativeResize(n_train + n_test, Eigen::NoChange);
          joined.loss.conservativeResize(n_train + n_test, Eigen::NoChange);
          joined.mask.conservativeResize(n_train + n_test, Eigen::NoChange);
          joined.params.conservativeResize(n_train + n_test);
          joined.tokens.conservativeResize(n_train + n_test);
          joined.h.bottomRows(n_test) = test->h;
          joined.loss.bottomRows(n_test) = test->loss;
          joined.mask.bottomRows(n_test) = test->mask;
          joined.params.tail(n_test) = test->params;
          joined.tokens.tail(n_test) = test->tokens;
          all = std::move(joined);
          for (Eigen::Index r = 0; r < n_train; ++r) split.train.push_back(r);
          for (Eigen::Index r = n_train; r < n_train + n_test; ++r) split.val.push_back(r);
          split.how = "separate test tables: " + a.test_mixture + (a.test_losses.empty() ? "" : " + " + a.test_losses);
        } else {
          split.train.resize(static_cast<std::size_t>(all.h.rows()));
          std::iota(split.train.begin(), split.train.end(), Eigen::Index{0});
          split.how = "none: every row is used for fitting";
        }
        if (a.predictions && split.val.empty()) throw UsageError("--predictions needs a validation set (a split or test tables)");
        std::vector<std::string> val_index;
        for (auto r : split.val)
          val_index.push_back(static_cast<std::size_t>(r) < index.size() ? index[static_cast<std::size_t>(r)]
                                                                          : "test:" + std::to_string(r - static_cast<Eigen::Index>(index.size())));
        const fit::MixData train = all.rows(split.train);
        std::optional<fit::MixData> val;
        if (!split.val.empty()) val = all.rows(split.val);
        const std::vector<std::string> laws = a.law == "all" ? fit::mixlaw_names() : std::vector<std::string>{a.law};
        const bool needs_all_losses = std::any_of(laws.begin(), laws.end(), [](const std::string& l) { return l.rfind("capacity", 0) == 0; });
        if (needs_all_losses && !all.loss.isFinite().all()) {
          std::string missing;
          for (Eigen::Index i = 0; i < all.loss.cols(); ++i)
            if (!all.loss.col(i).isFinite().all()) missing += (missing.empty() ? "" : ", ") + all.domains[static_cast<std::size_t>(i)];
          throw InputError(fmt::format("the capacity laws need a loss for every domain; no losses for: {}", missing), a.mixture);
        }
        if ((a.l2_given || a.l2_cv_given) && a.law != "all" && a.law != "capacity-noise")
          log::warn("--l2 and its cross-validation apply to capacity-noise's noise term only: ignored for {}", a.law);
        else if (a.l2_cv_given && a.l2 != "auto")
          log::warn("--l2-grid and --l2-folds are used only with --l2 auto: ignored");
        if (a.remedies_given && (a.law == "linear" || a.law == "all"))
          log::warn("--max-evals, --early-stop and --cv-folds do not apply to the linear law (an exact least-squares solve)");
        const int n_seeds = a.seeds > 0 ? a.seeds : (a.law == "all" && val ? 5 : 1);
        nlohmann::json trace = nlohmann::json::array();
        nlohmann::json results = nlohmann::json::array(), summary = nlohmann::json::array();
        for (const auto& name : laws) {
          nlohmann::json r;
          std::vector<SeedScore> scores;
          for (int k = 0; k < n_seeds; ++k) {
            const std::uint64_t seed = ctx.common.seed + static_cast<std::uint64_t>(k);
            nlohmann::json rk = fit_one(name, a, train, val ? &*val : nullptr, val_index, seed, a.trace.empty() ? nullptr : &trace);
            scores.push_back({seed, rk["train"]["mre"].get<double>(), val ? rk["val"]["mre"].get<double>() : 0.0,
                              name == "capacity-noise" ? rk["regularisation"]["l2"] : nlohmann::json(nullptr)});
            if (k == 0) r = std::move(rk);  // the full report is the first seed's
          }
          nlohmann::json s{{"law", name}, {"n_params", r["n_params"]}, {"train_mre", r["train"]["mre"]},
                           {"fit_seconds", r["fit_seconds"]}};
          if (val) {
            s["val_mre"] = r["val"]["mre"];
            s["val_mae"] = r["val"]["mae"];
          }
          if (n_seeds > 1) {
            // Spread over seeds: a ranking is claimed only where these ranges separate.
            auto spread = [&](double SeedScore::*m) {
              double lo = scores[0].*m, hi = lo, sum = 0;
              for (const auto& x : scores) {
                lo = std::min(lo, x.*m);
                hi = std::max(hi, x.*m);
                sum += x.*m;
              }
              return nlohmann::json{{"mean", sum / static_cast<double>(scores.size())}, {"min", lo}, {"max", hi}};
            };
            nlohmann::json per = nlohmann::json::array();
            for (const auto& x : scores) {
              nlohmann::json e{{"seed", x.seed}, {"train_mre", x.train_mre}, {"l2", x.l2}};
              if (val) e["val_mre"] = x.val_mre;
              per.push_back(e);
            }
            nlohmann::json seeds{{"n", n_seeds}, {"per_seed", per}, {"train_mre", spread(&SeedScore::train_mre)}};
            if (val) seeds["val_mre"] = spread(&SeedScore::val_mre);
            r["seeds"] = seeds;
            s["seeds"] = n_seeds;
            s["train_mre_mean"] = seeds["train_mre"]["mean"];
            if (val) {
              s["val_mre_mean"] = seeds["val_mre"]["mean"];
              s["val_mre_min"] = seeds["val_mre"]["min"];
              s["val_mre_max"] = seeds["val_mre"]["max"];
            }
          }
          summary.push_back(s);
          results.push_back(std::move(r));
        }
        // Laws by validation MRE (the mean over seeds when there are several); a law is ranked
        // above the next only when its worst seed beats the next law's best seed by more than
        // a millionth (relative), so two fits of the same optimum are not "separated".
        constexpr double kTieMargin = 1e-6;
        nlohmann::json ranking = nlohmann::json::array();
        if (val && laws.size() > 1) {
          std::vector<nlohmann::json> order(summary.begin(), summary.end());
          const std::string key = n_seeds > 1 ? "val_mre_mean" : "val_mre";
          std::stable_sort(order.begin(), order.end(), [&](const nlohmann::json& x, const nlohmann::json& y) {
            return x[key].get<double>() < y[key].get<double>();
          });
          for (std::size_t i = 0; i < order.size(); ++i) {
            nlohmann::json e{{"law", order[i]["law"]}, {"val_mre", order[i][key]}};
            if (i + 1 < order.size())
              e["separated_from_next"] =
                  n_seeds > 1 ? nlohmann::json(order[i]["val_mre_max"].get<double>() <
                                               order[i + 1]["val_mre_min"].get<double>() * (1 - kTieMargin))
                              : nlohmann::json(nullptr);  // one seed: no spread to judge by
            ranking.push_back(e);
          }
        }
        if (!a.trace.empty()) {
          std::string lines;
          for (const auto& t : trace) lines += t.dump() + "\n";
          io::write_text(a.trace, lines);
        }
        std::vector<std::string> scored;
        for (Eigen::Index i = 0; i < train.mask.cols(); ++i)
          if (train.mask.col(i).sum() > 0) scored.push_back(all.domains[static_cast<std::size_t>(i)]);
        nlohmann::json out{{"domains", all.domains},
                           {"scored_domains", scored},
                           {"rows", all.h.rows()},
                           {"split", {{"how", split.how}, {"train", split.train.size()}, {"val", split.val.size()}}},
                           {"min_weight", a.cols.min_weight},
                           {"columns", {{"weight_pattern", a.cols.weight_pattern}, {"params_col", a.cols.params_col},
                                        {"tokens_col", a.cols.tokens_col}}},
                           {"units", "N in millions of parameters, D in billions of tokens"},
                           {"summary", summary},
                           {"ranking", ranking},
                           {"laws", results},
                           {"meta", ctx.prov.to_json()}};
        io::write_json(a.output, out);
      });
}
