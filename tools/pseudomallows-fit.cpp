// pseudomallows-fit: the Pseudo-Mallows variational approximation of the Bayesian Mallows
// posterior (Liu, Vitelli, Mannino, Frigessi & Scheel, ICML 2026).
#include <fmt/core.h>

#include <cmath>
#include <ctime>
#include <numeric>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "rank/exact.hpp"
#include "rank/partition.hpp"
#include "rank/pseudo.hpp"
#include "rank/summary.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

// ELBO(alpha) = E_q[log prior(alpha) - (alpha/n) sum_j d(R_j, rho) - N log Z(alpha) - log q(rho)]
// for q_V(.|alpha) and a point mass at alpha; the same seed for every alpha (common random numbers).
double elbo(const rank::RankMatrix& R, rank::Metric m, const rank::Perm& order, double alpha, double lambda, int samples,
            std::uint64_t seed) {
  const int n = static_cast<int>(R.cols());
  const rank::PseudoMallows q(rank::itemwise_log_weights(R, alpha, m), order);
  return -rank::neg_elbo(q, samples, seed).value - lambda * alpha - static_cast<double>(R.rows()) * rank::log_z(n, alpha, m);
}

// Golden-section search of the ELBO over log alpha in [log 0.01, log 200].
double estimate_alpha(const rank::RankMatrix& R, rank::Metric m, const rank::Perm& order, double lambda, int samples,
                      std::uint64_t seed) {
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = std::log(0.01), b = std::log(200.0);
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = elbo(R, m, order, std::exp(c), lambda, samples, seed), fd = elbo(R, m, order, std::exp(d), lambda, samples, seed);
  for (int it = 0; it < 40 && b - a > 1e-4; ++it) {
    if (fc > fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - g * (b - a);
      fc = elbo(R, m, order, std::exp(c), lambda, samples, seed);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + g * (b - a);
      fd = elbo(R, m, order, std::exp(d), lambda, samples, seed);
    }
  }
  return std::exp((a + b) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output = "-", metric = "footrule", missing = "fail", order_policy = "v", alpha_text = "estimate";
  bool header = false, exact = false, reweight = false;
  int draws_n = 10000, kl_samples = 2000, search_iters = 200, search_starts = 10, random_orders = 0;
  double lambda = 0.001;
  rank::DrawOutputs outs;
  std::string exact_marginals;
  cli::ToolInfo info{
      "pseudomallows-fit",
      "Approximate the Bayesian Mallows posterior of the consensus ranking rho by Pseudo-Mallows: a product\n"
      "of univariate discrete factors q(rho_v | ranks already used) ∝ exp(-(alpha/n) sum_j f(R_jv, rho_v))\n"
      "taken in a variational item order V, chosen to minimise KL(q_V || p).  Draws from q are exact and\n"
      "independent, and log q of every draw is exact.  Input: a CSV of complete ranks without header, one\n"
      "assessor per line.  Metric footrule or spearman (the item-wise distances).",
      "  pseudomallows-fit ../shared/data/rankings/potato_visual.csv --alpha 10 --exact --random-orders 20\n"
      "  pseudomallows-fit ../shared/data/rankings/sushi_rankings.csv --order search --marginals sushi.csv\n"
      "  pseudomallows-fit ../shared/data/rankings/potato_visual.csv --samples q.h5 --heatmap q.png | jq .alpha\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("input", input, "Rank CSV, no header, one assessor per line; - = stdin")->required();
        cli::add_header_flags(app, header, "Rank CSV");
        app.add_option("--missing", missing, "Missing ranks: fail or omit the assessor (augmentation: use mallows-mcmc)")
            ->capture_default_str()
            ->check(CLI::Validator(
                [](std::string& v) -> std::string {
                  if (v == "augment") return "pseudomallows-fit needs complete rankings: use --missing omit, or mallows-mcmc --missing augment";
                  return v == "fail" || v == "omit" ? "" : "must be fail or omit";
                },
                "fail|omit"));
        app.add_option("--metric", metric, "footrule or spearman (the item-wise distances)")
            ->capture_default_str()
            ->check(CLI::Validator(
                [](std::string& v) -> std::string {
                  return v == "footrule" || v == "spearman" ? "" : "Pseudo-Mallows needs an item-wise distance: footrule or spearman";
                },
                "footrule|spearman"));
        app.add_option("--alpha", alpha_text, "A fixed alpha > 0, or 'estimate' (maximise the ELBO over alpha)")->capture_default_str();
        app.add_option("--lambda", lambda, "Rate of the exponential prior on alpha (estimate)")->capture_default_str()->check(cli::positive());
        app.add_option("--order", order_policy,
                       "Variational order: v (the paper's conjectured optimal form: items from the middle of the data\n"
                       "consensus outwards, its top and bottom items last; the order within each equidistant pair chosen by\n"
                       "the estimated KL), v-random (the same form, each pair's order one coin flip), v-mix (a fresh V order\n"
                       "with fresh coin flips for every draw, as the authors' sampler: a uniform mixture of the V orders),\n"
                       "search (swap local search minimising the estimated KL from the best candidate), mean-rank (top first),\n"
                       "ends-inward, middle-out, variance, identity, random")
            ->capture_default_str()->check(CLI::IsMember({"v", "v-random", "v-mix", "search", "mean-rank", "ends-inward", "middle-out", "variance", "identity", "random"}));
        app.add_option("--search-starts", search_starts, "Order search: random orders tried as starting points")->capture_default_str()->check(cli::int_range(0, 100000));
        app.add_option("--search-iters", search_iters, "Order search: swap proposals")->capture_default_str()->transform(cli::count(0, 10000000));
        app.add_option("--kl-samples", kl_samples, "Draws for each KL / ELBO estimate")->capture_default_str()->transform(cli::count(10, 100000000));
        app.add_option("--draws", draws_n, "Draws from q for marginals, consensus and --samples")->capture_default_str()->transform(cli::count(1, 100000000));
        app.add_flag("--reweight", reweight,
                     "Opt-in, not the paper's method: weight each draw by p~/q (self-normalised importance sampling\n"
                     "with q's exact log q) so the marginals estimate the exact posterior's, not q's; reports the\n"
                     "effective sample size.  The MAP consensus stays that of q's unweighted draws");
        app.add_option("--random-orders", random_orders, "Also report the KL of this many uniformly random orders")->capture_default_str()->check(cli::int_range(0, 100000));
        app.add_flag("--exact", exact, "Exact log Z_p and marginals by the subset DP (n <= 24): KL(q || p) and the max total-variation distance of the marginals");
        app.add_option("--exact-marginals", exact_marginals, "With --exact: also write the exact marginals, .csv or .h5");
        app.add_option("-o,--output", output, "Summary JSON (- = stdout)")->capture_default_str();
        app.add_option("--samples", outs.samples, "Draws from q, HDF5: /rho [draws, items] (1-based ranks), /alpha, /marginals");
        app.add_option("--marginals", outs.marginals, "Item-by-rank marginals of q, .csv (item,rank,probability) or .h5");
        app.add_option("--heatmap", outs.heatmap, "PNG heat map of the marginals (needs gnuplot)");
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        rank::check_draw_outputs(outs);
        rank::check_draw_outputs({"", exact_marginals, ""});
        io::check_distinct_outputs({{"-o", output},
                                    {"--samples", outs.samples},
                                    {"--marginals", outs.marginals},
                                    {"--heatmap", outs.heatmap},
                                    {"--exact-marginals", exact_marginals}},
                                   {input});
        if (!exact_marginals.empty() && !exact) throw UsageError("--exact-marginals needs --exact", "--exact-marginals");
        if (reweight && !outs.samples.empty())
          throw UsageError("--samples holds q's unweighted draws, which --reweight does not describe: drop one", "--reweight");
        const rank::Metric m = rank::parse_metric(metric, "--metric");
        double alpha = 0;
        const bool estimate = alpha_text == "estimate";
        if (!estimate) {
          const auto v = io::parse_double(alpha_text);
          // Beyond 1e6 (typical posteriors: alpha 1..20) the factors' log weights lose every digit.
          if (!v || !(*v > 0) || !(*v <= 1e6)) throw UsageError("alpha must be a number in (0, 1e6] or 'estimate'", "--alpha " + alpha_text);
          alpha = *v;
        }
        const auto rd = rank::read_rank_csv(input, rank::parse_missing_policy(missing, "--missing"), header);
        ctx.prov.add_input(input, rd.sha256);
        if (rd.omitted) log::info("omitted {} assessors with missing ranks", rd.omitted);
        const rank::RankMatrix& R = rd.ranks;
        const int n = static_cast<int>(R.cols());
        if (exact && n > rank::subset_dp_max_n)
          throw UsageError(fmt::format("--exact needs n <= {} items (n = {})", rank::subset_dp_max_n, n), "--exact");
        const std::uint64_t seed = ctx.common.seed;
        Stopwatch sw;
        const std::clock_t cpu0 = std::clock();
        auto random_order = [&](Rng& r) {
          rank::Perm o(static_cast<std::size_t>(n));
          std::iota(o.begin(), o.end(), 0);
          for (int k = n - 1; k > 0; --k) std::swap(o[static_cast<std::size_t>(k)], o[r.below(static_cast<std::uint64_t>(k) + 1)]);
          return o;
        };
        auto named_order = [&](const std::string& name) {
          // v-mix draws a fresh V order per draw: q's own order is only the component shown (and
          // the one --alpha estimate fits), so it takes every pair's better item first, no coins.
          if (name == "v-mix") return rank::v_order(R);
          if (name == "v" || name == "v-random") {
            Rng r(derive_seed(seed, 8));
            return rank::v_order(R, r);
          }
          if (name == "variance") return rank::variance_order(R);
          if (name == "mean-rank") return rank::mean_rank_order(R);
          if (name == "ends-inward") return rank::ends_inward_order(R);
          if (name == "middle-out") return rank::middle_out_order(R);
          if (name == "random") {
            Rng r(derive_seed(seed, 5));
            return random_order(r);
          }
          rank::Perm o(static_cast<std::size_t>(n));
          std::iota(o.begin(), o.end(), 0);
          return o;
        };
        // The order-dependent part of KL(q_V || p), with common random numbers across orders.
        const int threads = ctx.common.threads;
        auto score = [&](const Eigen::MatrixXd& w, const rank::Perm& o) {
          return rank::neg_elbo(rank::PseudoMallows(w, o), kl_samples, derive_seed(seed, 2), threads).value;
        };
        rank::Perm order = named_order(order_policy == "search" ? "mean-rank" : order_policy);
        if (estimate) alpha = estimate_alpha(R, m, order, lambda, kl_samples, derive_seed(seed, 3));
        Eigen::MatrixXd lw = rank::itemwise_log_weights(R, alpha, m);
        std::string start_name = order_policy;
        if (order_policy == "search") {
          // Start from the best of the data-dependent candidates and --search-starts random orders.
          double best = score(lw, order);
          start_name = "mean-rank";
          for (const char* name : {"v", "ends-inward", "middle-out", "variance"}) {
            const auto o = named_order(name);
            const double v = score(lw, o);
            if (v < best) { best = v; order = o; start_name = name; }
          }
          Rng sr(derive_seed(seed, 7));
          for (int k = 0; k < search_starts; ++k) {
            const auto o = random_order(sr);
            const double v = score(lw, o);
            if (v < best) { best = v; order = o; start_name = "random"; }
          }
          order = rank::search_order(lw, order, search_iters, kl_samples, derive_seed(seed, 4));
        } else if (order_policy == "v") {
          std::vector<char> coins(static_cast<std::size_t>(n / 2));
          Rng r(derive_seed(seed, 8));
          for (auto& c : coins) c = r.uniform() < 0.5;
          order = rank::v_order_search(lw, R, coins, kl_samples, derive_seed(seed, 2), nullptr, threads);
        }
        if ((order_policy == "search" || order_policy == "v") && estimate) {
          // One refinement of alpha with the searched order.
          alpha = estimate_alpha(R, m, order, lambda, kl_samples, derive_seed(seed, 3));
          lw = rank::itemwise_log_weights(R, alpha, m);
        }
        const rank::PseudoMallows q(lw, order);
        const bool mix = order_policy == "v-mix";
        const rank::Perm consensus = rank::mean_rank_order(R);
        rank::PseudoDraws pd = mix ? rank::draw_pseudo_v_mixture(q, consensus, draws_n, derive_seed(seed, 1), threads)
                                   : rank::draw_pseudo(q, draws_n, derive_seed(seed, 1), threads);
        rank::ReweightedMarginals rw;
        if (reweight) rw = rank::reweight_draws(q, pd);
        // CPU seconds of alpha, the order and the draws with their marginals (not the KL diagnostic).
        const double sampling_cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
        const std::vector<int>& draws = pd.rho;
        // Rao-Blackwellised marginals of q: the mean over draws of every factor's conditional
        // probabilities; with --reweight, the importance-weighted estimate of p's marginals.
        const Eigen::MatrixXd& marg = reweight ? rw.marginals : pd.marginals;
        // v-mix: the mean of the components' log q_V - log p~, an upper bound of the mixture's (KL + log Z).
        const auto ne = mix ? rank::neg_elbo(q, rank::draw_pseudo_v_mixture(q, consensus, kl_samples, derive_seed(seed, 2), threads))
                            : rank::neg_elbo(q, kl_samples, derive_seed(seed, 2), threads);
        const double fit_seconds = sw.seconds();
        const double fit_cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
        nlohmann::json out{{"n_items", n}, {"n_assessors", R.rows()}, {"metric", metric}, {"alpha", alpha},
                           {"alpha_estimated", estimate}, {"order_policy", order_policy}, {"v_mixture", mix}, {"search_start", order_policy == "search" ? start_name : ""}, {"order", rank::one_based(order)},
                           {"draws", draws_n}, {"neg_elbo", {{"value", ne.value}, {"se", ne.se}, {"samples", kl_samples}}}};
        if (rd.omitted) out["omitted_assessors"] = rd.omitted;
        if (reweight) {
          // The ESS counts draws, not rankings: when q has collapsed onto a few rankings their
          // equal weights give a full ESS although p's mass elsewhere is never seen.
          const std::size_t distinct = rank::distinct_draws(draws, n);
          out["importance"] = {{"what", "self-normalised importance weights p~/q of the draws; marginals are of p"},
                               {"ess", rw.ess}, {"ess_fraction", rw.ess / draws_n}, {"max_weight", rw.max_weight},
                               {"distinct_draws", distinct}, {"map_consensus", "of q's unweighted draws"}};
          if (rw.ess < 100)
            log::warn("the importance weights leave an effective sample size of {:.1f} of the {} draws: the reweighted "
                      "marginals rest on a few draws; raise --draws", rw.ess, draws_n);
          if (static_cast<double>(distinct) < 0.1 * rw.ess)
            log::warn("the {} draws hold only {} distinct rankings: the ESS {:.0f} counts repeated draws, and posterior mass q "
                      "never reaches is not seen; check neg_elbo (or --exact) before trusting the reweighted marginals",
                      draws_n, distinct, rw.ess);
        }
        out.update(rank::consensus_json(marg, draws, n));
        out["seconds"] = fit_seconds;
        out["cpu_seconds"] = fit_cpu;
        out["sampling_cpu_seconds"] = sampling_cpu;
        double log_norm = std::nan("");
        if (exact) {
          Stopwatch se;
          const rank::SubsetPosterior sp(lw);
          log_norm = sp.log_normaliser();
          const Eigen::MatrixXd pm = sp.marginals();
          out["exact"] = {{mix ? "kl_upper_bound" : "kl", ne.value + log_norm}, {"kl_se", ne.se}, {"log_normaliser", log_norm},
                          {"max_tv", rank::max_marginal_tv(marg, pm)}, {"mean_tv", rank::mean_marginal_tv(marg, pm)}, {"seconds", se.seconds()}};
          if (!exact_marginals.empty()) rank::write_marginals(exact_marginals, pm, ctx.prov);
        }
        if (random_orders > 0) {
          Rng orng(derive_seed(seed, 6));
          std::vector<double> kls;
          for (int t = 0; t < random_orders; ++t) kls.push_back(score(lw, random_order(orng)) + (exact ? log_norm : 0.0));
          std::vector<double> sorted = kls;
          std::sort(sorted.begin(), sorted.end());
          const double chosen = ne.value + (exact ? log_norm : 0.0);
          out["random_orders"] = {{"what", exact ? "KL(q || p)" : "neg_elbo"}, {"values", kls}, {"min", sorted.front()},
                                  {"median", sorted[sorted.size() / 2]}, {"max", sorted.back()},
                                  {"share_better_than_chosen", static_cast<double>(std::count_if(kls.begin(), kls.end(), [&](double v) { return v < chosen; })) / static_cast<double>(kls.size())}};
        }
        out["meta"] = ctx.prov.to_json();
        rank::write_draw_outputs(outs, draws, n, std::vector<double>(static_cast<std::size_t>(draws_n), alpha),
                                 std::vector<int>(static_cast<std::size_t>(draws_n), 1), {}, marg, ctx.prov, "Pseudo-Mallows q: P(rho_i = r)");
        io::write_json(output, out);
      });
}
