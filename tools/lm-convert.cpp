// lm-convert: convert model files between the native HDF5 checkpoint, GGUF and Hugging Face
// safetensors.
#include <fmt/core.h>

#include "cli/run_tool.hpp"
#include "lm/lora.hpp"
#include "lm/model_io.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  std::string input, output, dtype, to, merge_lora;
  cli::ToolInfo info{
      "lm-convert",
      "Convert a Llama-architecture model between formats.  Input (detected from the content):\n"
      "native HDF5 checkpoint, GGUF (F32, F16, BF16, Q8_0, Q4_0 tensors; llama SentencePiece vocabulary), or\n"
      "a Hugging Face directory (llama, mixtral or icmlkit_moe config.json + model.safetensors or sharded with\n"
      "model.safetensors.index.json, tokenizer.model).  Output from the extension of -o: .h5 native,\n"
      ".gguf GGUF v3 (f32, f16, bf16, q8_0 or q4_0), a directory a Hugging Face folder (file names of other model\n"
      "formats such as .safetensors or .bin are refused; /dev/null or a pipe takes the native file).  q/k rows are permuted\n"
      "between the rotate-half (Hugging Face) and interleaved (GGUF) RoPE layouts as needed, so the\n"
      "converted model computes the same function.  --dtype defaults to the input's storage (f32 for\n"
      "Q8_0 / Q4_0 input; --dtype q8_0 / q4_0 writes GGUF blocks as llama.cpp quantises them).  A weight beyond the chosen storage's range (f16: 65504) is refused with exit 2,\n"
      "naming the tensor; weights too small for it are counted in a warning.  Mixture-of-experts models\n"
      "(lm-init --moe): a Mixtral (standard blocks, softmax router, renormalised top-K, no shared expert,\n"
      "swiglu) becomes llama.cpp's llama architecture with 3-D expert tensors and transformers'\n"
      "MixtralForCausalLM; any other moe or latent-moe model is written under architecture icmlkit-moe /\n"
      "model_type icmlkit_moe (DeepSeek-V3 / Qwen-MoE tensor names; names and keys in libcore/lm/README.md),\n"
      "which only icmlkit reads.  --merge-lora DIR merges a PEFT LoRA adapter (adapter_config.json +\n"
      "adapter_model.safetensors; W += scaling B A) into the weights before writing, so the output runs without\n"
      "the adapter; an adapter made for another base (shapes, or its recorded base_sha256) is refused with exit 1\n"
      "and nothing is written.  With --dtype f16/bf16 the merged weights are rounded to that storage.",
      "  lm-convert model.h5 -o model.gguf --dtype f16\n"
      "  lm-convert ~/hf/TinyLlama-1.1B -o tinyllama.h5 --dtype bf16\n"
      "  lm-convert model.gguf --merge-lora adapter/ -o merged_hf/\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("input", input, "Model file or Hugging Face directory")->required();
        app.add_option("-o,--output", output, "Output: *.h5 (native), *.gguf, or a directory (Hugging Face); a stream such as /dev/null takes .h5")->required();
        app.add_option("--merge-lora", merge_lora, "LoRA adapter (a PEFT directory) merged into the weights before writing");
        app.add_option("--dtype", dtype, "Storage of matrices: f32, f16, bf16, or (GGUF only) q8_0 / q4_0 blocks for the matrices whose rows are a multiple of 32 long (the others f32)")
            ->transform(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}, CLI::ignore_case));
      },
      [&](cli::Context& ctx) {
        if (output == "-") throw UsageError("a model cannot go to stdout: give *.h5, *.gguf or a directory", "-o");
        const lm::ModelFormat out_fmt = lm::output_format(output);
        ctx.prov.add_input(input, lm::model_sha256(input));
        const lm::ModelFormat in_fmt = lm::detect_format(input);
        lm::Model m = lm::load_any(input);
        if (!merge_lora.empty()) lm::apply_lora(m, merge_lora, ctx.prov);
        const bool quant = dtype == "q8_0" || dtype == "q4_0";
        io::h5::FloatStorage st = dtype.empty() ? m.stored : quant ? io::h5::FloatStorage::f32 : io::h5::parse_float_storage(dtype, "--dtype");
        ctx.prov.extra["converted_from"] = lm::format_name(in_fmt);
        lm::save_any(output, out_fmt, m, st, ctx.prov, quant ? dtype : "");
        log::info("{} ({}, {} weights, {}) -> {} ({}, {})", input, lm::format_name(in_fmt), m.config.n_params(),
                  m.tokenizer_model.empty() ? "no tokenizer" : "with tokenizer", output, lm::format_name(out_fmt),
                  quant ? dtype : io::h5::storage_name(st));
      });
}
