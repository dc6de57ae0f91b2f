// lm-generate: autoregressive generation with the CPU or CUDA engine (prefill, then one decode step
// per token), greedy or sampled.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/engine.hpp"
#include "lm/forward.hpp"
#include "lm/lora.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/sampler.hpp"
#include "lm/text_stream.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass: spin briefly, then sleep
  std::string model_path, prompt, prompt_file, prompt_ids, output, lora_dir;
  int max_new = 64, top_logprobs = 5, prompt_tokens = 0;
  lm::SamplerConfig sc;
  bool ignore_eos = false, no_text = false, no_stream = false;
  std::string weights = "auto", device = "cpu", act_quant = "none";
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "lm-generate",
      "Generate text with a model (.h5, .gguf or a Hugging Face folder) on the CPU or, with --device\n"
      "cuda, a GPU: prefill the prompt in one batched\n"
      "forward, then one decode step per new token (full KV cache).  The prompt is text (--prompt,\n"
      "--prompt-file, or stdin when neither is given), tokenized with the model's own SentencePiece\n"
      "tokenizer with BOS prepended when the model says add_bos, or raw token ids (--prompt-ids, taken\n"
      "verbatim); --prompt-tokens N keeps its first N tokens.  Generated text goes to stdout as it is made,\n"
      "in whole UTF-8 characters (byte-fallback tokens of an unfinished character wait for the rest; bytes\n"
      "that form none print as U+FFFD; --no-text prints none); -o x.jsonl writes a {\"meta\"} line, one record per\n"
      "token (step, id, piece, logprob, top_ids, top_logprobs) and a final {\"summary\"} (prompt and\n"
      "generated tokens, prefill and decode tokens/s, time to first token, stop reason, engine_settings:\n"
      "weights, act_quant with --act-quant q8, and on CUDA batch_invariant, invariant_rows, cuda_graphs (see the man page), and\n"
      "compute_weights, the same as engine_settings' weights).\n"
      "Greedy by default; --temperature > 0 samples (with --top-k / --top-p), seeded by --seed.\n"
      "--lora DIR merges a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, made for this\n"
      "base) into the model before generating; the meta line records its files and settings.",
      "  lm-generate model.h5 --prompt 'In the beginning' -n 40\n"
      "  lm-generate model.h5 --prompt-file prompt.txt --prompt-tokens 128 --temperature 0.8 --top-p 0.95 --seed 7 -o run.jsonl --no-text\n"
      "  lm-generate model.gguf --lora adapter/ --prompt-ids 1,450,3186 -n 16 -o ids.jsonl --no-stream\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        lm::add_prompt_flags(app, prompt, prompt_file, prompt_ids, prompt_tokens);
        app.add_option("-n,--max-new-tokens,--n-predict", max_new, "Tokens to generate at most")->capture_default_str()->transform(cli::count(0, 1 << 24));
        lm::add_sampler_flags(app, sc);
        app.add_option("--top-logprobs", top_logprobs, "Top ids recorded per token in -o")->capture_default_str()->check(cli::int_range(0, 100));
        app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the end-of-sequence token");
        lm::add_text_flags(app, no_text, no_stream);
        app.add_option("-o,--output", output, "Per-token records (.jsonl)");
        lm::add_device_flag(app, device);
        lm::add_weights_flag(app, weights);
        lm::add_act_quant_flag(app, act_quant);
        lm::add_lora_flag(app, lora_dir);
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        if (!output.empty()) io::require_output_extension(output, "-o", {".jsonl"}, "the per-token output is JSON Lines");
        if (no_text && output.empty()) throw UsageError("without -o the run would print nothing: give -o run.jsonl, or drop it", "--no-text");
        sc.seed = ctx.common.seed;
        const std::string model_sha = lm::model_sha256(model_path);
        ctx.prov.add_input(model_path, model_sha);
        Stopwatch load_timer;
        lm::Model model = lm::load_any(model_path);
        if (!lora_dir.empty()) lm::apply_lora(model, lora_dir, ctx.prov);
        const std::unique_ptr<lm::Engine> engine = lm::open_engine_for(model, lm::parse_device(device), weights, model_path, act_quant);
        const double load_s = load_timer.seconds();
        const auto& c = model.config;
        std::unique_ptr<lm::Tokenizer> tok;
        if (!model.tokenizer_model.empty()) tok = std::make_unique<lm::Tokenizer>(lm::model_tokenizer(model, model_path));

        std::vector<int> ids = lm::resolve_prompt(*app, prompt, prompt_file, prompt_ids, tok.get(), c, model_path, ctx.prov, prompt_tokens);
        if (static_cast<int>(ids.size()) >= c.n_ctx)
          throw InputError(fmt::format("prompt has {} tokens, no room to generate in the context of n_ctx = {}: keep its first "
                                       "tokens with --prompt-tokens N (N < {})", ids.size(), c.n_ctx, c.n_ctx), model_path);
        const int n_prompt = static_cast<int>(ids.size());
        const int requested = max_new;
        max_new = std::min(max_new, c.n_ctx - n_prompt);

        std::unique_ptr<io::AtomicFile> out_file;
        std::ofstream out;
        if (!output.empty()) {
          out_file = std::make_unique<io::AtomicFile>(output);
          out.open(out_file->temp_path(), std::ios::binary);
          if (!out) throw RuntimeError("cannot write file", output);
          ctx.prov.extra["sampler"] = {{"temperature", sc.temperature}, {"top_k", sc.top_k}, {"top_p", sc.top_p}};
          out << nlohmann::json{{"meta", ctx.prov.to_json()}}.dump() << "\n";
        }

        lm::Sampler sampler(sc);
        // Greedy without a per-token record needs only the argmax (kept on the device on CUDA).
        const bool greedy_only = sc.temperature == 0.0 && !out.is_open();
        lm::ForwardOptions last;
        last.all_logits = false;
        last.logits_rows = {n_prompt - 1};
        last.state_rows = last.logits_rows;  // recurrent blocks: the prompt commits whole (chunkwise prefill)
        last.greedy_only = greedy_only;
        lm::ForwardOptions one;
        one.greedy_only = greedy_only;
        Stopwatch t;
        lm::ForwardResult fr = engine->forward(lm::Batch::causal(ids, 0), last);
        engine->commit_all();
        const double prefill_s = t.seconds();
        double ttft = 0.0;
        std::vector<int> gen;
        std::optional<lm::TextStream> stream;
        if (tok && !no_stream && !no_text) stream.emplace(*tok);
        std::string stop = max_new == 0 ? (requested > 0 ? "n_ctx" : "max_new_tokens") : "";
        Stopwatch decode_timer;
        for (int step = 0; step < max_new; ++step) {
          const int id = greedy_only ? fr.greedy[0] : sampler.sample(fr.logits.row(0), c.vocab_size);
          if (step == 0) ttft = t.seconds();
          gen.push_back(id);
          if (out.is_open()) {
            const float* logits = fr.logits.row(0);
            nlohmann::json rec = {{"step", step}, {"id", id}, {"logprob", lm::log_softmax_at(logits, c.vocab_size, id)}};
            if (tok) rec["piece"] = tok->piece(id);
            const auto top = lm::top_ids(logits, c.vocab_size, top_logprobs);
            std::vector<double> tl;
            for (int j : top) tl.push_back(lm::log_softmax_at(logits, c.vocab_size, j));
            rec["top_ids"] = top;
            rec["top_logprobs"] = tl;
            out << rec.dump() << "\n";
          }
          if (stream) {  // print the newly completed text (whole UTF-8 characters)
            const std::string text = stream->push(id);
            if (!text.empty()) std::cout << text << std::flush;
          }
          if (id == c.eos_id && !ignore_eos) { stop = "eos"; break; }
          if (step + 1 == max_new) { stop = max_new < requested ? "n_ctx" : "max_new_tokens"; break; }
          lm::Batch b;
          b.add(id, n_prompt + step);
          fr = engine->forward(b, one);
          engine->commit_all();
        }
        const double decode_s = decode_timer.seconds();
        if (stop == "n_ctx")
          log::warn("stopped at the context limit n_ctx = {} after {} of the {} tokens asked (prompt {} tokens); "
                    "a shorter prompt (--prompt-tokens N) leaves more room", c.n_ctx, gen.size(), requested, n_prompt);
        if (!no_text && tok) {
          std::cout << (stream ? stream->finish() : tok->decode(gen)) << "\n" << std::flush;
        } else if (!no_text) {
          for (std::size_t i = 0; i < gen.size(); ++i) std::cout << (i ? " " : "") << gen[i];
          std::cout << "\n";
        }
        const int n_decode = std::max(0, static_cast<int>(gen.size()) - 1);  // steps after the first token
        const nlohmann::json settings = engine->settings();
        nlohmann::json summary = {
            {"prompt_tokens", n_prompt}, {"generated_tokens", gen.size()}, {"stop_reason", stop},
            {"load_seconds", load_s}, {"prefill_seconds", prefill_s},
            {"prefill_tokens_per_s", prefill_s > 0 ? n_prompt / prefill_s : 0.0},
            {"time_to_first_token_s", ttft},
            {"decode_tokens_per_s", decode_s > 0 && n_decode > 0 ? n_decode / decode_s : 0.0},
            {"threads", threads()}, {"omp_spin_count", openmp_spin_count()}, {"device", engine->device()}, {"compute_weights", settings.value("weights", "f32")},
            {"weight_bytes", model.weight_bytes()}};
        summary["engine_settings"] = settings;
        log::debug("{}", summary.dump());
        if (out.is_open()) {
          out << nlohmann::json{{"summary", summary}}.dump() << "\n";
          out.close();
          if (!out) throw RuntimeError("cannot write file", output);
          out_file->commit();
        }
      });
}
