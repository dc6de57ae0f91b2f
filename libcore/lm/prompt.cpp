#include "lm/prompt.hpp"

#include "lm/model_io.hpp"

#include <cctype>
#include <limits>
#include <sstream>

#include <fmt/core.h>

#include "cli/run_tool.hpp"
#include "io/table.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

void add_prompt_flags(CLI::App& app, std::string& text, std::string& file, std::string& ids, int& prompt_tokens) {
  app.add_option("-p,--prompt", text, "Prompt text");
  app.add_option("--prompt-file", file, "File holding the prompt text (- for stdin)");
  app.add_option("--prompt-ids", ids, "Prompt as comma-separated token ids");
  app.add_option("--prompt-tokens", prompt_tokens, "Keep only the first N prompt tokens (0 = all)")->check(cli::int_range(0, 1 << 24));
}

void add_text_flags(CLI::App& app, bool& no_text, bool& no_stream) {
  app.add_flag("--no-text", no_text, "Do not print the generated text");
  app.add_flag("--no-stream", no_stream, "Print the text once at the end instead of as tokens are made");
}

void add_sampler_flags(CLI::App& app, SamplerConfig& sc) {
  app.add_option("--temperature,--temp", sc.temperature, "0 = greedy; > 0 samples")->capture_default_str()->check(cli::non_negative());
  app.add_option("--top-k", sc.top_k, "Sample among the k most likely (0 = all)")->capture_default_str()->check(cli::int_range(0, 1 << 24));
  app.add_option("--top-p", sc.top_p, "Nucleus: smallest set with probability >= p")->capture_default_str()->check(cli::unit_interval_open_left());
}

void add_device_flag(CLI::App& app, std::string& device) {
  app.add_option("--device", device, "Compute device: cpu, or cuda (a build with CUDA and a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

void add_weights_flag(CLI::App& app, std::string& weights, const std::string& help) {
  app.add_option("--weights", weights,
                 !help.empty() ? help
                               : "Compute weights: auto (the file's 16-bit format (f16 or bf16) when every weight is "
                                 "exact in it, GGUF Q8_0 / Q4_0 matrices kept quantised on the CPU, else f32), f32, f16 or "
                                 "bf16 (CPU: held 16-bit with the same logits, only when exact; CUDA: rounded), or "
                                 "bf16-dot (CPU: weights and activations rounded to bfloat16, products on AMX-BF16 tiles or AVX512-BF16; "
                                 "lossy; faster for many rows of a large model where the CPU has AMX)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "bf16-dot"}));
}

void add_act_quant_flag(CLI::App& app, std::string& act_quant) {
  app.add_option("--act-quant", act_quant,
                 "none, or q8 (CPU, GGUF Q8_0 / Q4_0 files, --weights auto): activations quantised to Q8_0 blocks and "
                 "multiplied with integer (VNNI) dot products, as llama.cpp computes these files; lossy, faster")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "q8"}));
}

std::vector<int> parse_token_ids(const std::string& text, const std::string& where) {
  std::vector<int> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && std::isspace(static_cast<unsigned char>(item[used]))) ++used;
    if (used == 0 || used != item.size()) throw UsageError("not a comma-separated list of token ids: '" + item + "'", where);
    if (v < 0 || v > std::numeric_limits<int>::max())
      throw UsageError(fmt::format("token ids are integers in 0..{}, got {}", std::numeric_limits<int>::max(), v), where);
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw UsageError("empty list of token ids", where);
  return ids;
}

std::vector<int> encode_prompt(const Tokenizer* tok, const ModelConfig& c, const std::string& text,
                               const std::string& where, const std::string& model_path) {
  if (!tok) throw InputError("the model has no tokenizer (" + tokenizer_location(model_path) + " missing): use --prompt-ids", model_path);
  std::vector<int> ids = tok->encode(text, where);
  if (c.add_bos) ids.insert(ids.begin(), c.bos_id);
  if (ids.empty()) throw InputError("empty prompt", where);
  return ids;
}

void check_prompt_sources(const CLI::App& app, const std::string& file, const std::string& ids) {
  const int sources = int(app.count("--prompt") > 0) + int(!file.empty()) + int(app.count("--prompt-ids") > 0);
  if (sources > 1) throw UsageError("give one of --prompt, --prompt-file, --prompt-ids");
  if (app.count("--prompt-ids") > 0 && ids.empty()) throw UsageError("empty list of token ids", "--prompt-ids");
}

std::vector<int> resolve_prompt(const CLI::App& app, const std::string& text, const std::string& file,
                                const std::string& ids_text, const Tokenizer* tok, const ModelConfig& c,
                                const std::string& model_path, io::Provenance& prov, int prompt_tokens) {
  std::vector<int> ids;
  if (!ids_text.empty()) {
    ids = parse_token_ids(ids_text, "--prompt-ids");
    for (int id : ids)
      if (id >= c.vocab_size)
        throw InputError(fmt::format("token id {} outside the vocabulary [0, {})", id, c.vocab_size), "--prompt-ids");
  } else {
    if (!tok) throw InputError("the model has no tokenizer (" + tokenizer_location(model_path) + " missing): use --prompt-ids", model_path);
    if (app.count("--prompt") > 0 && file.empty()) {
      ids = encode_prompt(tok, c, text, "--prompt", model_path);
    } else {
      const std::string src = file.empty() ? "-" : file;
      const std::string content = io::read_file(src);
      prov.add_input(src, io::sha256_hex(content));
      ids = encode_prompt(tok, c, content, src == "-" ? "stdin" : src, model_path);
    }
  }
  if (prompt_tokens > 0 && static_cast<int>(ids.size()) < prompt_tokens)
    throw InputError(fmt::format("prompt has {} tokens, fewer than --prompt-tokens {}", ids.size(), prompt_tokens));
  if (prompt_tokens > 0) ids.resize(prompt_tokens);
  return ids;
}

}  // namespace icmlkit::lm
