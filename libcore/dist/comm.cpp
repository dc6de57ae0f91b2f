#include "dist/comm.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "io/sha256.hpp"
#include "util/error.hpp"

namespace icmlkit::dist {

void SelfComm::send(const void*, std::size_t, int to) {
  throw RuntimeError(fmt::format("a single rank has no rank {} to send to", to));
}
void SelfComm::recv(void*, std::size_t, int from) {
  throw RuntimeError(fmt::format("a single rank has no rank {} to receive from", from));
}

namespace {

/// A message in flight: the sender's bytes, read by the receiver where they lie (no copy), as an
/// MPI rendezvous transfer does; so a sender that changed its buffer before the receiver took it
/// would deliver other bits, and the tests would see it.
struct Message {
  const unsigned char* data = nullptr;
  std::size_t bytes = 0;
};

/// The mailboxes of a thread group: one queue of messages per (sender, receiver) pair, and how
/// many messages of each pair were sent and taken (copied out by the receiver).
struct Mailboxes {
  explicit Mailboxes(int n)
      : n(n), queues(std::size_t(n) * std::size_t(n)), sent(queues.size(), 0), taken(queues.size(), 0) {}
  int n;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::deque<Message>> queues;  // [from * n + to]
  std::vector<std::uint64_t> sent, taken;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Mailboxes> box, int rank) : box_(std::move(box)), rank_(rank) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return box_->n; }
  /// Returns when the receiver has taken the message, as MPI's rendezvous protocol does for large
  /// messages (so the tests meet the waits MPI has).
  void send(const void* data, std::size_t bytes, int to) override {
    const std::size_t q = post(data, bytes, to);
    std::unique_lock lock(box_->mutex);
    const std::uint64_t mine = box_->sent[q];
    box_->changed.wait(lock, [&] { return box_->taken[q] >= mine; });
  }
  /// Returns at once; the receiver reads `data` where it lies, so it must stay unchanged until
  /// wait_sends().
  void send_async(const void* data, std::size_t bytes, int to) override { post(data, bytes, to); }
  void wait_sends() override {
    std::unique_lock lock(box_->mutex);
    box_->changed.wait(lock, [&] {
      for (int to = 0; to < box_->n; ++to) {
        const std::size_t q = std::size_t(rank_) * std::size_t(box_->n) + std::size_t(to);
        if (box_->taken[q] < box_->sent[q]) return false;
      }
      return true;
    });
  }
  void recv(void* data, std::size_t bytes, int from) override {
    check_peer(from);
    const std::size_t q = std::size_t(from) * std::size_t(box_->n) + std::size_t(rank_);
    std::unique_lock lock(box_->mutex);
    box_->changed.wait(lock, [&] { return !box_->queues[q].empty(); });
    const Message m = box_->queues[q].front();
    box_->queues[q].pop_front();
    lock.unlock();
    const bool fits = m.bytes == bytes;
    if (fits && bytes > 0) std::memcpy(data, m.data, bytes);  // before the sender may reuse its buffer
    lock.lock();
    ++box_->taken[q];
    lock.unlock();
    box_->changed.notify_all();
    if (!fits) throw RuntimeError(fmt::format("rank {} expected {} bytes from rank {}, got {}", rank_, bytes, from, m.bytes));
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (rank_ == root) {
      for (int r = 0; r < box_->n; ++r)
        if (r != root) send_async(data, bytes, r);
      wait_sends();
    } else {
      recv(data, bytes, root);
    }
  }
  std::string transport() const override { return "threads"; }

 private:
  std::size_t post(const void* data, std::size_t bytes, int to) {
    check_peer(to);
    const std::size_t q = std::size_t(rank_) * std::size_t(box_->n) + std::size_t(to);
    {
      std::lock_guard lock(box_->mutex);
      box_->queues[q].push_back({static_cast<const unsigned char*>(data), bytes});
      ++box_->sent[q];
    }
    box_->changed.notify_all();
    return q;
  }
  void check_peer(int r) const {
    if (r < 0 || r >= box_->n || r == rank_) throw RuntimeError(fmt::format("rank {}: no peer rank {} in a group of {}", rank_, r, box_->n));
  }
  std::shared_ptr<Mailboxes> box_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_thread_group(int n) {
  if (n < 1) throw InputError(fmt::format("a group needs at least one rank (got {})", n));
  auto box = std::make_shared<Mailboxes>(n);
  std::vector<std::unique_ptr<Comm>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadComm>(box, r));
  return out;
}

int first_mismatch(Comm& comm, const std::string& text) {
  const std::string mine = io::sha256_hex(text);
  std::int32_t bad = -1;
  if (comm.rank() == 0) {
    std::string theirs(mine.size(), '\0');
    for (int r = 1; r < comm.size(); ++r) {  // every rank's digest is received, also after a mismatch
      comm.recv(theirs.data(), theirs.size(), r);
      if (bad < 0 && theirs != mine) bad = r;
    }
  } else {
    comm.send(mine.data(), mine.size(), 0);
  }
  comm.broadcast(&bad, sizeof(bad), 0);
  return bad;
}

