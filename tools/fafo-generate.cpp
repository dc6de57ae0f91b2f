// fafo-generate: lossless multi-token decoding (FAFO and its baselines) on the CPU or CUDA engine.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cli/run_tool.hpp"
#include "decode/adaptive.hpp"
#include "decode/decoder.hpp"
#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/engine.hpp"
#include "lm/lora.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/text_stream.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

nlohmann::json summarise(const decode::DecodeResult& r) {
  std::map<int, int> hist;
  double draft_attn = 0.0, verify_attn = 0.0, step_wall = 0.0, step_engine = 0.0;
  int decode_tokens = 0, rows = 0, from_prompt = 0, from_lookahead = 0, from_both = 0;
  for (const auto& s : r.steps) {
    from_prompt += s.from_prompt;
    from_lookahead += s.from_lookahead;
    from_both += s.from_both;
    ++hist[s.accepted];
    decode_tokens += s.accepted;
    draft_attn += s.draft_attn_cpu_s;
    verify_attn += s.verify_attn_cpu_s;
    step_wall += s.wall_s;
    step_engine += s.engine_s;
    rows += s.rows;
  }
  nlohmann::json h = nlohmann::json::object();
  for (auto [k, v] : hist) h[std::to_string(k)] = v;
  const double n_steps = static_cast<double>(r.steps.size());
  // Where the accepted drafts came from (the bonus token of each step is the model's own).
  const double drafted = from_prompt + from_lookahead + from_both;
  const nlohmann::json sources = {{"prompt_match", from_prompt}, {"lookahead", from_lookahead}, {"both", from_both},
                                  {"lookahead_share", drafted > 0 ? (from_lookahead + from_both) / drafted : 0.0}};
  return {{"generated_tokens", r.tokens.size()},
          {"accepted_draft_sources", sources},
          {"decode_steps", r.steps.size()},
          {"forward_passes", r.forward_passes},
          {"mean_accepted_per_step", n_steps > 0 ? decode_tokens / n_steps : 0.0},
          {"accepted_histogram", h},
          {"mean_rows_per_step", n_steps > 0 ? rows / n_steps : 0.0},
          {"prefill_seconds", r.prefill_s},
          {"decode_seconds", r.decode_s},
          {"decode_tokens_per_s", r.decode_s > 0 ? decode_tokens / r.decode_s : 0.0},
          {"mean_step_seconds", n_steps > 0 ? step_wall / n_steps : 0.0},
          {"mean_host_seconds_per_step", n_steps > 0 ? (step_wall - step_engine) / n_steps : 0.0},
          {"time_split_cpu_s", {{"drafting_attention", draft_attn}, {"verification_attention", verify_attn}}},
          {"stop_reason", r.eos ? "eos" : r.context_full ? "n_ctx" : "max_new_tokens"}};
}

