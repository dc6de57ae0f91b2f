// Data parallelism's communication (issue 41): a group of ranks, and the fixed-order reduction of
// a step's micro-batch gradients over them.
//
// Why our own reduction: MPI_Allreduce (and NCCL's ring or tree) promise a sum, not an order, and
// floating-point addition is not associative, so the bits of a summed gradient would depend on the
// rank count and the library's algorithm.  Here the order is the micro-batches' own: a step of A
// micro-batches has gradient G = (((g_0 + g_1) + g_2) + ... + g_{A-1}), each g_a computed from zero
// (as PyTorch accumulates .grad), whichever rank computed it.  Micro-batch a is computed by rank
// a mod N, and the running sum travels from rank to rank: rank (a - 1) mod N sends G_{a-1}, rank
// a mod N adds its g_a, so N ranks, one rank, and any N in between give the same bits.  The sum is
// passed in chunks, so the ranks of one round work as a pipeline: a round costs about one transfer
// of the gradient plus N - 1 chunk latencies, and the total is then broadcast (a copy: exact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace icmlkit::dist {

/// A fixed group of ranks 0 .. size() - 1 that exchange bytes point to point.  Every call blocks
/// until its part is done; a failure (a rank gone) throws RuntimeError or ends the process (MPI's
/// default), never returns wrong data.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Sends `bytes` bytes to rank `to` (!= rank()).
  virtual void send(const void* data, std::size_t bytes, int to) = 0;
  /// Starts sending `bytes` bytes to rank `to` and returns at once; `data` must stay unchanged
  /// until wait_sends() returns.  Messages to one rank arrive in the order they were started.
  /// (The chained reduction passes its sum on this way: a rank that waited for its successor to
  /// receive before receiving from its own predecessor could wait in a circle.)
  virtual void send_async(const void* data, std::size_t bytes, int to) { send(data, bytes, to); }
  /// Returns when every send_async() started by this rank has completed.
  virtual void wait_sends() {}
  /// Receives exactly `bytes` bytes from rank `from` (!= rank()), sent by its matching send().
  virtual void recv(void* data, std::size_t bytes, int from) = 0;
  /// Copies `bytes` bytes from rank `root`'s `data` into every rank's `data`.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  /// What carries the bytes ("mpi", "threads", "self"), for logs.
  virtual std::string transport() const = 0;
};

/// One rank alone (size 1): point-to-point calls are errors (there is no other rank).
class SelfComm final : public Comm {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  void send(const void*, std::size_t, int) override;
  void recv(void*, std::size_t, int) override;
  void broadcast(void*, std::size_t, int) override {}
  std::string transport() const override { return "self"; }
};

/// N ranks as threads of one process (tests and benchmarks of the reduction without mpirun):
/// make_thread_group(N) returns N communicators, one per thread.  Messages between a pair of ranks
/// arrive in the order they were sent; send() returns when the receiver has taken the message (as
/// MPI's rendezvous protocol for large messages), send_async() copies and returns at once.
std::vector<std::unique_ptr<Comm>> make_thread_group(int n);

/// Compares every rank's `text` with rank 0's by SHA-256 (32 bytes per rank travel): returns the
/// lowest rank whose text differs, or -1 when all agree; every rank gets the same answer.  The
/// start-up check that the ranks of a job run the same configuration.
int first_mismatch(Comm& comm, const std::string& text);

/// Words of a step's running sum: the gradient (floats) and the step's statistics (doubles: loss
/// sums, expert loads), summed in the same order.
struct Sums {
  std::span<float> floats;
  std::span<double> doubles;
};

/// The fixed-order reduction of one optimizer step's micro-batch sums over the ranks of `comm`
/// (see the file comment).  Usage, on every rank: for each a in mine(), in increasing a: compute
/// g_a from zero into a buffer, then add(a, buffer); after the last one, finish(buffer) leaves the
/// step's total in every rank's buffer.  The buffer is the same one throughout (same sizes on every
/// rank); add() overwrites it with the running sum and returns without waiting for the successor,
/// which takes the sum from a copy (so each rank computes its next micro-batch meanwhile).  The
/// running sum (one rank) or that copy (several) costs a second buffer of the same size.  Throws InputError for a bad micro-batch index
/// or size, and whatever Comm throws.
class ChainReducer {
 public:
  /// `accum` micro-batches per step (>= 1) over comm's ranks; `chunk_floats` words per message.
  ChainReducer(Comm& comm, int accum, std::size_t chunk_floats = std::size_t(1) << 18);
  /// The micro-batches this rank computes, increasing (rank, rank + N, ...); empty when accum <= rank.
  std::vector<int> mine() const;
  /// Folds micro-batch a's sums `g` (this rank's, a in mine()) into the running sum: G_a = G_{a-1} + g_a
  /// (G_0 = g_0), receiving G_{a-1} from rank (a - 1) mod N and sending G_a to rank (a + 1) mod N.
  void add(int a, Sums g);
  /// After this rank's last add(): the total G_{A-1} into `g` on every rank (broadcast from rank
  /// (A - 1) mod N).  A rank with no micro-batch passes its buffer (same sizes) to receive it.
  void finish(Sums g);
  /// Seconds spent in add() and finish() waiting for and moving data (and adding), since construction.
  double seconds() const noexcept { return seconds_; }
  /// Bytes this rank sent along the chain since construction (the broadcast, which brings the
  /// total to every rank once more, is MPI's and not counted).
  std::int64_t bytes_sent() const noexcept { return sent_; }

 private:
  Comm& comm_;
  int accum_;
  std::size_t chunk_;
  std::vector<float> local_f_, in_f_, out_f_;  // one rank: the running sum; several: a received chunk, the sum passed on
  std::vector<double> local_d_, in_d_, out_d_;
  int last_ = -1;  // the last micro-batch folded
  double seconds_ = 0;
  std::int64_t sent_ = 0;
};

}  // namespace icmlkit::dist
