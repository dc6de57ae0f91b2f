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

namespace {
// Sets `name` to `value` and re-executes the program, unless the user set OMP_WAIT_POLICY or
// GOMP_SPINCOUNT (libgomp reads both only when it loads).
void reexec_with(char** argv, const char* name, const char* value) noexcept {
#ifdef __linux__
  if (argv == nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (::setenv(name, value, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed: carry on with the policy libgomp already chose.
#else
  (void)argv, (void)name, (void)value;
#endif
}
}  // namespace

void prefer_passive_openmp_wait(char** argv) noexcept { reexec_with(argv, "OMP_WAIT_POLICY", "passive"); }

void prefer_short_openmp_spin(char** argv) noexcept { reexec_with(argv, "GOMP_SPINCOUNT", "1000"); }

const char* openmp_spin_count() noexcept {
  const char* v = std::getenv("GOMP_SPINCOUNT");
  return v != nullptr ? v : "";
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
