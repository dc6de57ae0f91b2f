// lm-eval: loss and perplexity of a checkpoint on a text file or a corpus split.
#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/engine.hpp"
#include "lm/lora.hpp"
#include "lm/support.hpp"
#include "lm/model.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "nn/llama_train.hpp"
#include "nn/trainer.hpp"
#include "util/error.hpp"
#include "util/progress.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass: spin briefly, then sleep
  std::string model_path, text_path, output = "-", split = "all", device = "cpu", weights = "auto", act_quant = "none", lora_dir;
  nn::CorpusOptions copt;
  copt.val_every = 0;
  int seq_len = 0, batch = 4;
  std::int64_t max_tokens = 0;
  int recurrence = 0;  // recurrent-depth models: core iterations (0 = the model's mean)
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "lm-eval",
      "Mean cross-entropy (nats per token) and perplexity exp(loss) of a checkpoint on a text: documents are\n"
      "read and tokenized as lm-train does (BOS before each document), joined and cut into non-overlapping\n"
      "windows of --seq-len tokens (the last one shorter); every token after the first is predicted once.\n"
      "--split val with --val-every 20 evaluates exactly lm-train's held-out documents; --max-tokens N\n"
      "scores only the first N predicted tokens (the windows are cut from those).  JSON result:\n"
      "loss, perplexity, bits_per_token, top1_accuracy (next-token arg-max accuracy; null when the inference engine scores: --device cuda, --weights bf16-dot, --act-quant q8), tokens (predicted tokens counted), windows, split, device,\n"
      "engine_settings (weights; act_quant with --act-quant q8; with --device cuda also batch_invariant, invariant_rows, cuda_graphs), meta.\n"
      "On the CPU the loss is computed in f32, or by the inference engine with --weights bf16-dot (bfloat16\n"
      "arithmetic) or --act-quant q8 (a GGUF Q8_0 / Q4_0 file's blocks times activations quantised to Q8_0,\n"
      "as llama.cpp computes it); --device cuda runs the inference engine (--weights).\n"
      "--lora DIR merges a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, made for this\n"
      "base: shapes and its recorded base_sha256 must match) into the model first; meta.lora records it.",
      "  lm-eval kjv.h5 ../shared/data/corpus/kjv.tsv --column 2 --doc-column 1 --val-every 20 --split val\n"
      "  lm-eval kjv.h5 psalm23.txt --seq-len 256 -o eval.json\n"
      "  lm-eval kjv.h5 psalm23.txt --lora kjv-adapter/ -o eval-lora.json\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("model", model_path, "Model with a tokenizer (.h5, .gguf, or a Hugging Face directory)")->required();
        app.add_option("text", text_path, "Text file, TSV or JSONL (- for stdin)")->required();
        app.add_option("-o,--output", output, "Result JSON (- = stdout)")->capture_default_str();
        nn::add_corpus_flags(app, copt);
        app.add_option("--split", split, "all, train or val (documents as lm-train splits them with --val-every)")
            ->capture_default_str()->check(CLI::IsMember({"all", "train", "val"}));
        app.add_option("--seq-len", seq_len, "Window length (default the model's n_ctx; 1024 at most for a model with mlstm-hybrid blocks)")->check(cli::int_range(1, 1 << 20));
        app.add_option("--batch", batch, "Windows per forward")->capture_default_str()->check(cli::int_range(1, 1 << 16));
        lm::add_device_flag(app, device);
        lm::add_weights_flag(app, weights,
                             "Compute weights with --device cuda: auto (the file's 16-bit format, f16 or bf16, when every "
                             "weight is exact in it, else f32), f32, f16 or bf16 (rounded); the CPU computes in f32 "
                             "(auto or f32), or with bf16-dot in bfloat16 arithmetic on the inference engine");
        lm::add_act_quant_flag(app, act_quant);
        lm::add_lora_flag(app, lora_dir);
        app.add_option("--recurrence", recurrence, "Recurrent-depth models: core iterations r (default the model's mean recurrence)")->check(cli::int_range(1, 1 << 16));
        app.add_option("--max-tokens", max_tokens, "Score only the first N predicted tokens (0 = all)")->transform(cli::count(0, std::int64_t(1) << 50));
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        if (split != "all" && copt.val_every == 0) throw UsageError("--split train/val needs --val-every N", "--split");
        const lm::Device dev = lm::parse_device(device);
        if (dev == lm::Device::cpu && weights != "auto" && weights != "f32" && weights != "bf16-dot")
          throw UsageError("lm-eval computes in f32 on the CPU (f16 and bf16 are for --device cuda; bf16-dot runs the CPU engine)",
                           "--weights " + weights);
        lm::Model model = lm::load_any(model_path);
        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        if (recurrence > 0) {  // the forward's default iterations (engine and trainer forward alike)
          if (!model.config.is_recdepth())
            throw UsageError("--recurrence needs a recurrent-depth model (" + model_path + " has none)", "--recurrence");
          model.config.recdepth.mean_recurrence = recurrence;
        }
        if (!lora_dir.empty()) lm::apply_lora(model, lora_dir, ctx.prov);
        std::unique_ptr<lm::Engine> engine;
        // a model the trainer's batched forward cannot run (moe blocks) is scored by the CPU engine
        const bool engine_scores = dev != lm::Device::cpu || weights == "bf16-dot" || act_quant != "none" ||
                                   (model.config.has_moe() && !lm::supports(lm::Runner::trainer, lm::Feature::block_moe));
        if (engine_scores) engine = weights == "bf16-dot" || act_quant != "none" ? lm::open_engine_for(model, dev, weights, model_path, act_quant)
                                                          : lm::open_engine(model, dev, weights);
        if (model.tokenizer_model.empty())
          throw InputError("the model has no tokenizer (" + lm::tokenizer_location(model_path) + " missing)", model_path);
        const auto& c = model.config;
        // A student with recurrent blocks (mlstm-hybrid) has an n_ctx that is only a position limit;
        // its trainer forward is quadratic in the window, so it defaults to the teacher-sized 1024.
        if (seq_len == 0) seq_len = c.has_mlstm() ? std::min(c.n_ctx, 1024) : c.n_ctx;
        if (seq_len > c.n_ctx)
          throw UsageError(fmt::format("context --seq-len {} is larger than the model allows (n_ctx = {})", seq_len, c.n_ctx), "--seq-len");
        nn::Documents docs = nn::read_corpus(text_path, copt);
        ctx.prov.add_input(text_path, docs.sha256);
        std::vector<std::string> chosen;
        if (split != "val") chosen = docs.train;
        if (split != "train") chosen.insert(chosen.end(), docs.val.begin(), docs.val.end());
        if (split == "all" && copt.val_every > 0) {  // keep file order for "all"
          chosen.clear();
          nn::CorpusOptions all = copt;
          all.val_every = 0;
          chosen = nn::read_corpus(text_path, all).train;
        }
        if (chosen.empty()) throw InputError(fmt::format("no documents in split '{}'", split), text_path);
        const lm::Tokenizer tok = lm::model_tokenizer(model, model_path);
        const auto stream = nn::tokenize_documents(tok, chosen, c.add_bos ? c.bos_id : -1, text_path);
        if (stream.size() < 2) throw InputError("text has fewer than 2 tokens", text_path);
        nn::EvalResult r;
        const Stopwatch sw;  // the scoring only (not loading or tokenising)
        const std::int64_t all_targets = static_cast<std::int64_t>(stream.size()) - 1;
        Progress bar(static_cast<std::size_t>(max_tokens > 0 ? std::min(all_targets, max_tokens) : all_targets), "tokens");
        std::int64_t shown = 0;
        const auto progress = [&](std::int64_t done, std::int64_t) {
          bar.tick(static_cast<std::size_t>(done - shown));
          shown = done;
        };
        if (!engine) {
          auto params = nn::params_from_model<float>(model);
          r = nn::evaluate(params, stream, seq_len, batch, max_tokens, progress);
        } else {  // the inference engine on the device: one causal forward per window
          const double sum = lm::engine_loss(*engine, stream, seq_len, max_tokens, r.tokens, progress);
          r.loss = r.tokens > 0 ? sum / double(r.tokens) : 0.0;
        }
        bar.finish();
        if (!std::isfinite(r.loss))  // an overflowing forward (weights far too large) has no loss to report
          throw RuntimeError(fmt::format("the loss is not finite ({}): the model's forward overflows", r.loss), model_path);
        const double seconds = sw.seconds();
        nlohmann::json out{{"loss", r.loss},
                           {"perplexity", r.perplexity()},
                           {"bits_per_token", r.loss / std::log(2.0)},
                           {"top1_accuracy", engine ? nlohmann::json() : nlohmann::json(r.top1())},
                           {"tokens", r.tokens},
                           {"windows", (r.tokens + seq_len - 1) / seq_len},
                           {"documents", chosen.size()},
                           {"split", split},
                           {"seq_len", seq_len},
                           {"device", engine ? engine->device() : std::string("cpu")},
                           {"seconds", seconds},
                           {"tokens_per_second", seconds > 0 ? double(r.tokens) / seconds : 0.0},
                           {"threads", threads()},
                           {"omp_spin_count", openmp_spin_count()},
                           {"meta", ctx.prov.to_json()}};
        if (c.is_recdepth()) out["recurrence"] = c.recdepth.mean_recurrence;
        out["engine_settings"] = engine ? engine->settings() : nlohmann::json{{"weights", "f32"}};
        io::write_json(output, out);
        log::info("loss {:.4f} nats/token, perplexity {:.3f} over {} tokens", r.loss, r.perplexity(), r.tokens);
      });
}
