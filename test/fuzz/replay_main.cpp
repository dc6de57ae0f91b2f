// fuzz-replay: runs fuzzer inputs through a harness of test/fuzz without libFuzzer, so the normal
// (and the sanitizer) test suite replays the kept corpora (test/fuzz/corpus/<target>.tar.xz) and
// the regression inputs.  Each harness is compiled here with its libFuzzer entry points renamed
// (LLVMFuzzerTestOneInput -> replay_<target>, LLVMFuzzerInitialize -> replay_init_<target>).  What
// libFuzzer counts as a finding fails the replay and names the input: a harness abort, a crash, a
// sanitizer report, an input that runs longer than the campaign's -timeout (10 s; 30 s in a
// sanitizer build) and, as far as a plain process can tell, one that exhausts memory (the address
// space is capped at 4 GiB, so a runaway allocation throws std::bad_alloc, which no harness catches;
// in a sanitizer build ASan's max_allocation_size_mb and hard_rss_limit_mb do that job).  Each
// input is given to the harness in a heap buffer of exactly its size, as libFuzzer does, so ASan
// sees a read past its end.
//
// Usage: fuzz-replay TARGET PATH...  (a PATH is an input file or a directory of them, not recursed)
// Exit: 0 all inputs replayed; 1 a path cannot be read, holds no input, or an input timed out;
// 2 usage error; a finding dies of its signal (SIGABRT for a harness's abort).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define ICMLKIT_REPLAY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ICMLKIT_REPLAY_SANITIZED 1
#endif
#endif
#ifdef ICMLKIT_REPLAY_SANITIZED
#include <sanitizer/common_interface_defs.h>
/// ASan's defaults for this program: an allocation or a resident set libFuzzer's -rss_limit_mb=2048
/// would call an out-of-memory finding is a report here too (ASAN_OPTIONS still overrides).
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=2048:hard_rss_limit_mb=3072"; }
#endif

#define ICMLKIT_REPLAY_TARGETS(X) \
  X(fuzz_gguf) X(fuzz_safetensors) X(fuzz_checkpoint) X(fuzz_hf_config) X(fuzz_table) X(fuzz_ts) X(fuzz_vectors) X(fuzz_rank) X(fuzz_openai)

// A harness's LLVMFuzzerInitialize is optional: a weak reference is null where it has none.
extern "C" {
#define ICMLKIT_DECLARE(t)                                          \
  int replay_##t(const std::uint8_t* data, std::size_t size);      \
  __attribute__((weak)) int replay_init_##t(int* argc, char*** argv);
ICMLKIT_REPLAY_TARGETS(ICMLKIT_DECLARE)
#undef ICMLKIT_DECLARE
}

