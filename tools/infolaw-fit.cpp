// infolaw-fit: fit a parametric loss law (Chinchilla, data-constrained, InfoLaw) to a
// table of training runs and write the parameters as JSON.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <numeric>
#include <optional>

#include "cli/array_task.hpp"
#include "cli/run_tool.hpp"
#include "fit/infolaw.hpp"
#include "fit/law.hpp"
#include "fit/law_data.hpp"
#include "fit/law_fit.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "io/sha256.hpp"
#include "io/table_filter.hpp"
#include "num/stats.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

struct Args {
  std::string input;
  std::string output = "-";
  std::string law = "chinchilla";
  bool header = true;
  fit::ColumnMap cols;
  std::vector<std::string> where, test_where;
  int drop_highest = 0;
  double huber_delta = 1e-3;
  std::vector<std::string> grid;
  std::vector<std::string> fix;
  int bootstrap = 0;
  std::string array_task;                     ///< --array-task i/N: this task's share of the resamples
  std::vector<std::string> bootstrap_parts;   ///< --bootstrap-parts: the tasks' parts to merge
  bool residuals = false;
  std::string id_col = "name";
  int max_iterations = 1000;
  // InfoLaw
  int samples = 100000;
  std::string theta_range = "0:3", lambda_range = "0.001:10", shares;
  bool no_refine = false;
  double sum_tolerance = 1e-3;
};

std::pair<double, double> parse_range(const std::string& s, const std::string& flag) {
  const auto c = s.find(':');
  const auto lo = c == std::string::npos ? std::nullopt : io::parse_double(s.substr(0, c));
  const auto hi = c == std::string::npos ? std::nullopt : io::parse_double(s.substr(c + 1));
  if (!lo || !hi || !(*lo < *hi)) throw UsageError(fmt::format("expected LO:HI with LO < HI, got '{}'", s), flag);
  return {*lo, *hi};
}

nlohmann::json fit_stats(const Eigen::ArrayXd& loss, const Eigen::ArrayXd& pred) {
  return {{"r2", num::r_squared(loss, pred)},
          {"mae", num::mae(loss, pred)},
          {"mre", num::mre(loss, pred)},
          {"rmse", num::rmse(loss, pred)}};
}

// Per-row predictions: "row" is the 1-based data row of the input table, "residual" is
// pred - loss, and "id" the run's name when the table has the --id-col column.
nlohmann::json residual_rows(const io::Table& t, const std::vector<std::size_t>& rows, const Eigen::ArrayXd& loss,
                             const Eigen::ArrayXd& pred, const std::string& id_col) {
  nlohmann::json out = nlohmann::json::array();
  const std::vector<std::string> ids = t.has(id_col) ? t.texts(id_col) : std::vector<std::string>{};
  for (Eigen::Index i = 0; i < loss.size(); ++i) {
    nlohmann::json r{{"row", rows[static_cast<std::size_t>(i)] + 1},
                     {"loss", loss[i]},
                     {"pred", pred[i]},
                     {"residual", pred[i] - loss[i]}};
    if (!ids.empty()) r["id"] = ids[static_cast<std::size_t>(i)];
    out.push_back(std::move(r));
  }
  return out;
}

// Held-out error of a fitted law: the rows --test-where set aside (never fitted).
nlohmann::json test_report(const io::Table& t, const std::vector<std::size_t>& rows, const Eigen::ArrayXd& loss,
                           const Eigen::ArrayXd& pred, const std::string& id_col, const std::vector<std::string>& where) {
  const Eigen::ArrayXd ae = (pred - loss).abs();
  const Eigen::ArrayXd re = ae / loss;
  nlohmann::json out = fit_stats(loss, pred);
  out["rows"] = loss.size();
  out["max_ae"] = ae.maxCoeff();
  out["max_re"] = re.maxCoeff();
  out["mean_residual"] = (pred - loss).mean();
  out["where"] = where;
  out["residuals"] = residual_rows(t, rows, loss, pred, id_col);
  return out;
}

