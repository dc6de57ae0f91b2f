// util/block_pool (issue 37): every block runs exactly once for any thread count, loops from
// inside a block run serially, calls from two threads at once are both complete, and a helper
// that never gets a block (threads > cores) does not stop the loop from finishing.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "util/block_pool.hpp"

using namespace icmlkit;

TEST_CASE("block pool: each block exactly once, any thread count, nested loops serial") {
  for (int threads : {1, 2, 3, 8})
    for (int n : {0, 1, 2, 7, 1000}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      parallel_blocks(n, threads, [&](int b) { hits[static_cast<std::size_t>(b)].fetch_add(1); });
      bool once = true;
      for (auto& h : hits) once = once && h.load() == 1;
      CHECK(once);
    }
  // A loop inside a block runs on that thread, all of it.
  std::atomic<int> inner{0};
  parallel_blocks(4, 2, [&](int) { parallel_blocks(5, 2, [&](int) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 20);
}

TEST_CASE("block pool: two callers at once each get all their blocks") {
  std::atomic<long> a{0}, b{0};
  auto run = [](std::atomic<long>& sum) {
    for (int rep = 0; rep < 200; ++rep) parallel_blocks(64, 2, [&](int blk) { sum.fetch_add(blk + 1); });
  };
  std::thread t1(run, std::ref(a)), t2(run, std::ref(b));
  t1.join();
  t2.join();
  CHECK(a.load() == 200L * 64 * 65 / 2);
  CHECK(b.load() == 200L * 64 * 65 / 2);
}
