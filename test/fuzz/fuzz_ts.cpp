// libFuzzer harness: the UEA/UCR .ts reader (cde-train's input) on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "fuzz_file.hpp"
#include "io/ts.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  try {
    (void)io::read_ts(fuzz::scratch_file(data, size, ".ts"));
  } catch (const Error&) {
  }
  return 0;
}
