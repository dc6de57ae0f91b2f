// bench-mpi-reduce: the data-parallel gradient reduction (issue 41) against its peer, MPI_Allreduce,
// on the same bytes in the same run.  Ours: dist::ChainReducer with one micro-batch per rank (the
// chained, chunk-pipelined fold in micro-batch order, then MPI_Bcast); the peer: MPI_Allreduce(SUM)
// of the floats, which promises no summation order.  Run under mpirun; rank 0 prints one JSON
// object: per size, the median seconds of each and the bus bandwidth 2 (N - 1) / N x bytes / s.
//   mpirun -np 2 bench-mpi-reduce [floats ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if ICMLKIT_HAVE_MPI
#include <mpi.h>
#endif
#include <nlohmann/json.hpp>

#include "dist/comm.hpp"
#include "dist/world.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  dist::World& world = dist::World::init(argc, argv);
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::size_t(std::strtoull(argv[i], nullptr, 10)));
  if (sizes.empty()) sizes = {std::size_t(1) << 16, std::size_t(1) << 20, std::size_t(1) << 23};
  const int n = world.size(), reps = 7;
  nlohmann::json out{{"benchmark", "mpi_reduce"}, {"ranks", n}, {"transport", world.comm().transport()}, {"sizes", nlohmann::json::array()}};
  for (const std::size_t floats : sizes) {
    std::vector<float> buf(floats), res(floats);
    std::vector<double> d(8), dres(8);
    auto fill = [&] {
      for (std::size_t i = 0; i < floats; ++i) buf[i] = float(world.rank() + 1) * 1e-3f * float(i % 97);
    };
    std::vector<double> chain, peer;
    for (int r = 0; r < reps; ++r) {
      fill();
      dist::ChainReducer red(world.comm(), n);
      const auto t0 = std::chrono::steady_clock::now();
      for (int a : red.mine()) red.add(a, {buf, d});
      red.finish({buf, d});
      chain.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
#if ICMLKIT_HAVE_MPI
      if (n > 1) {
        fill();
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t1 = std::chrono::steady_clock::now();
        MPI_Allreduce(buf.data(), res.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(d.data(), dres.data(), 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        peer.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
      }
#endif
    }
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double bytes = double(floats) * sizeof(float), bus = n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0;
    nlohmann::json row{{"floats", floats}, {"bytes", bytes}, {"chain_seconds", median(chain)}};
    if (!peer.empty()) {
      row["allreduce_seconds"] = median(peer);
      row["chain_over_allreduce"] = median(chain) / std::max(median(peer), 1e-12);
      row["chain_bus_gb_per_s"] = bus / std::max(median(chain), 1e-12) / 1e9;
      row["allreduce_bus_gb_per_s"] = bus / std::max(median(peer), 1e-12) / 1e9;
    }
    out["sizes"].push_back(row);
  }
  if (world.rank() == 0) std::printf("%s\n", out.dump().c_str());
  return world.finish(0);
}
