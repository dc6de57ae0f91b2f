// smc-optimize: maximum marginal likelihood with intractable gradients by SMC (SOSMC, Cuin,
// Carbone, Tang & Akyildiz, ICML 2026) and its baselines, on built-in problems.
#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <numeric>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "smc/logistic.hpp"
#include "smc/optimize.hpp"
#include "smc/reward.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

struct Args {
  std::string optimizer = "sgd";
  std::string problem = "toy", data, output = "-", trajectory, method = "sosmc", move = "ula", resampling = "multinomial";
  int particles = 100, steps = 400, inner_steps = 10, toy_d = 100, skip_lines = 0, leapfrog = 5;
  double lr = 0.01, step_size = 0.01, resample_threshold = 0.9, toy_theta = 1.0, test_fraction = 0.2, theta0 = 0.0;
  bool no_header = false, no_adapt = false;
  double beta = 0.1;
  int n_ref = 5000;
  std::string label_col;
};

smc::Method parse_method(const std::string& m) {
  if (m == "sosmc") return smc::Method::sosmc;
  if (m == "impdiff") return smc::Method::impdiff;
  if (m == "pgd") return smc::Method::pgd;
  return smc::Method::soul;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "smc-optimize",
      "Maximise a marginal likelihood whose gradient is an expectation under pi_theta ~ exp(-U_theta) with\n"
      "SOSMC (one weighted particle population moved, reweighted and resampled as theta changes) or the\n"
      "baselines ImpDiff, PGD (Kuntz et al. 2023), SOUL and exact EM (toy problem).  Problems: toy\n"
      "(y_d ~ N(x_d, 1), x_d ~ N(theta, 1); MLE = mean y) and logistic (Bayesian logistic regression with\n"
      "x ~ N(theta 1, 5 I), no intercept, on a CSV of features + 0/1 label, standardised, split by --test-fraction)\n"
      "and gmm-reward (reward tuning of the hexagon Gaussian mixture with a KL penalty --beta).",
      "  smc-optimize --problem toy --method sosmc --particles 100 --steps 400 --trajectory traj.jsonl\n"
      "  smc-optimize --problem logistic --data ../shared/data/tabular/breast_cancer.csv --no-header --skip-lines 1 --method pgd\n"
      "  smc-optimize --problem toy --method em --steps 50 | jq .theta\n"
      "  smc-optimize --problem gmm-reward --beta 0.001 --particles 1000 --steps 300 --lr 20 --step-size 0.1 | jq .mean_reward\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("--problem", a.problem, "toy, logistic, or gmm-reward (hexagon mixture, half-plane reward)")->capture_default_str()->check(CLI::IsMember({"toy", "logistic", "gmm-reward"}));
        app.add_option("--beta", a.beta, "gmm-reward: KL weight beta")->capture_default_str()->check(cli::non_negative());
        app.add_option("--n-ref", a.n_ref, "gmm-reward: exact reference samples")->capture_default_str()->check(cli::int_range(1, 10000000));
        app.add_option("--data", a.data, "logistic: CSV of features with the 0/1 label last (or --label-col); toy: optional CSV column y");
        app.add_option("--method", a.method, "sosmc, impdiff, pgd, soul, or em (toy only)")
            ->capture_default_str()
            ->check(CLI::IsMember({"sosmc", "impdiff", "pgd", "soul", "em"}));
        app.add_option("--move", a.move, "sosmc particle move: ula, mala, rwm or hmc")
            ->capture_default_str()
            ->check(CLI::IsMember({"ula", "mala", "rwm", "hmc"}));
        app.add_option("--leapfrog", a.leapfrog, "hmc: leapfrog steps per move (step sqrt(gamma))")
            ->capture_default_str()
            ->check(cli::int_range(1, 100000));
        app.add_option("--particles", a.particles, "N particles (soul: one chain)")->capture_default_str()->check(cli::int_range(1, 10000000));
        app.add_option("--steps", a.steps, "theta updates K")->capture_default_str()->check(cli::int_range(1, 100000000));
        app.add_option("--lr", a.lr, "theta learning rate (gradient ascent)")->capture_default_str()->check(cli::positive());
        app.add_option("--optimizer", a.optimizer, "theta update: sgd or adam (pgd: always plain steps of size h)")
            ->capture_default_str()
            ->check(CLI::IsMember({"sgd", "adam"}));
        app.add_option("--step-size", a.step_size, "initial Langevin step gamma (pgd: h)")->capture_default_str()->check(cli::positive());
        app.add_flag("--no-adapt", a.no_adapt, "sosmc: keep gamma fixed");
        app.add_option("--resample-threshold", a.resample_threshold, "sosmc: resample when ESS < this x N")
            ->capture_default_str()
            ->check(CLI::Range(0.0, 1.0));
        app.add_option("--resampling", a.resampling, "multinomial or systematic")
            ->capture_default_str()
            ->check(CLI::IsMember({"multinomial", "systematic"}));
        app.add_option("--inner-steps", a.inner_steps, "soul: Langevin steps per update")->capture_default_str()->check(cli::int_range(1, 1000000));
        app.add_option("--theta0", a.theta0, "initial theta")->capture_default_str();
        app.add_option("--toy-d", a.toy_d, "toy: number of latent variables D (generated data only)")->capture_default_str()->check(cli::int_range(1, 10000000));
        app.add_option("--toy-theta", a.toy_theta, "toy: theta used to generate y (with --seed)")->capture_default_str();
        app.add_option("--test-fraction", a.test_fraction, "logistic: held-out fraction")->capture_default_str()->check(CLI::Range(0.0, 0.9));
        app.add_flag("--no-header", a.no_header, "CSV has no header row");
        app.add_option("--skip-lines", a.skip_lines, "CSV lines to skip first (scikit-learn's files: 1)")
            ->capture_default_str()
            ->check(cli::int_range(0, 1000000));
        app.add_option("--label-col", a.label_col, "logistic: label column name (default: the last column; with --no-header columns are c1..cN)");
        app.add_option("-o,--output", a.output, "Final result, *.json (- = stdout)")->capture_default_str();
        app.add_option("--trajectory", a.trajectory, "Per-step JSON Lines (*.jsonl): a {\"meta\"} line, then step, theta, ess, step_size, resampled, seconds");
      },
      [&](cli::Context& ctx) {
        io::require_json_path(a.output);
        if (!a.trajectory.empty() && std::filesystem::path(a.trajectory).extension() != ".jsonl")
          throw UsageError("the trajectory is JSON Lines: give a path ending in .jsonl", "--trajectory " + a.trajectory);
        if (a.method == "em" && a.problem != "toy") throw UsageError("exact EM exists only for the toy problem", "--method");
        if (a.problem == "gmm-reward" && !a.data.empty()) throw UsageError("the gmm-reward problem takes no data", "--data");
        if (a.move != "ula" && a.method != "sosmc")
          log::warn("--move {} applies to sosmc only; {} uses ULA", a.move, a.method);
        if (a.method == "pgd") log::info("pgd takes theta steps of the Langevin step size h (--step-size); --lr is not used");
        Rng data_rng(derive_seed(ctx.common.seed, 1000));
        // Reads --data with the CSV flags and records it in the provenance.
        auto read_data = [&] {
          io::TableReadOptions ro;
          ro.header = !a.no_header;
          ro.skip_lines = a.skip_lines;
          io::Table t = io::Table::read(a.data, ro);
          ctx.prov.add_input(a.data, t.sha256());
          return t;
        };
        std::unique_ptr<smc::Problem> problem;
        nlohmann::json extra;
        Eigen::MatrixXd test_f;
        Eigen::VectorXd test_l;
        if (a.problem == "toy") {
          Eigen::VectorXd y;
          if (!a.data.empty()) {
            const io::Table t = read_data();
            const auto v = t.numbers("y");
            y = Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()));
          } else {
            y.resize(a.toy_d);
            for (int d = 0; d < a.toy_d; ++d) y[d] = a.toy_theta + data_rng.normal() + data_rng.normal();
          }
          extra["mle"] = y.mean();
          problem = std::make_unique<smc::ToyHierarchical>(y);
        } else if (a.problem == "gmm-reward") {
          auto gm = std::make_unique<smc::MixtureRewardTuning>(
              smc::MixtureRewardTuning::hexagon(a.beta, a.n_ref, derive_seed(ctx.common.seed, 2000)));
          Rng ev(derive_seed(ctx.common.seed, 3000));
          extra["reference_mean_reward"] = gm->mean_reward(gm->reference_logits(), 100000, ev);
          problem = std::move(gm);
        } else {
          if (a.data.empty()) throw UsageError("the logistic problem needs --data", "--data");
          const io::Table t = read_data();
          const std::string label = a.label_col.empty() ? t.names().back() : a.label_col;
          std::vector<std::string> feats;
          for (const auto& n : t.names())
            if (n != label) feats.push_back(n);
          const auto lv = t.numbers(label);
          for (std::size_t r = 0; r < lv.size(); ++r)
            if (lv[r] != 0 && lv[r] != 1) throw InputError(fmt::format("label {} is not 0 or 1", lv[r]), t.where(r) + ", column '" + label + "'");
          if (feats.empty() || t.rows() < 10) throw InputError("need at least one feature column and 10 rows", a.data);
          Eigen::MatrixXd F(static_cast<Eigen::Index>(t.rows()), static_cast<Eigen::Index>(feats.size()));
          for (std::size_t c = 0; c < feats.size(); ++c) {
            const auto v = t.numbers(feats[c]);
            for (std::size_t r = 0; r < v.size(); ++r) F(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = v[r];
          }
          // Seeded 80/20 split (--test-fraction), then standardisation with training statistics.
          std::vector<Eigen::Index> perm(static_cast<std::size_t>(F.rows()));
          std::iota(perm.begin(), perm.end(), Eigen::Index{0});
          for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[data_rng.below(i)]);
          const auto n_test = static_cast<Eigen::Index>(std::lround(a.test_fraction * static_cast<double>(F.rows())));
          const Eigen::Index n_train = F.rows() - n_test;
          Eigen::MatrixXd tr(n_train, F.cols());
          Eigen::VectorXd ltr(n_train);
          test_f.resize(n_test, F.cols());
          test_l.resize(n_test);
          for (Eigen::Index i = 0; i < F.rows(); ++i) {
            const Eigen::Index r = perm[static_cast<std::size_t>(i)];
            if (i < n_train) { tr.row(i) = F.row(r); ltr[i] = lv[static_cast<std::size_t>(r)]; }
            else { test_f.row(i - n_train) = F.row(r); test_l[i - n_train] = lv[static_cast<std::size_t>(r)]; }
          }
          smc::standardise(tr, test_f);
          extra["train_rows"] = n_train;
          extra["test_rows"] = n_test;
          extra["features"] = feats.size();
          problem = std::make_unique<smc::BayesianLogistic>(tr, ltr);
        }

        std::optional<io::AtomicFile> traj_file;
        std::ofstream traj;
        if (!a.trajectory.empty()) {
          traj_file.emplace(a.trajectory);
          traj.open(traj_file->temp_path());
          if (!traj) throw RuntimeError("cannot create trajectory file", a.trajectory);
          traj << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump() << "\n";
        }
        Stopwatch sw;
        auto emit = [&](int step, const Eigen::VectorXd& th, double ess, double gamma, bool resampled) {
          if (!traj_file) return;
          const nlohmann::json theta = th.size() == 1 ? nlohmann::json(th[0])
                                                      : nlohmann::json(std::vector<double>(th.data(), th.data() + th.size()));
          traj << nlohmann::json{{"step", step}, {"theta", theta}, {"ess", ess}, {"step_size", gamma},
                                   {"resampled", resampled}, {"seconds", sw.seconds()}}.dump() << "\n";
        };
        nlohmann::json out{{"problem", a.problem}, {"method", a.method}, {"steps", a.steps}};
        if (a.method == "em") {
          const auto& toy = static_cast<const smc::ToyHierarchical&>(*problem);
          double th = a.theta0;
          for (int k = 1; k <= a.steps; ++k) {
            th = toy.em_step(th);
            emit(k, Eigen::VectorXd::Constant(1, th), 0, 0, false);
          }
          out["theta"] = th;
        } else {
          smc::SmcOptions o;
          o.method = parse_method(a.method);
          o.move = a.move == "mala" ? smc::Move::mala
                   : a.move == "rwm" ? smc::Move::rwm
                   : a.move == "hmc" ? smc::Move::hmc
                                     : smc::Move::ula;
          o.leapfrog = a.leapfrog;
          o.optimizer = a.optimizer == "adam" ? smc::Optimizer::adam : smc::Optimizer::sgd;
          o.particles = a.particles;
          o.steps = a.steps;
          o.learning_rate = a.lr;
          o.step_size = a.step_size;
          o.adapt_step = !a.no_adapt;
          o.resample_threshold = a.resample_threshold;
          o.resampling = a.resampling == "systematic" ? smc::Resampling::systematic : smc::Resampling::multinomial;
          o.inner_steps = a.inner_steps;
          o.seed = ctx.common.seed;
          int resamples = 0;
          Eigen::VectorXd theta0 = Eigen::VectorXd::Constant(problem->dim_theta(), a.theta0);
          Eigen::VectorXd x0 = Eigen::VectorXd::Zero(problem->dim_x());
          if (a.problem == "gmm-reward") {
            // Start from the reference model and a draw from it.
            const auto& gm = static_cast<const smc::MixtureRewardTuning&>(*problem);
            theta0 = gm.reference_logits();
            Rng r0(derive_seed(ctx.common.seed, 4000));
            x0 = gm.sample(theta0, 1, r0).row(0).transpose();
          }
          const auto r = smc::maximise_marginal_likelihood(
              *problem, theta0, x0, o,
              [&](const smc::SmcStep& s) {
                resamples += s.resampled;
                emit(s.step, s.theta, s.ess, s.gamma, s.resampled);
              });
          if (r.theta.size() == 1) out["theta"] = r.theta[0];
          else out["theta"] = std::vector<double>(r.theta.data(), r.theta.data() + r.theta.size());
          if (a.problem == "gmm-reward") {
            Rng ev(derive_seed(ctx.common.seed, 3000));
            out["mean_reward"] = static_cast<const smc::MixtureRewardTuning&>(*problem).mean_reward(r.theta, 100000, ev);
          }
          out["final_ess"] = r.trajectory.back().ess;
          out["final_step_size"] = r.trajectory.back().gamma;
          out["resamples"] = resamples;
          out["particles"] = a.method == "soul" ? 1 : a.particles;
          if (a.problem == "logistic")
            out["test_accuracy"] = smc::BayesianLogistic::accuracy(test_f, test_l, r.population.x, r.population.weights());
        }
        bool finite = true;
        // Finite but astronomically large parameters are divergence too (none of these problems
        // has a maximiser beyond |theta| ~ 1e3).
        auto too_big = [](double v) { return !std::isfinite(v) || std::abs(v) > 1e8; };
        if (out["theta"].is_number()) finite = !too_big(out["theta"].get<double>());
        else
          for (const auto& v : out["theta"]) finite = finite && !too_big(v.get<double>());
        if (!finite) throw RuntimeError("theta diverged (try a smaller --lr or --step-size)");
        out["seconds"] = sw.seconds();
        out["steps_per_second"] = a.steps / std::max(sw.seconds(), 1e-9);
        for (auto it = extra.begin(); it != extra.end(); ++it) out[it.key()] = it.value();
        out["meta"] = ctx.prov.to_json();
        if (traj_file) {
          traj.close();
          if (!traj) throw RuntimeError("cannot write trajectory file", a.trajectory);
          traj_file->commit();
        }
        io::write_json(a.output, out);
      });
}
