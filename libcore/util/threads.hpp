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
/// 2-core machine (bench/smc_gmm.sh).  A value the user set (OMP_WAIT_POLICY, e.g. "active",
/// or GOMP_SPINCOUNT) is kept.
void prefer_passive_openmp_wait(char** argv) noexcept;
/// For the language-model tools (a forward pass is a few dozen parallel regions a few
/// microseconds to milliseconds apart): makes idle OpenMP threads spin only briefly
/// (GOMP_SPINCOUNT=1000, about 10-50 us) before sleeping, instead of libgomp's default of
/// 300,000 spins.  Like prefer_passive_openmp_wait it sets the variable and re-executes the
/// program, and does nothing when OMP_WAIT_POLICY or GOMP_SPINCOUNT is already set.  Why:
/// with long spins a forward pass whose second thread was descheduled by another process
/// waits time slices at every barrier; on the shared 2-core machine a 4-token prefill took
/// 0.25-0.44 s at 2 threads against 0.007 s at 1, and short spins gave 0.009 s.  Since issue 37
/// the engine's products and attention run on util/block_pool instead (short spins had made a
/// 7m decode step 2-3x slower on a quiet machine); the setting still governs the loops that use
/// OpenMP (MoE experts, mLSTM, training).
void prefer_short_openmp_spin(char** argv) noexcept;
/// OMP_WAIT_POLICY as this process sees it ("" when unset), for provenance.
const char* openmp_wait_policy() noexcept;
/// GOMP_SPINCOUNT as this process sees it ("" when unset), for provenance.
const char* openmp_spin_count() noexcept;

}  // namespace icmlkit
