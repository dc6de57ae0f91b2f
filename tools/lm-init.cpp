// lm-init: write a randomly initialised Llama-style checkpoint (native HDF5, model contract v2).
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <sstream>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/model.hpp"
#include "lm/presets.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string output, tokenizer_path, preset, rope = "half", dtype = "f32";
  lm::ModelConfig c = lm::default_shape();
  c.moe.n_experts = 8;  // the defaults --moe shows
  c.moe.top_k = 2;
  lm::MoeFlags moe;
  lm::RecdepthFlags recdepth;
  bool tied = false;
  double init_std = 0.02;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "lm-init",
      "Write a Llama-style model with random weights N(0, init_std^2) (norm weights 1) as a native HDF5\n"
      "checkpoint: config as root attributes, GGUF tensor names, matrices in f32, f16 or bf16, and the\n"
      "SentencePiece tokenizer inside (/tokenizer/model), so one file is a whole model.  Presets:\n"
      "tiny (d 64, 2 layers), 7m (vocab 4096, d 256, 6 layers, ~6.6M weights), 100m (vocab 32000,\n"
      "d 768, 12 layers, ~134M weights); explicit flags override a preset.  The vocabulary size comes\n"
      "from --tokenizer when given.  Same --seed, same weights on every machine.  --moe standard|latent makes every\n"
      "block's FFN a routed mixture of experts (block types moe / latent-moe: N experts, top-K, optional shared\n"
      "expert, softmax or sigmoid router; latent: LatentMoE's experts at width --latent behind shared W_down/W_up).",
      "  tokenizer-train ../shared/data/corpus/kjv.tsv --column 2 --vocab-size 2048 -o kjv.model && lm-init --tokenizer kjv.model --preset tiny -o tiny.h5\n"
      "  lm-init --preset 100m --vocab-size 32000 --dtype bf16 -o big.h5\n"
      "  lm-init --vocab-size 2048 --d-model 256 --n-layers 4 --moe latent --experts 32 --top-k 8 --latent 64 --d-expert 256 -o lmoe.h5\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("-o,--output", output, "Output checkpoint (.h5)")->required();
        app.add_option("--tokenizer", tokenizer_path, "SentencePiece model to embed (sets the vocabulary size)");
        app.add_option("--preset", preset, "tiny | 7m | 100m")->check(CLI::IsMember({"tiny", "7m", "100m"}));
        app.add_option("--vocab-size", c.vocab_size, "Vocabulary size (without --tokenizer)")->check(cli::int_range(2, 1 << 22));
        lm::add_shape_flags(app, c);
        lm::add_moe_flags(app, c, moe);
        lm::add_recdepth_flags(app, c, recdepth);
        app.add_option("--rope-theta", c.rope_theta, "RoPE base")->check(cli::positive());
        app.add_option("--rope-style", rope, "half (Hugging Face rotate-half) or interleaved (GGUF)")->check(CLI::IsMember({"half", "interleaved"}));
        app.add_option("--rms-eps", c.rms_eps, "RMSNorm epsilon")->check(cli::positive());
        app.add_flag("--tied", tied, "LM head shares the token embedding");
        app.add_option("--dtype", dtype, "Storage of matrices: f32, f16 or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}));
        // Beyond 1e3 the f32 weights of a forward pass overflow long before any use (1e300 gave inf weights).
        app.add_option("--init-std", init_std, "Standard deviation of the random matrices, in (0, 1000]")
            ->check(cli::positive())
            ->check(CLI::Range(0.0, 1000.0));
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        io::require_output_extension(output, "-o", {".h5", ".hdf5"},
                                     "lm-init writes the native HDF5 checkpoint (lm-convert makes GGUF or Hugging Face)");
        // A preset fills every size field the command line did not set explicitly.
        if (!preset.empty()) lm::apply_preset(preset, c, [&](const char* flag) { return app->count(flag) > 0; });
        std::string tok_bytes;
        if (!tokenizer_path.empty()) {
          tok_bytes = io::read_file(tokenizer_path);
          ctx.prov.add_input(tokenizer_path, io::sha256_hex(tok_bytes));
          const lm::Tokenizer tok(tok_bytes, tokenizer_path);
          if (app->count("--vocab-size") && c.vocab_size != tok.vocab_size())
            throw UsageError(fmt::format("--vocab-size {} differs from the tokenizer's {} pieces", c.vocab_size, tok.vocab_size()), "--vocab-size");
          c.vocab_size = tok.vocab_size();
          c.bos_id = tok.bos_id();
          c.eos_id = tok.eos_id();
          c.add_bos = c.bos_id >= 0;
        }
        if (c.vocab_size <= 0) throw UsageError("give --tokenizer, --vocab-size or --preset", "--vocab-size");
        if (c.bos_id >= c.vocab_size) c.bos_id = -1;
        if (c.eos_id >= c.vocab_size) c.eos_id = -1;
        c.add_bos = c.add_bos && c.bos_id >= 0;
        c.rope_style = rope == "half" ? lm::RopeStyle::half : lm::RopeStyle::interleaved;
        c.tied = tied;
        lm::apply_moe_flags(moe, c, [&](const char* flag) { return app->count(flag) > 0; });
        lm::apply_recdepth_flags(recdepth, c, [&](const char* flag) { return app->count(flag) > 0; });
        try {
          c.validate("model config");
        } catch (const InputError& e) {
          throw UsageError(e.what());
        }
        const double need = c.n_params_approx() * 4.0;  // float32 in memory
        const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
        if (ram > 0 && need > ram)
          throw UsageError(fmt::format("{:.3g} weights need {:.1f} GB in memory, more than this machine's {:.1f} GB",
                                       c.n_params_approx(), need / 1e9, ram / 1e9));
        if (c.is_recdepth() && app->count("--init-std"))
          throw UsageError("--arch recurrent-depth uses Huginn's initialisation (std sqrt(2 / (5 d)), scaled output projections)", "--init-std");
        lm::Model m = c.is_recdepth() ? lm::random_recdepth_model(c, ctx.common.seed) : lm::random_model(c, ctx.common.seed, init_std);
        m.tokenizer_model = tok_bytes;
        const auto st = io::h5::parse_float_storage(dtype, "--dtype");
        ctx.prov.extra["n_params"] = c.n_params();
        if (c.has_moe()) {
          std::int64_t active = c.n_params();
          for (int l = 0; l < c.n_layers; ++l) active -= c.block_params(l) - c.block_active_params(l);
          ctx.prov.extra["n_active_params"] = active;
        }
        lm::save_checkpoint(output, m, st, ctx.prov);
        log::info("{} weights ({} layers, d_model {}, vocab {}) -> {}", c.n_params(), c.n_layers, c.d_model, c.vocab_size, output);
      });
}
