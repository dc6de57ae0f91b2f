#include "lm/prompt.hpp"

#include <cctype>
#include <sstream>

#include "cli/run_tool.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

void add_prompt_flags(CLI::App& app, std::string& text, std::string& file, std::string& ids) {
  app.add_option("--prompt", text, "Prompt text");
  app.add_option("--prompt-file", file, "File holding the prompt text (- for stdin)");
  app.add_option("--prompt-ids", ids, "Prompt as comma-separated token ids");
}

void add_sampler_flags(CLI::App& app, SamplerConfig& sc) {
  app.add_option("--temperature", sc.temperature, "0 = greedy; > 0 samples")->capture_default_str()->check(cli::non_negative());
  app.add_option("--top-k", sc.top_k, "Sample among the k most likely (0 = all)")->capture_default_str()->check(cli::int_range(0, 1 << 24));
  app.add_option("--top-p", sc.top_p, "Nucleus: smallest set with probability >= p")->capture_default_str()->check(CLI::Range(0.0, 1.0));
}

void add_device_flag(CLI::App& app, std::string& device) {
  app.add_option("--device", device, "Compute device: cpu, or cuda (a build with CUDA and a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
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
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw UsageError("empty list of token ids", where);
  return ids;
}

std::vector<int> encode_prompt(const Tokenizer* tok, const ModelConfig& c, const std::string& text,
                               const std::string& where, const std::string& model_path) {
  if (!tok) throw InputError("the model has no tokenizer (/tokenizer/model): use --prompt-ids", model_path);
  std::vector<int> ids = tok->encode(text, where);
  if (c.add_bos) ids.insert(ids.begin(), c.bos_id);
  if (ids.empty()) throw InputError("empty prompt", where);
  return ids;
}

}  // namespace icmlkit::lm
