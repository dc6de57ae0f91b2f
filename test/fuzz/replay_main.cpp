// fuzz-replay: runs fuzzer inputs through a harness of test/fuzz without libFuzzer, so the normal
// (and the sanitizer) test suite replays the kept corpora (test/fuzz/corpus/<target>.tar.xz) and
// the regression inputs.  Each harness is compiled here with its libFuzzer entry points renamed
// (LLVMFuzzerTestOneInput -> replay_<target>, LLVMFuzzerInitialize -> replay_init_<target>); a
// harness that finds a defect aborts, so a finding fails the test.
//
// Usage: fuzz-replay TARGET PATH...  (a PATH is an input file or a directory of them, not recursed)
// Exit: 0 all inputs replayed; 1 a path cannot be read; 2 usage error.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
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
#endif

#define ICMLKIT_REPLAY_TARGETS(X) \
  X(fuzz_gguf) X(fuzz_safetensors) X(fuzz_checkpoint) X(fuzz_hf_config) X(fuzz_table) X(fuzz_ts) X(fuzz_vectors) X(fuzz_rank) X(fuzz_openai)

extern "C" {
#define ICMLKIT_DECLARE(t) int replay_##t(const std::uint8_t* data, std::size_t size);
ICMLKIT_REPLAY_TARGETS(ICMLKIT_DECLARE)
#undef ICMLKIT_DECLARE
int replay_init_fuzz_checkpoint(int* argc, char*** argv);
}

namespace {

struct Target {
  const char* name;
  int (*one)(const std::uint8_t*, std::size_t);
};

constexpr Target kTargets[] = {
#define ICMLKIT_ENTRY(t) {#t, replay_##t},
    ICMLKIT_REPLAY_TARGETS(ICMLKIT_ENTRY)
#undef ICMLKIT_ENTRY
};

// The input being replayed, named on stderr when the harness aborts, crashes or a sanitizer stops
// the process (async-signal-safe: a fixed buffer and write(2)).
char g_current[4096];

void name_current_input() {
  const char lead[] = "fuzz-replay: the finding's input: ";
  if (write(STDERR_FILENO, lead, sizeof lead - 1) < 0) return;
  std::size_t n = 0;
  while (n < sizeof g_current && g_current[n] != '\0') ++n;
  if (write(STDERR_FILENO, g_current, n) < 0) return;
  if (write(STDERR_FILENO, "\n", 1) < 0) return;
}

void on_fatal_signal(int sig) {
  name_current_input();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int usage(const std::string& why) {
  std::fprintf(stderr, "fuzz-replay: %s (usage: fuzz-replay TARGET PATH..., TARGET one of:", why.c_str());
  for (const auto& t : kTargets) std::fprintf(stderr, " %s", t.name);
  std::fprintf(stderr, ")\n");
  return 2;
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
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      if (ec) {
        std::fprintf(stderr, "fuzz-replay: cannot list %s: %s\n", argv[i], ec.message().c_str());
        return 1;
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz-replay: %s is neither a file nor a directory\n", argv[i]);
      return 1;
    }
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_fatal_signal);
#ifdef ICMLKIT_REPLAY_SANITIZED
  __sanitizer_set_death_callback(name_current_input);
#endif
  if (name == "fuzz_checkpoint") replay_init_fuzz_checkpoint(&argc, &argv);
  std::size_t bytes = 0;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz-replay: cannot read %s\n", path.c_str());
      return 1;
    }
    const std::string shown = path.string().substr(0, sizeof g_current - 1);
    std::copy(shown.begin(), shown.end(), g_current);
    g_current[shown.size()] = '\0';
    target->one(reinterpret_cast<const std::uint8_t*>(data.data()), data.size());
    bytes += data.size();
  }
  std::printf("fuzz-replay: %s: %zu inputs (%zu bytes) replayed, no finding\n", target->name, inputs.size(), bytes);
  return 0;
}
