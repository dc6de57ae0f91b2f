// mixlaw-optimize: the mixture minimising a weighted sum of predicted domain losses at a given
// model size and token budget, under a law fitted by mixlaw-fit.
#include <fmt/core.h>

#include <filesystem>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "fit/mix_optimize.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

#include <cmath>
#include <limits>

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string fit_path, output = "-", law, domain_weights, lower, upper;
  double params = 0, tokens = 0;
  int check_samples = 0;
  cli::ToolInfo info{
      "mixlaw-optimize",
      "Find the data mixture h on the simplex (with optional per-domain bounds) that minimises sum_i v_i L_i(h)\n"
      "at model size N (millions) and D tokens (billions) under a fitted mixing law.  Method: projected\n"
      "gradient descent with Armijo backtracking onto the bounded simplex, from the uniform mixture and each\n"
      "domain's corner (the law is not convex in h); --check-samples compares with random mixtures.",
      "  mixlaw-optimize fit.json --params 1000 --tokens 25\n"
      "  mixlaw-optimize fit.json --params 1000 --tokens 25 --lower 0.01 --upper github=0.2 --domain-weights pile_cc=2\n"
      "  mixlaw-optimize fit.json --params 100 --tokens 10 --check-samples 100000 | jq .mixture\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("fit", fit_path, "mixlaw-fit result (JSON)")->required();
        app.add_option("-o,--output", output, "Output JSON file (- = stdout)")->capture_default_str();
        app.add_option("--law", law, "Which fitted law to use when the file holds several (default: the only one, else capacity-noise, the paper's law)");
        app.add_option("--params", params, "Model size N (millions of parameters); needed by the capacity laws")->check(cli::positive());
        app.add_option("--tokens", tokens, "Training tokens D (billions); needed by the capacity laws")->check(cli::positive());
        app.add_option("--domain-weights", domain_weights,
                       "Objective weights v: V for all, or dom=V,... (unnamed: 1/K over domains the fit observed)");
        app.add_option("--lower", lower, "Lower bounds: V or dom=V,... (default 0)");
        app.add_option("--upper", upper, "Upper bounds: V or dom=V,... (default 1)");
        app.add_option("--check-samples", check_samples, "Also evaluate this many random feasible mixtures")
            ->check(cli::int_range(0, 100000000));
      },
      [&](cli::Context& ctx) {
        std::string json_sha;
        const nlohmann::json j = io::read_json(fit_path, &json_sha);
        ctx.prov.add_input(fit_path, json_sha);
        io::require_json_path(output);
        const auto f = fit::load_fitted_mixlaw(j, law, fit_path);
        if (j.contains("meta")) ctx.prov.extra["fit_meta"] = j["meta"];
        const Eigen::Index K = static_cast<Eigen::Index>(f.domains.size());
        if (f.law->uses_scale()) {
          if (!(params > 0)) throw UsageError(fmt::format("the {} law needs the model size N", f.law->name()), "--params");
          if (!(tokens > 0)) throw UsageError(fmt::format("the {} law needs the training tokens D", f.law->name()), "--tokens");
        } else {
          params = params > 0 ? params : 1;  // unused by this law
          tokens = tokens > 0 ? tokens : 1;
        }
        fit::MixOptimizeOptions opt;
        opt.lower = fit::parse_domain_values(lower, f.domains, 0.0, "--lower");
        opt.upper = fit::parse_domain_values(upper, f.domains, 1.0, "--upper");
        if ((opt.lower < 0).any() || (opt.upper > 1).any() || (opt.lower > opt.upper).any() || opt.lower.sum() > 1 ||
            opt.upper.sum() < 1)
          throw UsageError("bounds must satisfy 0 <= lower <= upper <= 1, sum(lower) <= 1 <= sum(upper)", "--lower/--upper");
        const Eigen::ArrayXd v = fit::objective_weights(f, domain_weights, "--domain-weights");
        const auto best = fit::optimize_mixture(*f.law, f.params, params, tokens, v, opt);
        nlohmann::ordered_json mix, losses;
        Eigen::ArrayXd g;
        for (Eigen::Index i = 0; i < K; ++i) mix[f.domains[static_cast<std::size_t>(i)]] = best.h[i];
        for (Eigen::Index i = 0; i < K; ++i) {
          if (!f.scored[static_cast<std::size_t>(i)]) continue;  // no fitted prediction for unobserved domains
          Eigen::ArrayXd e = Eigen::ArrayXd::Zero(K);
          e[i] = 1;
          const double li = f.law->weighted_loss_grad(f.params.data(), best.h, params, tokens, e, nullptr);
          if (!(li > 0)) log::warn("predicted loss of '{}' at the optimum is {} (the law extrapolates badly here)",
                                   f.domains[static_cast<std::size_t>(i)], li);
          losses[f.domains[static_cast<std::size_t>(i)]] = li;
        }
        nlohmann::json out{{"law", f.law->name()},
                           {"params", f.law->uses_scale() ? nlohmann::json(params) : nlohmann::json()},
                           {"tokens", f.law->uses_scale() ? nlohmann::json(tokens) : nlohmann::json()},
                           {"objective", best.objective},
                           {"objective_kind", "sum_i v_i L_i(h)"},
                           {"method", "projected gradient descent with Armijo backtracking on the bounded simplex"},
                           {"starts", best.starts},
                           {"iterations", best.iterations}};
        out["mixture"] = nlohmann::json::parse(mix.dump());
        out["losses"] = nlohmann::json::parse(losses.dump());
        if (check_samples > 0) {
          // Random feasible mixtures: uniform on the simplex (normalised exponentials), rejected
          // outside the bounds; the best is reported next to the optimum.
          Rng rng(ctx.common.seed);
          double sampled = std::numeric_limits<double>::infinity();
          long accepted = 0;
          for (long s = 0; s < check_samples * 100L && accepted < check_samples; ++s) {
            Eigen::ArrayXd h(K);
            for (Eigen::Index i = 0; i < K; ++i) h[i] = -std::log(1 - rng.uniform());
            h /= h.sum();
            if ((h < opt.lower).any() || (h > opt.upper).any()) continue;
            ++accepted;
            sampled = std::min(sampled, f.law->weighted_loss_grad(f.params.data(), h, params, tokens, v, nullptr));
          }
          out["check"] = {{"samples_requested", check_samples}, {"samples", accepted}};
          if (accepted == 0) {
            log::warn("no random mixture satisfied the bounds in {} draws; nothing was checked", check_samples * 100L);
            out["check"]["best_sampled_objective"] = nullptr;
            out["check"]["optimum_not_worse"] = nullptr;
          } else {
            if (accepted < check_samples)
              log::warn("only {} of {} random mixtures satisfied the bounds", accepted, check_samples);
            out["check"]["best_sampled_objective"] = sampled;
            out["check"]["optimum_not_worse"] = best.objective <= sampled + 1e-12;
          }
          if (accepted > 0 && best.objective > sampled + 1e-12)
            log::warn("a random mixture beats the optimiser ({} < {}); the law may have several basins", sampled, best.objective);
        }
        out["meta"] = ctx.prov.to_json();
        io::write_json(output, out);
      });
}