void check_not_constant(const Eigen::ArrayXd& loss, const std::string& input) {
  if (loss.size() > 1 && (loss == loss[0]).all())
    throw InputError(fmt::format("all {} losses are equal: there is nothing to fit", loss.size()), input);
}

std::map<std::string, double> parse_fix(const std::vector<std::string>& items) {
  std::map<std::string, double> fixed;
  std::string text;
  for (const auto& i : items) text += (text.empty() ? "" : ",") + i;
  if (text.empty()) return fixed;
  for (const auto& [k, v] : cli::parse_assignments(text, "--fix")) {
    const auto x = io::parse_double(v);
    if (!x || !std::isfinite(*x)) throw UsageError(fmt::format("'{}' is not a number", v), "--fix " + k);
    if (k == "A" || k == "B" || k == "E") {
      if (!(*x > 0)) throw UsageError(fmt::format("{} must be > 0", k), "--fix");
      const std::string lower(1, static_cast<char>(std::tolower(k[0])));
      if (fixed.count(lower)) throw UsageError(fmt::format("{} and {} are the same parameter", k, lower), "--fix");
      fixed[lower] = std::log(*x);
    } else {
      if (fixed.count(k)) throw UsageError(fmt::format("{} is given twice (A/a, B/b, E/e name one parameter)", k), "--fix");
      fixed[k] = *x;
    }
  }
  return fixed;
}

