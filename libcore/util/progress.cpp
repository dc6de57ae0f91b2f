#include "util/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "util/log.hpp"

namespace icmlkit {

Progress::Progress(std::size_t total, std::string label)
    : total_(total), label_(std::move(label)),
      enabled_(total > 0 && ::isatty(STDERR_FILENO) != 0 && log::level() != log::Level::quiet),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

Progress::~Progress() { finish(); }

void Progress::tick(std::size_t n) {
  const std::size_t done = done_.fetch_add(n) + n;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  draw(done);
}

void Progress::draw(std::size_t done) {
  constexpr int width = 30;
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * width);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r%s [%s] %zu/%zu %.1fs", label_.c_str(), bar.c_str(), done, total_, secs);
  std::fflush(stderr);
}

void Progress::clear() {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (finished_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  last_ = std::chrono::steady_clock::time_point();  // redraw at the next tick
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace icmlkit
