// libFuzzer harness: the rank-CSV reader of pseudomallows-fit and mallows-mcmc on arbitrary
// bytes; the first byte picks the missing-rank policy and the header flag.
#include <cstddef>
#include <cstdint>

#include "fuzz_file.hpp"
#include "rank/ranking.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  if (size == 0) return 0;
  const auto policy = static_cast<rank::MissingPolicy>(data[0] % 3);
  try {
    (void)rank::read_rank_csv(fuzz::scratch_file(data + 1, size - 1, ".csv"), policy, (data[0] & 0x10) != 0);
  } catch (const Error&) {
  }
  return 0;
}
