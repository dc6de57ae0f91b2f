// recdepth-sample: sampling from a recurrent-depth (Huginn-style) model on the CPU engine: ar at a
// fixed recurrence, ar-adaptive (KL exit per token) and the diffusion-forcing sampler (issue 36).
#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "decode/recdepth_sampler.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

nlohmann::json per_token(double value, int tokens) {
  return tokens > 0 ? nlohmann::json(value / tokens) : nlohmann::json(nullptr);
}

/// Sums over the prompts of a run, for the totals record.
struct Totals {
  long long prompt_tokens = 0, generated = 0, decode = 0, forwards = 0, core = 0, recurrence = 0;
  double prefill_s = 0, generate_s = 0, ar_s = 0, nll = 0;
  long long agree = 0, compared = 0, scored = 0;
  double agreement_sum = 0;
  int prompts = 0, compared_prompts = 0;
};

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass
  std::string model_path, prompt, prompt_file, prompt_ids, prompts_file, output, steps_log;
  std::string method = "diffusion-forcing", freeze = "latent-diff";
  int prompt_tokens = 0, recurrence = 0;
  bool ignore_eos = false, compare_ar = false, score = false;
  int ar_recurrence = 0;  // --compare-ar's baseline recurrence (0 = r)
  decode::RecdepthSampleConfig cfg;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "recdepth-sample",
      "Sample from a recurrent-depth model (Huginn-style prelude, core looped r times, coda; lm-init or\n"
      "lm-train --arch recurrent-depth) on the CPU engine with its compressed KV cache (each committed\n"
      "position keeps its latest core iteration's K/V).  Every method prefills the prompt at recurrence r\n"
      "(--recurrence, default the model's mean) and takes the first token from it; latent states start\n"
      "from a truncated normal drawn from (--seed, position).\n"
      "--method ar: one token per forward, r core iterations each (the baseline).\n"
      "--method ar-adaptive: per token one iteration at a time, the coda after each, exit once\n"
      "KL(p_prev || p_cur) < --kl-threshold (p_0 uniform; Huginn's KL exit).\n"
      "--method diffusion-forcing (Geiping, Yang & Su 2025): each forward runs the whole wavefront of\n"
      "undecided positions --inner-recurrence iterations, mixes their embeddings by an EMA (--ema), adds\n"
      "state noise beta0/(1+n_i) (--state-noise; n_i iterations so far), resamples every active token and\n"
      "appends --headway new positions (further ones get seeded random token ids, as the reference's extra_tokens), freezes by\n"
      "--freeze latent-diff (relative state change < --exit-threshold: all up to the last such position),\n"
      "token-stability or fixed, commits the frozen rows' K/V and drops the others'; at most\n"
      "--max-wavefront positions per forward.  A position whose row has had r iterations also freezes\n"
      "(so --inner-recurrence r --max-wavefront 1 --ema 0 --state-noise 0 is exactly ar).\n"
      "Output: a JSON summary (stdout, or -o x.json): settings, prompt and generated tokens, stop reason,\n"
      "prefill and generation seconds, tokens_per_s (tokens after the prefill's first / generation\n"
      "seconds), forwards_per_token, core_iterations_per_token (row x iteration evaluations per token),\n"
      "mean_recurrence_per_token (iterations of the row that predicted each token), the ids and the text.\n"
      "--compare-ar also runs ar at r: agreement_with_ar (position-wise equal ids over the shorter run)\n"
      "and speedup_over_ar (generation time ratio); --score adds the mean NLL and perplexity of the\n"
      "continuation scored by one forward at recurrence r.  --prompts FILE runs one prompt per line and\n"
      "reports per-prompt records and totals.  --steps-log x.jsonl writes a meta line and one record per\n"
      "forward (wavefront, frozen, committed, core iterations).  Greedy by default; --temperature\n"
      "samples (with --top-k / --top-p), seeded by --seed.",
      "  recdepth-sample model.h5 --prompt 'In the beginning' -n 64 --compare-ar --score\n"
      "  recdepth-sample model.h5 --prompts prompts.txt -n 128 --inner-recurrence 8 --exit-threshold 0.05 --headway 2 -o df.json --steps-log steps.jsonl\n"
      "  recdepth-sample model.h5 --prompt-ids 1,450,3186 --method ar-adaptive --kl-threshold 5e-4 | jq .core_iterations_per_token\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("model,-m,--model", model_path, "Recurrent-depth model (native .h5: no other format has the architecture)")->required();
        lm::add_prompt_flags(app, prompt, prompt_file, prompt_ids, prompt_tokens);
        app.add_option("--prompts", prompts_file, "Prompts, one per line (blank lines skipped); --prompt-tokens N cuts each longer one to its first N tokens");
        app.add_option("--method", method, "ar | ar-adaptive | diffusion-forcing")->capture_default_str()
            ->check(CLI::IsMember({"ar", "ar-adaptive", "diffusion-forcing"}));
        app.add_option("-n,--max-new-tokens", cfg.max_new_tokens, "Tokens to generate at most (per prompt)")->capture_default_str()
            ->transform(cli::count(1, 1 << 24));
        app.add_option("--recurrence", recurrence, "Core iterations r: ar's, ar-adaptive's most, diffusion forcing's prefill and per-position cap (default: the model's mean)")
            ->check(cli::int_range(1, 1 << 16));
        app.add_option("--kl-threshold", cfg.kl_threshold, "ar-adaptive: exit when KL(p_prev || p_cur) is below this (nats)")->capture_default_str()
            ->check(cli::non_negative());
        app.add_option("--inner-recurrence", cfg.inner_recurrence, "diffusion-forcing: core iterations per forward")->capture_default_str()
            ->check(cli::int_range(1, 1 << 16));
        app.add_option("--ema", cfg.ema, "diffusion-forcing: weight of the previous step's embedding, in [0, 1)")->capture_default_str()
            ->check(CLI::Range(0.0, 1.0));
        app.add_option("--state-noise", cfg.state_noise, "diffusion-forcing: beta0 of the state noise beta0 / (1 + n_i), in [0, 1]")->capture_default_str()
            ->check(CLI::Range(0.0, 1.0));
        app.add_option("--headway", cfg.headway, "diffusion-forcing: new positions per forward")->capture_default_str()
            ->check(cli::int_range(1, 1 << 16));
        app.add_option("--freeze", freeze, "diffusion-forcing: latent-diff | token-stability | fixed")->capture_default_str()
            ->check(CLI::IsMember({"latent-diff", "token-stability", "fixed"}));
        app.add_option("--exit-threshold", cfg.exit_threshold, "diffusion-forcing latent-diff: freeze when ||s - s_prev|| / ||s|| is below this")
            ->capture_default_str()->check(cli::non_negative());
        app.add_option("--max-wavefront", cfg.max_wavefront, "diffusion-forcing: most positions per forward (>= --headway)")->capture_default_str()
            ->check(cli::int_range(1, 1 << 20));
        lm::add_sampler_flags(app, cfg.sampler);
        app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the end-of-sequence token");
        app.add_flag("--compare-ar", compare_ar, "Also run ar at r on each prompt: agreement_with_ar and speedup_over_ar");
        app.add_option("--ar-recurrence", ar_recurrence, "--compare-ar: the baseline ar's recurrence (default --recurrence's r)")->check(cli::int_range(1, 65536));
        app.add_flag("--score", score, "Score each continuation by one forward at recurrence r (--ar-recurrence when given): mean NLL and perplexity");
        app.add_option("--steps-log", steps_log, "One record per forward (.jsonl)");
        app.add_option("-o,--output", output, "Summary (.json; default stdout)");
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        if (!prompts_file.empty() && (app->count("--prompt") > 0 || !prompt_file.empty() || app->count("--prompt-ids") > 0))
          throw UsageError("give one of --prompt, --prompt-file, --prompt-ids, --prompts");
        io::require_json_path(output);
        if (!steps_log.empty()) {
          io::require_output_extension(steps_log, "--steps-log", {".jsonl"}, "the step records are JSON Lines");
          io::check_output_dir(steps_log);
        }
        io::check_distinct_outputs({{"-o", output}, {"--steps-log", steps_log}}, {model_path, prompts_file, prompt_file});
        cfg.method = decode::parse_recdepth_method(method);
        cfg.freeze = decode::parse_freeze_rule(freeze);
        // A flag the chosen method never reads is a mistake on the command line, not a no-op.
        for (const char* flag : {"--inner-recurrence", "--ema", "--state-noise", "--headway", "--freeze", "--exit-threshold", "--max-wavefront"})
          if (app->count(flag) > 0 && cfg.method != decode::RecdepthMethod::diffusion_forcing)
            throw UsageError(fmt::format("{} is used by --method diffusion-forcing only (this run: {})", flag, method), flag);
        if (app->count("--kl-threshold") > 0 && cfg.method != decode::RecdepthMethod::ar_adaptive)
          throw UsageError(fmt::format("--kl-threshold is used by --method ar-adaptive only (this run: {})", method), "--kl-threshold");
        if (app->count("--exit-threshold") > 0 && cfg.freeze != decode::FreezeRule::latent_diff)
          throw UsageError(fmt::format("--exit-threshold is used by --freeze latent-diff only (this run: {})", freeze), "--exit-threshold");
        cfg.recurrence = recurrence;
        cfg.stop_at_eos = !ignore_eos;
        cfg.sampler.seed = ctx.common.seed;
        cfg.state_seed = ctx.common.seed;
        cfg.validate();

        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        const lm::Model model = lm::load_any(model_path);
        const lm::ModelConfig& c = model.config;
        decode::require_recdepth(c, model_path);
        std::unique_ptr<lm::Tokenizer> tok;
        if (!model.tokenizer_model.empty()) tok = std::make_unique<lm::Tokenizer>(lm::model_tokenizer(model, model_path));
        const int r = cfg.effective_recurrence(c);

        std::vector<std::vector<int>> prompts;
        std::vector<std::string> where;
        if (!prompts_file.empty()) {
          const std::string text = io::read_file(prompts_file);
          ctx.prov.add_input(prompts_file, io::sha256_hex(text));
          std::stringstream ss(text);
          std::string line;
          int ln = 0;
          while (std::getline(ss, line)) {
            ++ln;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.find_first_not_of(" \t") == std::string::npos) continue;
            const std::string at = fmt::format("{}, line {}", prompts_file, ln);
            std::vector<int> ids = lm::encode_prompt(tok.get(), c, line, at, model_path);
            if (prompt_tokens > 0 && static_cast<int>(ids.size()) > prompt_tokens) ids.resize(std::size_t(prompt_tokens));  // shorter lines pass whole
            prompts.push_back(std::move(ids));
            where.push_back(at);
          }
          if (prompts.empty()) throw InputError("no prompts (one per non-empty line)", prompts_file);
        } else {
          prompts.push_back(lm::resolve_prompt(*app, prompt, prompt_file, prompt_ids, tok.get(), c, model_path, ctx.prov, prompt_tokens));
          where.push_back(!prompt_ids.empty() ? "--prompt-ids" : !prompt_file.empty() ? prompt_file : app->count("--prompt") > 0 ? "--prompt" : "stdin");
        }
        for (std::size_t i = 0; i < prompts.size(); ++i)
          if (static_cast<int>(prompts[i].size()) >= c.n_ctx)
            throw InputError(fmt::format("prompt has {} tokens, no room to generate in the context of n_ctx = {}: keep its first "
                                         "tokens with --prompt-tokens N (N < {})", prompts[i].size(), c.n_ctx, c.n_ctx), where[i]);

        nlohmann::json settings = {{"recurrence", r}, {"max_new_tokens", cfg.max_new_tokens}, {"stop_at_eos", cfg.stop_at_eos},
                                   {"temperature", cfg.sampler.temperature}, {"top_k", cfg.sampler.top_k}, {"top_p", cfg.sampler.top_p}};
        if (cfg.method == decode::RecdepthMethod::ar_adaptive) settings["kl_threshold"] = cfg.kl_threshold;
        if (cfg.method == decode::RecdepthMethod::diffusion_forcing) {
          settings["inner_recurrence"] = cfg.inner_recurrence;
          settings["ema"] = cfg.ema;
          settings["state_noise"] = cfg.state_noise;
          settings["headway"] = cfg.headway;
          settings["freeze"] = freeze;
          if (cfg.freeze == decode::FreezeRule::latent_diff) settings["exit_threshold"] = cfg.exit_threshold;
          settings["max_wavefront"] = cfg.max_wavefront;
        }
        ctx.prov.extra["recdepth"] = {{"method", method}, {"settings", settings}};

        std::unique_ptr<io::AtomicFile> log_file;
        std::ofstream log_out;
        if (!steps_log.empty()) {
          log_file = std::make_unique<io::AtomicFile>(steps_log);
          log_out.open(log_file->temp_path(), std::ios::binary);
          if (!log_out) throw RuntimeError("cannot write file", steps_log);
          log_out << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        }

        Totals tot;
        nlohmann::json records = nlohmann::json::array();
        decode::RecdepthSampleConfig ar_cfg = cfg;
        ar_cfg.method = decode::RecdepthMethod::ar;
        if (ar_recurrence > 0) {
          if (!compare_ar) throw UsageError("--ar-recurrence sets the --compare-ar baseline: give --compare-ar", "--ar-recurrence");
          ar_cfg.recurrence = ar_recurrence;
          settings["ar_recurrence"] = ar_recurrence;
          ctx.prov.extra["recdepth"]["settings"] = settings;
        }
        for (std::size_t pi = 0; pi < prompts.size(); ++pi) {
          const std::vector<int>& ids = prompts[pi];
          const decode::RecdepthResult res = decode::recdepth_generate(model, ids, cfg);
          const int dt = res.decode_tokens();
          long long rec_sum = 0;
          for (std::size_t i = 1; i < res.recurrence_per_token.size(); ++i) rec_sum += res.recurrence_per_token[i];
          nlohmann::json rec = {{"prompt_tokens", ids.size()},
                                {"generated_tokens", res.tokens.size()},
                                {"decode_tokens", dt},
                                {"stop_reason", res.stop_reason},
                                {"prefill_seconds", res.prefill_s},
                                {"generation_seconds", res.generate_s},
                                {"tokens_per_s", res.generate_s > 0 && dt > 0 ? nlohmann::json(dt / res.generate_s) : nlohmann::json(nullptr)},
                                {"forwards", res.forwards},
                                {"forwards_per_token", per_token(double(res.forwards), dt)},
                                {"core_iterations", res.core_iterations},
                                {"core_iterations_per_token", per_token(double(res.core_iterations), dt)},
                                {"mean_recurrence_per_token", per_token(double(rec_sum), dt)},
                                {"recurrence_per_token", res.recurrence_per_token},
                                {"ids", res.tokens}};
          if (tok) rec["text"] = tok->decode(res.tokens);
          if (prompts.size() > 1) {
            rec["prompt"] = pi;
            rec["where"] = where[pi];
          }
          ++tot.prompts;
          tot.prompt_tokens += static_cast<long long>(ids.size());
          tot.generated += static_cast<long long>(res.tokens.size());
          tot.decode += dt;
          tot.forwards += res.forwards;
          tot.core += res.core_iterations;
          tot.recurrence += rec_sum;
          tot.prefill_s += res.prefill_s;
          tot.generate_s += res.generate_s;
          if (compare_ar) {
            const decode::RecdepthResult ar = decode::recdepth_generate(model, ids, ar_cfg);
            const double agree = decode::agreement(res.tokens, ar.tokens);
            const std::size_t n = std::min(res.tokens.size(), ar.tokens.size());
            rec["agreement_with_ar"] = agree;
            rec["speedup_over_ar"] = res.generate_s > 0 ? nlohmann::json(ar.generate_s / res.generate_s) : nlohmann::json(nullptr);
            rec["ar"] = {{"generated_tokens", ar.tokens.size()}, {"generation_seconds", ar.generate_s},
                         {"tokens_per_s", ar.generate_s > 0 && ar.decode_tokens() > 0 ? nlohmann::json(ar.decode_tokens() / ar.generate_s) : nlohmann::json(nullptr)},
                         {"ids", ar.tokens}};
            tot.ar_s += ar.generate_s;
            for (std::size_t i = 0; i < n; ++i) tot.agree += res.tokens[i] == ar.tokens[i];
            tot.compared += static_cast<long long>(n);
            tot.agreement_sum += agree;
            ++tot.compared_prompts;
          }
          if (score) {
            if (res.tokens.empty()) {
              rec["score"] = nullptr;
            } else {
              const decode::ContinuationScore s = decode::score_continuation(model, ids, res.tokens, ar_recurrence > 0 ? ar_recurrence : r, cfg.state_seed);
              rec["score"] = {{"tokens", s.tokens}, {"mean_nll", s.mean_nll}, {"perplexity", s.perplexity}};
              tot.nll += s.mean_nll * s.tokens;
              tot.scored += s.tokens;
            }
          }
          if (log_out.is_open())
            for (const auto& s : res.steps) {
              nlohmann::json j = {{"prompt", pi}, {"step", s.step}, {"first_pos", s.first_pos}, {"wavefront", s.wavefront},
                                  {"frozen", s.frozen}, {"committed", s.committed}, {"core_iterations", s.core_iterations},
                                  {"min_iterations", s.min_iterations}, {"max_iterations", s.max_iterations}, {"wall_s", s.wall_s}};
              if (cfg.method == decode::RecdepthMethod::ar_adaptive) j["kl"] = s.kl;
              log_out << j.dump() << "\n";
            }
          log::info("prompt {}: {} tokens ({}), {} forwards, {:.2f} core iterations per token", pi + 1, res.tokens.size(),
                    res.stop_reason, res.forwards, dt > 0 ? double(res.core_iterations) / dt : 0.0);
          records.push_back(std::move(rec));
        }

        nlohmann::json summary = {{"meta", ctx.prov.to_json()}, {"method", method}, {"settings", settings},
                                  {"threads", threads()}, {"device", "cpu"}};
        if (prompts.size() == 1) {
          summary.update(records[0]);
        } else {
          nlohmann::json t = {{"prompts", tot.prompts},
                              {"prompt_tokens", tot.prompt_tokens},
                              {"generated_tokens", tot.generated},
                              {"decode_tokens", tot.decode},
                              {"prefill_seconds", tot.prefill_s},
                              {"generation_seconds", tot.generate_s},
                              {"tokens_per_s", tot.generate_s > 0 && tot.decode > 0 ? nlohmann::json(tot.decode / tot.generate_s) : nlohmann::json(nullptr)},
                              {"forwards", tot.forwards},
                              {"forwards_per_token", per_token(double(tot.forwards), static_cast<int>(tot.decode))},
                              {"core_iterations", tot.core},
                              {"core_iterations_per_token", per_token(double(tot.core), static_cast<int>(tot.decode))},
                              {"mean_recurrence_per_token", per_token(double(tot.recurrence), static_cast<int>(tot.decode))}};
          if (compare_ar) {
            t["agreement_with_ar"] = tot.compared > 0 ? nlohmann::json(double(tot.agree) / tot.compared) : nlohmann::json(nullptr);
            t["mean_agreement_with_ar"] = tot.agreement_sum / tot.compared_prompts;
            t["speedup_over_ar"] = tot.generate_s > 0 ? nlohmann::json(tot.ar_s / tot.generate_s) : nlohmann::json(nullptr);
            t["ar_generation_seconds"] = tot.ar_s;
          }
          if (score && tot.scored > 0) {
            t["score"] = {{"tokens", tot.scored}, {"mean_nll", tot.nll / tot.scored}, {"perplexity", std::exp(tot.nll / tot.scored)}};
          }
          summary["prompts"] = std::move(records);
          summary["totals"] = std::move(t);
        }
        if (log_out.is_open()) {
          log_out.close();
          if (!log_out) throw RuntimeError("cannot write file", steps_log);
        }
        io::write_json(output.empty() ? "-" : output, summary);
        if (log_file) log_file->commit();
      });
}
