#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <thread>

#include "kernels/launch.hpp"
#include "kernels/nccl_chain.hpp"
#include "util/error.hpp"

namespace icmlkit::kernels {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
void check(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) throw RuntimeError(fmt::format("{}: {}", what, ncclGetErrorString(e)));
}

/// out[i] = prev[i] + g[i]: G_a = G_{a-1} + g_a, one float addition per word (as the CPU fold).
__global__ void fold_chunk(float* out, const float* prev, const float* g, std::size_t n) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = prev[i] + g[i];
}

void fold(float* out, const float* prev, const float* g, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  const unsigned block = 256;
  const unsigned grid = static_cast<unsigned>((n + block - 1) / block);
  ICMLKIT_LAUNCH(fold_chunk, grid, block, s)(out, prev, g, n);
  check(cudaGetLastError(), "fold kernel");
}

}  // namespace

NcclChainReducer::NcclChainReducer(void* comm, void* stream, int accum, std::size_t n, std::size_t chunk_floats)
    : comm_(comm), stream_(stream), accum_(accum), n_(n), chunk_(std::max<std::size_t>(1, chunk_floats)) {
  if (accum < 1) throw InputError(fmt::format("NCCL chain: accum {} < 1", accum));
  check(ncclCommUserRank(static_cast<ncclComm_t>(comm_), &rank_), "ncclCommUserRank");
  check(ncclCommCount(static_cast<ncclComm_t>(comm_), &size_), "ncclCommCount");
  if (size_ > 1 && accum_ > size_)  // K <= N - 1 chunks: a rank's two links never share a diagonal (header comment)
    chunk_ = std::max(chunk_, (n_ + std::size_t(size_) - 2) / std::size_t(size_ - 1));
  check(cudaMalloc(&sum_, std::max<std::size_t>(1, n_) * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&recv_, std::min(n_, chunk_) * sizeof(float) + sizeof(float)), "cudaMalloc");
}

NcclChainReducer::~NcclChainReducer() {
  cudaFree(sum_);
  cudaFree(recv_);
}

std::vector<int> NcclChainReducer::mine() const {
  std::vector<int> out;
  for (int a = rank_; a < accum_; a += size_) out.push_back(a);
  return out;
}

void NcclChainReducer::add(int a, const float* g) {
  if (a < 0 || a >= accum_ || a % size_ != rank_ || a <= last_)
    throw InputError(fmt::format("NCCL chain: micro-batch {} is not rank {}'s next", a, rank_));
  last_ = a;
  auto* comm = static_cast<ncclComm_t>(comm_);
  auto* s = static_cast<cudaStream_t>(stream_);
  const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
  const bool send = size_ > 1 && a + 1 < accum_;
  const std::size_t chunks = (n_ + chunk_ - 1) / chunk_;
  auto len = [&](std::size_t c) { return std::min(chunk_, n_ - c * chunk_); };
  if (a == 0 || size_ == 1) {  // G_0 = g_0, or one rank folding locally
    if (a == 0)
      check(cudaMemcpyAsync(sum_, g, n_ * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    else
      fold(sum_, sum_, g, n_, s);
    if (send)  // one chunk per group, as the links after it (the diagonal order)
      for (std::size_t c = 0; c < chunks; ++c) check(ncclSend(sum_ + c * chunk_, len(c), ncclFloat32, next, comm, s), "ncclSend");
    return;
  }
  // chunk c of G_{a-1} arrives while chunk c - 1 of G_a leaves: the chain is pipelined
  for (std::size_t c = 0; c <= chunks; ++c) {
    check(ncclGroupStart(), "ncclGroupStart");
    if (c < chunks) check(ncclRecv(recv_, len(c), ncclFloat32, prev, comm, s), "ncclRecv");
    if (send && c > 0) check(ncclSend(sum_ + (c - 1) * chunk_, len(c - 1), ncclFloat32, next, comm, s), "ncclSend");
    check(ncclGroupEnd(), "ncclGroupEnd");
    if (c < chunks) fold(sum_ + c * chunk_, recv_, g + c * chunk_, len(c), s);
  }
}

void NcclChainReducer::finish(float* g) {
  const std::vector<int> m = mine();
  if (last_ != (m.empty() ? -1 : m.back()))
    throw InputError(fmt::format("NCCL chain: rank {} finished before its last micro-batch", rank_));
  auto* s = static_cast<cudaStream_t>(stream_);
  const int root = (accum_ - 1) % size_;
  if (size_ == 1)
    check(cudaMemcpyAsync(g, sum_, n_ * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  else
    check(ncclBroadcast(sum_, g, n_, ncclFloat32, root, static_cast<ncclComm_t>(comm_), s), "ncclBroadcast");
  last_ = -1;
}

std::vector<std::vector<float>> nccl_chain_sum(int devices, const std::vector<std::vector<float>>& micro, std::size_t chunk_floats) {
  int present = 0;
  if (cudaGetDeviceCount(&present) != cudaSuccess) present = 0;
  if (devices < 1 || devices > present)
    throw RuntimeError(fmt::format("NCCL chain: {} GPU(s) asked for, {} present", devices, present));
  if (micro.empty()) throw InputError("NCCL chain: no micro-batches");
  const std::size_t n = micro[0].size();
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
  check(ncclCommInitAll(comms.data(), devices, nullptr), "ncclCommInitAll");
  std::vector<std::vector<float>> out(static_cast<std::size_t>(devices), std::vector<float>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(devices));
  std::vector<std::thread> threads;
  for (int r = 0; r < devices; ++r)
    threads.emplace_back([&, r] {
      float* g = nullptr;
      cudaStream_t s = nullptr;
      try {
        check(cudaSetDevice(r), "cudaSetDevice");
        check(cudaStreamCreate(&s), "cudaStreamCreate");
        check(cudaMalloc(&g, std::max<std::size_t>(1, n) * sizeof(float)), "cudaMalloc");
        NcclChainReducer chain(comms[std::size_t(r)], s, static_cast<int>(micro.size()), n, chunk_floats);
        for (int a : chain.mine()) {
          if (micro[std::size_t(a)].size() != n) throw InputError("NCCL chain: micro-batches of different sizes");
          check(cudaMemcpyAsync(g, micro[std::size_t(a)].data(), n * sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
          chain.add(a, g);
        }
        chain.finish(g);
        check(cudaMemcpyAsync(out[std::size_t(r)].data(), g, n * sizeof(float), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
      }
      cudaFree(g);
      if (s) cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  for (auto c : comms) ncclCommDestroy(c);
  for (int r = 0; r < devices; ++r)
    if (!errors[std::size_t(r)].empty()) throw RuntimeError(fmt::format("NCCL chain, rank {}: {}", r, errors[std::size_t(r)]));
  return out;
}

}  // namespace icmlkit::kernels
