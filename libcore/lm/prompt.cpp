#include "lm/prompt.hpp"

#include <cctype>
#include <sstream>

#include "util/error.hpp"

namespace icmlkit::lm {

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
