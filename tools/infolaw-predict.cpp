// infolaw-predict: evaluate a fitted loss law (infolaw-fit output) on query rows, or give
// the compute-optimal model size and token count for FLOP budgets.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "cli/run_tool.hpp"
#include "fit/infolaw.hpp"
#include "fit/law.hpp"
#include "fit/law_data.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

using namespace icmlkit;

namespace {

struct Args {
  std::string params_path, query, output = "-";
  std::vector<double> compute;
  bool header = true;
  fit::ColumnMap cols;
  std::string pred_col = "pred_loss";
};

double get_number(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number()) throw InputError(fmt::format("missing numeric parameter '{}'", key), where);
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) throw InputError(fmt::format("parameter '{}' is not finite", key), where);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "infolaw-predict",
      "Predict loss from a fitted law (the JSON that infolaw-fit writes) for the rows of a query table, or,\n"
      "with --compute, the compute-optimal parameters N and tokens D for FLOP budgets C = 6 N D under the\n"
      "law's Chinchilla form (Hoffmann et al. 2022, eq. 4).",
      "  infolaw-fit data/scaling/chinchilla_synthetic.csv -o fit.json && infolaw-predict fit.json data/scaling/chinchilla_synthetic.csv -o predicted.csv\n"
      "  infolaw-predict fit.json --compute 1e21 --compute 5.76e23\n"
      "  echo '[{\"params\":6.34e9,\"tokens\":2.42e11}]' | infolaw-predict fit.json -\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("params", a.params_path, "Fitted parameters (JSON from infolaw-fit)")->required();
        app.add_option("query", a.query, "Query table (.csv/.json/.jsonl/.h5, - for stdin) with the law's input columns");
        app.add_option("-o,--output", a.output, "Output file; format from the extension (- = JSON on stdout)")
            ->capture_default_str();
        app.add_option("--compute", a.compute, "FLOP budget C (repeatable): print N_opt, D_opt and the loss there")
            ->check(cli::positive());
        cli::add_header_flags(app, a.header, "CSV (without one the columns are c1, c2, ...)");
        app.add_option("--params-col", a.cols.role["params"], "Column of model parameters N")->capture_default_str();
        app.add_option("--tokens-col", a.cols.role["tokens"], "Column of training tokens D")->capture_default_str();
        app.add_option("--unique-col", a.cols.role["unique_tokens"], "Column of unique tokens U_D")->capture_default_str();
        app.add_option("--source-col", a.cols.role["source_tokens"], "Column of source size S (InfoLaw)")
            ->capture_default_str();
        app.add_option("--pred-col", a.pred_col, "Name of the added prediction column")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        if (a.query.empty() && a.compute.empty()) throw UsageError("give a query table or --compute");
        if (!a.query.empty() && !a.compute.empty()) throw UsageError("give either a query table or --compute, not both");
        std::string json_sha;
        const nlohmann::json pj = io::read_json(a.params_path, &json_sha);
        ctx.prov.add_input(a.params_path, json_sha);
        if (!pj.is_object() || !pj.contains("law") || !pj["law"].is_string() || !pj.contains("params") ||
            !pj["params"].is_object())
          throw InputError("not a parameter file: expected an object with \"law\" and \"params\"", a.params_path);
        const std::string law_name = pj["law"];
        const auto& params = pj["params"];
        const auto known = fit::law_names();
        if (std::find(known.begin(), known.end(), law_name) == known.end())
          throw InputError(fmt::format("unknown law '{}' (known: chinchilla, data-constrained, infolaw)", law_name),
                           a.params_path);
        if (pj.contains("meta")) ctx.prov.extra["fit_meta"] = pj["meta"];

        if (!a.compute.empty()) {
          if (law_name == "infolaw") throw UsageError("--compute needs a Chinchilla-form law (chinchilla or data-constrained)");
          const auto law = fit::make_law(law_name);
          const Eigen::VectorXd p = law->from_json(params, a.params_path);
          if (!(p[3] > 0 && p[4] > 0))
            throw InputError("the compute-optimal allocation needs alpha > 0 and beta > 0", a.params_path);
          nlohmann::json rows = nlohmann::json::array();
          for (double c : a.compute) {
            const auto o = fit::compute_optimal(std::exp(p[0]), std::exp(p[1]), std::exp(p[2]), p[3], p[4], c);
            if (!std::isfinite(o.params) || !std::isfinite(o.tokens) || !std::isfinite(o.loss))
              throw InputError(fmt::format("the parameters give no finite optimum for C = {:g}", c), a.params_path);
            rows.push_back({{"flops", o.flops}, {"params", o.params}, {"tokens", o.tokens}, {"loss", o.loss},
                            {"tokens_per_param", o.tokens / o.params}});
          }
          nlohmann::json out{{"law", law_name},
                             {"note", "compute-optimal N, D for C = 6ND under L = E + A/N^alpha + B/D^beta"},
                             {"rows", rows},
                             {"meta", ctx.prov.to_json()}};
          io::write_json(a.output, out);
          return;
        }

        io::TableReadOptions ro;
        ro.header = a.header;
        io::Table t = io::Table::read(a.query, ro);
        if (t.has(a.pred_col))
          throw UsageError(fmt::format("the query file already has a column '{}'; name the predictions otherwise", a.pred_col), "--pred-col");
        ctx.prov.add_input(a.query, t.sha256());
        Eigen::ArrayXd pred;
        if (law_name == "infolaw") {
          fit::InfoLawParams p{get_number(params, "theta", a.params_path), get_number(params, "a", a.params_path),
                               get_number(params, "b", a.params_path), get_number(params, "alpha", a.params_path),
                               get_number(params, "beta", a.params_path)};
          Eigen::ArrayXd shares = fit::infolaw_default_shares();
          if (pj.contains("shares")) {
            if (!pj["shares"].is_array() || pj["shares"].empty())
              throw InputError("\"shares\" must be a non-empty array of positive numbers", a.params_path);
            std::vector<double> v;
            for (const auto& e : pj["shares"]) {
              if (!e.is_number() || !std::isfinite(e.get<double>()) || !(e.get<double>() > 0))
                throw InputError("\"shares\" must be a non-empty array of positive numbers", a.params_path);
              v.push_back(e.get<double>());
            }
            shares = Eigen::Map<const Eigen::ArrayXd>(v.data(), static_cast<Eigen::Index>(v.size()));
          }
          if (pj.contains("weight_prefix") && pj["weight_prefix"].is_string()) a.cols.weight_prefix = pj["weight_prefix"];
          const auto d = fit::infolaw_data_from_table(t, a.cols, shares, false);
          pred = fit::infolaw_predict(p, d);
          for (Eigen::Index i = 0; i < pred.size(); ++i)
            if (!std::isfinite(pred[i]))
              throw InputError("lambda(N) = a ln N + b is not positive for this model size", t.where(static_cast<std::size_t>(i)));
        } else {
          const auto law = fit::make_law(law_name);
          const Eigen::VectorXd p = law->from_json(params, a.params_path);
          const auto d = fit::law_data_from_table(*law, t, a.cols, false);
          Eigen::ArrayXd logs;
          if (!law->log_predict(p.data(), d, logs, nullptr))
            throw InputError("parameters outside the law's domain (alpha, beta, rd_star, rn_star must be > 0)",
                             a.params_path);
          pred = law->predict(p.data(), d);
          for (Eigen::Index i = 0; i < pred.size(); ++i)
            if (!std::isfinite(pred[i]))
              throw InputError(fmt::format("the parameters of {} give a non-finite prediction", a.params_path),
                               t.where(static_cast<std::size_t>(i)));
        }
        t.set_column(a.pred_col, std::vector<double>(pred.data(), pred.data() + pred.size()));
        t.write(a.output, &ctx.prov);
      });
}
