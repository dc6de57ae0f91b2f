// mixlaw-predict: per-domain and weighted loss of mixtures under a fitted mixing law.
#include <fmt/core.h>

#include "cli/run_tool.hpp"
#include "fit/mix_data.hpp"
#include "fit/mix_optimize.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string fit_path, query, output = "-", law, weight_pattern, params_col, tokens_col, domain_weights;
  double params = 0, tokens = 0;
  bool header = true;
  cli::ToolInfo info{
      "mixlaw-predict",
      "Predict each domain's loss, and their weighted sum, for mixtures under a law fitted by mixlaw-fit.\n"
      "Adds columns pred_<domain> for every domain whose losses the fit observed, and pred_weighted\n"
      "(sum_i v_i L_i; v from --domain-weights: V for all, or dom=V,... with unnamed domains at the default\n"
      "1/K over observed domains).",
      "  mixlaw-fit data/scaling/mixture_synthetic.csv --params 100 --tokens 10 --law exponential -o fit.json && mixlaw-predict fit.json data/scaling/mixture_synthetic.csv --params 100 --tokens 10 -o pred.csv\n"
      "  mixlaw-predict fit.json mixtures.csv --params 1000 --tokens 25 --domain-weights web=2,code=1,books=1\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("fit", fit_path, "mixlaw-fit result (JSON)")->required();
        app.add_option("mixtures", query, "Table of mixtures (weight columns per --weight-pattern); - for stdin")->required();
        app.add_option("-o,--output", output, "Output table; format from the extension (- = JSON on stdout)")->capture_default_str();
        app.add_option("--law", law, "Which fitted law to use when the file holds several (default: the only one, else capacity-noise, the paper's law)");
        app.add_option("--weight-pattern", weight_pattern, "Weight column names, {} = domain (default: the fit's, else h_{})");
        app.add_option("--params-col", params_col, "Column of model size N (millions; default: the fit's column when the table has it)");
        app.add_option("--tokens-col", tokens_col, "Column of tokens D (billions; default: the fit's column when the table has it)");
        app.add_option("--params", params, "Constant N (millions); the capacity laws only")->check(cli::positive());
        app.add_option("--tokens", tokens, "Constant D (billions); the capacity laws only")->check(cli::positive());
        app.add_option("--domain-weights", domain_weights, "Weights v of pred_weighted: V or dom=V,...");
        cli::add_header_flags(app, header, "CSV");
      },
      [&](cli::Context& ctx) {
        std::string json_sha;
        const nlohmann::json j = io::read_json(fit_path, &json_sha);
        ctx.prov.add_input(fit_path, json_sha);
        const auto f = fit::load_fitted_mixlaw(j, law, fit_path);
        if (j.contains("meta")) ctx.prov.extra["fit_meta"] = j["meta"];
        ctx.prov.extra["law"] = f.law->name();
        io::TableReadOptions ro;
        ro.header = header;
        io::Table t = io::Table::read(query, ro);
        ctx.prov.add_input(query, t.sha256());
        // Columns: the flags, else what the fit read (stored in its JSON), else the defaults.
        const nlohmann::json stored = j.value("columns", nlohmann::json::object());
        auto from_fit = [&](const std::string& given, const char* key, const std::string& fallback) {
          if (!given.empty()) return given;
          const std::string s = stored.is_object() && stored.contains(key) && stored[key].is_string() ? stored[key].get<std::string>() : "";
          return s.empty() ? fallback : s;
        };
        fit::MixColumns cols;
        cols.weight_pattern = from_fit(weight_pattern, "weight_pattern", "h_{}");
        cols.params_col = from_fit(params_col, "params_col", "");
        cols.tokens_col = from_fit(tokens_col, "tokens_col", "");
        if (params > 0 || !t.has(cols.params_col)) cols.params_col = params_col;  // a constant, or a column the table lacks
        if (tokens > 0 || !t.has(cols.tokens_col)) cols.tokens_col = tokens_col;
        cols.params = params;
        cols.tokens = tokens;
        if (!f.law->uses_scale()) {  // N and D are not used: any value will do
          if (cols.params_col.empty() && !(cols.params > 0)) cols.params = 1;
          if (cols.tokens_col.empty() && !(cols.tokens > 0)) cols.tokens = 1;
        }
        const fit::MixData d = fit::mix_queries_from_table(t, f.domains, cols);
        const Eigen::Index n = d.h.rows(), K = d.h.cols();
        const Eigen::ArrayXd v = fit::objective_weights(f, domain_weights, "--domain-weights");
        Eigen::ArrayXXd pred;
        if (!f.law->predict(f.params.data(), d, pred))
          throw InputError("the fitted parameters give no finite prediction here (is N larger than H?)", fit_path);
        for (Eigen::Index i = 0; i < K; ++i)
          if (f.scored[static_cast<std::size_t>(i)])  // unobserved domains have no fitted prediction
            t.set_column("pred_" + f.domains[static_cast<std::size_t>(i)],
                       std::vector<double>(pred.col(i).data(), pred.col(i).data() + n));
        const Eigen::ArrayXd weighted = (pred.matrix() * v.matrix()).array();
        t.set_column("pred_weighted", std::vector<double>(weighted.data(), weighted.data() + n));
        t.write(output, &ctx.prov);
      });
}
