// latentmoe-cost: LatentMoE's analytic cost model (parameters, decode bytes, the per-expert roofline,
// all-to-all traffic under expert parallelism) for the standard, eff and acc variants side by side.
#include <cmath>
#include <limits>
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/core.h>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/gnuplot.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "nn/moe_cost.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using nn::MoeCostConfig;

namespace {

// Every setting: its flag, its key in a --config file and where it lives (a double or an int).
struct Setting {
  const char* flag;
  const char* key;
  double MoeCostConfig::*real = nullptr;
  int MoeCostConfig::*whole = nullptr;
  const char* help;
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> s{
      {"--d", "d", &MoeCostConfig::d, nullptr, "model width d"},
      {"--latent", "latent", &MoeCostConfig::latent, nullptr, "latent width l of eff/acc (0 = d / alpha)"},
      {"--alpha", "alpha", &MoeCostConfig::alpha, nullptr, "compression d / l when --latent is 0 (the paper recommends 4)"},
      {"--experts", "experts", nullptr, &MoeCostConfig::experts, "N, the standard layer's routed experts (eff/acc: alpha N)"},
      {"--top-k", "top_k", nullptr, &MoeCostConfig::top_k, "K, routed experts per token (acc: alpha K)"},
      {"--shared", "shared", nullptr, &MoeCostConfig::shared, "S, shared experts (width d, always active)"},
      {"--m", "m", &MoeCostConfig::m, nullptr, "the routed experts' hidden width m"},
      {"--m-shared", "m_shared", &MoeCostConfig::m_shared, nullptr, "the shared experts' hidden width (0 = m)"},
      {"--layers", "layers", nullptr, &MoeCostConfig::layers, "MoE layers"},
      {"--ep", "ep", nullptr, &MoeCostConfig::ep, "expert-parallel degree (GPUs holding the experts)"},
      {"--tokens", "tokens", &MoeCostConfig::tokens, nullptr, "t, tokens in flight per layer step over the EP group"},
      {"--decode-batch", "decode_batch", &MoeCostConfig::decode_batch, nullptr, "tokens per decode step for the weight bytes read"},
      {"--flops", "flops", &MoeCostConfig::flops, nullptr, "F, FLOP/s per GPU (GB200 FP4: 1e16)"},
      {"--hbm-bw", "hbm_bw", &MoeCostConfig::hbm_bw, nullptr, "HBM bandwidth, bytes/s per GPU (GB200: 8e12)"},
      {"--link-bw", "link_bw", &MoeCostConfig::link_bw, nullptr, "all-to-all link bandwidth, bytes/s per GPU and direction (NVLink 5: 9e11)"},
      {"--weight-bytes", "weight_bytes", &MoeCostConfig::weight_bytes, nullptr, "bytes per weight (the paper's roofline counts 1 per element; FP4 is 0.5)"},
      {"--act-bytes", "act_bytes", &MoeCostConfig::act_bytes, nullptr, "bytes per activation element in the roofline"},
      {"--dispatch-bytes", "dispatch_bytes", &MoeCostConfig::dispatch_bytes, nullptr, "bytes per element dispatched to the experts (FP4: 0.5)"},
      {"--combine-bytes", "combine_bytes", &MoeCostConfig::combine_bytes, nullptr, "bytes per element combined back (BF16: 2)"},
      {"--cost-matrices", "cost_matrices", nullptr, &MoeCostConfig::cost_matrices, "matrices per expert in the expert compute C_comp (0 = the expert's own, 3 SwiGLU / 2 relu2; 1 = the paper's worked form)"},
      {"--other-params", "other_params", &MoeCostConfig::other_params, nullptr, "parameters outside the MoE layers (attention, embeddings), counted active"},
  };
  return s;
}

// The configurations of the paper's worked example and tables.
MoeCostConfig preset(const std::string& name) {
  MoeCostConfig c;  // the defaults: Qwen3-235B on GB200
  if (name == "qwen3-235b") return c;
  if (name == "latentmoe-16b") {  // Table 2, 16BT-2BA
    c.layers = 27, c.d = 2048, c.experts = 64, c.top_k = 6, c.shared = 2, c.m = 1408, c.expert = nn::ExpertType::swiglu;
    return c;
  }
  if (name == "latentmoe-95b") {  // Table 2, 95BT-8BA
    c.layers = 32, c.d = 4096, c.experts = 128, c.top_k = 6, c.shared = 2, c.m = 2688, c.expert = nn::ExpertType::relu2;
    return c;
  }
  throw UsageError(fmt::format("unknown preset '{}' (qwen3-235b, latentmoe-16b, latentmoe-95b)", name), "--preset");
}

// A --config file: an object whose keys are the settings' keys (and "expert").
void apply_config_file(MoeCostConfig& c, const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError("a cost configuration must be a JSON object", path);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = it.key();
    if (key == "meta") continue;
    if (key == "expert") {
      if (!it->is_string()) throw InputError("\"expert\" must be \"swiglu\" or \"relu2\"", path);
      try {
        c.expert = nn::parse_expert_type(it->get<std::string>());
      } catch (const UsageError& e) {
        throw InputError(e.what(), path + ": expert");
      }
      continue;
    }
    const Setting* s = nullptr;
    for (const auto& x : settings())
      if (key == x.key) s = &x;
    if (!s) throw InputError(fmt::format("unknown key \"{}\"", key), path);
    if (!it->is_number()) throw InputError(fmt::format("\"{}\" must be a number", key), path);
    if (s->real) {
      c.*(s->real) = it->get<double>();
    } else {
      const double v = it->get<double>();
      if (v != std::floor(v) || std::abs(v) > 1e9) throw InputError(fmt::format("\"{}\" must be a whole number (got {})", key, v), path);
      c.*(s->whole) = static_cast<int>(v);
    }
  }
}