ChainReducer::ChainReducer(Comm& comm, int accum, std::size_t chunk_floats)
    : comm_(comm), accum_(accum), chunk_(chunk_floats) {
  if (accum < 1) throw InputError(fmt::format("a step needs at least one micro-batch (got {})", accum));
  if (chunk_ == 0) throw InputError("the reduction's chunk must hold at least one value");
}

std::vector<int> ChainReducer::mine() const {
  std::vector<int> a;
  for (int i = comm_.rank(); i < accum_; i += comm_.size()) a.push_back(i);
  return a;
}

void ChainReducer::add(int a, Sums g) {
  const int n = comm_.size(), me = comm_.rank();
  // this rank's micro-batches in increasing order, none skipped: me, me + n, ...
  const int next = last_ < 0 ? me : last_ + n;
  if (a != next || a >= accum_)
    throw InputError(fmt::format("rank {} of {} cannot fold micro-batch {} of {} (its next is {})", me, n, a, accum_,
                                 next < accum_ ? std::to_string(next) : std::string("none")));
  const auto t0 = std::chrono::steady_clock::now();
  if (n == 1) {  // the running sum stays here: G_0 = g_0, then G_a = G_{a-1} + g_a
    if (a == 0) {
      local_f_.assign(g.floats.begin(), g.floats.end());
      local_d_.assign(g.doubles.begin(), g.doubles.end());
    } else {
      if (local_f_.size() != g.floats.size() || local_d_.size() != g.doubles.size())
        throw InputError("micro-batch sums changed size within a step");
      for (std::size_t i = 0; i < local_f_.size(); ++i) local_f_[i] = local_f_[i] + g.floats[i];
      for (std::size_t i = 0; i < local_d_.size(); ++i) local_d_[i] = local_d_[i] + g.doubles[i];
    }
  } else {
    const int from = (a - 1 + n) % n, to = (a + 1) % n;
    const bool receive = a > 0, pass = a + 1 < accum_;
    // G_a goes out from a copy, so that this rank computes its next micro-batch while the
    // successor takes it; the copy of the previous link must have left first.
    comm_.wait_sends();
    if (pass) {
      out_f_.resize(g.floats.size());
      out_d_.resize(g.doubles.size());
    }
    in_f_.resize(std::min(chunk_, g.floats.size()));
    for (std::size_t o = 0; o < g.floats.size(); o += chunk_) {  // chunk by chunk: the ranks form a pipeline
      const std::size_t k = std::min(chunk_, g.floats.size() - o);
      float* mine = g.floats.data() + o;
      if (receive) {
        comm_.recv(in_f_.data(), k * sizeof(float), from);
        for (std::size_t i = 0; i < k; ++i) mine[i] = in_f_[i] + mine[i];
      }
      if (pass) {
        std::copy(mine, mine + k, out_f_.data() + o);
        comm_.send_async(out_f_.data() + o, k * sizeof(float), to);
        sent_ += std::int64_t(k * sizeof(float));
      }
    }
    if (!g.doubles.empty()) {
      if (receive) {
        in_d_.resize(g.doubles.size());
        comm_.recv(in_d_.data(), in_d_.size() * sizeof(double), from);
        for (std::size_t i = 0; i < in_d_.size(); ++i) g.doubles[i] = in_d_[i] + g.doubles[i];
      }
      if (pass) {
        std::copy(g.doubles.begin(), g.doubles.end(), out_d_.begin());
        comm_.send_async(out_d_.data(), out_d_.size() * sizeof(double), to);
        sent_ += std::int64_t(g.doubles.size() * sizeof(double));
      }
    }
  }
  last_ = a;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ChainReducer::finish(Sums g) {
  const int n = comm_.size(), root = (accum_ - 1) % n;
  const auto t0 = std::chrono::steady_clock::now();
  if (n == 1) {
    if (last_ != accum_ - 1) throw InputError(fmt::format("finish after micro-batch {} of {}", last_, accum_));
    if (accum_ > 1) {  // a single micro-batch's sums are already the total
      if (local_f_.size() != g.floats.size() || local_d_.size() != g.doubles.size())
        throw InputError("micro-batch sums changed size within a step");
      std::copy(local_f_.begin(), local_f_.end(), g.floats.begin());
      std::copy(local_d_.begin(), local_d_.end(), g.doubles.begin());
    }
  } else {
    const std::vector<int> m = mine();
    if ((m.empty() ? -1 : m.back()) != last_) throw InputError(fmt::format("rank {}: finish before its last micro-batch", comm_.rank()));
    comm_.wait_sends();
    const std::size_t limit = std::size_t(1) << 28;  // bytes per broadcast call (MPI counts are ints)
    auto* f = reinterpret_cast<unsigned char*>(g.floats.data());
    const std::size_t fb = g.floats.size() * sizeof(float);
    for (std::size_t o = 0; o < fb; o += limit) comm_.broadcast(f + o, std::min(limit, fb - o), root);
    if (!g.doubles.empty()) comm_.broadcast(g.doubles.data(), g.doubles.size() * sizeof(double), root);
  }
  last_ = -1;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace icmlkit::dist
