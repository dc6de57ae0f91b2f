// Process memory figures for logs and benchmarks.
#pragma once

#include <cstdint>

namespace icmlkit {

/// Peak resident set size of this process so far, in bytes (getrusage's ru_maxrss); 0 when the
/// system does not report it.
std::int64_t peak_rss_bytes() noexcept;

}  // namespace icmlkit
