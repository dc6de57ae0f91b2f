// libFuzzer harness: lm-serve's request bodies (the OpenAI completions, chat and embeddings
// parsers) on arbitrary bytes: JSON parsed as the server does, then each parser; a parser may
// refuse a body only with ApiError (the server's 400), never otherwise.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "serve/openai.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  const nlohmann::json body = nlohmann::json::parse(data, data + size, nullptr, false);
  if (body.is_discarded()) return 0;
  for (bool chat : {false, true}) {
    try {
      const auto p = serve::parse_completion(body, chat);
      if (chat) (void)serve::chat_prompt(p.messages);
    } catch (const serve::ApiError&) {
    }
  }
  try {
    bool base64 = false;
    (void)serve::parse_embedding_input(body, base64);
  } catch (const serve::ApiError&) {
  }
  return 0;
}
