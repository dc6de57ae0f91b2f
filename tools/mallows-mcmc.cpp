// mallows-mcmc: Metropolis-Hastings for the Bayesian Mallows model (Vitelli et al. 2018), the
// sampler of the BayesMallows R package and the baseline of Pseudo-Mallows (Liu et al., ICML 2026).
#include <fmt/core.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include "cli/count.hpp"
#include "io/atomic_file.hpp"
#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "rank/partition.hpp"
#include "rank/exact.hpp"
#include "rank/mcmc.hpp"
#include "rank/summary.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string input, output = "-", metric = "footrule", missing = "fail", error_model = "none", rho_init = "random", log_z_query;
  bool pairwise = false, header = false, implied = false, exact = false;
  int items = 0, simulate = 0;
  CLI::App* app_ptr = nullptr;
  rank::McmcOptions o;
  rank::DrawOutputs outs;
  cli::ToolInfo info{
      "mallows-mcmc",
      "Sample the Bayesian Mallows posterior of the consensus ranking rho and the scale alpha\n"
      "(likelihood exp(-(alpha/n) d(R_j, rho)) / Z_n(alpha), uniform prior on rho, exponential(lambda) prior\n"
      "on alpha) by Metropolis-Hastings: leap-and-shift for rho, a log-normal random walk for alpha,\n"
      "augmentation of missing ranks and of pairwise preferences (optionally with the Bernoulli error\n"
      "model).  Input: a CSV of ranks without header, one assessor per line (potato_visual.csv), or with\n"
      "--pairwise a CSV with columns assessor,bottom_item,top_item (beach_preferences.csv).",
      "  mallows-mcmc ../shared/data/rankings/potato_visual.csv --iterations 20000 --burnin 2000 --chains 4 | jq .cp_consensus\n"
      "  mallows-mcmc ../shared/data/rankings/beach_preferences.csv --pairwise --iterations 20000 --samples beach.h5\n"
      "  mallows-mcmc ../shared/data/rankings/bernoulli_data.csv --pairwise --error-model bernoulli | jq .theta\n"
      "  mallows-mcmc --log-z 10:3 --metric kendall | jq .log_z\n"
      "  mallows-mcmc --simulate 20 --items 20 --alpha 2 -o sim.csv   # 20 rankings drawn exactly from a Mallows model\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("input", input, "Rank CSV (no header) or, with --pairwise, preference CSV; - = stdin");
        app.add_option("--log-z", log_z_query, "Only print log Z_n(alpha) for --metric as JSON, given N:ALPHA (no input): exact where an\n"
                                               "exact method covers n (\"exact\": true), else an importance-sampling estimate with its se and ESS");
        app.add_option("--simulate", simulate, "Only draw this many rankings exactly from the Mallows model with consensus\n"
                                               "rho0 = (1, ..., --items), scale --alpha and --metric (footrule, spearman or hamming; subset DP,\n"
                                               "--items <= 24) and write them to -o FILE.csv (the input format, no header; provenance in\n"
                                               "FILE.csv.meta.json)")->transform(cli::count(1, 10000000));
        app.add_flag("--pairwise", pairwise, "Input is pairwise preferences (assessor,bottom_item,top_item)");
        app.add_option("--items", items, "Number of items for --pairwise (default: the largest item seen) or --simulate")->check(cli::int_range(2, 1000));
        cli::add_header_flags(app, header, "Rank CSV");
        app.add_option("--missing", missing, "Missing ranks (empty, NA or 0): augment, fail or omit the assessor")
            ->capture_default_str()->check(CLI::IsMember({"augment", "fail", "omit"}));
        app.add_flag("--as-pairwise", implied, "Fit a rank CSV through the pairwise preferences it implies");
        app.add_option("--metric", metric, "footrule, spearman, kendall, cayley, hamming or ulam")
            ->capture_default_str()->check(CLI::IsMember({"footrule", "spearman", "kendall", "cayley", "hamming", "ulam"}));
        app.add_option("--error-model", error_model, "Pairwise data: none (preferences must be acyclic) or bernoulli")
            ->capture_default_str()->check(CLI::IsMember({"none", "bernoulli"}));
        app.add_option("--iterations", o.iterations, "MCMC iterations per chain, burn-in included")->capture_default_str()->transform(cli::count(1, 100000000));
        app.add_option("--burnin", o.burnin, "Burn-in iterations discarded")->capture_default_str()->transform(cli::count(0, 100000000));
        app.add_option("--thin", o.thin, "Keep every thin-th draw")->capture_default_str()->check(cli::int_range(1, 1000000));
        app.add_option("--chains", o.chains, "Independent chains (random starts), run in parallel")->capture_default_str()->check(cli::int_range(1, 1000));
        app.add_option("-L,--leap-size", o.leap_size, "Leap size L of leap-and-shift")->capture_default_str()->check(cli::int_range(1, 1000));
        app.add_option("--alpha", o.alpha_init, "Starting alpha (the fixed value with --fix-alpha)")->capture_default_str()->check(cli::positive());
        app.add_flag("--fix-alpha", o.fix_alpha, "Keep alpha fixed");
        app.add_option("--rho-init", rho_init, "Starting rho: random (BayesMallows' default; dispersed starts for R-hat) or data (mean-rank / wins-minus-losses order)")
            ->capture_default_str()->check(CLI::IsMember({"random", "data"}));
        app.add_option("--alpha-sd", o.alpha_prop_sd, "sd of the log-normal random walk on alpha")->capture_default_str()->check(cli::positive());
        app.add_option("--lambda", o.lambda, "Rate of the exponential prior on alpha")->capture_default_str()->check(cli::positive());
        app.add_option("--alpha-jump", o.alpha_jump, "Update alpha every this many iterations")->capture_default_str()->check(cli::int_range(1, 1000000));
        app.add_option("--aug-moves", o.aug_moves, "Augmentation proposals per assessor per iteration")->capture_default_str()->check(cli::int_range(1, 100000));
        app.add_option("--kappa1", o.kappa1, "Bernoulli model: Beta prior shape 1 of theta (truncated to [0, 0.5])")->capture_default_str()->check(cli::positive());
        app.add_option("--kappa2", o.kappa2, "Bernoulli model: Beta prior shape 2 of theta")->capture_default_str()->check(cli::positive());
        app.add_option("--is-samples", o.is_samples, "Importance samples per log Z grid node (only where no exact method)")->capture_default_str()->transform(cli::count(100, 100000000));
        app.add_flag("--exact", exact, "Also compute the exact rho marginals by the subset DP (fixed alpha, complete data, item-wise metric, n <= 24) and report the max total-variation distance");
        app.add_option("-o,--output", output, "Summary JSON (- = stdout)")->capture_default_str();
        app.add_option("--samples", outs.samples, "Posterior draws, HDF5: /rho [draws, items] (1-based ranks), /alpha, /chain, /marginals");
        app.add_option("--marginals", outs.marginals, "Item-by-rank marginals, .csv (item,rank,probability) or .h5");
        app.add_option("--heatmap", outs.heatmap, "PNG heat map of the marginals (needs gnuplot)");
      },
      [&](cli::Context& ctx) {
        o.metric = rank::parse_metric(metric, "--metric");
        if (simulate > 0) {
          if (!input.empty()) throw UsageError("--simulate reads no input", input);
          if (items < 2) throw UsageError("--simulate needs --items N (2..24)", "--items");
          if (items > rank::subset_dp_max_n)
            throw UsageError(fmt::format("--simulate draws exactly by the subset DP: --items <= {}", rank::subset_dp_max_n), "--items");
          if (!rank::is_itemwise(o.metric)) throw UsageError("--simulate needs an item-wise metric: footrule, spearman or hamming", "--metric");
          io::require_output_extension(output, "-o", {".csv"}, "--simulate writes a rank CSV");
          rank::Perm rho0(static_cast<std::size_t>(items));
          std::iota(rho0.begin(), rho0.end(), 0);
          Rng rng(ctx.common.seed);
          if (app_ptr->count("--alpha") == 0) throw UsageError("--simulate needs the model's --alpha (the MCMC starting value is no default for it)");
          for (const char* flag : {"--iterations", "--burnin", "--thin", "--chains", "--leap-size", "--fix-alpha", "--missing", "--error-model"})
            if (app_ptr->count(flag) > 0) throw UsageError(fmt::format("{} is not used by --simulate (it draws exactly, without MCMC)", flag));
          const rank::RankMatrix R = rank::simulate_mallows(rho0, o.alpha_init, simulate, o.metric, rng);
          std::string text;
          for (Eigen::Index j = 0; j < R.rows(); ++j)
            for (int i = 0; i < items; ++i) text += fmt::format("{}{}", R(j, i) + 1, i + 1 < items ? ',' : '\n');
          ctx.prov.extra["simulation"] = {{"model", "Mallows"}, {"metric", metric}, {"alpha", o.alpha_init}, {"items", items},
                                          {"assessors", simulate}, {"rho0", "1..items"}, {"sampler", "exact (subset DP)"}};
          // Both files are staged before either is renamed, so a failure leaves neither.
          io::AtomicFile data(output), meta(output + ".meta.json");
          for (auto [f, body] : {std::pair{&data, text}, std::pair{&meta, nlohmann::json{{"meta", ctx.prov.to_json()}}.dump(2) + "\n"}}) {
            std::ofstream os(f->temp_path(), std::ios::binary);
            os << body;
            if (!os.flush()) throw RuntimeError("cannot write output file", f->target().string());
          }
          meta.commit();
          data.commit();
          return;
        }
        io::require_json_path(output);
        rank::check_draw_outputs(outs);
        io::check_distinct_outputs({{"-o", output}, {"--samples", outs.samples}, {"--marginals", outs.marginals}, {"--heatmap", outs.heatmap}},
                                   {input});
        if (!log_z_query.empty()) {
          if (!input.empty()) throw UsageError("--log-z reads no input (it evaluates the partition function alone)", input);
          const auto colon = log_z_query.find(':');
          const auto nn = colon == std::string::npos ? std::nullopt : io::parse_double(log_z_query.substr(0, colon));
          const auto aa = colon == std::string::npos ? std::nullopt : io::parse_double(log_z_query.substr(colon + 1));
          if (!nn || !aa || *nn < 1 || *nn > 100000 || *nn != std::floor(*nn) || !(*aa >= 0) || !std::isfinite(*aa))
            throw UsageError("give N:ALPHA with an integer N >= 1 and ALPHA >= 0", "--log-z " + log_z_query);
          const int qn = static_cast<int>(*nn);
          nlohmann::json out{{"n", qn}, {"alpha", *aa}, {"metric", metric}};
          if (rank::log_z_exact(qn, o.metric)) {
            if (o.metric == rank::Metric::spearman && qn > 18)
              log::info("exact Spearman log Z by the dynamic programme over all 2^{} item subsets: {:.1e} steps", qn,
                        std::ldexp(static_cast<double>(qn), qn));
            out["log_z"] = rank::log_z(qn, *aa, o.metric);
            out["method"] = rank::PartitionFunction(qn, o.metric).method();
            out["exact"] = true;
          } else {
            // No exact method at this n: an importance-sampling estimate (as BayesMallows beyond its
            // exact tables), refused with a hint when out of reach, with a progress line when slow.
            Rng rng(ctx.common.seed);
            const auto e = rank::log_z_importance(qn, *aa, o.metric, o.is_samples, rng, ctx.common.threads);
            out["log_z"] = e.value;
            out["se"] = e.se;
            out["ess"] = e.ess;
            out["samples"] = o.is_samples;
            out["method"] = "importance sampling";
            out["exact"] = false;
            if (e.ess < 100)
              log::warn("log Z is an importance-sampling estimate with an effective sample size of {:.1f} of {}: its "
                        "standard error is unreliable; raise --is-samples", e.ess, o.is_samples);
          }
          out["meta"] = ctx.prov.to_json();
          io::write_json(output, out);
          return;
        }
        if (input.empty()) throw UsageError("an input file is required", "input");
        o.error_model = error_model == "bernoulli" ? rank::ErrorModel::bernoulli : rank::ErrorModel::none;
        o.seed = ctx.common.seed;
        o.rho_init_data = rho_init == "data";
        o.threads = ctx.common.threads;
        if (o.burnin >= o.iterations) throw UsageError(fmt::format("burn-in ({}) must be below the iterations ({})", o.burnin, o.iterations), "--burnin");
        if (pairwise && implied) throw UsageError("--as-pairwise reads a rank CSV; the input is already pairwise", "--as-pairwise");
        if (!pairwise && app_ptr->count("--items") > 0)
          throw UsageError("--items is for --pairwise or --simulate; a rank file's columns are its items", "--items");
        if (!pairwise && !implied && o.error_model != rank::ErrorModel::none)
          throw UsageError("the Bernoulli error model applies to pairwise data", "--error-model");
        if (exact && !o.fix_alpha) throw UsageError("the exact comparison needs a fixed alpha (--fix-alpha)", "--exact");
        rank::MallowsData data;
        int omitted = 0;
        std::string source_kind = "rankings";
        if (pairwise) {
          std::string sha;
          const auto p = rank::read_pairwise_csv(input, items, &sha);
          ctx.prov.add_input(input, sha);
          data.n_items = p.n_items;
          data.prefs = p.by_assessor;
          data.labels = p.assessor_labels;
          source_kind = "pairwise";
        } else {
          const auto rd = rank::read_rank_csv(input, rank::parse_missing_policy(missing, "--missing"), header);
          ctx.prov.add_input(input, rd.sha256);
          omitted = rd.omitted;
          data.n_items = static_cast<int>(rd.ranks.cols());
          if (implied) {
            data.prefs = rank::implied_preferences(rd.ranks).by_assessor;
            source_kind = "implied pairwise";
          } else {
            data.ranks = rd.ranks;
            if (rd.has_missing()) source_kind = "partial rankings";
          }
        }
        data.source = input;
        const int n = data.n_items;
        if (exact && (source_kind != "rankings" || !rank::is_itemwise(o.metric) || n > rank::subset_dp_max_n))
          throw UsageError(fmt::format("--exact needs complete rankings, an item-wise metric and n <= {}", rank::subset_dp_max_n), "--exact");
        if (omitted) log::info("omitted {} assessors with missing ranks", omitted);
        if (!outs.samples.empty()) {
          const double bytes = 4.0 * n * o.chains * std::floor(double(o.iterations - o.burnin) / o.thin);
          if (bytes > 1e9)
            log::warn("--samples will hold about {:.1f} GB of draws ({} chains x {} kept x {} items, int32); --thin keeps fewer",
                      bytes / 1e9, o.chains, (o.iterations - o.burnin) / o.thin, n);
        }
        const auto res = rank::run_mcmc(data, o);
        if (const std::size_t kept = res.chains.front().alpha.size(); kept < 100)
          log::warn("only {} draws kept per chain ((--iterations - --burnin) / --thin): too few for the marginals or R-hat", kept);

        std::vector<int> draws, chain_of;
        std::vector<double> alpha, theta;
        std::vector<std::vector<double>> alpha_chains, theta_chains;
        std::vector<std::vector<std::vector<double>>> rank_chains(static_cast<std::size_t>(n));
        nlohmann::json acc = nlohmann::json::array();
        for (std::size_t c = 0; c < res.chains.size(); ++c) {
          const auto& ch = res.chains[c];
          draws.insert(draws.end(), ch.rho.begin(), ch.rho.end());
          alpha.insert(alpha.end(), ch.alpha.begin(), ch.alpha.end());
          theta.insert(theta.end(), ch.theta.begin(), ch.theta.end());
          chain_of.insert(chain_of.end(), ch.alpha.size(), static_cast<int>(c) + 1);
          alpha_chains.push_back(ch.alpha);
          theta_chains.push_back(ch.theta);
          for (int i = 0; i < n; ++i) {
            std::vector<double> v;
            for (std::size_t s = 0; s < ch.alpha.size(); ++s) v.push_back(ch.rho[s * static_cast<std::size_t>(n) + static_cast<std::size_t>(i)]);
            rank_chains[static_cast<std::size_t>(i)].push_back(std::move(v));
          }
          acc.push_back({{"rho", ch.rho_acceptance}, {"alpha", ch.alpha_acceptance}, {"augmentation", ch.aug_acceptance}});
        }
        // Its CPU time is reported apart: the cost of turning the draws into marginals, which a
        // comparison with Pseudo-Mallows (whose marginals come with its draws) must add.
        const std::clock_t mcpu0 = std::clock();
        const Eigen::MatrixXd marg = rank::marginals_from_draws(draws, n);
        const double marginals_cpu = static_cast<double>(std::clock() - mcpu0) / CLOCKS_PER_SEC;
        double rhat_rho = 0;
        for (const auto& rc : rank_chains) {
          const double r = rank::rhat(rc);
          if (std::isfinite(r)) rhat_rho = std::max(rhat_rho, r);
        }
        nlohmann::json out{{"n_items", n}, {"n_assessors", data.assessors()}, {"data", source_kind}, {"metric", metric},
                           {"chains", o.chains}, {"iterations", o.iterations}, {"burnin", o.burnin}, {"thin", o.thin},
                           {"leap_size", o.leap_size}, {"rho_init", rho_init}, {"draws", alpha.size()}, {"alpha_fixed", o.fix_alpha},
                           {"alpha", rank::scalar_summary(alpha)}, {"acceptance", acc}, {"log_z_method", res.log_z_method}};
        if (omitted) out["omitted_assessors"] = omitted;
        if (!theta.empty()) out["theta"] = rank::scalar_summary(theta);
        const double ra = o.fix_alpha ? std::nan("") : rank::rhat(alpha_chains);
        out["rhat"] = {{"alpha", std::isfinite(ra) ? nlohmann::json(ra) : nlohmann::json(nullptr)},
                       {"rho_max", o.chains > 1 ? nlohmann::json(rhat_rho) : nlohmann::json(nullptr)}};
        if (!theta.empty() && o.chains > 1) out["rhat"]["theta"] = rank::rhat(theta_chains);
        out.update(rank::consensus_json(marg, draws, n));
        if (exact) {
          const rank::SubsetPosterior sp(rank::itemwise_log_weights(data.ranks, o.alpha_init, o.metric));
          const Eigen::MatrixXd pm = sp.marginals();
          out["exact"] = {{"max_tv", rank::max_marginal_tv(marg, pm)}, {"mean_tv", rank::mean_marginal_tv(marg, pm)},
                          {"log_normaliser", sp.log_normaliser()}};
        }
        out["seconds"] = res.seconds;
        out["cpu_seconds"] = res.cpu_seconds;
        out["marginals_cpu_seconds"] = marginals_cpu;
        out["iterations_per_second"] = o.iterations * o.chains / std::max(res.seconds, 1e-9);
        out["meta"] = ctx.prov.to_json();
        rank::write_draw_outputs(outs, draws, n, alpha, chain_of, theta, marg, ctx.prov, "mallows-mcmc: P(rho_i = r)");
        io::write_json(output, out);
      });
}
