#include "util/block_pool.hpp"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace icmlkit {

namespace {

/// The claim word: generation (24 bits) | blocks n (20 bits) | next unclaimed block (20 bits).
constexpr int kBlockBits = 20;
constexpr std::uint64_t kBlockMask = (std::uint64_t(1) << kBlockBits) - 1;
constexpr std::uint64_t pack(std::uint64_t gen, std::uint64_t n, std::uint64_t next) {
  return (gen << (2 * kBlockBits)) | (n << kBlockBits) | next;
}
constexpr std::uint32_t gen_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> (2 * kBlockBits)); }
constexpr int n_of(std::uint64_t w) { return static_cast<int>((w >> kBlockBits) & kBlockMask); }
constexpr int next_of(std::uint64_t w) { return static_cast<int>(w & kBlockMask); }

/// How long an idle helper spins before it sleeps (the next loop of a forward pass usually
/// starts within microseconds; between decode steps there is host work).
constexpr auto kSpin = std::chrono::microseconds(200);

thread_local bool tl_in_block = false;

class Pool {
 public:
  void run(int n, int threads, void (*fn)(void*, int), void* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    grow(threads - 1);
    fn_ = fn;
    ctx_ = ctx;
    helpers_allowed_.store(threads - 1, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    gen_ = (gen_ + 1) & 0xffffff;
    claim_.store(pack(gen_, std::uint64_t(n), 0), std::memory_order_release);
    signal_.fetch_add(1, std::memory_order_release);
    if (sleepers_.load(std::memory_order_acquire) > 0) signal_.notify_all();
    tl_in_block = true;
    work(gen_);
    tl_in_block = false;
    // Wait only for blocks that helpers claimed and have not finished.
    while (finished_.load(std::memory_order_acquire) < n) _mm_pause();
  }

  ~Pool() {
    stop_.store(true);
    signal_.fetch_add(1);
    signal_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  /// Claims and runs blocks of generation `gen` until none is left.
  void work(std::uint32_t gen) {
    for (;;) {
      std::uint64_t w = claim_.load(std::memory_order_acquire);
      if (gen_of(w) != gen || next_of(w) >= n_of(w)) return;
      if (!claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
      fn_(ctx_, next_of(w));  // fn_ / ctx_ are this generation's while a block of it is unfinished
      finished_.fetch_add(1, std::memory_order_release);
    }
  }

  void helper(int index) {
    tl_in_block = true;  // a helper's blocks never start a pool loop of their own
    std::uint32_t seen = signal_.load(std::memory_order_acquire);
    for (;;) {
      // Wait for the next loop: spin briefly, then sleep.
      const auto until = std::chrono::steady_clock::now() + kSpin;
      int spins = 0;
      while (signal_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
        _mm_pause();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > until) {
          sleepers_.fetch_add(1, std::memory_order_acq_rel);
          if (signal_.load(std::memory_order_acquire) == seen) signal_.wait(seen, std::memory_order_acquire);
          sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
      if (stop_.load()) return;
      seen = signal_.load(std::memory_order_acquire);
      if (index < helpers_allowed_.load(std::memory_order_relaxed)) work(gen_of(claim_.load(std::memory_order_acquire)));
    }
  }

  void grow(int helpers) {
    while (static_cast<int>(threads_.size()) < helpers) {
      const int index = static_cast<int>(threads_.size());
      threads_.emplace_back([this, index] { helper(index); });
    }
  }

  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::uint32_t gen_ = 0;
  void (*fn_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  std::atomic<std::uint64_t> claim_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> helpers_allowed_{0};
  std::atomic<std::uint32_t> signal_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallel_blocks(int n, int threads, void (*fn)(void* ctx, int block), void* ctx) noexcept {
  if (n <= 0) return;
  if (threads <= 1 || n == 1 || tl_in_block || n > int(kBlockMask)) {
    for (int b = 0; b < n; ++b) fn(ctx, b);
    return;
  }
  pool().run(n, threads, fn, ctx);
}

}  // namespace icmlkit
