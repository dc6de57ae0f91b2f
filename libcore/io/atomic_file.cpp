#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/core.h>

#include "util/error.hpp"

namespace icmlkit::io {
namespace fs = std::filesystem;

namespace {
std::atomic<unsigned> g_counter{0};

// Temporaries still pending, readable from a signal handler: a fixed table of path buffers,
// each published by its state (0 free, 1 being filled, 2 pending).  A process killed by SIGINT,
// SIGTERM, SIGHUP or SIGPIPE (e.g. `tool -o out | head`) removes them before it dies.
constexpr int kSlots = 64;
constexpr std::size_t kPathMax = 4096;
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax];
};
Slot g_slots[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

extern "C" void remove_pending_and_die(int sig) {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);  // async-signal-safe
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kSignals) {
      struct sigaction old {};
      // Only where the default action (terminate) is in force: an ignored signal or another
      // handler the program installed is left alone.
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa {};
        sa.sa_handler = remove_pending_and_die;
        sigemptyset(&sa.sa_mask);
        ::sigaction(sig, &sa, nullptr);
      }
    }
  });
}

// Returns the slot that now holds `path`, or -1 when the table is full or the path too long
// (then only the destructor removes it, as before).
int register_pending(const std::string& path) {
  if (path.size() + 1 > kPathMax) return -1;
  install_handlers_once();
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_pending(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0, std::memory_order_release);
}

// The directory an entry at `path` lives in ("." for a bare name; "a/b/" is the entry "a/b").
fs::path containing_dir(fs::path path) {
  if (!path.has_filename()) path = path.parent_path();
  fs::path dir = path.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}
}  // namespace

int descriptor_path(const std::string& path) noexcept {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::size_t n = std::strlen(prefix);
    if (path.size() > n && path.compare(0, n, prefix) == 0 && path.find_first_not_of("0123456789", n) == std::string::npos &&
        path.size() - n < 6)
      return std::atoi(path.c_str() + n);
  }
  return -1;
}

bool is_dev_null(const std::string& path) noexcept {
  std::error_code ec;
  return path == "/dev/null" || fs::weakly_canonical(path, ec) == fs::path("/dev/null");
}

bool is_stream_path(const std::string& path) {
  if (is_stdout(path)) return false;
  if (path == "/dev/stdout" || path == "/dev/stderr" || path.rfind("/dev/fd/", 0) == 0 || path.rfind("/proc/self/fd/", 0) == 0)
    return true;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}

void require_output_extension(const std::string& path, const std::string& flag, const std::vector<std::string>& extensions,
                              const std::string& what, bool allow_stdout) {
  if (is_stdout(path) ? allow_stdout : is_stream_path(path)) return;
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (const std::string& e : extensions)
    if (ext == e) return;
  std::string list;
  for (std::size_t i = 0; i < extensions.size(); ++i) list += (i ? " or " : "") + extensions[i];
  throw UsageError(fmt::format("{}: give a path ending in {}{}", what, list, allow_stdout ? " (or - for stdout)" : ""),
                   flag + " " + (path.empty() ? std::string("-") : path));
}

