// lmcleaner-unlearn: remove training data from a model trained with a recorded trajectory
// (lm-train --trajectory): LMCleaner (Xu et al., ICML 2026) and the baselines its paper compares
// against, with the certificate and the metrics that judge them (issue 34).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "cli/run_tool.hpp"
#include "cli/count.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "lm/model_io.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "unlearn/deletion.hpp"
#include "unlearn/lm_run.hpp"
#include "unlearn/lmcleaner.hpp"
#include "unlearn/trajectory.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

std::vector<std::int64_t> parse_ids(const std::string& list, const char* flag) {
  std::vector<std::int64_t> out;
  std::size_t a = 0;
  while (a <= list.size()) {
    const std::size_t b = std::min(list.find(',', a), list.size());
    const std::string item = list.substr(a, b - a);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0)
      throw UsageError(fmt::format("'{}' is not a non-negative integer", item), flag);
    out.push_back(v);
    a = b + 1;
  }
  return out;
}

double norm_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass: spin briefly, then sleep
  std::string traj_dir, corpus_path, output, method = "lmcleaner", hvp = "fisher", forget_path, documents, windows, steps,
                                        request_path, nonmembers_path, certificate_path;
  std::vector<std::string> references;
  std::string K_str = "16", precision = "float";
  std::int64_t at = -1, baseline_steps = 0, eval_windows = 128;
  double damping = 0, baseline_lr = 0, alpha = 1.0;
  bool no_probe = false, no_eval = false;
  unlearn::NoiseOptions noise;
  unlearn::BoundOptions bound;
  cli::ToolInfo info{
      "lmcleaner-unlearn",
      "Forget training data of a model whose run was recorded with lm-train --trajectory DIR: LMCleaner\n"
      "(Xu et al., ICML 2026, Algorithm 1) or a baseline (--method).  The deletion names training documents\n"
      "(--forget FILE, read like the corpus, each matched exactly; --documents ids), windows (--windows) or\n"
      "batches (--steps), or a JSON request (--request).  Every step whose batch held a deleted window is a\n"
      "deleted step tz (the batch is the unit: the counterfactual skips the step).  LMCleaner: u[tz] =\n"
      "theta[tz+1] - theta[tz] (Phase 1) carried K steps by the linearised step map v <- v - eta_s H_s v\n"
      "(Phase 2; --hvp fisher: g g^T v as the paper, ggn: the Gauss-Newton product, exact: the Hessian's),\n"
      "theta_hat = theta[tau] - v (Phase 3), plus Gaussian noise calibrated to the bound Delta = sum_i\n"
      "(C_lin + gamma^K*/(1 - gamma)) ||u_i|| (Phase 4; --noise subspace: sigma_par on a public rank-k subspace,\n"
      "beta sigma_par off it; isotropic; none).  The certificate states epsilon, delta, each term and whether\n"
      "it is certified (gamma and C_lin given as public constants), empirical (estimated from this\n"
      "trajectory: gamma the mean contraction of ||v||, C_lin from the measured linearisation residual) or a\n"
      "substitute (--substitute-norm: ||v|| for the bound, as the reference does without one; never\n"
      "certified).  Baselines: none (the model as trained), retrain (replay tz_min+1..tau-1 from theta[tz_min]\n"
      "with each deleted step a no-op, the gold standard), lmcleaner-inf (K = infinity), gradient-ascent\n"
      "(ascent on the forget windows), negrad+ (descent on retain minus --alpha x forget), finetune (descent on\n"
      "retain).  The report (stdout, JSON) has the distance to --reference (a retrain model), forget and\n"
      "retain loss, held-out perplexity, the loss-threshold membership-inference AUC of the forget documents\n"
      "against --nonmembers (0.5 = forgotten), FLOP and seconds against retrain's.  --at tau unlearns the\n"
      "state after tau steps (a request that arrived then).  Data never trained on by tau is refused (exit 1).",
      "  lmcleaner-unlearn run.traj corpus.tsv --forget canaries.tsv --method retrain -o retrain.h5\n"
      "  lmcleaner-unlearn run.traj corpus.tsv --forget canaries.tsv -K 32 --reference retrain.h5 -o clean.h5\n"
      "  lmcleaner-unlearn run.traj corpus.tsv --steps 120 --hvp exact -K inf --noise none -o clean.h5\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("trajectory", traj_dir, "The run's trajectory directory (lm-train --trajectory)")->required();
        app.add_option("corpus", corpus_path, "The training corpus the run read (checked by SHA-256)")->required();
        app.add_option("-o,--output", output, "The unlearned model (.h5)")->required();
        app.add_option("--method", method, "lmcleaner, lmcleaner-inf, none, retrain, gradient-ascent, negrad+ or finetune")
            ->capture_default_str()
            ->check(CLI::IsMember({"lmcleaner", "lmcleaner-inf", "none", "retrain", "gradient-ascent", "negrad+", "finetune"}));
        app.add_option("--forget", forget_path, "Documents to forget, a file read like the corpus (its format flags); each must be a training document");
        app.add_option("--documents", documents, "Training document ids to forget (a comma list; the training split's order, 0-based)");
        app.add_option("--windows", windows, "Training window ids to forget (a comma list)");
        app.add_option("--steps", steps, "Batches to forget, by step (a comma list)");
        app.add_option("--request", request_path, "A JSON file holding one deletion request: {\"documents\": [...], \"texts\": [...], \"windows\": [...], \"steps\": [...]}");
        app.add_option("--at", at, "tau: unlearn the state after this many steps (default: the trajectory's end)")->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("-K,--window", K_str, "Truncation window K: steps each deviation is carried (a count, or inf)")->capture_default_str();
        app.add_option("--hvp", hvp, "Curvature product: fisher (g g^T v, the paper's), ggn (Gauss-Newton) or exact (Hessian)")
            ->capture_default_str()
            ->check(CLI::IsMember({"fisher", "ggn", "exact"}));
        app.add_option("--hvp-precision", precision, "Curvature products and probes in float (the trainer's fast kernels; central differences of step 1e-2 ||theta|| / ||v||) or double (step 1e-4; several times slower)")
            ->capture_default_str()
            ->check(CLI::IsMember({"float", "double"}));
        app.add_option("--damping", damping, "The reference's damping lambda: v -= eta lambda v after each product (0 = the paper's)")->capture_default_str()->check(cli::non_negative());
        app.add_flag("--no-probe", no_probe, "Skip the linearisation probe (one more step-map evaluation per step; then --c-lin is needed for noise)");
        app.add_option("--noise", noise.kind, "Phase 4 noise: none, isotropic or subspace (warned when its expected norm exceeds the weights')")->capture_default_str()->check(CLI::IsMember({"subspace", "isotropic", "none"}));
        app.add_option("--epsilon", noise.epsilon, "Privacy epsilon (> 0)")->capture_default_str();
        app.add_option("--delta", noise.delta, "Privacy delta, in (0, 1)")->capture_default_str();
        app.add_option("--noise-rank", noise.rank, "subspace: rank k of the public projector")->capture_default_str();
        app.add_option("--beta", noise.beta, "subspace: sigma_perp = beta sigma_par, in (0, 1]")->capture_default_str();
        app.add_option("--public-seed", noise.public_seed, "subspace: the public projector's seed")->capture_default_str();
        app.add_option("--gamma", bound.gamma, "Public contraction constant gamma in (0, 1) (default: estimated; the bound is then empirical)");
        app.add_option("--c-lin", bound.c_lin, "Public linearisation constant C_lin >= 0 (default: estimated by the probe)");
        app.add_flag("--substitute-norm", bound.substitute_norm, "Calibrate the noise to ||v|| (the reference's fallback): labelled substitute, never certified");
        app.add_option("--baseline-steps", baseline_steps, "gradient-ascent, negrad+, finetune: SGD steps (default: the number of deleted steps)")->transform(cli::count(1, std::int64_t(1) << 30));
        app.add_option("--baseline-lr", baseline_lr, "gradient-ascent, negrad+, finetune: learning rate (default: the run's last)")->check(cli::positive());
        app.add_option("--alpha", alpha, "negrad+: the forget term's weight (loss = retain - alpha forget)")->capture_default_str()->check(cli::positive());
        app.add_option("--reference", references, "A model to measure the L2 distance to (the retrain model of lmcleaner-unlearn --method retrain; repeat for more: distances)");
        app.add_option("--nonmembers", nonmembers_path, "Documents never trained on for the membership-inference AUC (read like the corpus; default: the validation documents)");
        app.add_option("--eval-windows", eval_windows, "Retain windows scored (a seeded sample)")->capture_default_str()->transform(cli::count(1, std::int64_t(1) << 30));
        app.add_flag("--no-eval", no_eval, "Skip the metrics (the model and certificate only)");
        app.add_option("--certificate", certificate_path, "Also write the certificate JSON here");
      },
      [&](cli::Context& ctx) {
        const auto t0 = std::chrono::steady_clock::now();
        unlearn::LmCleanerOptions lo;
        lo.mode = unlearn::parse_hvp_mode(hvp);
        lo.damping = damping;
        lo.probe = !no_probe;
        if (K_str == "inf" || method == "lmcleaner-inf") {
          lo.K = -1;
        } else {
          if (K_str.empty() || K_str.find_first_not_of("0123456789") != std::string::npos)
            throw UsageError(fmt::format("'{}' is not a window: give a step count or inf", K_str), "--window");
          const auto k = parse_ids(K_str, "--window");
          lo.K = k[0];
        }
        for (const auto& r : references)
          if (!std::filesystem::exists(r)) throw unreadable_file(r);
        {  // an output may not replace an input or land in the trajectory it reads
          namespace fs = std::filesystem;
          std::error_code ec;
          const fs::path store = fs::weakly_canonical(traj_dir, ec);
          std::vector<std::string> inputs = {corpus_path, forget_path, nonmembers_path, request_path};
          inputs.insert(inputs.end(), references.begin(), references.end());
          for (const auto& [path, flag] : {std::pair<std::string, const char*>{output, "-o"}, {certificate_path, "--certificate"}}) {
            if (path.empty() || path == "-") continue;
            const fs::path o = fs::weakly_canonical(path, ec);
            const auto rel = o.lexically_relative(store);
            if (!rel.empty() && *rel.begin() != "..")
              throw UsageError(fmt::format("{} would write into the trajectory {} it reads", path, traj_dir), flag);
            for (const auto& in : inputs)
              if (!in.empty() && fs::weakly_canonical(in, ec) == o) throw UsageError(fmt::format("{} is also an input", path), flag);
            if (fs::is_directory(o, ec)) throw UsageError(fmt::format("{} is a directory", path), flag);
          }
          if (!certificate_path.empty() && !(method == "lmcleaner" || method == "lmcleaner-inf"))
            throw UsageError("only lmcleaner writes a certificate", "--certificate");
        }
        const bool cleaner = method == "lmcleaner" || method == "lmcleaner-inf";
        if (cleaner) unlearn::check_noise_options(noise, bound);
        if (forget_path.empty() && documents.empty() && windows.empty() && steps.empty() && request_path.empty())
          throw UsageError("name what to forget: --forget, --documents, --windows, --steps or --request");
        const std::string out_ext = std::filesystem::path(output).extension().string();
        if (out_ext != ".h5") throw UsageError("the unlearned model is an .h5 checkpoint", "-o");

        unlearn::Trajectory traj = unlearn::Trajectory::read(traj_dir);
        ctx.prov.extra["trajectory_bytes"] = traj.bytes;
        if (at >= 0) {
          if (at > static_cast<std::int64_t>(traj.steps.size()))
            throw InputError(fmt::format("--at {} is beyond the trajectory's {} steps", at, traj.steps.size()), traj_dir);
          traj.steps.resize(std::size_t(at));
          auto past = [&](std::int64_t c) { return c > at; };
          traj.checkpoints.erase(std::remove_if(traj.checkpoints.begin(), traj.checkpoints.end(), past), traj.checkpoints.end());
          traj.corrections.erase(std::remove_if(traj.corrections.begin(), traj.corrections.end(), past), traj.corrections.end());
        }
        const std::int64_t tau = static_cast<std::int64_t>(traj.steps.size());
        if (tau == 0) throw InputError(at == 0 ? "nothing was trained by step 0 (--at 0)" : "the trajectory holds no step", traj_dir);
        const nn::Documents docs = nn::read_corpus(corpus_path, traj.meta.corpus);
        if (docs.sha256 != traj.meta.corpus_sha256)
          throw InputError(fmt::format("not the corpus the run trained on (SHA-256 {}, the trajectory's {})", docs.sha256.substr(0, 12),
                                       traj.meta.corpus_sha256.substr(0, 12)),
                           corpus_path);
        ctx.prov.add_input(corpus_path, docs.sha256);
        const lm::Model first = lm::load_checkpoint(traj.checkpoint_path(traj.checkpoints.front()));
        const lm::Tokenizer tok(first.tokenizer_model, "model tokenizer");
        const int bos = first.config.add_bos ? first.config.bos_id : -1;
        std::vector<std::int64_t> starts;
        std::vector<int> stream = nn::tokenize_documents(tok, docs.train, bos, corpus_path, &starts);
        if (starts != traj.meta.doc_starts)
          throw InputError("the corpus tokenizes differently from the recorded run (document boundaries differ)", corpus_path);

        // ---- the deletion ----
        unlearn::DeletionRequest req;
        if (!request_path.empty()) {
          std::string sha;
          req = unlearn::DeletionRequest::from_json(io::read_json(request_path, &sha), request_path);
          ctx.prov.add_input(request_path, sha);
          if (!req.settings.empty())
            throw UsageError(fmt::format("'{}' is a setting of lm-train's online requests; here give the flags (--at, -K, --hvp, --noise, ...)",
                                         req.settings.begin().key()),
                             "--request");
        }
        std::vector<std::string> forget_docs;
        if (!forget_path.empty()) {
          const nn::Documents f = nn::read_corpus(forget_path, traj.meta.corpus);
          ctx.prov.add_input(forget_path, f.sha256);
          forget_docs = nn::split_documents(f, "all");
          req.texts.insert(req.texts.end(), forget_docs.begin(), forget_docs.end());
        }
        if (!documents.empty()) {
          const auto d = parse_ids(documents, "--documents");
          req.documents.insert(req.documents.end(), d.begin(), d.end());
        }
        if (!windows.empty()) {
          const auto w = parse_ids(windows, "--windows");
          req.windows.insert(req.windows.end(), w.begin(), w.end());
        }
        if (!steps.empty()) {
          const auto s = parse_ids(steps, "--steps");
          req.steps.insert(req.steps.end(), s.begin(), s.end());
        }
        const unlearn::ResolvedDeletion del = unlearn::resolve_deletion(req, traj.meta, traj.steps, docs.train);
        if (!del.untrained.empty())
          throw InputError(fmt::format("{} of the {} windows to forget were never trained on in the first {} steps (window {} first): "
                                       "nothing to unlearn there",
                                       del.untrained.size(), del.data_windows.size(), tau, del.untrained.front()));
        if (del.steps.empty()) throw InputError("no step trained on the data to forget");
        for (const auto& d : del.documents) forget_docs.push_back(docs.train[std::size_t(d)]);
        forget_docs.erase(std::unique(forget_docs.begin(), forget_docs.end()), forget_docs.end());
        std::sort(forget_docs.begin(), forget_docs.end());
        forget_docs.erase(std::unique(forget_docs.begin(), forget_docs.end()), forget_docs.end());
        log::info("{} windows in {} of {} steps (first {}, last {}); {} benign windows of those batches to re-queue", del.windows.size(),
                  del.steps.size(), tau, del.steps.front(), del.steps.back(), del.requeue.size());

        // ---- the method ----
        // the windows no deleted step's forgotten data touches (the baselines' retain set and the retain loss's pool)
        std::vector<std::int64_t> retain_windows;
        {
          const std::set<std::int64_t> gone(del.windows.begin(), del.windows.end());
          for (std::int64_t w = 0; w < traj.meta.windows; ++w)
            if (!gone.count(w)) retain_windows.push_back(w);
        }
        const int B = traj.meta.train_options.at("batch").get<int>();
        unlearn::LmRun run(traj, stream);
        run.set_double_products(precision == "double");
        const double step_flop = run.step_flop();
        const std::int64_t tz_min = del.steps.front();
        // retrain trains tz_min + 1 .. tau - 1 but the deleted steps (no-ops)
        const std::int64_t retrain_steps = tau - tz_min - static_cast<std::int64_t>(del.steps.size());
        nlohmann::json report{{"method", method}, {"tau", tau}, {"deleted_steps", del.steps}, {"deleted_windows", del.windows.size()},
                              {"forget_documents", forget_docs.size()}, {"requeue_windows", del.requeue}};
        std::vector<double> theta;
        double flop = 0;
        const auto m0 = std::chrono::steady_clock::now();
        const std::int64_t replay0 = run.steps_replayed();
        if (method == "none") {
          run.seek(tau);
          run.params(theta);
        } else if (method == "retrain") {
          run.seek(tz_min);
          const std::int64_t seek_steps = run.steps_replayed() - replay0;
          const std::int64_t taken = unlearn::retrain(run, del.steps, theta);
          flop = double(run.steps_replayed() - replay0 - seek_steps) * step_flop;
          report["steps_taken"] = taken;
          report["seek_steps"] = seek_steps;
        } else if (cleaner) {
          run.seek(tz_min);
          const std::int64_t seek_steps = run.steps_replayed() - replay0;
          const unlearn::Correction c = unlearn::lmcleaner_correction(run, del.steps, lo);
          const unlearn::Certificate cert = unlearn::certify(c, bound, noise);
          run.seek(tau);
          run.params(theta);
          for (std::size_t i = 0; i < theta.size(); ++i) theta[i] -= c.v[i];
          const unlearn::NoiseDraw draw = unlearn::add_noise(theta, cert, noise);
          if (draw.swamps())
            log::warn("the calibrated noise (norm {:.4g}, sigma_par {:.4g}) is larger than the weights (norm {:.4g}): the model is destroyed "
                      "(the certificate's {} bound: {})",
                      draw.norm, cert.sigma_par, draw.theta_norm, cert.kind,
                      cert.truncation_term > cert.linearisation_term ? "its truncation term gamma^K/(1-gamma) dominates" : "its linearisation term dominates");
          nlohmann::json cj = cert.to_json(c);
          cj["noise_norm"] = draw.norm;
          cj["noise_rms_par"] = draw.rms_par;
          cj["noise_rms_perp"] = draw.rms_perp;
          cj["hvp"] = hvp;
          cj["hvp_precision"] = precision;
          cj["assumption"] = run.assumption();
          cj["clipped_steps_in_window"] = run.clipped_steps_in(tz_min, tau);
          report["certificate"] = cj;
          if (!certificate_path.empty()) io::write_json(certificate_path, cj);
          // the walk's own replay (window steps) and probes are training steps; seek to tz_min is not counted (retrain needs it too)
          const std::int64_t walk_steps = c.steps_replayed;
          flop = double(walk_steps + c.probes) * step_flop + double(c.products) * run.hvp_flop(lo.mode);
          report["seek_steps"] = seek_steps;
          report["walk_steps"] = walk_steps;
          report["products"] = c.products;
          report["probes"] = c.probes;
          report["K"] = lo.K < 0 ? nlohmann::json("inf") : nlohmann::json(lo.K);
          report["window_over_K"] = lo.K > 0 ? nlohmann::json(double(tau - tz_min) / double(lo.K)) : nlohmann::json();
        } else {  // gradient-ascent, negrad+, finetune: SGD on theta[tau]
          run.seek(tau);
          run.params(theta);
          const std::vector<std::int64_t>& retain = retain_windows;
          if (retain.empty() && method != "gradient-ascent") throw InputError("every window is deleted: nothing to retain");
          const std::int64_t n_steps = baseline_steps > 0 ? baseline_steps : static_cast<std::int64_t>(del.steps.size());
          const double lr = baseline_lr > 0 ? baseline_lr : traj.steps.back().lr;
          Rng rng(ctx.common.seed);
          std::vector<double> gf, gr;
          const std::vector<std::int64_t>& forget = del.windows;
          auto sample = [&](const std::vector<std::int64_t>& pool) {
            std::vector<std::int64_t> b;
            for (int i = 0; i < B; ++i) b.push_back(pool[rng.below(pool.size())]);
            return b;
          };
          for (std::int64_t k = 0; k < n_steps; ++k) {
            if (method != "finetune") run.windows_gradient(sample(forget), gf);
            if (method != "gradient-ascent") run.windows_gradient(sample(retain), gr);
            for (std::size_t i = 0; i < theta.size(); ++i) {
              double g = 0;
              if (method == "gradient-ascent") g = -gf[i];
              else if (method == "negrad+") g = gr[i] - alpha * gf[i];
              else g = gr[i];
              theta[i] -= lr * g;
            }
            run.set_params(theta);
            flop += (method == "negrad+" ? 2.0 : 1.0) * step_flop / traj.meta.train_options.at("accum").get<int>();
          }
          report["baseline_steps"] = n_steps;
          report["baseline_lr"] = lr;
        }
        const double method_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
        report["flop"] = flop;
        report["retrain_flop"] = double(retrain_steps) * step_flop;
        report["flop_vs_retrain"] = retrain_steps > 0 ? nlohmann::json(flop / (double(retrain_steps) * step_flop)) : nlohmann::json();
        report["seconds"] = method_seconds;
        for (const double x : theta)
          if (!std::isfinite(x)) throw RuntimeError("the unlearned weights are not finite (the baseline's learning rate may be too high)");
        run.set_params(theta);
        lm::Model out = run.model();

        // ---- metrics ----
        if (!no_eval) {
          nn::LlamaParams<float>& P = run.float_params();
          const nn::Windows W{&stream, traj.meta.seq_len};
          std::vector<std::int64_t> retain = retain_windows;
          Rng rng(derive_seed(ctx.common.seed, 7));
          for (std::size_t i = retain.size(); i > 1; --i) std::swap(retain[i - 1], retain[rng.below(i)]);
          if (retain.size() > std::size_t(eval_windows)) retain.resize(std::size_t(eval_windows));
          std::sort(retain.begin(), retain.end());
          nlohmann::json m;
          m["forget_window_loss"] = unlearn::windows_loss(P, W, del.windows, B);
          m["retain_loss"] = retain.empty() ? nlohmann::json() : nlohmann::json(unlearn::windows_loss(P, W, retain, B));
          m["retain_windows"] = retain.size();
          const std::vector<int> val = nn::tokenize_documents(tok, docs.val, bos, corpus_path);
          if (val.size() > 1) {
            const nn::EvalResult r = nn::evaluate(P, val, traj.meta.seq_len, B);
            m["heldout_loss"] = r.loss;
            m["heldout_perplexity"] = r.perplexity();
          }
          if (!forget_docs.empty() && docs.val.empty() && nonmembers_path.empty())
            log::warn("no validation documents and no --nonmembers: no membership-inference AUC");
          if (!forget_docs.empty()) {
            std::vector<std::string> non = docs.val;
            if (!nonmembers_path.empty()) {
              const nn::Documents nd = nn::read_corpus(nonmembers_path, traj.meta.corpus);
              ctx.prov.add_input(nonmembers_path, nd.sha256);
              non = nn::split_documents(nd, "all");
            }
            const auto fl = unlearn::document_losses(P, tok, forget_docs, bos, traj.meta.seq_len);
            const auto nl = unlearn::document_losses(P, tok, non, bos, traj.meta.seq_len);
            double mean = 0;
            for (double x : fl) mean += x / double(fl.size());
            m["forget_loss"] = mean;
            auto finite = [](const std::vector<double>& x) {
              return std::all_of(x.begin(), x.end(), [](double y) { return std::isfinite(y); });
            };
            if (!nl.empty() && finite(fl) && finite(nl)) m["mia_auc"] = unlearn::mia_auc(fl, nl);
            else if (!nl.empty()) log::warn("a document loss is not finite (the noise or the baseline broke the model): no MIA AUC");
            m["nonmember_documents"] = nl.size();
          }
          nlohmann::json dists = nlohmann::json::object();
          for (const auto& reference : references) {
            const lm::Model ref = lm::load_checkpoint(reference);
            ctx.prov.add_input(reference, lm::model_sha256(reference));
            const std::vector<double> rw = unlearn::flatten_trainable(nn::params_from_model<float>(ref).store);
            if (rw.size() != theta.size()) throw InputError("the reference model has another shape", reference);
            dists[reference] = norm_diff(theta, rw);
            if (!m.contains("distance_to_reference")) m["distance_to_reference"] = dists[reference];
          }
          if (!references.empty()) m["distances"] = dists;
          report["metrics"] = m;
        }
        report["meta"] = ctx.prov.to_json();
        lm::save_checkpoint(output, out, io::h5::FloatStorage::f32, ctx.prov);
        report["total_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        io::write_json("-", report);
      });
}
