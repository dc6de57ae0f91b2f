// libFuzzer harness: the safetensors header parser and tensor decoding on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "lm/safetensors.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  try {
    const auto h = lm::safetensors::parse(data, size, "fuzz.safetensors");
    for (const auto& [name, e] : h.tensors)
      if (e.end - e.begin <= (1u << 24)) (void)lm::safetensors::to_floats(data, e);
  } catch (const Error&) {
  }
  return 0;
}
