// doctest's main, plus one rule: a run filtered with --test-case (as every ctest entry is) that
// matches no test case fails.  A ctest entry whose name no longer matches its test case — a
// renamed case, or a name CMake cut at a ';' — would otherwise pass while running nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

unsigned g_matched = 0;  // test cases that passed the run's filters

/// A listener that records how many test cases passed the filters.
struct FilterCount : doctest::IReporter {
  explicit FilterCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { g_matched = s.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("filter-count", 1, FilterCount);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;  // --help, --list-test-cases, ...
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    filtered = filtered || std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0;
  if (rc == 0 && filtered && g_matched == 0) {
    std::fprintf(stderr, "unit tests: no test case matches the --test-case filter (a renamed test, or a ';' in its name?)\n");
    return 1;
  }
  return rc;
}
