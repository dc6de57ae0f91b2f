#include "util/threads.hpp"

#include <omp.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
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

void prefer_passive_openmp_wait(char** argv) noexcept {
#ifdef __linux__
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || argv == nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed: carry on with the policy libgomp already chose.
#else
  (void)argv;
#endif
}

const char* openmp_wait_policy() noexcept {
  const char* v = std::getenv("OMP_WAIT_POLICY");
  return v != nullptr ? v : "";
}

int threads() noexcept {
  const int n = g_threads.load();
  return n > 0 ? n : hardware_threads();
}

}  // namespace icmlkit
