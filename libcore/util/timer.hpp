// Wall-clock stopwatch for benchmarks and progress reports (never asserted in tests).
#pragma once

#include <chrono>

namespace icmlkit {

/// Starts on construction; `seconds()` is the elapsed wall time.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  /// Restarts from zero.
  void reset() { start_ = std::chrono::steady_clock::now(); }
  /// Elapsed seconds since construction or the last reset.
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace icmlkit
