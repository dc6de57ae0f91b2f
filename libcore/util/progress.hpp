// A progress bar on stderr, shown only when stderr is a terminal and the level is not quiet.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace icmlkit {

/// Thread-safe progress bar: `tick()` from any thread; redraws at most ~10 times a second.
/// Silent (no output at all) when stderr is not a TTY, so logs and pipes stay clean.
class Progress {
 public:
  /// `total`: number of work items; `label`: what is being done ("starts").
  Progress(std::size_t total, std::string label);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Marks `n` more items done.
  void tick(std::size_t n = 1);
  /// Clears the bar (also done by the destructor).
  void finish();
  /// Erases the bar's line so that other output (a log record on the same terminal) starts on a
  /// clean line; the next tick draws it again.
  void clear();
  /// Whether the bar draws anything (stderr is a TTY and not -q).
  bool enabled() const noexcept { return enabled_; }

 private:
  void draw(std::size_t done);
  std::size_t total_;
  std::string label_;
  bool enabled_;
  bool finished_ = false;
  std::atomic<std::size_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace icmlkit
