// The data-parallel gradient reduction of issue 41 on GPUs: dist::ChainReducer's algorithm and
// order over NCCL point-to-point (built when CUDA and NCCL are found: ICMLKIT_HAVE_NCCL).
//
// Micro-batch a of a step runs on rank a mod N; the running sum G_a = G_{a-1} + g_a (G_0 = g_0)
// travels from rank to rank in K chunks, group c of a rank's link being {receive chunk c of
// G_{a-1}, send chunk c - 1 of G_a} (ncclGroupStart/End), so the chain is pipelined; the total
// G_{A-1} is broadcast from rank (A - 1) mod N.  Why no rank waits in a circle: NCCL's sends block
// until the peer receives (no MPI_Isend-like buffering), and group c of the link at chain position
// p matches only groups of positions p - 1 and p + 1 on the same anti-diagonal p + c, so the
// diagonals complete in order, as long as each rank's links are in that order (the first link's
// sends count as groups 1..K).  With A > N a rank holds positions p and p + N; its first link ends
// at diagonal p + K, its second starts at p + N, so the chunk is widened to make K <= N - 1 there
// (ceil(n / (N - 1)) floats at least).  A float addition is the same IEEE operation
// on the GPU and the CPU, so the result is bitwise the CPU left fold's, whatever N and the chunk.
#pragma once

#include <cstddef>
#include <vector>

namespace icmlkit::kernels {

/// The chained, fixed-order reduction of `accum` micro-batch gradients (`n` floats each) over the
/// `size` ranks of an NCCL communicator, one GPU per rank.  Usage on every rank, on its device:
/// for each a in mine(), in increasing a: the micro-batch's gradient into a device buffer g, then
/// add(a, g); after the last, finish(g) leaves the total in g on every rank.  Work is enqueued on
/// the stream given; synchronise it before reading g on the host.  Throws RuntimeError for a CUDA
/// or NCCL failure, InputError for a micro-batch out of turn.
class NcclChainReducer {
 public:
  /// `comm`: this rank's ncclComm_t and `stream` its cudaStream_t (passed as void* so that this
  /// header needs neither CUDA's nor NCCL's); `chunk_floats` words per message (>= 1; at least
  /// ceil(n / (N - 1)) when accum > N, see the file comment).
  NcclChainReducer(void* comm, void* stream, int accum, std::size_t n, std::size_t chunk_floats = std::size_t(1) << 18);
  ~NcclChainReducer();
  NcclChainReducer(const NcclChainReducer&) = delete;
  NcclChainReducer& operator=(const NcclChainReducer&) = delete;
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// The micro-batches this rank computes: rank, rank + N, ... below accum.
  std::vector<int> mine() const;
  /// Folds micro-batch a's gradient `g` (n device floats) into the running sum (see the file comment).
  void add(int a, const float* g);
  /// The step's total into `g` (n device floats) on every rank.
  void finish(float* g);

 private:
  void* comm_;
  void* stream_;
  int rank_ = 0, size_ = 1, accum_ = 1;
  std::size_t n_, chunk_;
  float* sum_ = nullptr;   // G_a as this rank last formed it (device)
  float* recv_ = nullptr;  // one received chunk of G_{a-1} (device)
  int last_ = -1;
};

/// The reduction run over `devices` GPUs of this process (one thread and one NCCL rank each) on
/// the host micro-batch gradients `micro` ([accum][n]): returns each rank's total, copied back to
/// the host.  For the tests and gpu-check.  Throws RuntimeError when fewer GPUs are present or a
/// CUDA/NCCL call fails before the chain starts; a rank that fails within it leaves the others
/// waiting in NCCL (the process must be ended from outside: gpu-check runs it under timeout).
std::vector<std::vector<float>> nccl_chain_sum(int devices, const std::vector<std::vector<float>>& micro,
                                               std::size_t chunk_floats);

}  // namespace icmlkit::kernels