void check_output_dir(const std::string& path) {
  if (is_stdout(path) || is_stream_path(path)) return;
  const fs::path dir = containing_dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw RuntimeError("output directory does not exist", dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw RuntimeError("output directory is not writable", dir.string());
}

namespace {
fs::path resolved_path(const std::string& p) {
  std::error_code ec;
  const fs::path abs = fs::absolute(fs::path(p), ec).lexically_normal();
  const fs::path r = fs::weakly_canonical(abs, ec);  // symbolic links of the existing part resolved
  return ec ? abs : r;
}
}  // namespace

bool path_in_dir(const std::string& path, const std::string& dir) {
  if (is_stdout(path) || is_stdout(dir)) return false;
  return resolved_path(path).parent_path() == resolved_path(dir);
}

bool same_file_path(const std::string& a, const std::string& b) {
  return !is_stdout(a) && !is_stdout(b) && resolved_path(a) == resolved_path(b);
}

void check_distinct_outputs(const std::vector<NamedOutput>& outputs, const std::vector<std::string>& inputs) {
  std::vector<const NamedOutput*> seen;
  for (const NamedOutput& o : outputs) {
    if (is_stdout(o.path) || is_dev_null(o.path)) continue;  // /dev/null may take several outputs
    for (const NamedOutput* other : seen)
      if (same_file_path(other->path, o.path))
        throw UsageError(fmt::format("{} and {} name the same file; give each output its own path", other->flag, o.flag), o.path);
    for (const std::string& in : inputs)
      if (same_file_path(in, o.path)) throw UsageError(fmt::format("{} would overwrite the input file; write the output elsewhere", o.flag), o.path);
    seen.push_back(&o);
  }
}

std::string target_of_temp(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  const std::size_t tmp = name.rfind(".tmp.");
  if (name.size() < 2 || name[0] != '.' || tmp == std::string::npos || tmp < 2) return path;
  const std::string tail = name.substr(tmp + 5);
  const std::size_t dot = tail.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == tail.size() || tail.find_first_not_of("0123456789.") != std::string::npos) return path;
  const std::string base = name.substr(1, tmp - 1);
  return base == "icmlkit-stream" ? path : (p.parent_path() / base).string();
}

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)), stream_(is_stream_path(target_.string())) {
  check_output_dir(target_.string());
  std::error_code ec;
  const fs::path dir = stream_ ? fs::temp_directory_path(ec) : containing_dir(target_);
  if (fs::is_directory(target_, ec)) throw RuntimeError("output path is a directory", target_.string());
  std::string name = ".";
  name += stream_ ? std::string("icmlkit-stream") : target_.filename().string();
  name += ".tmp.";
  name += std::to_string(::getpid());
  name += '.';
  name += std::to_string(g_counter.fetch_add(1));
  temp_ = dir / name;
  slot_ = register_pending(temp_.string());
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
  unregister_pending(slot_);
}

void AtomicFile::commit() {
  std::error_code ec;
  if (!fs::exists(temp_, ec)) throw RuntimeError("nothing was written", target_.string());
  if (stream_) {
    // Into the stream: through the descriptor a /dev/fd-style path names (never reopened), or
    // the device or pipe opened for writing without truncation.
    int fd = descriptor_path(target_.string());
    const bool own = fd < 0;
    if (own) fd = ::open(target_.c_str(), O_WRONLY);
    if (fd < 0) throw RuntimeError(std::string("cannot write output: ") + std::strerror(errno), target_.string());
    if (fd == 1) std::cout.flush();
    std::ifstream in(temp_, std::ios::binary);
    std::vector<char> buf(1 << 16);
    bool ok = static_cast<bool>(in);
    while (ok && in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const char* p = buf.data();
      std::streamsize left = in.gcount();
      while (ok && left > 0) {
        const ssize_t w = ::write(fd, p, static_cast<std::size_t>(left));
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        p += ok ? w : 0;
        left -= ok ? w : 0;
      }
    }
    const int err = errno;
    if (own) ::close(fd);
    if (!ok) throw RuntimeError(std::string("cannot write output: ") + std::strerror(err), target_.string());
    fs::remove(temp_, ec);
  } else {
    fs::rename(temp_, target_, ec);
    if (ec) throw RuntimeError("cannot write output: " + ec.message(), target_.string());
  }
  committed_ = true;
  unregister_pending(slot_);
  slot_ = -1;
}

void write_text(const std::string& path, std::string_view bytes) {
  if (is_stdout(path)) {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) throw RuntimeError("cannot write to standard output");
    return;
  }
  AtomicFile file(path);
  {
    std::ofstream out(file.temp_path(), std::ios::binary);
    if (!out) throw RuntimeError("cannot create output file", path);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw RuntimeError("cannot write output file (disk full?)", path);
  }
  file.commit();
}

void install_temporary_cleanup() { install_handlers_once(); }

}  // namespace icmlkit::io