void run_parametric(const Args& a, const io::Table& t, const std::vector<std::size_t>& rows, const io::Table& test,
                    const std::vector<std::size_t>& test_rows, cli::Context& ctx, nlohmann::json& out) {
  const auto law = fit::make_law(a.law);
  const fit::LawData data = fit::law_data_from_table(*law, t, a.cols, true);
  check_not_constant(data.loss, a.input);
  fit::FitOptions opt;
  opt.huber_delta = a.huber_delta;
  opt.fixed = parse_fix(a.fix);
  for (const auto& g : a.grid) opt.grid.push_back(fit::parse_grid_axis(g));
  opt.bootstrap = a.bootstrap;
  opt.seed = ctx.common.seed;
  opt.lbfgs.max_iterations = a.max_iterations;
  const auto n_starts = fit::make_start_grid(*law, opt).size();
  const auto n_free = law->param_names().size() - opt.fixed.size();
  if (static_cast<std::size_t>(data.loss.size()) < n_free)
    throw InputError(fmt::format("{} rows cannot determine {} free parameters of the {} law", data.loss.size(), n_free,
                                 law->name()), a.input);
  log::debug("fitting {} to {} rows from {} starts on {} threads", law->name(), data.loss.size(), n_starts, threads());
  Stopwatch sw;
  // Job arrays (issue 42): task i of N refits resamples [iK/N, (i+1)K/N) and writes them as a part;
  // the merge refits none and takes every resample from the parts.
  std::pair<int, int> task{-1, 0};
  if (!a.array_task.empty()) {
    task = cli::parse_array_task(a.array_task);
    opt.bootstrap_begin = static_cast<int>(std::int64_t(task.first) * a.bootstrap / task.second);
    opt.bootstrap_end = static_cast<int>(std::int64_t(task.first + 1) * a.bootstrap / task.second);
  }
  if (!a.bootstrap_parts.empty()) opt.bootstrap_end = 0;
  fit::FitResult r;
  {
    Progress bar(n_starts, "starts");
    r = fit::fit_law(*law, data, opt, &bar);
  }
  const double secs = sw.seconds();
  const Eigen::ArrayXd pred = law->predict(r.params.data(), data);
  if (task.first >= 0 || !a.bootstrap_parts.empty()) {
    // what the parts of one run share: the law, its data, the fit's settings and its optimum
    std::string key = fmt::format("{} huber {} iterations {} seed {} resamples {} fixed", law->name(), opt.huber_delta,
                                  opt.lbfgs.max_iterations, opt.seed, opt.bootstrap);
    for (const auto& [k, v] : opt.fixed) key += fmt::format(" {}={}", k, v);
    for (const auto& g : a.grid) key += " grid " + g;
    key.append(reinterpret_cast<const char*>(data.loss.data()), std::size_t(data.loss.size()) * sizeof(double));
    key.append(reinterpret_cast<const char*>(pred.data()), std::size_t(pred.size()) * sizeof(double));
    key.append(reinterpret_cast<const char*>(r.params.data()), std::size_t(r.params.size()) * sizeof(double));
    const std::string fit_sha = io::sha256_hex(key);
    if (task.first >= 0) {
      nlohmann::json rows = nlohmann::json::array();
      for (Eigen::Index k = 0; k < r.bootstrap.rows(); ++k) {
        std::vector<double> v(std::size_t(r.bootstrap.cols()));
        for (Eigen::Index c = 0; c < r.bootstrap.cols(); ++c) v[std::size_t(c)] = r.bootstrap(k, c);
        rows.push_back({{"k", r.bootstrap_k[std::size_t(k)]}, {"params", v}});
      }
      out["bootstrap_part"] = {{"task", task.first},        {"tasks", task.second}, {"resamples", a.bootstrap},
                               {"begin", opt.bootstrap_begin}, {"end", opt.bootstrap_end}, {"fit_sha256", fit_sha},
                               {"rows", rows},              {"failed", r.bootstrap_failed}};
      return;
    }
    // the merge: every resample k in [0, K) from exactly one part, in k order
    std::vector<int> from(static_cast<std::size_t>(a.bootstrap), -1);
    std::vector<std::vector<double>> fits(static_cast<std::size_t>(a.bootstrap));
    for (std::size_t pi = 0; pi < a.bootstrap_parts.size(); ++pi) {
      const std::string& path = a.bootstrap_parts[pi];
      const nlohmann::json j = io::read_json(path);
      if (!j.is_object() || !j.contains("bootstrap_part") || !j["bootstrap_part"].is_object())
        throw InputError("not a bootstrap part of infolaw-fit --array-task (no bootstrap_part)", path);
      const auto& part = j["bootstrap_part"];
      try {
        if (part.value("fit_sha256", std::string()) != fit_sha)
          throw InputError("the part comes from another fit (other data, law, options, --seed or --bootstrap)", path);
        auto claim = [&](int k) {
          if (k < 0 || k >= a.bootstrap) throw InputError(fmt::format("resample {} outside 0..{}", k, a.bootstrap - 1), path);
          if (from[std::size_t(k)] >= 0)
            throw InputError(fmt::format("resample {} is also in {}", k, a.bootstrap_parts[std::size_t(from[std::size_t(k)])]), path);
          from[std::size_t(k)] = static_cast<int>(pi);
        };
        for (const auto& row : part.at("rows")) {
          const int k = row.at("k").get<int>();
          claim(k);
          fits[std::size_t(k)] = row.at("params").get<std::vector<double>>();
          if (fits[std::size_t(k)].size() != std::size_t(r.params.size())) throw InputError(fmt::format("resample {}: wrong parameter count", k), path);
        }
        for (const auto& k : part.at("failed")) claim(k.get<int>());
      } catch (const nlohmann::json::exception& e) {  // a part of the right kind but the wrong shape
        throw InputError(fmt::format("a malformed bootstrap part ({})", e.what()), path);
      }
    }
    for (int k = 0; k < a.bootstrap; ++k)
      if (from[std::size_t(k)] < 0)
        throw InputError(fmt::format("resample {} of {} is in none of the {} parts given (a task missing?)", k, a.bootstrap,
                                     a.bootstrap_parts.size()),
                         "--bootstrap-parts");
    int n_ok = 0;
    for (const auto& f : fits) n_ok += !f.empty();
    r.bootstrap.resize(n_ok, r.params.size());
    int row = 0;
    for (int k = 0; k < a.bootstrap; ++k)
      if (!fits[std::size_t(k)].empty()) {
        for (Eigen::Index c = 0; c < r.params.size(); ++c) r.bootstrap(row, c) = fits[std::size_t(k)][std::size_t(c)];
        ++row;
      }
  }
  out["law"] = law->name();
  out["equation"] = law->equation();
  out["params"] = law->to_json(r.params.data());
  nlohmann::json fixed = nlohmann::json::object();
  for (const auto& [k, v] : opt.fixed) fixed[k] = v;
  out["fixed"] = fixed;
  out["objective"] = r.objective;
  out["objective_kind"] = fmt::format("sum of Huber(delta={}) losses of log-loss residuals", a.huber_delta);
  out["huber_delta"] = a.huber_delta;
  out["fit"] = fit_stats(data.loss, pred);
  out["rows_used"] = data.loss.size();
  out["starts"] = {{"total", r.n_starts},
                   {"converged", r.n_converged},
                   {"failed", r.n_failed},
                   {"best_index", r.best_start},
                   {"best_start", law->to_json(r.best_start_point.data())},
                   {"best_converged", r.converged},
                   {"best_iterations", r.iterations}};
  out["seconds"] = secs;
  if (!r.converged) log::warn("the best start did not report convergence; treat the parameters with care");
  nlohmann::json warnings = nlohmann::json::array();
  for (const char* k : {"rd_star", "rn_star"}) {
    const auto names = law->param_names();
    const auto it = std::find(names.begin(), names.end(), k);
    if (it != names.end() && r.params[it - names.begin()] > 1e4) {
      const std::string w = fmt::format("{} = {:.4g} ran away: these runs do not constrain it (try --fix)", k,
                                        r.params[it - names.begin()]);
      log::warn("{}", w);
      warnings.push_back(w);
    }
  }
  if (!pred.isFinite().all()) {
    // A parameter that ran off to where exp() overflows (B = e^b, say): the stats are null in the output.
    std::string which;
    for (const auto& [k, v] : out["params"].items())
      if (!v.is_number()) which += (which.empty() ? "" : ", ") + k;
    const std::string w = fmt::format("the fit diverged: predictions are not finite{}; these runs do not determine the {} law "
                                      "(try --fix or a narrower --grid)",
                                      which.empty() ? "" : " (" + which + " overflowed)", law->name());
    log::warn("{}", w);
    warnings.push_back(w);
  }
  if (!warnings.empty()) out["warnings"] = warnings;
  if (r.bootstrap.rows() > 0) {
    nlohmann::json b = nlohmann::json::object();
    const auto names = law->param_names();
    std::vector<nlohmann::json> as_json;
    for (Eigen::Index k = 0; k < r.bootstrap.rows(); ++k) {
      Eigen::VectorXd row = r.bootstrap.row(k).transpose();
      as_json.push_back(law->to_json(row.data()));
    }
    for (auto it = as_json.front().begin(); it != as_json.front().end(); ++it) {
      const std::string lower(1, static_cast<char>(std::tolower(it.key()[0])));
      if (opt.fixed.count(it.key()) || (it.key().size() == 1 && opt.fixed.count(lower))) continue;  // held fixed
      std::vector<double> v;
      for (const auto& j : as_json) v.push_back(j[it.key()].get<double>());
      std::sort(v.begin(), v.end());
      const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      double var = 0;
      for (double x : v) var += (x - mean) * (x - mean);
      const double sd = v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0;
      auto q = [&](double p) {
        const double pos = p * static_cast<double>(v.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const auto hi = std::min(lo + 1, v.size() - 1);
        return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
      };
      b[it.key()] = {{"mean", mean}, {"sd", sd}, {"q025", q(0.025)}, {"q975", q(0.975)}};
    }
    out["bootstrap"] = {{"resamples", a.bootstrap}, {"refits_ok", r.bootstrap.rows()}, {"params", b}};
  }
  if (a.residuals) out["residuals"] = residual_rows(t, rows, data.loss, pred, a.id_col);
  if (!test_rows.empty()) {
    const fit::LawData td = fit::law_data_from_table(*law, test, a.cols, true);
    out["test"] = test_report(test, test_rows, td.loss, law->predict(r.params.data(), td), a.id_col, a.test_where);
  }
}

void run_infolaw(const Args& a, const io::Table& t, const std::vector<std::size_t>& rows, const io::Table& test,
                 const std::vector<std::size_t>& test_rows, cli::Context& ctx, nlohmann::json& out) {
  Eigen::ArrayXd shares = fit::infolaw_default_shares();
  if (!a.shares.empty()) {
    std::vector<double> v;
    std::size_t pos = 0;
    while (pos <= a.shares.size()) {
      const std::size_t end = std::min(a.shares.find(',', pos), a.shares.size());
      const auto x = io::parse_double(a.shares.substr(pos, end - pos));
      if (!x || !(*x > 0)) throw UsageError(fmt::format("bucket shares must be positive numbers, got '{}'", a.shares), "--shares");
      v.push_back(*x);
      pos = end + 1;
    }
    shares = Eigen::Map<Eigen::ArrayXd>(v.data(), static_cast<Eigen::Index>(v.size()));
  }
  const fit::InfoLawData d = fit::infolaw_data_from_table(t, a.cols, shares, true, a.sum_tolerance);
  check_not_constant(d.loss, a.input);
  if (d.loss.size() < 5)
    throw InputError(fmt::format("{} rows cannot determine the 5 InfoLaw parameters", d.loss.size()), a.input);
  fit::InfoLawFitOptions opt;
  opt.samples = a.samples;
  std::tie(opt.theta_lo, opt.theta_hi) = parse_range(a.theta_range, "--theta-range");
  std::tie(opt.lambda_lo, opt.lambda_hi) = parse_range(a.lambda_range, "--lambda-range");
  if (!(opt.lambda_lo > 0)) throw UsageError("the lambda range must be positive", "--lambda-range");
  opt.refine = !a.no_refine;
  opt.seed = ctx.common.seed;
  Stopwatch sw;
  fit::InfoLawFitResult r;
  {
    Progress bar(static_cast<std::size_t>(a.samples), "samples");
    r = fit::fit_infolaw(d, opt, &bar);
  }
  const Eigen::ArrayXd pred = fit::infolaw_predict(r.params, d);
  auto pj = [](const fit::InfoLawParams& p) {
    return nlohmann::json{{"theta", p.theta}, {"a", p.a}, {"b", p.b}, {"alpha", p.alpha}, {"beta", p.beta}};
  };
  out["law"] = "infolaw";
  out["equation"] =
      "L = alpha * info^-beta; info = sum_d exp(-theta d) M_d ln K (1 - exp(-lambda(N) R_d / ln K)); "
      "lambda(N) = a ln N + b; K_d = w_d K, M_d = min(K_d, s_d S), R_d = K_d / M_d";
  out["params"] = pj(r.params);
  std::vector<double> sh(shares.data(), shares.data() + shares.size());
  out["shares"] = sh;
  out["weight_prefix"] = a.cols.weight_prefix;
  out["stages"] = {{"spearman_info_vs_neg_loss", r.spearman},
                   {"sizes", r.sizes},
                   {"lambda_per_size", r.lambda_per_size},
                   {"staged_params", pj(r.staged)},
                   {"sse_log_staged", r.sse_log_staged},
                   {"refined", r.refined},
                   {"refine_converged", r.refine_converged},
                   {"samples", a.samples}};
  out["objective"] = r.sse_log;
  out["objective_kind"] = "sum of squared log-loss residuals";
  out["fit"] = fit_stats(d.loss, pred);
  out["rows_used"] = d.loss.size();
  out["seconds"] = sw.seconds();
  if (a.residuals) out["residuals"] = residual_rows(t, rows, d.loss, pred, a.id_col);
  if (!test_rows.empty()) {
    const fit::InfoLawData td = fit::infolaw_data_from_table(test, a.cols, shares, true, a.sum_tolerance);
    out["test"] = test_report(test, test_rows, td.loss, fit::infolaw_predict(r.params, td), a.id_col, a.test_where);
  }
  ctx.prov.extra["validation"] =
      "InfoLaw has no public run table: the implementation was checked on the formula's limits and on recovery "
      "from noise-free generated runs, not against published runs; with noisy runs theta, a and b are weakly "
      "identified (similar losses from quite different values)";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "infolaw-fit",
      "Fit a parametric loss law to a table of training runs and print its parameters as JSON.\n"
      "Laws: chinchilla (L = E + A/N^alpha + B/D^beta, Hoffmann et al. 2022, approach 3 as replicated by "
      "Epoch AI), data-constrained (Muennighoff et al. 2023), infolaw (Liu et al., ICML 2026).\n"
      "The Chinchilla-form laws minimise a Huber loss on log L with L-BFGS from every point of a start grid "
      "(threads share the starts; the best converged start wins).",
      "  infolaw-fit data/scaling/chinchilla_synthetic.csv --law chinchilla --drop-highest 5 -o chinchilla.json\n"
      "  infolaw-fit ../shared/data/scaling/datablations_runs.csv --law data-constrained --fix a=6.255414,b=7.3049974,e=0.6254804,alpha=0.3526596,beta=0.3526596\n"
      "  infolaw-fit data/scaling/infolaw_synthetic.csv --law infolaw --residuals | jq .params\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("input", a.input, "Table of runs: .csv/.tsv, .json/.jsonl, .h5[:/group], or - for stdin")
            ->required();
        app.add_option("-o,--output", a.output, "Output JSON file, *.json (- = stdout)")->capture_default_str();
        app.add_option("--law", a.law, "Law: chinchilla, data-constrained or infolaw")
            ->capture_default_str()
            ->check(CLI::IsMember({"chinchilla", "data-constrained", "infolaw"}));
        cli::add_header_flags(app, a.header, "CSV (without one the columns are c1, c2, ...)");
        app.add_option("--params-col", a.cols.role["params"], "Column of model parameters N")->capture_default_str();
        app.add_option("--tokens-col", a.cols.role["tokens"], "Column of training tokens D (InfoLaw: K)")->capture_default_str();
        app.add_option("--unique-col", a.cols.role["unique_tokens"], "Column of unique tokens U_D (data-constrained)")
            ->capture_default_str();
        app.add_option("--loss-col", a.cols.role["loss"], "Column of final loss L")->capture_default_str();
        app.add_option("--source-col", a.cols.role["source_tokens"], "Column of source size S in tokens (InfoLaw)")
            ->capture_default_str();
        app.add_option("--weight-prefix", a.cols.weight_prefix, "InfoLaw bucket weight columns are PREFIX0, PREFIX1, ...")
            ->capture_default_str();
        app.add_option("--where", a.where, "Keep rows where COLUMN OP VALUE holds (repeatable; OP: < <= > >= == !=)");
        app.add_option("--test-where", a.test_where,
                       "Hold out the rows where COLUMN OP VALUE holds (repeatable; all must hold), taken from every row (they need "
                       "not pass --where): they are not fitted, and \"test\" reports the law's error on them (mae, mre, max_ae, "
                       "max_re, residuals)");
        app.add_option("--drop-highest", a.drop_highest, "Drop the K runs with the highest loss (Epoch AI drops 5)")
            ->capture_default_str()
            ->check(cli::int_range(0, 1000000000));
        app.add_option("--huber-delta", a.huber_delta, "Huber threshold on log-loss residuals")
            ->capture_default_str()
            ->check(cli::positive());
        app.add_option("--grid", a.grid,
                       "Start grid axis NAME=LO:HI:STEP or NAME=V1|V2 (repeatable).  Defaults: chinchilla "
                       "alpha,beta=0:2:0.5, e=-1:1:0.5, a,b=0:25:5 (4,500 starts); data-constrained a,b=0:25:5, "
                       "e=-1|0|1, alpha,beta=0.25|0.5|1, rd_star,rn_star=6.67|13.3|20 (8,748 starts)");
        app.add_option("--fix", a.fix,
                       "Hold parameters fixed: NAME=VALUE,... (repeatable; a,b,e or A,B,E, alpha, beta, rd_star, rn_star)");
        app.add_option("--bootstrap", a.bootstrap, "Refit K row resamples warm-started from the optimum (at most 100000)")
            ->capture_default_str()
            ->check(cli::int_range(0, 100000));
        app.add_option("--array-task", a.array_task, "i/N with --bootstrap K: refit resamples [iK/N, (i+1)K/N) only and write them as a part to -o (one job-array task)");
        app.add_option("--bootstrap-parts", a.bootstrap_parts, "Merge the --array-task parts: the same fit, its resamples from the parts (the output is one process's)")->expected(1, -1);
        app.add_flag("--residuals", a.residuals, "Add per-row predictions and residuals (pred - loss; row = input data row)");
        app.add_option("--id-col", a.id_col, "Column naming each run, copied into --residuals when present")
            ->capture_default_str();
        app.add_option("--max-iterations", a.max_iterations, "L-BFGS iterations per start")
            ->capture_default_str()
            ->check(cli::int_range(1, 1000000));
        app.add_option("--samples", a.samples, "InfoLaw stage-1 random samples of (theta, lambda_N), at most 1e9")
            ->capture_default_str()
            ->check(cli::int_range(1, 1000000000));
        app.add_option("--theta-range", a.theta_range, "InfoLaw: uniform range LO:HI of theta")->capture_default_str();
        app.add_option("--lambda-range", a.lambda_range, "InfoLaw: log-uniform range LO:HI of lambda_N")
            ->capture_default_str();
        app.add_option("--shares", a.shares, "InfoLaw bucket shares of the source (default 0.05,0.15,0.2,0.2,0.2,0.2)");
        app.add_flag("--no-refine", a.no_refine, "InfoLaw: skip the joint L-BFGS refinement after the stages");
        app.add_option("--sum-tolerance", a.sum_tolerance, "InfoLaw: allowed |sum of weights - 1|")
            ->capture_default_str()
            ->check(cli::non_negative());
      },
      [&](cli::Context& ctx) {
        io::require_json_path(a.output);
        if ((!a.array_task.empty() || !a.bootstrap_parts.empty()) && (a.bootstrap == 0 || a.law == "infolaw"))
          throw UsageError(fmt::format("{} needs --bootstrap K and a parametric law (it splits the bootstrap's resamples)",
                                       a.array_task.empty() ? "--bootstrap-parts" : "--array-task"),
                           a.array_task.empty() ? "--bootstrap-parts" : "--array-task");
        if (!a.array_task.empty() && !a.bootstrap_parts.empty())
          throw UsageError("give --array-task (one part) or --bootstrap-parts (the merge), not both", "--bootstrap-parts");
        for (const auto& p : a.bootstrap_parts) ctx.prov.add_input(p, io::sha256_file(p));
        io::TableReadOptions ro;
        ro.header = a.header;
        const io::Table full = io::Table::read(a.input, ro);
        ctx.prov.add_input(a.input, full.sha256());
        std::vector<std::size_t> rows = io::filter_rows(full, a.where);
        std::vector<std::size_t> test_rows;
        if (!a.test_where.empty()) {
          test_rows = io::filter_rows(full, a.test_where);
          if (test_rows.empty()) throw InputError("no row matches --test-where", a.input);
          std::vector<std::size_t> kept;
          std::set_difference(rows.begin(), rows.end(), test_rows.begin(), test_rows.end(), std::back_inserter(kept));
          rows = kept;
        }
        const io::Table test = full.select_rows(test_rows);
        io::Table t = full.select_rows(rows);
        if (a.drop_highest > 0) {
          const auto keep = io::drop_largest(t, a.cols.role["loss"], static_cast<std::size_t>(a.drop_highest));
          std::vector<std::size_t> orig;
          for (auto k : keep) orig.push_back(rows[k]);
          rows = orig;
          t = full.select_rows(rows);
        }
        if (t.rows() == 0) throw InputError("no rows left after --where", a.input);
        nlohmann::json out;
        if (a.law == "infolaw") run_infolaw(a, t, rows, test, test_rows, ctx, out);
        else run_parametric(a, t, rows, test, test_rows, ctx, out);
        if (out.contains("bootstrap_part")) {  // a task's part: its resamples and provenance only
          out["meta"] = ctx.prov.to_json();
          io::write_json(a.output, out);
          return;
        }
        out["rows_dropped"] = full.rows() - t.rows() - test.rows();
        if (!test_rows.empty()) out["rows_test"] = test.rows();
        out["meta"] = ctx.prov.to_json();
        io::write_json(a.output, out);
      });
}
