// bench-rank-warm: Pseudo-Mallows against our MCMC, time to a marginal accuracy measured inside
// one process.  rank_mallows.sh times the tools themselves (process CPU seconds from clock(), 1 us
// steps), where a run of tens of microseconds is mostly cold caches, first-touch page faults and
// lazy symbol binding, which is not the algorithms' cost and weighs most on the faster one.  Here
// each rung of a ladder (PM draws, MCMC iterations) runs once untimed (seed 0) and then for seeds
// 1..K (31), each seed timed on its own (thread CPU time, ns).  A rung's time and accuracy are the
// medians over the seeds; the ladders run N (3) rounds and a rung keeps its least median time.  Every seed gives other random numbers, so the branch predictor cannot
// learn a repeated run (timing one seed over and over made PM look 2-3x faster at 400 draws).
//   PM:   pseudomallows-fit --order v-mix: the V order shown, the log weights, q, the
//         mean-rank consensus and `draws` V-mixture draws with their Rao-Blackwellised marginals
//         (what sampling_cpu_seconds covers).
//   MCMC: mallows-mcmc --fix-alpha, one chain, 10% burn-in, random start, leap size 1, footrule,
//         and the marginals counted from the kept draws (cpu_seconds + marginals_cpu_seconds).
// Accuracy: max and mean over items of the total-variation distance of the rank marginals to the
// exact ones (subset DP).  Time to an accuracy = the first rung whose median is at or below it;
// speed-up = MCMC time / PM time at 1.1 x PM's floor (its accuracy at 100,000 draws, each measure),
// at 1.1 x its best rung, and at fixed levels (which PM, being biased, may never reach).
// Usage: bench-rank-warm FILE ALPHA [--seeds K] [--rounds N] [--name NAME]    Prints one JSON object.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "rank/exact.hpp"
#include "rank/mcmc.hpp"
#include "rank/pseudo.hpp"
#include "rank/ranking.hpp"
#include "rank/summary.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::rank;

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

struct Rung {
  long param = 0;
  double seconds = 0, max_tv = 0, mean_tv = 0;
};

// Runs `run(seed)` (returning marginals) for seed 0 untimed, then seeds 1..K timed one by one;
// the rung's seconds are the median over the seeds, its accuracies the medians of the accuracies.
template <class Run>
Rung measure(long param, int seeds, const Eigen::MatrixXd& exact, Run run) {
  run(0);
  std::vector<double> t, mx, mn;
  for (int s = 1; s <= seeds; ++s) {
    const double t0 = thread_cpu_seconds();
    const Eigen::MatrixXd m = run(static_cast<std::uint64_t>(s));
    t.push_back(thread_cpu_seconds() - t0);
    mx.push_back(max_marginal_tv(m, exact));
    mn.push_back(mean_marginal_tv(m, exact));
  }
  return {param, median(t), median(mx), median(mn)};
}

// The whole ladder `rounds` times; each rung keeps its least median time over the rounds (the
// machine is a shared VM: the host's noise only ever adds time).  The seeds, hence the
// accuracies, are the same in every round.
template <class Run>
std::vector<Rung> ladder(const std::vector<long>& params, int seeds, int rounds, const Eigen::MatrixXd& exact, Run run) {
  std::vector<Rung> best;
  for (int k = 0; k < rounds; ++k)
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Rung r = measure(params[i], seeds, exact, [&](std::uint64_t seed) { return run(params[i], seed); });
      if (k == 0) best.push_back(r);
      else best[i].seconds = std::min(best[i].seconds, r.seconds);
    }
  return best;
}

nlohmann::json curve_json(const std::vector<Rung>& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : c) a.push_back({{"param", r.param}, {"seconds", r.seconds}, {"max_tv", r.max_tv}, {"mean_tv", r.mean_tv}});
  return a;
}