nlohmann::json config_json(const MoeCostConfig& c) {
  nlohmann::json j;
  for (const auto& s : settings()) {
    if (s.real) j[s.key] = c.*(s.real);
    else j[s.key] = c.*(s.whole);
  }
  j["expert"] = nn::expert_type_name(c.expert);
  return j;
}

// The value of a cost, or NaN (written as null / an empty CSV cell) for infinity.
double finite_or_nan(double x) { return std::isfinite(x) ? x : std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

int main(int argc, char** argv) {
  MoeCostConfig flags;
  std::string preset_name, config_path, output = "-", sweep, plot, expert = "swiglu";
  std::vector<std::string> variants{"standard", "eff", "acc"};
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "latentmoe-cost",
      "The analytic cost model of LatentMoE (Elango et al. 2026, arXiv 2601.18089) for mixture-of-experts layers: the\n"
      "standard layer (N experts of width d, top-K), l-MoE_eff (experts in a latent space of width l = d / alpha behind\n"
      "shared projections W_down, W_up; alpha N experts, top-K) and l-MoE_acc (alpha N experts, top alpha K), side by side.\n"
      "Per variant and per layer: routed, shared, router and projection parameters, total and active parameters (x layers,\n"
      "+ --other-params); the weight bytes read per decode step (the expected distinct experts of --decode-batch tokens\n"
      "under uniform routing); the tokens per expert t_exp = t K / N, one expert matrix's arithmetic intensity\n"
      "2 t_exp w m / (b_w w m + b_a t_exp (w + m)) and the t_exp at which it reaches F / BW_HBM (the compute roof; null if\n"
      "never); the all-to-all bytes per GPU and layer (b_dispatch + b_combine) (N / EP) t_exp w, the experts' FLOPs\n"
      "2 c (N / EP) t_exp w m and the communication/computation time ratio (w = d, or l for the latent variants).\n"
      "Settings come from the defaults (the paper's worked example: Qwen3-235B's shape, GB200, EP 64), then --preset,\n"
      "then --config (a JSON object with the flags' names, underscores for dashes, e.g. {\"d\": 2048, \"top_k\": 6}), then\n"
      "the flags.  With --cost-matrices 1 and the defaults it gives the paper's numbers: t_exp >= 1418.8 and a ratio of\n"
      "9.04 (the fields roof_tokens and comm_comp_ratio).  --sweep latent=V,... or alpha=V,... prints one row per value\n"
      "and variant, values in increasing order (--plot draws it).  Output: a table, one row per variant, as JSON on\n"
      "stdout or -o .json/.csv/.h5, with the columns variant, alpha, latent (null for standard), experts, top_k, width,\n"
      "expert_params, routed_params, shared_params, router_params, projection_params, layer_total_params,\n"
      "layer_active_params, total_params, active_params, total_params_delta, active_params_delta (against standard),\n"
      "decode_experts, decode_weight_bytes, decode_weight_bytes_per_token, tokens_per_expert, intensity, roof_tokens\n"
      "(null in JSON, nan in CSV, when the roof is never reached), comm_bytes, comp_flops, comm_seconds, comp_seconds,\n"
      "comm_comp_ratio.  Non-integer experts per GPU (N / EP) are averages.",
      "  latentmoe-cost --cost-matrices 1 --variants standard | jq '.rows[0] | {roof_tokens, comm_comp_ratio}'\n"
      "  latentmoe-cost --preset latentmoe-95b --latent 1024 -o cost95.csv\n"
      "  latentmoe-cost --preset latentmoe-16b --sweep alpha=1,2,4,8 --plot sweep.png -o sweep.csv\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("--preset", preset_name, "Start from a configuration: qwen3-235b (the default), latentmoe-16b or latentmoe-95b (the paper's Table 2)");
        app.add_option("--config", config_path, "A JSON object of settings (keys: the flags' names with underscores, and expert)");
        for (const auto& s : settings()) {
          if (s.real) app.add_option(s.flag, flags.*(s.real), s.help);
          else app.add_option(s.flag, flags.*(s.whole), s.help);
        }
        app.add_option("--expert", expert, "Expert MLP: swiglu (3 matrices) or relu2 (squared ReLU, 2 matrices)")->check(CLI::IsMember({"swiglu", "relu2"}));
        app.add_option("--variants", variants, "Variants to cost, a comma list of standard, eff, acc")->delimiter(',')->check(CLI::IsMember({"standard", "eff", "acc"}));
        app.add_option("--sweep", sweep, "latent=V1,V2,... or alpha=V1,V2,...: one row per value and variant");
        app.add_option("--plot", plot, "With --sweep: a PNG of active parameters and all-to-all bytes per GPU and layer against the swept value");
        app.add_option("-o,--output", output, "Output table; format from the extension (- = JSON on stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        MoeCostConfig c = preset(preset_name.empty() ? "qwen3-235b" : preset_name);
        if (!config_path.empty()) {
          std::string sha;
          const nlohmann::json j = io::read_json(config_path, &sha);
          ctx.prov.add_input(config_path, sha);
          apply_config_file(c, j, config_path);
          try {  // what the file itself sets wrong is the file's error (exit 1), not a flag's
            nn::check_moe_cost_config(c);
          } catch (const UsageError& e) {
            throw InputError(e.what(), config_path);
          }
        }
        // the flags given on the command line win (a flag left at its default does not)
        auto given = [&](const std::string& flag) { return app_ptr->count(flag) > 0; };
        for (const auto& s : settings()) {
          if (!given(s.flag)) continue;
          if (s.real) c.*(s.real) = flags.*(s.real);
          else c.*(s.whole) = flags.*(s.whole);
        }
        if (given("--latent") && !given("--alpha")) c.alpha = c.d / c.latent;  // keep the two consistent in the record
        if (given("--alpha") && !given("--latent")) c.latent = 0;
        if (given("--expert")) c.expert = nn::parse_expert_type(expert);
        if (!plot.empty() && sweep.empty()) throw UsageError("--plot draws a sweep; give --sweep latent=... or alpha=...", "--plot");
        std::string sweep_name;
        std::vector<double> sweep_values;
        if (!sweep.empty()) {
          const auto eq = sweep.find('=');
          sweep_name = sweep.substr(0, eq);
          if (eq == std::string::npos || (sweep_name != "latent" && sweep_name != "alpha"))
            throw UsageError(fmt::format("--sweep takes latent=V1,V2,... or alpha=V1,V2,... (got '{}')", sweep), "--sweep");
          std::stringstream ss(sweep.substr(eq + 1));
          std::string item;
          while (std::getline(ss, item, ',')) {
            std::size_t used = 0;
            double v = 0;
            try {
              v = std::stod(item, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            if (used == 0 || used != item.size() || !(v > 0) || !std::isfinite(v))
              throw UsageError(fmt::format("--sweep: '{}' is not a positive number", item), "--sweep");
            sweep_values.push_back(v);
          }
          if (sweep_values.empty()) throw UsageError("--sweep needs at least one value", "--sweep");
          std::sort(sweep_values.begin(), sweep_values.end());  // the rows and the plot in increasing order
          sweep_values.erase(std::unique(sweep_values.begin(), sweep_values.end()), sweep_values.end());
          const char* other = sweep_name == "latent" ? "--alpha" : "--latent";
          if (given(other)) throw UsageError(fmt::format("--sweep {}=... sets the latent width itself: drop {}", sweep_name, other), other);
          for (double v : sweep_values) {  // each swept configuration must be one the model can cost
            MoeCostConfig x = c;
            if (sweep_name == "latent") x.latent = v, x.alpha = x.d / v;
            else x.alpha = v, x.latent = 0;
            try {
              nn::check_moe_cost_config(x);
              for (nn::MoeVariant mv : {nn::MoeVariant::eff, nn::MoeVariant::acc}) nn::moe_shape(x, mv);
            } catch (const UsageError& e) {
              throw UsageError(fmt::format("{}={}: {}", sweep_name, v, e.what()), "--sweep");
            }
          }
        }
        if (!plot.empty()) {
          io::require_output_extension(plot, "--plot", {".png"}, "the picture is PNG");
          io::check_distinct_outputs({{"-o", output}, {"--plot", plot}}, {config_path});
          io::require_gnuplot("--plot");
        }
        std::vector<nn::MoeVariant> vs;
        {
          std::vector<std::string> unique;
          for (const auto& v : variants)
            if (std::find(unique.begin(), unique.end(), v) == unique.end()) unique.push_back(v);
          variants = unique;
        }
        for (const auto& v : variants)
          vs.push_back(v == "standard" ? nn::MoeVariant::standard : v == "eff" ? nn::MoeVariant::eff : nn::MoeVariant::acc);
        std::vector<MoeCostConfig> configs;
        if (sweep_values.empty()) configs.push_back(c);
        for (double v : sweep_values) {
          MoeCostConfig x = c;
          if (sweep_name == "latent") x.latent = v, x.alpha = x.d / v;
          else x.alpha = v, x.latent = 0;
          configs.push_back(x);
        }
        nn::check_moe_cost_config(c);
        // rows: one per configuration and variant
        std::vector<std::string> names;
        std::map<std::string, std::vector<double>> cols;
        const std::vector<std::string> order{"sweep_value", "alpha", "latent", "experts", "top_k", "width", "expert_params", "routed_params",
                                             "shared_params", "router_params", "projection_params", "layer_total_params",
                                             "layer_active_params", "total_params", "active_params", "total_params_delta",
                                             "active_params_delta", "decode_experts", "decode_weight_bytes", "decode_weight_bytes_per_token",
                                             "tokens_per_expert", "intensity", "roof_tokens", "comm_bytes", "comp_flops", "comm_seconds",
                                             "comp_seconds", "comm_comp_ratio"};
        std::vector<std::array<double, 3>> picture;  // x, active params, all-to-all bytes per row
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const MoeCostConfig& x = configs[i];
          const nn::MoeVariantCost base = nn::moe_cost(x, nn::MoeVariant::standard);
          for (nn::MoeVariant v : vs) {
            const nn::MoeVariantCost r = nn::moe_cost(x, v);
            names.push_back(nn::moe_variant_name(v));
            const double val = sweep_values.empty() ? std::numeric_limits<double>::quiet_NaN() : sweep_values[i];
            const double lat = v == nn::MoeVariant::standard ? std::numeric_limits<double>::quiet_NaN() : nn::latent_width(x);
            const std::vector<double> row{val, r.alpha, lat, double(r.shape.experts), double(r.shape.top_k), r.shape.width,
                                          r.expert_params, r.routed_params, r.shared_params, r.router_params, r.projection_params,
                                          r.layer_total, r.layer_active, r.total_params, r.active_params, r.total_params - base.total_params,
                                          r.active_params - base.active_params, r.decode_experts, r.decode_weight_bytes,
                                          r.decode_weight_bytes / x.decode_batch, r.tokens_per_expert, r.intensity,
                                          finite_or_nan(r.roof_tokens), r.comm_bytes, r.comp_flops, r.comm_seconds, r.comp_seconds,
                                          r.comm_comp_ratio};
            for (std::size_t k = 0; k < order.size(); ++k) cols[order[k]].push_back(row[k]);
            picture.push_back({val, r.active_params, r.comm_bytes});
          }
        }
        io::Table t;
        t.set_column("variant", names);
        for (const auto& k : order)
          if (k != "sweep_value" || !sweep_values.empty()) t.set_column(k == "sweep_value" ? sweep_name : k, cols[k]);
        ctx.prov.extra["config"] = config_json(c);
        if (!sweep.empty()) ctx.prov.extra["sweep"] = sweep;
        std::optional<io::AtomicFile> png;  // committed with the table, so that a failure leaves neither
        if (!plot.empty()) {
          png.emplace(plot);
          std::string data;
          for (std::size_t v = 0; v < vs.size(); ++v) {
            for (std::size_t i = 0; i < configs.size(); ++i) {
              const auto& p = picture[i * vs.size() + v];
              data += fmt::format("{} {} {}\n", p[0], p[1] / 1e9, p[2] / 1e6);
            }
            data += "\n\n";
          }
          io::gnuplot_png(
              *png, data,
              [&](const std::string& dat) {
                std::string s = fmt::format("set multiplot layout 1,2 title 'latentmoe-cost sweep over {}'\nset xlabel '{}'\nset logscale x 2\n"
                                            "set key below\nset ylabel 'active parameters (billions)'\nplot ",
                                            sweep_name, sweep_name == "latent" ? "latent width l" : "alpha = d / l");
                for (std::size_t v = 0; v < vs.size(); ++v)
                  s += fmt::format("{}{} index {} using 1:2 with linespoints title '{}'", v ? ", " : "", dat, v, variants[v]);
                s += "\nset ylabel 'all-to-all MB per GPU and layer'\nplot ";
                for (std::size_t v = 0; v < vs.size(); ++v)
                  s += fmt::format("{}{} index {} using 1:3 with linespoints dashtype {} title '{}'", v ? ", " : "", dat, v, v + 1, variants[v]);
                return s + "\nunset multiplot\n";
              },
              1200, 500);
        }
        t.write(output, &ctx.prov);
        if (png) png->commit();
      });
}
