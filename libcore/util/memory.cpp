#include "util/memory.hpp"

#include <sys/resource.h>

namespace icmlkit {

std::int64_t peak_rss_bytes() noexcept {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace icmlkit
