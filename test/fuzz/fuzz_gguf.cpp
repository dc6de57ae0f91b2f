// libFuzzer harness: the GGUF header parser, tensor decoding and the whole llama model loader
// (config, tensors, vocabulary -> SentencePiece) on arbitrary bytes.  Any exception other than
// icmlkit::Error, any sanitizer report, crash or timeout is a finding.
#include <cstddef>
#include <cstdint>

#include "lm/gguf.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  try {
    const auto f = lm::gguf::parse(data, size, "fuzz.gguf");
    for (const auto& t : f.tensors)
      if (t.nbytes <= (1u << 24)) (void)lm::gguf::dequantize(data, t);
  } catch (const Error&) {
  }
  try {
    (void)lm::gguf::load_model(data, size, "fuzz.gguf");
  } catch (const Error&) {
  }
  return 0;
}
