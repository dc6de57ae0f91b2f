// bench-nccl-chain: the NCCL chained reduction of issue 41 (kernels/nccl_chain.hpp) on this
// machine's GPUs.  First the check: for 1 .. min(4, GPUs) ranks, 1, 2, 3, 5 and 8 micro-batches
// and chunks of 7 and 2^18 floats, every rank's total must equal the CPU left fold
// ((g_0 + g_1) + g_2) + ... bit for bit (the data make other orders give other bits).  One JSON
// object on stdout.  Exit 0 when every case matched, 1 when one did not, 77 without a GPU, 2 for
// bad arguments.  (The reduction is not timed here: lm-train trains on the CPU.)
// Usage: bench-nccl-chain [--check]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device.hpp"
#include "kernels/nccl_chain.hpp"
#include "util/rng.hpp"

namespace {

/// Micro-batch a's gradient: magnitudes 1e-3 .. 1e4, both signs, so the sum depends on the order.
std::vector<float> micro_gradient(int a, std::size_t n) {
  icmlkit::Rng rng(3000 + std::uint64_t(a));
  std::vector<float> g(n);
  for (auto& x : g) x = static_cast<float>((rng.uniform() - 0.5) * std::pow(10.0, 7.0 * rng.uniform() - 3.0));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--check") {
      std::fprintf(stderr, "bench-nccl-chain: error: unknown argument %s (usage: bench-nccl-chain [--check])\n", argv[i]);
      return 2;
    }
  const int gpus = icmlkit::kernels::device_count();
  if (gpus == 0) {
    std::printf("%s\n", nlohmann::json{{"benchmark", "nccl_chain"}, {"skipped", "no CUDA device"}}.dump().c_str());
    return 77;
  }
  const int max_ranks = std::min(4, gpus);
  nlohmann::json out{{"benchmark", "nccl_chain"}, {"gpus", gpus}, {"device", icmlkit::kernels::device_name(0)}};
  bool all_same = true;
  try {
    nlohmann::json cases = nlohmann::json::array();
    const std::size_t n = 3001;
    for (int accum : {1, 2, 3, 5, 8}) {
      std::vector<std::vector<float>> micro;
      for (int a = 0; a < accum; ++a) micro.push_back(micro_gradient(a, n));
      std::vector<float> want = micro[0];
      for (int a = 1; a < accum; ++a)
        for (std::size_t i = 0; i < n; ++i) want[i] = want[i] + micro[std::size_t(a)][i];
      for (int ranks = 1; ranks <= max_ranks; ++ranks)
        for (std::size_t chunk : {std::size_t(7), std::size_t(1) << 18}) {
          const auto got = icmlkit::kernels::nccl_chain_sum(ranks, micro, chunk);
          bool same = got.size() == std::size_t(ranks);
          for (const auto& g : got) same = same && std::memcmp(g.data(), want.data(), n * sizeof(float)) == 0;
          all_same = all_same && same;
          cases.push_back({{"ranks", ranks}, {"micro_batches", accum}, {"chunk_floats", chunk}, {"bit_identical", same}});
        }
    }
    out["check"] = cases;
    out["bit_identical"] = all_same;
  } catch (const std::exception& e) {
    out["error"] = e.what();
    std::printf("%s\n", out.dump().c_str());
    std::fprintf(stderr, "bench-nccl-chain: error: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", out.dump().c_str());
  return all_same ? 0 : 1;
}