namespace {

struct Target {
  const char* name;
  int (*one)(const std::uint8_t*, std::size_t);
  int (*init)(int*, char***);
};

const Target kTargets[] = {
#define ICMLKIT_ENTRY(t) {#t, replay_##t, replay_init_##t},
    ICMLKIT_REPLAY_TARGETS(ICMLKIT_ENTRY)
#undef ICMLKIT_ENTRY
};

#ifdef ICMLKIT_REPLAY_SANITIZED
#define ICMLKIT_REPLAY_TIMEOUT 30
#else
#define ICMLKIT_REPLAY_TIMEOUT 10
#endif
#define ICMLKIT_STR2(x) #x
#define ICMLKIT_STR(x) ICMLKIT_STR2(x)
constexpr unsigned kTimeoutSeconds = ICMLKIT_REPLAY_TIMEOUT;

// The input being replayed, named on stderr when the harness aborts, crashes, times out or a
// sanitizer stops the process (async-signal-safe: a fixed buffer and write(2)).
char g_current[4096];

void say(const char* text) {
  std::size_t n = 0;
  while (text[n] != '\0') ++n;
  if (write(STDERR_FILENO, text, n) < 0) return;
}

void set_current(const std::string& what) {
  const std::string shown = what.substr(0, sizeof g_current - 1);
  std::copy(shown.begin(), shown.end(), g_current);
  g_current[shown.size()] = '\0';
}

void name_current_input() {
  say("fuzz-replay: the finding's input: ");
  say(g_current);
  say("\n");
}

void on_fatal_signal(int sig) {
  name_current_input();
  std::signal(sig, SIG_DFL);  // the default action (core, exit status of the signal)
  std::raise(sig);
}

void on_timeout(int) {
  say("fuzz-replay: timed out after " ICMLKIT_STR(ICMLKIT_REPLAY_TIMEOUT) " s (the campaign's -timeout) on input: ");
  say(g_current);
  say("\n");
  _exit(1);
}

/// Installs `handler` for `sig` on an alternate stack, so a stack overflow still names its input.
void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

void install_handlers() {
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  install(SIGABRT, on_fatal_signal);
  install(SIGILL, on_fatal_signal);
  install(SIGALRM, on_timeout);
#ifdef ICMLKIT_REPLAY_SANITIZED
  // ASan's own handlers report SEGV, BUS and FPE with a stack; its death callback names the input.
  __sanitizer_set_death_callback(name_current_input);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE}) install(sig, on_fatal_signal);
  const rlimit cap{rlim_t{4} << 30, rlim_t{4} << 30};
  setrlimit(RLIMIT_AS, &cap);
#endif
}

int usage(const std::string& why) {
  std::fprintf(stderr, "fuzz-replay: %s (usage: fuzz-replay TARGET PATH..., TARGET one of:", why.c_str());
  for (const auto& t : kTargets) std::fprintf(stderr, " %s", t.name);
  std::fprintf(stderr, ")\n");
  return 2;
}

/// The regular files of directory `dir`, sorted by name; false (with `ec` set) when it cannot be listed.
bool list_files(const std::filesystem::path& dir, std::vector<std::filesystem::path>& files, std::error_code& ec) {
  namespace fs = std::filesystem;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) return usage("TARGET and at least one PATH are required");
  const std::string name = argv[1];
  const auto* target = std::find_if(std::begin(kTargets), std::end(kTargets), [&](const Target& t) { return name == t.name; });
  if (target == std::end(kTargets)) return usage("unknown TARGET '" + name + "'");
  // the inputs, in a fixed order (a directory's files sorted by name)
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    const fs::path p = argv[i];
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      if (!list_files(p, files, ec)) {
        std::fprintf(stderr, "fuzz-replay: cannot list %s: %s\n", argv[i], ec.message().c_str());
        return 1;
      }
      if (files.empty()) {
        std::fprintf(stderr, "fuzz-replay: directory %s holds no input file\n", argv[i]);
        return 1;
      }
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz-replay: '%s' is neither a file nor a directory\n", argv[i]);
      return 1;
    }
  }
  install_handlers();
  // a harness's seed-writing mode (fuzz_checkpoint) must not replace the replay
  unsetenv("ICMLKIT_FUZZ_EMIT_SEEDS");
  unsetenv("ICMLKIT_FUZZ_SEED_MODELS");
  set_current("(the harness's initialisation, before any input)");
  if (target->init) target->init(&argc, &argv);
  std::size_t bytes = 0;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz-replay: cannot read %s\n", path.c_str());
      return 1;
    }
    // exactly the input's size on the heap, as libFuzzer passes it (no terminator or spare capacity)
    const std::unique_ptr<std::uint8_t[]> exact(new std::uint8_t[data.size()]);
    std::copy(data.begin(), data.end(), exact.get());
    set_current(path.string());
    alarm(kTimeoutSeconds);
    target->one(exact.get(), data.size());
    alarm(0);
    bytes += data.size();
  }
  set_current("(none: a check at exit, after every input ran)");
  std::printf("fuzz-replay: %s: %zu inputs (%zu bytes) replayed, no finding\n", target->name, inputs.size(), bytes);
  return 0;
}
