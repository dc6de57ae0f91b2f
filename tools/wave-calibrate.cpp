// wave-calibrate: offline calibration of training-free early exit (WAVE's exit window and proxy
// head, and the thresholds of CALM, DVP and LayerSkip's fixed exit) from the logit lens of a model
// over calibration text (issue 28).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "cli/run_tool.hpp"
#include "decode/exit_calibration.hpp"
#include "io/json.hpp"
#include "lm/model_io.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

nlohmann::json choice_json(const decode::ExitChoice& c, const decode::StepCost& cost, int L) {
  const double full = cost.block * L + cost.head;
  nlohmann::json j{{"agreement", c.agreement},     {"mean_depth", c.mean_depth}, {"exit_rate", c.exit_rate},
                   {"flops_per_token", c.flops},   {"head_flops_per_token", c.head_flops},
                   {"flops_speedup", c.flops > 0 ? full / c.flops : 0.0}, {"target_met", c.met},
                   {"faster_than_full", c.flops < full}};
  const auto& k = c.config;
  switch (k.method) {
    case decode::ExitMethod::wave:
      j["window_start"] = k.window_start;
      j["window_end"] = k.window_end;
      j["proxy_k"] = k.proxy_k;
      j["threshold"] = k.threshold;
      break;
    case decode::ExitMethod::dvp:
      j["dvp_layer"] = k.dvp_layer;
      j["proxy_k"] = k.proxy_k;
      j["threshold"] = k.threshold;
      break;
    case decode::ExitMethod::calm:
      j["min_layer"] = k.min_layer;
      j["threshold"] = k.threshold;
      break;
    case decode::ExitMethod::layerskip: j["exit_layer"] = k.exit_layer; break;
    default: break;
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, corpus_path, output = "-", split = "val";
  nn::CorpusOptions copt;
  std::vector<int> ks{32, 64, 128, 256, 512};
  int tokens = 8192, window = 512, dvp_layer = 0;
  double target = 0.95;
  cli::ToolInfo info{
      "wave-calibrate",
      "Calibrate training-free early exit on held-out text (issue 28).  The model runs over the calibration\n"
      "documents (a seeded half of the corpus split; the other half is left for wave-generate's evaluation)\n"
      "and the final RMSNorm + LM head is applied after every block (logit lens).  Reported: the per-depth\n"
      "agreement of the lens argmax with the final one, the histogram of each token's saturation depth\n"
      "(from which the argmax stays final), and, simulated teacher-forced on the lens, the cheapest\n"
      "setting of each method whose agreement with the full model meets --target-agreement: WAVE's exit\n"
      "window [start, end], proxy vocabulary K (chosen at the window start from --proxy-k) and threshold\n"
      "on the top-2 softmax gap over K; CALM's first checked depth and threshold (full head at each\n"
      "depth); DVP's K and threshold at the fixed --dvp-layer; LayerSkip's shallowest fixed exit depth.\n"
      "Cost = FLOPs per decoded token (blocks at the mean context, heads: 2 d per vocabulary row, state\n"
      "copies: the K/V projections of each block not run).  Writes JSON (-o, default stdout) that\n"
      "wave-generate --calibration reads; it records the model's SHA-256 and the evaluation documents.",
      "  wave-calibrate data/models/kjv16l.h5 data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20 -o wave.json\n"
      "  wave-calibrate model.h5 text.txt --split all --tokens 4096 --target-agreement 0.9 | jq .wave\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& a) {
        a.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        a.add_option("corpus", corpus_path, "Text read as lm-train reads it; the calibration and evaluation documents come from --split")->required();
        nn::add_corpus_flags(a, copt);
        a.add_option("--split", split, "val (lm-train's held-out documents), train or all")->capture_default_str()
            ->check(CLI::IsMember({"val", "train", "all"}));
        a.add_option("--tokens", tokens, "Calibration tokens")->capture_default_str()->check(cli::int_range(16, 1 << 24));
        a.add_option("--window", window, "Tokens per forward pass (at most n_ctx)")->capture_default_str()->check(cli::int_range(2, 1 << 20));
        a.add_option("--target-agreement", target, "Agreement with the full model each method must reach")->capture_default_str()
            ->check(CLI::Range(0.0, 1.0));
        a.add_option("--proxy-k", ks, "Comma list of proxy vocabulary sizes to consider")->delimiter(',')->capture_default_str()
            ->check(cli::int_range(2, 1 << 24));
        a.add_option("--dvp-layer", dvp_layer, "DVP's pruning depth (default: n_layers / 8, at least 1)")->check(cli::int_range(1, 1 << 20));
        a.add_option("-o,--output", output, "Calibration, *.json (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        const std::string model_hash = lm::model_sha256(model_path);
        ctx.prov.add_input(model_path, model_hash);
        const lm::Model model = lm::load_any(model_path);
        const lm::ModelConfig& c = model.config;
        const int L = c.n_layers;
        if (L < 2) throw InputError(fmt::format("the model has {} block: nothing to exit early from", L), model_path);
        if (window > c.n_ctx) throw UsageError(fmt::format("{} tokens per pass exceed n_ctx = {}", window, c.n_ctx), "--window");
        for (int k : ks)
          if (k > c.vocab_size) throw UsageError(fmt::format("proxy size {} above the vocabulary ({})", k, c.vocab_size), "--proxy-k");
        if (dvp_layer == 0) dvp_layer = std::max(1, L / 8);
        if (dvp_layer >= L) throw UsageError(fmt::format("DVP's depth {} must be below the model's {} blocks", dvp_layer, L), "--dvp-layer");
        const lm::Tokenizer tok = lm::model_tokenizer(model, model_path);
        const nn::Documents docs = nn::read_corpus(corpus_path, copt);
        ctx.prov.add_input(corpus_path, docs.sha256);
        const std::vector<std::string> pool = nn::split_documents(docs, split);
        if (pool.size() < 2)
          throw InputError(fmt::format("the {} split has {} document{}; calibration and evaluation need 2{}", split, pool.size(),
                                       pool.size() == 1 ? "" : "s", split == "all" ? "" : " (try --split all)"),
                           corpus_path);
        // A seeded half of the split calibrates; the other half is for evaluation.
        std::vector<int> order(pool.size());
        std::iota(order.begin(), order.end(), 0);
        Rng rng(ctx.common.seed);
        for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
        const std::size_t n_cal = (order.size() + 1) / 2;
        std::vector<int> cal(order.begin(), order.begin() + std::ptrdiff_t(n_cal)), eval(order.begin() + std::ptrdiff_t(n_cal), order.end());
        std::sort(cal.begin(), cal.end());
        std::sort(eval.begin(), eval.end());
        std::vector<int> stream;
        for (int di : cal) {
          if (static_cast<int>(stream.size()) >= tokens) break;
          std::vector<int> t = tok.encode(pool[std::size_t(di)], corpus_path);
          if (c.bos_id >= 0) stream.push_back(c.bos_id);
          stream.insert(stream.end(), t.begin(), t.end());
        }
        if (static_cast<int>(stream.size()) > tokens) stream.resize(std::size_t(tokens));
        if (stream.size() < 16)
          throw InputError(fmt::format("the calibration half of the {} split holds {} tokens; at least 16 are needed", split, stream.size()),
                           corpus_path);
        if (static_cast<int>(stream.size()) < tokens)
          log::warn("the calibration half of the {} split holds {} tokens, fewer than --tokens {}", split, stream.size(), tokens);

        decode::LensData lens = decode::make_lens(c, ks);
        Stopwatch sw;
        Progress bar((stream.size() + std::size_t(window) - 1) / std::size_t(window), "windows");
        for (std::size_t at = 0; at < stream.size(); at += std::size_t(window)) {
          const std::vector<int> w(stream.begin() + std::ptrdiff_t(at), stream.begin() + std::ptrdiff_t(std::min(stream.size(), at + window)));
          decode::add_lens_window(model, w, lens);
          bar.tick();
        }
        bar.finish();
        const double lens_s = sw.seconds();
        const double context = lens.context_sum / static_cast<double>(lens.tokens());
        const decode::StepCost cost = decode::StepCost::of(c, context);
        decode::ExitConfig base;
        base.dvp_layer = dvp_layer;
        nlohmann::json methods = nlohmann::json::object();
        for (decode::ExitMethod m : {decode::ExitMethod::wave, decode::ExitMethod::calm, decode::ExitMethod::dvp, decode::ExitMethod::layerskip}) {
          const decode::ExitChoice ch = decode::calibrate(lens, m, target, cost, base);
          if (!ch.met)
            log::warn("{}: no setting reaches agreement {} on the calibration text (best {:.3f}); it is reported", decode::exit_method_name(m),
                      target, ch.agreement);
          methods[decode::exit_method_name(m)] = choice_json(ch, cost, L);
          if (ch.flops >= cost.block * L + cost.head)
            log::warn("{}: its cheapest setting meeting the target is no faster than the full model (flops_speedup {:.3f}); decode with the full model",
                      decode::exit_method_name(m), (cost.block * L + cost.head) / ch.flops);
        }
        const std::vector<double> agree = decode::depth_agreement(lens);
        const std::vector<std::int64_t> sat = decode::saturation_histogram(lens);
        double mean_sat = 0;
        for (int l = 0; l < L; ++l) mean_sat += double(l + 1) * static_cast<double>(sat[std::size_t(l)]) / static_cast<double>(lens.tokens());
        nlohmann::json out{{"meta", ctx.prov.to_json()},
                           {"model_sha256", model_hash},
                           {"corpus_sha256", docs.sha256},
                           {"n_layers", L},
                           {"vocab_size", c.vocab_size},
                           {"split", split},
                           {"seed", ctx.common.seed},
                           {"calibration_documents", cal},
                           {"evaluation_documents", eval},
                           {"evaluation_sha256", nn::documents_sha256(pool, eval)},
                           {"tokens", lens.tokens()},
                           {"window", window},
                           {"target_agreement", target},
                           {"proxy_k_grid", lens.ks},
                           {"lens_seconds", lens_s},
                           {"depth_agreement", agree},
                           {"saturation_histogram", sat},
                           {"mean_saturation_depth", mean_sat},
                           {"cost", {{"mean_context", context}, {"block_flops", cost.block}, {"head_flops", cost.head},
                                     {"head_row_flops", cost.head_row}, {"state_copy_flops", cost.state_copy},
                                     {"full_flops_per_token", cost.block * L + cost.head}}},
                           {"wave", methods["wave"]},
                           {"calm", methods["calm"]},
                           {"dvp", methods["dvp"]},
                           {"layerskip", methods["layerskip"]}};
        io::write_json(output, out);
        const auto& w = out["wave"];
        log::info("{} calibration tokens; wave: window [{}, {}], K = {}, threshold {}: agreement {:.3f}, {:.2f} of {} blocks per token",
                  lens.tokens(), w["window_start"].get<int>(), w["window_end"].get<int>(), w["proxy_k"].get<int>(), w["threshold"].get<double>(),
                  w["agreement"].get<double>(), w["mean_depth"].get<double>(), L);
      });
}
