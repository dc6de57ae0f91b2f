#include "util/threads.hpp"

#include <omp.h>

#include <atomic>
#include <thread>

namespace icmlkit {
namespace {
std::atomic<int> g_threads{0};
}

int hardware_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_threads(int n) noexcept {
  if (n <= 0) n = hardware_threads();
  g_threads.store(n);
  omp_set_num_threads(n);
}

int threads() noexcept {
  const int n = g_threads.load();
  return n > 0 ? n : hardware_threads();
}

}  // namespace icmlkit
