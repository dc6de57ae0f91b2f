#include "util/subprocess.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/core.h>

#include "util/error.hpp"

extern char** environ;

namespace icmlkit {

namespace {

constexpr std::size_t kSlots = 256;
std::array<std::atomic<pid_t>, kSlots> g_children{};  // 0 = free slot

int claim_slot(pid_t pid) noexcept {
  for (std::size_t i = 0; i < kSlots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) return static_cast<int>(i);
  }
  return -1;
}

struct sigaction g_old_int {}, g_old_term {};

/// Waits (polling, async-signal-safe) until every child registered now has exited, at most
/// `grace_ms` (a multiple of 10); a child still running then gets SIGKILL.  Children are not reaped here (run_process
/// reaps its own), so a killed sweep returns only once no lm-train of it is left running.
void wait_children_exit(const int grace_ms) noexcept {
  std::array<pid_t, kSlots> pids{};
  for (std::size_t i = 0; i < kSlots; ++i) pids[i] = g_children[i].load();
  const timespec tick{0, 10'000'000};  // 10 ms
  for (int waited = 0;; waited += 10) {
    bool running = false;
    for (pid_t& pid : pids) {
      if (pid <= 0) continue;
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0)
        running = true;
      else
        pid = 0;  // exited (or already reaped by its runner)
    }
    if (!running) return;
    if (waited == grace_ms)
      for (pid_t pid : pids)
        if (pid > 0) ::kill(pid, SIGKILL);
    if (waited >= grace_ms + 2000) return;  // killed, and still not gone: stop waiting
    ::nanosleep(&tick, nullptr);
  }
}

void on_termination(int sig) {
  terminate_children();
  wait_children_exit(10'000);
  // Chain to a handler installed before ours (io::AtomicFile's, which removes pending
  // temporaries and then dies of the signal), else die of it here.
  const struct sigaction& old = sig == SIGINT ? g_old_int : g_old_term;
  if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN && old.sa_handler != nullptr) {
    old.sa_handler(sig);
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

std::string executable_dir() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw RuntimeError("cannot find this program's own directory (/proc/self/exe): " + ec.message());
  return p.parent_path().string();
}

int run_process(const std::vector<std::string>& argv, const std::string& stdout_path, const std::string& stderr_path) {
  if (argv.empty()) throw RuntimeError("run_process: no program given");
  if (::access(argv[0].c_str(), X_OK) != 0)
    throw RuntimeError(fmt::format("cannot run {}: {}", argv[0], std::strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  struct Guard {
    posix_spawn_file_actions_t* fa;
    ~Guard() { posix_spawn_file_actions_destroy(fa); }
  } guard{&fa};
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (!stdout_path.empty()) posix_spawn_file_actions_addopen(&fa, 1, stdout_path.c_str(), flags & ~O_CLOEXEC, 0644);
  if (!stderr_path.empty()) posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), flags & ~O_CLOEXEC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  // SIGINT/SIGTERM are held back from this thread while the child is spawned and registered, so
  // this thread's handler never runs in between with the child unregistered.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  posix_spawnattr_t attr;  // the child starts with the mask this thread had before (signals not blocked)
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  const int slot = rc == 0 ? claim_slot(pid) : -1;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) throw RuntimeError(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  auto release = [&] {
    if (slot >= 0) g_children[static_cast<std::size_t>(slot)].store(0);
  };
  // Wait without reaping, unregister, then reap: the pid cannot be reused while it is registered.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0) {
    if (errno != EINTR) {
      release();
      throw RuntimeError(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
    }
  }
  release();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw RuntimeError(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void terminate_children() noexcept {
  for (auto& c : g_children) {
    const pid_t pid = c.load();
    if (pid > 0) ::kill(pid, SIGTERM);
  }
}

void forward_termination_to_children() noexcept {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = on_termination;
  sigemptyset(&sa.sa_mask);
  // A signal the program was started ignoring (a background job of a script ignores SIGINT) stays ignored.
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction& old = sig == SIGINT ? g_old_int : g_old_term;
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace icmlkit
