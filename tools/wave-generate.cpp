// wave-generate: greedy decoding with training-free early exit (WAVE, and the baselines it is
// compared with: CALM, DVP, SkipDecode, LayerSkip's fixed exit, the full model), measured against
// the full model in the same run (issue 28).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli/run_tool.hpp"
#include "decode/early_exit.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "lm/forward.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/sampler.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

/// Length of the longest common subsequence of a and b.
int lcs(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// One method's decode of one prompt.
struct Run {
  std::vector<int> tokens;
  std::vector<decode::ExitStep> steps;  ///< decode steps (lossless: the draft steps)
  double seconds = 0;
  decode::LosslessStats lossless;
};

/// Prefill `prompt` with the full model, then `n` tokens (the first from the prefill) by `cfg`.
Run generate(const lm::Model& m, const std::vector<int>& prompt, int n, const decode::ExitConfig& cfg, const decode::StepCost& cost,
             int draft = 0, bool reuse = true) {
  lm::KvCache cache(m.config);
  lm::ForwardOptions o;
  o.all_logits = false;
  o.logits_rows = {static_cast<int>(prompt.size()) - 1};
  o.greedy_only = true;
  const auto fr = lm::forward(m, cache, lm::Batch::causal(prompt, 0), o);
  cache.commit_all();
  Run r;
  r.tokens.push_back(fr.greedy[0]);
  Stopwatch sw;
  if (draft > 0) {
    r.tokens = decode::lossless_generate(m, cache, r.tokens[0], static_cast<int>(prompt.size()), n, draft, cfg, cost, r.lossless, reuse);
    r.steps = r.lossless.draft_steps;
    r.seconds = sw.seconds();
    return r;
  }
  for (int t = 1; t < n; ++t) {
    const decode::ExitStep s = decode::exit_decode_step(m, cache, r.tokens.back(), static_cast<int>(prompt.size()) + t - 1, t, cfg, cost);
    r.tokens.push_back(s.token);
    r.steps.push_back(s);
  }
  r.seconds = sw.seconds();
  return r;
}

/// Teacher-forced NLL of the `n` tokens after the first `prompt` ones of `doc` under `cfg`'s exits
/// (the prompt prefilled by the full model; each later token fed as input, its exit logits scoring
/// the next): the NLLs, +inf where a proxy head leaves the true token out.
std::vector<double> forced_nll(const lm::Model& m, const std::vector<int>& doc, int prompt, int n, const decode::ExitConfig& cfg,
                               const decode::StepCost& cost) {
  lm::KvCache cache(m.config);
  const std::vector<int> head(doc.begin(), doc.begin() + prompt);
  lm::ForwardOptions o;
  o.all_logits = false;
  o.logits_rows = {prompt - 1};
  const auto fr = lm::forward(m, cache, lm::Batch::causal(head, 0), o);
  cache.commit_all();
  std::vector<double> nll{-lm::log_softmax_at(fr.logits.row(0), m.config.vocab_size, doc[std::size_t(prompt)])};
  decode::ExitLogits z;
  for (int i = 1; i < n; ++i) {
    const int at = prompt + i - 1;  // input position
    decode::exit_decode_step(m, cache, doc[std::size_t(at)], at, i, cfg, cost, &z);
    nll.push_back(z.nll(doc[std::size_t(at) + 1]));
  }
  return nll;
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);
  std::string model_path, calibration, method_name = "wave", prompt, prompt_file, prompt_ids, output = "-", eval_corpus;
  nn::CorpusOptions copt;
  int prompt_tokens = 0, n_new = 128, n_prompts = 8, ppl_tokens = 0;
  bool no_compare = false, no_steps = false, lossless = false, no_reuse = false;
  int draft = 4;
  decode::ExitConfig cfg;
  CLI::App* app = nullptr;
  cli::ToolInfo info{
      "wave-generate",
      "Greedy decoding with training-free early exit, each token on the CPU engine block by block (issue 28).\n"
      "--method wave: after --window-start blocks the full LM head runs once and keeps its top --proxy-k ids\n"
      "(the proxy head); at each depth up to --window-end the top-2 softmax gap over those K logits is checked\n"
      "against --threshold and the token exits with the argmax over K; past the window the full model runs.\n"
      "Baselines: calm (the full head at every depth from --min-layer, threshold optionally decaying with the\n"
      "step, --decay-tau), dvp (the vocabulary pruned to --proxy-k ids once at --dvp-layer, exits at every\n"
      "later depth), skipdecode (token t of -n runs n_t blocks: the --skip-warmup lowest, then the top ones; n_t\n"
      "falls linearly from --skip-max to --skip-min; bypassed blocks are never attended), layerskip (a fixed\n"
      "exit after --exit-layer blocks), full.  An exit fills the K/V of the blocks not run by state copying\n"
      "(the exit hidden state through each later block's own norm, K/V projections and RoPE; CALM).  --lossless\n"
      "makes the exits drafts that the full model verifies in one pass, so the output equals full's; the verifier\n"
      "reuses the K/V and residuals of the blocks every draft ran in full (the window start, --min-layer,\n"
      "--dvp-layer or --exit-layer; LayerSkip's KV reuse) and runs only the blocks above (--no-draft-reuse: all).  Settings\n"
      "come from wave-calibrate's JSON (--calibration; flags override), which must be of this model.  Each\n"
      "prompt is prefilled by the full model, which gives the first token; the method then decodes -n - 1 more.\n"
      "Prompts: --prompt / --prompt-file / --prompt-ids, or --eval-corpus (the calibration's evaluation\n"
      "documents, each cut to --prompt-tokens, which it needs).  Writes JSON Lines (-o, default stdout): a meta line, per step\n"
      "{prompt, step, token, depth, exited, confidence, checks, head_flops} (not with --no-steps), a record per\n"
      "prompt and a summary: blocks per token, exit rate, head FLOPs per token and their overhead over the full\n"
      "model's one head, decode tokens/s and the speedup over the full model measured in the same run, and\n"
      "agreement with the full model's tokens (position-wise accuracy, exact-match prefix, ROUGE-L F1).",
      "  wave-generate data/models/kjv16l.h5 --calibration wave.json --eval-corpus data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20 --prompts 8 --prompt-tokens 64 -n 128 --no-steps | tail -1\n"
      "  wave-generate model.h5 --calibration wave.json --method calm --prompt-file p.txt -n 64 -o calm.jsonl\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& a) {
        app = &a;
        a.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        a.add_option("--calibration", calibration, "wave-calibrate's JSON (settings of wave, calm, dvp, layerskip)");
        a.add_option("--method", method_name, "wave, calm, dvp, skipdecode, layerskip or full")->capture_default_str()
            ->check(CLI::IsMember({"wave", "calm", "dvp", "skipdecode", "layerskip", "full"}));
        lm::add_prompt_flags(a, prompt, prompt_file, prompt_ids, prompt_tokens);
        a.add_option("--eval-corpus", eval_corpus, "Prompts from the calibration's evaluation documents of this corpus");
        nn::add_corpus_flags(a, copt);
        a.add_option("--prompts", n_prompts, "With --eval-corpus: prompts")->capture_default_str()->check(cli::int_range(1, 100000));
        a.add_option("-n,--n-predict", n_new, "Tokens per prompt (the first from the prefill)")->capture_default_str()->check(cli::int_range(2, 1 << 20));
        a.add_option("--threshold", cfg.threshold, "wave, calm, dvp: top-2 softmax gap needed to exit (> 1: never)")->check(CLI::NonNegativeNumber);
        a.add_option("--window-start", cfg.window_start, "wave: depth of the proxy head and the first check")->check(cli::int_range(0, 1 << 20));
        a.add_option("--window-end", cfg.window_end, "wave: last depth checked")->check(cli::int_range(0, 1 << 20));
        a.add_option("--proxy-k", cfg.proxy_k, "wave, dvp: proxy vocabulary size")->check(cli::int_range(0, 1 << 24));
        a.add_option("--min-layer", cfg.min_layer, "calm: first depth checked")->check(cli::int_range(0, 1 << 20));
        a.add_option("--decay-tau", cfg.decay_tau, "calm: threshold decay clip(0.9 lambda + 0.1 exp(-tau t / n)); 0 = constant")
            ->capture_default_str()->check(CLI::NonNegativeNumber);
        a.add_option("--dvp-layer", cfg.dvp_layer, "dvp: pruning depth")->check(cli::int_range(0, 1 << 20));
        a.add_option("--skip-min", cfg.skip_min, "skipdecode: blocks of the last token (default n_layers / 2)")->check(cli::int_range(0, 1 << 20));
        a.add_option("--skip-max", cfg.skip_max, "skipdecode: blocks of the first token (default n_layers)")->check(cli::int_range(0, 1 << 20));
        a.add_option("--skip-warmup", cfg.skip_warmup, "skipdecode: lowest blocks always run")->capture_default_str()->check(cli::int_range(0, 1 << 20));
        a.add_option("--exit-layer", cfg.exit_layer, "layerskip: fixed exit depth")->check(cli::int_range(0, 1 << 20));
        a.add_flag("--lossless", lossless,
                   "Exits draft tokens that the full model verifies in one pass (self-speculative): the output equals full's");
        a.add_option("--draft", draft, "--lossless: draft tokens per verification")->capture_default_str()->check(cli::int_range(1, 64));
        a.add_flag("--no-draft-reuse", no_reuse,
                   "--lossless: the verifier runs every block (by default it reuses the blocks every draft ran in full: LayerSkip's KV reuse)");
        a.add_option("--perplexity-tokens", ppl_tokens,
                     "With --eval-corpus: also the teacher-forced perplexity of this many tokens after each prompt, with exits and full")
            ->capture_default_str()->check(cli::int_range(0, 1 << 20));
        a.add_flag("--no-compare", no_compare, "Do not run the full model for comparison (no agreement or speedup)");
        a.add_flag("--no-steps", no_steps, "Leave the per-step records out");
        a.add_option("-o,--output", output, "JSON Lines (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_output_extension(output, "-o", {".jsonl", ".json"}, "the records are JSON Lines", true);
        cfg.method = decode::parse_exit_method(method_name);
        if (no_reuse && !lossless) throw UsageError("--no-draft-reuse needs --lossless", "--no-draft-reuse");
        if (app->count("--draft") && !lossless) throw UsageError("--draft needs --lossless", "--draft");
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        const bool have_prompt = app->count("--prompt") > 0 || !prompt_file.empty() || app->count("--prompt-ids") > 0;
        if (have_prompt == !eval_corpus.empty()) throw UsageError("give one of --prompt, --prompt-file, --prompt-ids or --eval-corpus");
        const std::string model_hash = lm::model_sha256(model_path);
        ctx.prov.add_input(model_path, model_hash);
        const lm::Model model = lm::load_any(model_path);
        const lm::ModelConfig& c = model.config;
        const int L = c.n_layers;
        // Settings: the calibration's, then the flags given.
        nlohmann::json cal;
        if (!calibration.empty()) {
          std::string cal_sha;
          cal = io::read_json(calibration, &cal_sha);
          ctx.prov.add_input(calibration, cal_sha);
          if (!cal.is_object() || !cal.contains("model_sha256") || !cal.contains("n_layers"))
            throw InputError("not a wave-calibrate output (no model_sha256 or n_layers)", calibration);
          if (cal.value("model_sha256", "") != model_hash)
            throw InputError("the calibration is of another model (its model_sha256 differs from this model's)", calibration);
        }
        if (!eval_corpus.empty() && cal.is_null()) throw UsageError("--eval-corpus takes its documents from --calibration", "--eval-corpus");
        auto setting = [&](const char* flag, const char* method, const char* key, auto& field) {
          if (app->count(flag) > 0) return;
          if (cal.contains(method) && cal[method].is_object() && cal[method].contains(key)) {
            try {
              field = cal[method][key].get<std::remove_reference_t<decltype(field)>>();
            } catch (const nlohmann::json::exception&) {
              throw InputError(fmt::format("{}.{} is not a number", method, key), calibration);
            }
            return;
          }
          if (!cal.is_null()) throw InputError(fmt::format("the calibration has no {}.{} (give {})", method, key, flag), calibration);
          throw UsageError(fmt::format("{} needs {} (or --calibration from wave-calibrate)", method, flag), flag);
        };
        switch (cfg.method) {
          case decode::ExitMethod::wave:
            setting("--window-start", "wave", "window_start", cfg.window_start);
            setting("--window-end", "wave", "window_end", cfg.window_end);
            setting("--proxy-k", "wave", "proxy_k", cfg.proxy_k);
            setting("--threshold", "wave", "threshold", cfg.threshold);
            break;
          case decode::ExitMethod::calm:
            setting("--min-layer", "calm", "min_layer", cfg.min_layer);
            setting("--threshold", "calm", "threshold", cfg.threshold);
            break;
          case decode::ExitMethod::dvp:
            setting("--dvp-layer", "dvp", "dvp_layer", cfg.dvp_layer);
            setting("--proxy-k", "dvp", "proxy_k", cfg.proxy_k);
            setting("--threshold", "dvp", "threshold", cfg.threshold);
            break;
          case decode::ExitMethod::layerskip: setting("--exit-layer", "layerskip", "exit_layer", cfg.exit_layer); break;
          case decode::ExitMethod::skipdecode:
            if (app->count("--skip-max") == 0) cfg.skip_max = L;
            if (app->count("--skip-min") == 0) cfg.skip_min = std::max(1, L / 2);
            break;
          case decode::ExitMethod::full: break;
        }
        cfg.max_new = n_new;
        try {
          cfg.validate(c);
        } catch (const UsageError& e) {  // a value the calibration gave, not a flag: bad input, naming the file
          if (!cal.is_null() && !e.where().empty() && app->count(e.where()) == 0)
            throw InputError(fmt::format("{} (the calibration's value for {})", e.what(), e.where()), calibration);
          throw;
        }
        if (lossless && cfg.method == decode::ExitMethod::full) throw UsageError("the full model drafts nothing to verify", "--lossless");

        // The prompts.
        std::vector<std::vector<int>> prompts, docs_for_ppl;
        std::unique_ptr<lm::Tokenizer> tok;
        if (!model.tokenizer_model.empty()) tok = std::make_unique<lm::Tokenizer>(lm::model_tokenizer(model, model_path));
        if (have_prompt) {
          prompts.push_back(lm::resolve_prompt(*app, prompt, prompt_file, prompt_ids, tok.get(), c, model_path, ctx.prov, prompt_tokens));
        } else {
          if (!tok) throw InputError("the model has no tokenizer to encode the corpus", model_path);
          if (prompt_tokens < 2) throw UsageError("--eval-corpus needs --prompt-tokens N >= 2 (the prompt cut from each document)", "--prompt-tokens");
          const nn::Documents docs = nn::read_corpus(eval_corpus, copt);
          ctx.prov.add_input(eval_corpus, docs.sha256);
          if (docs.sha256 != cal.value("corpus_sha256", ""))
            throw InputError("not the corpus the calibration was made on (its SHA-256 differs)", eval_corpus);
          const std::string split = cal.value("split", "val");
          const std::vector<std::string> pool = nn::split_documents(docs, split);
          const std::vector<int> eval_ids = cal.value("evaluation_documents", std::vector<int>{});
          for (int di : eval_ids)
            if (di < 0 || di >= static_cast<int>(pool.size()))
              throw InputError(fmt::format("evaluation document {} outside the {} split's {} (other corpus flags than the calibration's?)", di,
                                           split, pool.size()),
                               calibration);
          if (!cal.contains("evaluation_sha256"))
            throw InputError("the calibration predates the record of its evaluation documents (evaluation_sha256): run "
                             "wave-calibrate again",
                             calibration);
          if (nn::documents_sha256(pool, eval_ids) != cal.value("evaluation_sha256", ""))
            throw InputError("the evaluation documents read here differ from the calibration's: give the corpus flags it used "
                             "(--column, --doc-column, --val-every, --format, --field, --doc-field)",
                             eval_corpus);
          for (int di : eval_ids) {
            std::vector<int> t = tok->encode(pool[std::size_t(di)], eval_corpus);
            if (c.bos_id >= 0) t.insert(t.begin(), c.bos_id);
            if (static_cast<int>(t.size()) < prompt_tokens + (ppl_tokens > 0 ? ppl_tokens + 1 : 0)) continue;
            if (ppl_tokens > 0) docs_for_ppl.emplace_back(t.begin(), t.begin() + prompt_tokens + ppl_tokens + 1);
            t.resize(std::size_t(prompt_tokens));
            prompts.push_back(std::move(t));
            if (static_cast<int>(prompts.size()) == n_prompts) break;
          }
          if (static_cast<int>(prompts.size()) < n_prompts)
            log::warn("{} of the evaluation documents have at least {} tokens; using {} prompt(s)", prompts.size(),
                      prompt_tokens + (ppl_tokens > 0 ? ppl_tokens + 1 : 0), prompts.size());
          if (prompts.empty()) throw InputError(fmt::format("no evaluation document has {} tokens", prompt_tokens), eval_corpus);
        }
        if (ppl_tokens > 0 && eval_corpus.empty()) throw UsageError("needs --eval-corpus (the text to score)", "--perplexity-tokens");
        if (prompt_tokens + ppl_tokens + 1 > c.n_ctx)
          throw UsageError(fmt::format("--prompt-tokens {} plus {} scored exceed n_ctx = {}", prompt_tokens, ppl_tokens, c.n_ctx), "--perplexity-tokens");
        for (const auto& p : prompts)
          if (static_cast<int>(p.size()) + n_new > c.n_ctx)
            throw UsageError(fmt::format("a prompt of {} tokens plus {} new exceeds n_ctx = {}", p.size(), n_new, c.n_ctx), "-n");

        io::AtomicFile out_file(output == "-" ? "/dev/stdout" : output);
        std::ofstream out(out_file.temp_path(), std::ios::binary);
        if (!out) throw RuntimeError("cannot write file", output);
        out << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump() << "\n";
        const double mean_context = prompts[0].size() + n_new / 2.0;
        const decode::StepCost cost = decode::StepCost::of(c, mean_context);
        decode::ExitConfig full_cfg;
        full_cfg.max_new = n_new;
        double steps = 0, depth = 0, exits = 0, head = 0, flops = 0, secs = 0, full_secs = 0, acc = 0, prefix = 0, rouge = 0;
        double rounds = 0, drafted = 0, accepted = 0;
        int reused_depth = 0;
        Progress bar(prompts.size(), "prompts");
        for (std::size_t p = 0; p < prompts.size(); ++p) {
          const Run run = generate(model, prompts[p], n_new, cfg, cost, lossless ? draft : 0, !no_reuse);
          Run ref;
          const bool compare = !no_compare && cfg.method != decode::ExitMethod::full;
          if (compare) ref = generate(model, prompts[p], n_new, full_cfg, cost);
          double pd = 0, pe = 0, ph = 0, pf = 0;
          for (std::size_t i = 0; i < run.steps.size(); ++i) {
            const auto& s = run.steps[i];
            pd += s.depth;
            pe += s.exited;
            ph += s.head_flops;
            pf += s.flops;
            if (!no_steps)
            {
              nlohmann::json rec{{"prompt", p}, {lossless ? "draft" : "step", i + 1}, {"token", s.token}, {"depth", s.depth}, {"exited", s.exited},
                                 {"confidence", s.confidence}, {"checks", s.checks}, {"head_flops", s.head_flops}};
              if (lossless) rec["accepted"] = bool(run.lossless.draft_accepted[i]);
              out << rec.dump() << "\n";
            }
          }
          const double ns = static_cast<double>(run.steps.size());
          nlohmann::json rec{{"prompt", p},
                             {"prompt_tokens", prompts[p].size()},
                             {"tokens", run.tokens},
                             {"mean_depth", pd / ns},
                             {"exit_rate", pe / ns},
                             {"decode_seconds", run.seconds}};
          if (tok) rec["text"] = tok->decode(run.tokens);
          if (lossless) {
            rec["rounds"] = run.lossless.rounds;
            rec["accepted"] = run.lossless.accepted;
            rec["drafted"] = run.lossless.drafted;
            rounds += run.lossless.rounds;
            drafted += run.lossless.drafted;
            accepted += run.lossless.accepted;
            // The verifier's passes: the input and the drafts through the blocks it did not reuse.
            pf += run.lossless.verify_flops;
            reused_depth = run.lossless.reused_depth;
          }
          steps += ns;
          depth += pd;
          exits += pe;
          head += ph;
          flops += pf;
          secs += run.seconds;
          if (compare) {
            int same = 0, pre = 0;
            for (int i = 0; i < n_new; ++i) same += run.tokens[i] == ref.tokens[i];
            while (pre < n_new && run.tokens[pre] == ref.tokens[pre]) ++pre;
            const double l = lcs(run.tokens, ref.tokens);
            const double f1 = 2 * l / (run.tokens.size() + ref.tokens.size());  // equal lengths: P = R = F1
            rec["token_accuracy"] = double(same) / n_new;
            rec["exact_prefix"] = pre;
            rec["rouge_l"] = f1;
            rec["full_decode_seconds"] = ref.seconds;
            acc += double(same) / n_new;
            prefix += pre;
            rouge += f1;
            full_secs += ref.seconds;
          }
          out << nlohmann::json{{"prompt_summary", rec}}.dump() << "\n";
          bar.tick();
        }
        bar.finish();
        const double np = static_cast<double>(prompts.size()), full_flops = cost.block * L + cost.head;
        const double emitted = np * (n_new - 1);  // tokens after the prefill's
        nlohmann::json settings{{"method", method_name}};
        switch (cfg.method) {
          case decode::ExitMethod::wave:
            settings.update({{"window_start", cfg.window_start}, {"window_end", cfg.window_end}, {"proxy_k", cfg.proxy_k}, {"threshold", cfg.threshold}});
            break;
          case decode::ExitMethod::calm:
            settings.update({{"min_layer", cfg.min_layer}, {"threshold", cfg.threshold}, {"decay_tau", cfg.decay_tau}});
            break;
          case decode::ExitMethod::dvp:
            settings.update({{"dvp_layer", cfg.dvp_layer}, {"proxy_k", cfg.proxy_k}, {"threshold", cfg.threshold}});
            break;
          case decode::ExitMethod::skipdecode:
            settings.update({{"skip_min", cfg.skip_min}, {"skip_max", cfg.skip_max}, {"skip_warmup", cfg.skip_warmup}});
            break;
          case decode::ExitMethod::layerskip: settings["exit_layer"] = cfg.exit_layer; break;
          case decode::ExitMethod::full: break;
        }
        nlohmann::json summary{{"settings", settings},
                               {"prompts", prompts.size()},
                               {"new_tokens", n_new},
                               {"n_layers", L},
                               {"mean_depth", depth / steps},
                               {"exit_rate", exits / steps},
                               {"head_flops_per_token", head / steps},
                               {"head_overhead_flops_per_token", head / steps - cost.head},
                               {"flops_per_token", flops / emitted},
                               {"flops_speedup", full_flops / (flops / emitted)},
                               {"decode_tokens_per_s", emitted / secs},
                               {"threads", threads()}};
        if (!no_compare && cfg.method != decode::ExitMethod::full) {
          summary["full_decode_tokens_per_s"] = emitted / full_secs;
          summary["speedup"] = full_secs / secs;
          summary["token_accuracy"] = acc / np;
          summary["exact_prefix"] = prefix / np;
          summary["rouge_l"] = rouge / np;
        }
        if (lossless)
          summary["lossless"] = {{"draft", draft}, {"rounds", rounds}, {"drafted", drafted}, {"accepted", accepted},
                                 {"acceptance_rate", drafted > 0 ? accepted / drafted : 0.0},
                                 {"tokens_per_round", rounds > 0 ? emitted / rounds : 0.0}, {"reused_depth", reused_depth}};
        if (ppl_tokens > 0) {
          double s_full = 0, s_method = 0, s_full_defined = 0;
          std::size_t n_all = 0, n_defined = 0;
          for (const auto& doc : docs_for_ppl) {
            const std::vector<double> f = forced_nll(model, doc, prompt_tokens, ppl_tokens, full_cfg, cost);
            const std::vector<double> e = forced_nll(model, doc, prompt_tokens, ppl_tokens, cfg, cost);
            for (std::size_t i = 0; i < f.size(); ++i) {
              s_full += f[i];
              ++n_all;
              if (std::isfinite(e[i])) {
                s_method += e[i];
                s_full_defined += f[i];
                ++n_defined;
              }
            }
          }
          const double full_ppl = std::exp(s_full / n_all);
          nlohmann::json pj{{"tokens", n_all}, {"full", full_ppl}, {"defined_fraction", double(n_defined) / n_all}};
          if (n_defined > 0) {
            pj["method"] = std::exp(s_method / n_defined);
            pj["full_on_defined"] = std::exp(s_full_defined / n_defined);
            pj["change"] = std::exp(s_method / n_defined) / std::exp(s_full_defined / n_defined) - 1;
          }
          summary[lossless ? "draft_perplexity" : "perplexity"] = pj;  // lossless: the output is full's; this is the drafter's
        }
        out << nlohmann::json{{"summary", summary}}.dump() << "\n";
        out.close();
        if (!out) throw RuntimeError("cannot write file", output);
        out_file.commit();
        log::info("{}: {} prompt(s) x {} tokens, {:.2f} of {} blocks per token, exit rate {:.2f}{}", method_name, prompts.size(), n_new,
                  depth / steps, L, exits / steps,
                  summary.contains("speedup")
                      ? fmt::format(", speedup {:.2f}, token accuracy {:.3f}", summary["speedup"].get<double>(), summary["token_accuracy"].get<double>())
                      : "");
      });
}
