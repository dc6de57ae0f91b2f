// The process-wide worker-thread count (--threads).
#pragma once

namespace icmlkit {

/// Number of hardware threads (at least 1).
int hardware_threads() noexcept;
/// Sets the worker count used by parallel loops (OpenMP); n <= 0 means all hardware threads.
void set_threads(int n) noexcept;
/// Current worker count.
int threads() noexcept;

}  // namespace icmlkit
