// libFuzzer harness: the vector-set readers of bimetric-index / bimetric-search (.fbin, .fvecs,
// CSV) on arbitrary bytes; the first byte picks the format and the CSV options.
#include <cstddef>
#include <cstdint>

#include "ann/vectors.hpp"
#include "fuzz_file.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  if (size == 0) return 0;
  const int form = data[0] % 4;
  const char* ext = form == 0 ? ".fbin" : form == 1 ? ".fvecs" : ".csv";
  ann::VectorReadOptions o;
  o.no_header = form == 3;
  o.label_last = (data[0] & 0x10) != 0;
  try {
    (void)ann::read_vectors(fuzz::scratch_file(data + 1, size - 1, ext), o);
  } catch (const Error&) {
  }
  return 0;
}