/// Share of generated tokens that complete a trigram already seen earlier in prompt + output
/// (how much of the continuation n-gram drafting can predict).
double repeated_trigram_rate(const std::vector<int>& prompt, const std::vector<int>& gen) {
  std::vector<int> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  std::set<std::array<int, 3>> seen;
  int repeated = 0;
  const std::size_t start = prompt.size();
  for (std::size_t i = 2; i < all.size(); ++i) {
    const std::array<int, 3> t{all[i - 2], all[i - 1], all[i]};
    if (i >= start && seen.count(t)) ++repeated;
    seen.insert(t);
  }
  return gen.empty() ? 0.0 : double(repeated) / gen.size();
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass: spin briefly, then sleep
  std::string model_path, prompt, prompt_file, prompt_ids, output, method = "fafo", compare, skip_file, device = "cpu",
      weights = "auto", act_quant = "none", lora_dir;
  std::string search_out, calibration, kv_policy = "streaming", kv_pool = "max", kv_gqa_reduce = "sum";
  std::string schedule = "adaptive", pass_cost_cache = decode::default_pass_cost_cache();
  int prompt_tokens = 0, calib_tokens = 32, max_skips = 8;
  decode::DecodeConfig dc;
  bool ignore_eos = false, quiet_text = false, no_stream = false;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "fafo-generate",
      "Lossless multi-token decoding on the CPU or CUDA engine: FAFO (lookahead rows draft n-grams while\n"
      "attending a token-dropped view of the KV cache, verification rows check them against the full\n"
      "cache in the same forward pass) and its baselines in one harness (--method ar, prompt-lookup,\n"
      "lookahead, self-spec, fafo).  Only tokens the full-cache rows accept are committed, so greedy\n"
      "output is token-for-token the model's own AR output; sampling uses speculative acceptance,\n"
      "which keeps the model's distribution exactly.  Text goes to stdout; -o run.jsonl writes a meta\n"
      "line, one record per decode step and a summary: tokens, forward passes, mean accepted tokens per\n"
      "step and its histogram, decode tokens/s, mean_host_seconds_per_step (the decoder's own work: a\n"
      "step's wall time less its engine calls, engine_s in each step record), time_split_cpu_s (attention\n"
      "CPU time of drafting and verification rows; null on CUDA), engine_settings (weights; act_quant with --act-quant q8; on CUDA also\n"
      "batch_invariant, invariant_rows, cuda_graphs: see ICMLKIT_CUDA_INVARIANT_ROWS and\n"
      "ICMLKIT_CUDA_GRAPHS in the man page) and on CUDA engine_counters: forwards (the prefill\n"
      "included), graph_replays (those run as a CUDA graph, the capturing one included; graphs captured\n"
      "earlier in the process are reused), graph_captures, graph_drops (graph cache flushes) and\n"
      "host_prep_ns (host time preparing forwards: metadata, uploads, graph lookup).\n"
      "--method fafo adapts its step by default (--schedule adaptive): before each step it picks a shape\n"
      "among AR, a prompt match of --draft tokens, pool n-grams and lookahead windows up to --window,\n"
      "--ngram, --guesses, by the tokens/s each gave so far (accepted tokens over step wall time) and, for\n"
      "shapes not yet run, by the most they could give at the engine's measured pass costs c(k) (timed\n"
      "once per model shape, weights, threads and CPU, cached in --pass-cost-cache).  The summary's\n"
      "adaptive lists each shape's steps and estimates; accepted_draft_sources says how many accepted\n"
      "tokens came from prompt matches and how many from the lookahead rows' n-grams.  --schedule fixed\n"
      "runs every step at (--window, --ngram, --guesses), as the paper does on GPUs.\n"
      "--compare ar also decodes with AR and adds the speedup (null when no decode step was timed, as with -n 1)\n"
      "and identical_to_ar (null when sampling).\n"
      "--device cuda takes --kv-policy streaming only (the others need attention records).\n"
      "--search-skip-set FILE searches a self-spec skip set on --calibration prompts and writes it\n"
      "(progress on stderr; a few minutes for a few prompts).  Without --prompt, --prompt-file or\n"
      "--prompt-ids the prompt text is read from stdin.  --lora DIR merges a PEFT LoRA adapter (adapter_config.json +\n"
      "adapter_model.safetensors, made for this base) into the model first; the meta line records it.",
      "  fafo-generate data/models/kjv7m.h5 --prompt 'In the beginning' -n 128 --method fafo --kv-policy h2o --kv-budget 64 --compare ar -o run.jsonl\n"
      "  fafo-generate data/models/kjv7m.h5 --lora adapter/ --prompt-file gen1.txt --prompt-tokens 256 --method lookahead --window 7 --ngram 5 --guesses 7\n"
      "  fafo-generate data/models/kjv7m.h5 --calibration calib.txt --search-skip-set skip.json && fafo-generate data/models/kjv7m.h5 --prompt 'And God said' --method self-spec --skip-set skip.json\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        lm::add_prompt_flags(app, prompt, prompt_file, prompt_ids, prompt_tokens);
        app.add_option("--method", method, "ar | prompt-lookup | lookahead | self-spec | fafo")->capture_default_str()
            ->check(CLI::IsMember({"ar", "prompt-lookup", "lookahead", "self-spec", "fafo"}));
        app.add_option("-n,--max-new-tokens,--n-predict", dc.max_new_tokens, "Tokens to generate at most")->capture_default_str()->check(cli::int_range(1, 1 << 24));
        lm::add_sampler_flags(app, dc.sampler);
        app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the end-of-sequence token");
        app.add_option("--window", dc.window, "Lookahead/FAFO: Jacobi window W (columns)")->capture_default_str()->check(cli::int_range(1, 256));
        app.add_option("--ngram", dc.ngram, "Lookahead/FAFO: n-gram size N (N-1 window levels)")->capture_default_str()->check(cli::int_range(2, 32));
        app.add_option("--guesses", dc.guesses, "Lookahead/FAFO: candidate n-grams G verified per step (also the pool's per-key size)")->capture_default_str()->check(cli::int_range(0, 256));
        app.add_option("--pld-max-ngram", dc.pld_max_ngram, "Prompt lookup: longest suffix matched")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        app.add_option("--pld-min-ngram", dc.pld_min_ngram, "Prompt lookup: shortest suffix matched")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        app.add_option("--draft", dc.pld_draft, "Prompt lookup: tokens a prompt match proposes; adaptive FAFO: the most it drafts (it picks the length); self-spec: most tokens drafted (default 8)")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        app.add_option("--schedule", schedule, "FAFO: adaptive (each step's shape chosen from measured costs and acceptance) | fixed (W, N, G every step)")
            ->capture_default_str()->check(CLI::IsMember({"adaptive", "fixed"}));
        app.add_option("--pass-cost-cache", pass_cost_cache, "Adaptive FAFO: file caching the engine's measured pass costs (none = measure every run)")
            ->capture_default_str();
        app.add_option("--skip-set", skip_file, "Self-spec: skip set (JSON written by --search-skip-set)");
        app.add_option("--draft-stop", dc.draft_stop, "Self-spec: stop drafting when the draft's top probability is below this")->capture_default_str()->check(CLI::Range(0.0, 1.0));
        app.add_option("--kv-policy", kv_policy,
                       "FAFO: streaming | h2o | tova | snapkv, the last three also with OBCache's score: +obcV, +obcK, +obcVK "
                       "(value, key, joint; p = 2 with the value norm), _no_cross, _p1 (e.g. h2o+obcVK)")
            ->capture_default_str()
            ->check(CLI::IsMember(kv::preset_names()));
        app.add_option("--kv-gqa-reduce", kv_gqa_reduce, "OBCache scores: combine a KV group's query heads by sum or max")
            ->capture_default_str()->check(CLI::IsMember({"sum", "max"}));
        app.add_option("--kv-budget", dc.kv.budget, "FAFO: cache slots the drafting rows see per layer and KV head")->capture_default_str()->check(cli::int_range(1, 1 << 24));
        app.add_option("--kv-sinks", dc.kv.sinks, "streaming: attention-sink slots kept (-1 = min(4, budget - 1))")->capture_default_str()->check(cli::int_range(-1, 1 << 24));
        app.add_option("--kv-recent", dc.kv.recent, "h2o: recent slots kept (-1 = budget/2)")->capture_default_str()->check(cli::int_range(-1, 1 << 24));
        app.add_option("--kv-window", dc.kv.window, "snapkv: observation window")->capture_default_str()->check(cli::int_range(1, 1 << 24));
        app.add_option("--kv-kernel", dc.kv.kernel, "snapkv: pooling kernel (odd)")->capture_default_str()->check(cli::int_range(1, 1 << 24));
        app.add_option("--kv-pool", kv_pool, "snapkv: max | avg pooling")->capture_default_str()->check(CLI::IsMember({"max", "avg"}));
        lm::add_device_flag(app, device);
        lm::add_weights_flag(app, weights);
        lm::add_act_quant_flag(app, act_quant);
        lm::add_lora_flag(app, lora_dir);
        app.add_option("--compare", compare, "Also decode with this method (ar) and report speedup and identical_to_ar")
            ->check(CLI::IsMember({"ar"}));
        app.add_option("-o,--output", output, "Per-step records and summary (.jsonl)");
        lm::add_text_flags(app, quiet_text, no_stream);
        app.add_option("--search-skip-set", search_out, "Search a self-spec skip set on --calibration prompts, write it here (.json), exit");
        app.add_option("--calibration", calibration, "Calibration prompts, one per line (for --search-skip-set)");
        app.add_option("--calibration-tokens", calib_tokens, "Tokens generated per calibration prompt")->capture_default_str()->check(cli::int_range(1, 4096));
        app.add_option("--max-skips", max_skips, "Most sublayers the search may skip")->capture_default_str()->check(cli::int_range(1, 4096));
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        const bool searching = !search_out.empty();
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        if (!output.empty()) io::require_output_extension(output, "-o", {".jsonl"}, "the run record is JSON Lines");
        if (searching && calibration.empty()) throw UsageError("--search-skip-set needs --calibration prompts");
        if (searching) io::require_output_extension(search_out, "--search-skip-set", {".json"}, "the skip set is JSON");
        if (searching) io::check_output_dir(search_out);  // -o is checked by run_tool
        dc.method = decode::parse_method(method);
        if (app->count("--draft") == 0 && dc.method == decode::Method::self_spec) dc.pld_draft = 8;
        dc.draft_max = dc.pld_draft;
        dc.stop_at_eos = !ignore_eos;
        dc.sampler.seed = ctx.common.seed;
        kv::apply_preset(kv_policy, dc.kv);
        dc.kv.gqa_reduce = kv::parse_gqa_reduce(kv_gqa_reduce, "--kv-gqa-reduce");
        const std::string kv_base = kv_policy.substr(0, kv_policy.find('+'));
        dc.kv.max_pool = kv_pool == "max";
        // A flag that the chosen method never reads is a mistake on the command line, not a no-op.
        struct FlagUse { const char* flag; std::vector<decode::Method> methods; };
        using M = decode::Method;
        const FlagUse uses[] = {
            {"--window", {M::lookahead, M::fafo}}, {"--ngram", {M::lookahead, M::fafo}}, {"--guesses", {M::lookahead, M::fafo}},
            {"--pld-max-ngram", {M::prompt_lookup, M::fafo}}, {"--pld-min-ngram", {M::prompt_lookup, M::fafo}},
            {"--draft", {M::prompt_lookup, M::self_spec, M::fafo}}, {"--skip-set", {M::self_spec}}, {"--draft-stop", {M::self_spec}},
            {"--schedule", {M::fafo}}, {"--pass-cost-cache", {M::fafo}},
            {"--kv-policy", {M::fafo}}, {"--kv-gqa-reduce", {M::fafo}}, {"--kv-budget", {M::fafo}}, {"--kv-sinks", {M::fafo}}, {"--kv-recent", {M::fafo}},
            {"--kv-window", {M::fafo}}, {"--kv-kernel", {M::fafo}}, {"--kv-pool", {M::fafo}}};
        if (!searching)
          for (const FlagUse& u : uses)
            if (app->count(u.flag) > 0 && std::find(u.methods.begin(), u.methods.end(), dc.method) == u.methods.end())
              throw UsageError(fmt::format("{} is not used by --method {}", u.flag, method));
        // The compressor flags each belong to one --kv-policy.
        const std::pair<const char*, const char*> policy_flags[] = {
            {"--kv-sinks", "streaming"}, {"--kv-recent", "h2o"}, {"--kv-window", "snapkv"}, {"--kv-kernel", "snapkv"}, {"--kv-pool", "snapkv"}};
        if (!searching && dc.method == decode::Method::fafo)
          for (const auto& [flag, policy] : policy_flags)
            if (app->count(flag) > 0 && kv_base != policy)
              throw UsageError(fmt::format("{} is only used by --kv-policy {} (this run uses {})", flag, policy, kv_policy));
        for (const char* flag : {"--calibration", "--calibration-tokens", "--max-skips"})
          if (app->count(flag) > 0 && !searching) throw UsageError(fmt::format("{} is only used with --search-skip-set", flag));
        if (searching && app->count("--method") > 0)
          throw UsageError("--search-skip-set searches for --method self-spec and exits: drop --method");
        const lm::Device dev = lm::parse_device(device);
        if (searching && dev != lm::Device::cpu) throw UsageError("--search-skip-set runs on the CPU (drop --device cuda)", "--device");
        if (dev != lm::Device::cpu && dc.method == decode::Method::fafo && dc.kv.policy != kv::Policy::streaming)
          throw UsageError("--kv-policy " + kv_policy + " needs attention records, which the CUDA engine does not provide (use streaming, or --device cpu)",
                           "--device cuda");
        dc.adaptive = dc.method == decode::Method::fafo && schedule == "adaptive";
        dc.pass_cost_cache = pass_cost_cache == "none" ? "" : pass_cost_cache;
        if (dc.adaptive && !dc.pass_cost_cache.empty()) {
          // The cache is written: never onto a file this run reads or writes.
          namespace fs = std::filesystem;
          std::error_code ec;
          const fs::path cache = fs::weakly_canonical(dc.pass_cost_cache, ec);
          for (const std::string& other : {model_path, prompt_file, output, skip_file, lora_dir})
            if (!other.empty() && other != "-" && fs::weakly_canonical(other, ec) == cache)
              throw UsageError("--pass-cost-cache names " + other + ", a file this run reads or writes", "--pass-cost-cache");
        }
        if (!dc.adaptive)
          for (const char* flag : {"--draft", "--pld-max-ngram", "--pld-min-ngram", "--pass-cost-cache"})
            if (app->count(flag) > 0 && dc.method == decode::Method::fafo)
              throw UsageError(fmt::format("{} is used by --method fafo only with --schedule adaptive", flag));
        if (dc.method == decode::Method::self_spec && skip_file.empty() && !searching)
          throw UsageError("self-spec needs --skip-set (make one with --search-skip-set)", "--method self-spec");

        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        lm::Model model = lm::load_any(model_path);
        if (!lora_dir.empty()) lm::apply_lora(model, lora_dir, ctx.prov);
        const std::unique_ptr<lm::Engine> engine = lm::open_engine_for(model, dev, weights, model_path, act_quant);
        const auto& c = model.config;
        std::unique_ptr<lm::Tokenizer> tok;
        if (!model.tokenizer_model.empty()) tok = std::make_unique<lm::Tokenizer>(lm::model_tokenizer(model, model_path));
        auto encode = [&](const std::string& text, const std::string& where) {
          return lm::encode_prompt(tok.get(), c, text, where, model_path);
        };

        if (searching) {
          const std::string text = io::read_file(calibration);
          ctx.prov.add_input(calibration, io::sha256_hex(text));
          std::vector<std::vector<int>> prompts;
          std::stringstream ss(text);
          std::string line;
          while (std::getline(ss, line))
            if (!line.empty()) {
              auto ids = encode(line, calibration);
              if (static_cast<int>(ids.size()) + calib_tokens >= c.n_ctx)
                throw InputError(fmt::format("calibration prompt {} has {} tokens: with --calibration-tokens {} it does not fit n_ctx = {}",
                                             prompts.size() + 1, ids.size(), calib_tokens, c.n_ctx), calibration);
              prompts.push_back(std::move(ids));
            }
          if (prompts.empty()) throw InputError("no calibration prompts (one per non-empty line)", calibration);
          std::vector<double> trace;
          dc.skip.attn.assign(c.n_layers, 0);
          dc.skip.mlp.assign(c.n_layers, 0);
          decode::SkipSet s = decode::search_skip_set(model, prompts, calib_tokens, dc, max_skips, &trace);
          nlohmann::json meta = ctx.prov.to_json();
          meta["objective_trace"] = trace;
          meta["objective"] = "accepted tokens per verifying-pass-equivalent (draft pass cost = unskipped share)";
          io::write_text(search_out, s.to_json(meta.dump()));
          log::info("skip set: {} of {} sublayers skipped, modelled speed {:.3f} -> {:.3f}", s.count(), 2 * c.n_layers,
                    trace.front(), trace.back());
          return;
        }

        std::vector<int> ids = lm::resolve_prompt(*app, prompt, prompt_file, prompt_ids, tok.get(), c, model_path, ctx.prov, prompt_tokens);
        if (static_cast<int>(ids.size()) >= c.n_ctx)
          throw InputError(fmt::format("prompt has {} tokens, no room to generate in the context of n_ctx = {}: keep its first "
                                       "tokens with --prompt-tokens N (N < {})", ids.size(), c.n_ctx, c.n_ctx), model_path);
        if (!skip_file.empty()) {
          dc.skip = decode::SkipSet::from_json(io::read_file(skip_file), c.n_layers, skip_file);
          ctx.prov.add_input(skip_file, io::sha256_hex(io::read_file(skip_file)));
        }
        dc.validate(c);

        std::unique_ptr<io::AtomicFile> out_file;
        std::ofstream out;
        if (!output.empty()) {
          out_file = std::make_unique<io::AtomicFile>(output);
          out.open(out_file->temp_path(), std::ios::binary);
          if (!out) throw RuntimeError("cannot write file", output);
          ctx.prov.extra["decode"] = {{"method", method}, {"temperature", dc.sampler.temperature}, {"top_k", dc.sampler.top_k},
                                      {"top_p", dc.sampler.top_p}, {"window", dc.window}, {"ngram", dc.ngram},
                                      {"guesses", dc.guesses}, {"kv_policy", kv_policy}, {"kv_budget", dc.kv.budget},
                                      {"schedule", dc.method == decode::Method::fafo ? nlohmann::json(schedule) : nlohmann::json(nullptr)},
                                      {"max_new_tokens", dc.max_new_tokens}};
          out << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump() << "\n";
        }

        std::optional<lm::TextStream> stream;  // print whole UTF-8 characters as tokens are accepted
        decode::TokenSink sink;
        if (!quiet_text && tok && !no_stream) {
          stream.emplace(*tok);
          sink = [&stream](int id) {
            const std::string text = stream->push(id);
            if (!text.empty()) std::cout << text << std::flush;
          };
        }
        // Engine counters (CUDA: graph replays) over one run: the difference across it.
        auto counters_since = [&engine](const std::vector<std::pair<std::string, long long>>& before) {
          nlohmann::json j = nlohmann::json::object();
          const auto now = engine->counters();
          for (std::size_t i = 0; i < now.size(); ++i) j[now[i].first] = now[i].second - (i < before.size() ? before[i].second : 0);
          return j;
        };
        const auto before = engine->counters();
        decode::DecodeResult r = decode::generate(*engine, ids, dc, sink);
        if (r.context_full && !r.eos)
          log::warn("stopped at the context limit n_ctx = {} after {} of the {} tokens asked (prompt {} tokens); a shorter "
                    "prompt (--prompt-tokens N) leaves more room", c.n_ctx, r.tokens.size(), dc.max_new_tokens, ids.size());
        nlohmann::json summary = summarise(r);
        if (!before.empty()) summary["engine_counters"] = counters_since(before);
        // Attention CPU time is measured by the CPU engine only: elsewhere it is not 0 but absent.
        const bool attn_timed = r.attention_timed;
        if (!attn_timed) summary["time_split_cpu_s"] = nullptr;
        summary["engine_settings"] = engine->settings();
        summary["method"] = method;
        summary["prompt_tokens"] = ids.size();
        summary["repeated_trigram_rate"] = repeated_trigram_rate(ids, r.tokens);
        summary["threads"] = threads();
        summary["omp_spin_count"] = openmp_spin_count();
        summary["device"] = engine->device();
        if (dc.method == decode::Method::fafo) {
          summary["kv_policy"] = kv_policy;
          summary["kv_budget"] = dc.kv.budget;
          summary["schedule"] = schedule;
          if (dc.adaptive) summary["adaptive"] = r.schedule;
        }
        if (!compare.empty()) {
          decode::DecodeConfig ar = dc;
          ar.method = decode::Method::ar;
          const auto before_ar = engine->counters();
          decode::DecodeResult base = decode::generate(*engine, ids, ar);
          const nlohmann::json bs = summarise(base);
          summary["compare"] = {{"method", compare}, {"decode_tokens_per_s", bs["decode_tokens_per_s"]},
                                {"decode_seconds", base.decode_s}, {"generated_tokens", base.tokens.size()},
                                {"mean_host_seconds_per_step", bs["mean_host_seconds_per_step"]}};
          if (!before_ar.empty()) summary["compare"]["engine_counters"] = counters_since(before_ar);
          const double ar_tps = bs["decode_tokens_per_s"].get<double>();
          // no decode steps to time (-n 1: the one token comes from the prefill): no speedup to report
          const double tps = summary["decode_tokens_per_s"].get<double>();
          summary["speedup"] = ar_tps > 0 && tps > 0 ? nlohmann::json(tps / ar_tps) : nlohmann::json(nullptr);
          if (dc.sampler.temperature == 0.0) summary["identical_to_ar"] = r.tokens == base.tokens;
          else summary["identical_to_ar"] = nullptr;  // sampling: equal in distribution, not per seed
        }
        if (!quiet_text) {
          if (stream) std::cout << stream->finish() << "\n";
          else if (tok) std::cout << tok->decode(r.tokens) << "\n";
          else {
            for (std::size_t i = 0; i < r.tokens.size(); ++i) std::cout << (i ? " " : "") << r.tokens[i];
            std::cout << "\n";
          }
          std::cout << std::flush;
        }
        log::debug("{}", summary.dump());
        if (out.is_open()) {
          for (const auto& s : r.steps)
            out << nlohmann::json{{"step", s.step}, {"n_past", s.n_past}, {"rows", s.rows}, {"draft_rows", s.draft_rows},
                                  {"verify_rows", s.verify_rows}, {"candidates", s.candidates}, {"accepted", s.accepted},
                                  {"arm", s.arm >= 0 ? nlohmann::json(r.schedule["arms"][std::size_t(s.arm)]["name"]) : nlohmann::json(nullptr)},
                                  {"prompt_draft", s.prompt_draft}, {"from_prompt", s.from_prompt}, {"from_lookahead", s.from_lookahead}, {"from_both", s.from_both},
                                  {"wall_s", s.wall_s}, {"engine_s", s.engine_s},
                                  {"draft_attn_cpu_s", attn_timed ? nlohmann::json(s.draft_attn_cpu_s) : nlohmann::json(nullptr)},
                                  {"verify_attn_cpu_s", attn_timed ? nlohmann::json(s.verify_attn_cpu_s) : nlohmann::json(nullptr)}}.dump()
                << "\n";
          out << nlohmann::json{{"summary", summary}}.dump() << "\n";
          out.close();
          if (!out) throw RuntimeError("cannot write file", output);
          out_file->commit();
        }
      });
}