// Seconds of the first rung at or below `level` in the measure (max or mean TV); negative if none.
double reach(const std::vector<Rung>& c, bool use_max, double level) {
  for (const auto& r : c)
    if ((use_max ? r.max_tv : r.mean_tv) <= level) return r.seconds;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) {
      std::cerr << "usage: bench-rank-warm FILE ALPHA [--seeds K] [--rounds N] [--name NAME]\n";
      return 2;
    }
    const std::string file = argv[1];
    const double alpha = std::stod(argv[2]);
    int seeds = 31, rounds = 3;
    std::string name = file;
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string f = argv[i];
      if (f == "--seeds") seeds = std::max(1, std::atoi(argv[i + 1]));
      else if (f == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
      else if (f == "--name") name = argv[i + 1];
      else throw std::runtime_error("unknown option " + f);
    }
    const RankMatrix R = read_rank_csv(file, MissingPolicy::fail).ranks;
    const int n = static_cast<int>(R.cols());
    const Eigen::MatrixXd exact = SubsetPosterior(itemwise_log_weights(R, alpha, Metric::footrule)).marginals();

    const std::vector<Rung> pm = ladder({10, 20, 30, 50, 100, 200, 300, 1000, 3000, 10000, 30000, 100000}, seeds, rounds, exact,
                                        [&](long draws, std::uint64_t seed) {
                                          const PseudoMallows q(itemwise_log_weights(R, alpha, Metric::footrule), v_order(R));
                                          return draw_pseudo_v_mixture(q, mean_rank_order(R), static_cast<int>(draws),
                                                                       derive_seed(seed, 1), 1)
                                              .marginals;
                                        });
    MallowsData data;
    data.n_items = n;
    data.ranks = R;
    const std::vector<Rung> mc = ladder({100, 200, 500, 1000, 1500, 2000, 3000, 5000, 10000, 20000, 50000, 100000, 200000}, seeds,
                                        rounds, exact, [&](long it, std::uint64_t seed) {
                                          McmcOptions o;
                                          o.iterations = static_cast<int>(it);
                                          o.burnin = static_cast<int>(it / 10);
                                          o.fix_alpha = true;
                                          o.alpha_init = alpha;
                                          o.threads = 1;
                                          o.seed = seed;
                                          return marginals_from_draws(run_mcmc(data, o).chains[0].rho, n);
                                        });

    // PM's floor: its accuracy with the most draws (q's own error, which more draws do not remove).
    // The best rung of the curve is also reported, but it is the floor minus the noise of the
    // medians: a level just above it asks PM for a lucky rung rather than for its accuracy.
    const double floor_max = pm.back().max_tv, floor_mean = pm.back().mean_tv;
    double best_max = 1e300, best_mean = 1e300;
    for (const auto& r : pm) {
      best_max = std::min(best_max, r.max_tv);
      best_mean = std::min(best_mean, r.mean_tv);
    }
    nlohmann::json levels = nlohmann::json::array();
    const std::vector<std::tuple<std::string, bool, double>> asked = {
        {"1.1 x PM floor", true, 1.1 * floor_max}, {"1.1 x PM floor", false, 1.1 * floor_mean},
        {"1.1 x PM best rung", true, 1.1 * best_max}, {"1.1 x PM best rung", false, 1.1 * best_mean},
        {"fixed", true, 0.2}, {"fixed", true, 0.1}, {"fixed", false, 0.1}, {"fixed", false, 0.05}};
    for (const auto& [what, use_max, level] : asked) {
      const double tp = reach(pm, use_max, level), tm = reach(mc, use_max, level);
      nlohmann::json e{{"measure", use_max ? "max_tv" : "mean_tv"}, {"level", level}, {"level_is", what}, {"pm_seconds", nullptr},
                       {"mcmc_seconds", nullptr}, {"pm_speedup", nullptr}};
      if (tp >= 0) e["pm_seconds"] = tp;
      if (tm >= 0) e["mcmc_seconds"] = tm;
      if (tp > 0 && tm >= 0) e["pm_speedup"] = tm / tp;
      levels.push_back(e);
    }
    const nlohmann::json out{
        {"bench", "rank_warm"}, {"data", name}, {"n_items", n}, {"n_assessors", R.rows()}, {"alpha", alpha},
        {"seeds", seeds}, {"rounds", rounds},
        {"timing", "thread CPU seconds inside one process; per rung one untimed run (seed 0), then the median over seeds 1..K; the least of the rounds' medians"},
        {"pseudo_mallows", {{"order", "v-mix"}, {"x", "draws"}, {"curve", curve_json(pm)},
                            {"floor_max_tv", floor_max}, {"floor_mean_tv", floor_mean}, {"best_max_tv", best_max}, {"best_mean_tv", best_mean}}},
        {"mallows_mcmc", {{"x", "iterations (10% burn-in)"}, {"curve", curve_json(mc)}}},
        {"at_equal_accuracy", levels}};
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench-rank-warm: error: " << e.what() << "\n";
    return 1;
  }
}
