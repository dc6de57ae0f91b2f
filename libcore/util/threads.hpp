// The process-wide worker-thread count (--threads).
#pragma once

namespace icmlkit {

/// Number of hardware threads (at least 1).
int hardware_threads() noexcept;
/// Sets the worker count used by parallel loops (OpenMP); n <= 0 means all hardware threads.
void set_threads(int n) noexcept;
/// Current worker count.
int threads() noexcept;

/// For tools whose steps are one short parallel region each (smc-optimize: ~0.3 ms per step):
/// makes OpenMP threads sleep, not spin, while they wait.  libgomp reads OMP_WAIT_POLICY only
/// when it loads, so when the variable is unset this sets it to "passive" and re-executes the
/// program (/proc/self/exe, same argv; Linux only, and nothing happens if the exec fails).
/// Why: with spinning waits, a step whose second thread has been descheduled by any other
/// process waits a whole scheduler time slice, and 2 threads ran 20x slower than 1 on a shared
/// 2-core machine (bench/smc_gmm.sh).  A value the user set, e.g. "active", is kept.
void prefer_passive_openmp_wait(char** argv) noexcept;
/// OMP_WAIT_POLICY as this process sees it ("" when unset), for provenance.
const char* openmp_wait_policy() noexcept;

}  // namespace icmlkit
