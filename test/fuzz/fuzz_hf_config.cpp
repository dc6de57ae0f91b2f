// libFuzzer harness: the Hugging Face config.json reader (lm/hf_config) on arbitrary bytes: JSON
// parsed as io::read_json does, then config_from_hf_json; a bad config may only be refused with
// our Error (exit 1 for the user), never otherwise.  What it accepts must also pass the
// checks the model allocator relies on before sizing anything (layers in [0, 4096]).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "lm/hf_config.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  const nlohmann::json cfg = nlohmann::json::parse(data, data + size, nullptr, false);
  if (cfg.is_discarded()) return 0;
  try {
    const lm::ModelConfig c = lm::config_from_hf_json(cfg, "config.json");
    if (c.n_layers < 0 || c.n_layers > 4096) std::abort();
    if (!c.block_types.empty() && c.block_types.size() != static_cast<std::size_t>(c.n_layers)) std::abort();
    (void)c.n_params_approx();
  } catch (const Error&) {
  }
  return 0;
}
