// cli/: flag validators.  Truth: the decimal values of the texts given (3e6 = 3000000, ...) and
// the documented range rules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"

using namespace icmlkit;

namespace {

// Parses "--n TEXT" into an int64 option guarded by cli::count(lo, hi); returns the value, or
// sets `error` to CLI11's message.
std::int64_t parse_count(const std::string& text, long long lo, long long hi, std::string& error) {
  CLI::App app("t");
  std::int64_t n = -12345;
  app.add_option("--n", n)->transform(cli::count(lo, hi));
  std::vector<std::string> args = {text, "--n"};  // CLI11 parses a reversed vector
  error.clear();
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    error = e.what();
  }
  return n;
}

}  // namespace

TEST_CASE("cli: count() takes integers in scientific notation and refuses the rest") {
  std::string err;
  CHECK(parse_count("3e6", 1, 1LL << 40, err) == 3000000);
  CHECK(err.empty());
  CHECK(parse_count("2.5E+5", 1, 1LL << 40, err) == 250000);
  CHECK(parse_count("+7", 1, 10, err) == 7);
  CHECK(parse_count(" 42 ", 1, 100, err) == 42);
  CHECK(parse_count("0", 0, 10, err) == 0);
  CHECK(parse_count("1e0", 1, 1, err) == 1);
  // Plain digits stay exact beyond 2^53 (2^53 + 1 is not a double).
  CHECK(parse_count("9007199254740993", 0, 1LL << 60, err) == 9007199254740993LL);
  CHECK(err.empty());

  parse_count("2.5", 1, 100, err);
  CHECK(err.find("must be a whole number, got 2.5") != std::string::npos);
  parse_count("1e20", 1, 1LL << 40, err);
  CHECK(err.find("must be an integer in 1..1099511627776, got 1e20") != std::string::npos);
  parse_count("0", 1, 10, err);
  CHECK(err.find("must be an integer in 1..10") != std::string::npos);
  parse_count("-3e2", 0, 10, err);
  CHECK(err.find("must be an integer in 0..10") != std::string::npos);
  parse_count("99999999999999999999", 0, 1LL << 60, err);
  CHECK(err.find("must be an integer in") != std::string::npos);
  parse_count("1.5e17", 0, 1LL << 60, err);
  CHECK(err.find("too large to be exact") != std::string::npos);
  for (const char* bad : {"abc", "3e", "1e6x", "nan", "+-5", "0x10"}) {
    parse_count(bad, 0, 1LL << 40, err);
    CHECK_MESSAGE(err.find("is not an integer") != std::string::npos, bad);  // as int_range says
  }
  parse_count("inf", 0, 1LL << 40, err);
  CHECK(err.find("must be an integer in") != std::string::npos);
}

namespace {

// CLI11 2.1's own message for `args` (given in order) on an app with `setup`'s options: taken
// from a real parse, never written by hand, so a CLI11 upgrade that changes its wording shows.
std::string cli11_message(const std::function<void(CLI::App&)>& setup, std::vector<std::string> args) {
  CLI::App app("t");
  setup(app);
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("cli: a failed conversion is reported with the value, then the flag") {
  int w = 0;
  const std::string what = cli11_message([&](CLI::App& a) { a.add_option("--window", w); }, {"--window", "99999999999"});
  REQUIRE(!what.empty());
  CHECK(cli::describe_parse_error(what) ==
        "cannot read '99999999999': not a number of the right kind, or out of range (--window)");
}

TEST_CASE("cli: bad flag values read '<what> (<flag>)', CLI11's range and choice wording made ours") {
  double f = 0;
  int n = 0;
  std::string s;
  // Our validators: the message is kept, the flag moves to the end.
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--n", n)->check(cli::positive()); }, {"--n", "0"})) ==
        "must be > 0, got 0 (--n)");
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--n", n)->check(cli::int_range(1, 8)); }, {"--n", "9"})) ==
        "must be an integer in 1..8, got 9 (--n)");
  // CLI::Range prints its bounds with std::to_string ("1.000000"); ours are the shortest decimals.
  const std::string range = cli11_message([&](CLI::App& a) { a.add_option("--adapt-factor", f)->check(CLI::Range(1.0, 10.0)); },
                                          {"--adapt-factor", "0.5"});
  REQUIRE(range.find("not in range") != std::string::npos);
  CHECK(cli::describe_parse_error(range) == "must be a number in 1..10, got 0.5 (--adapt-factor)");
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--p", f)->check(CLI::Range(0.0, 0.99)); }, {"--p", "2"})) ==
        "must be a number in 0..0.99, got 2 (--p)");
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--m", s)->check(CLI::IsMember({"ar", "fafo"})); }, {"--m", "x"})) ==
        "must be one of ar, fafo, got 'x' (--m)");
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--n", n); }, {"--n", "1", "--n", "2"})) ==
        "given 2 times; give it once (--n)");
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--m", s); }, {"--m"})) == "needs a value (--m)");
  // Unexpected words: named in command-line order (CLI11 2.1 lists them last to first), with the
  // pointer to --help.
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("--n", n); }, {"--bogus"})) ==
        "unexpected argument: --bogus (run with --help for usage)");
  std::string pos;
  CHECK(cli::describe_parse_error(cli11_message([&](CLI::App& a) { a.add_option("in", pos); }, {"x", "--a", "1", "--b", "2"})) ==
        "unexpected arguments: --a 1 --b 2 (run with --help for usage)");
  // Anything else: kept, with the pointer to --help.
  const std::string other = cli11_message([&](CLI::App& a) { a.add_option("--n", n)->required(); }, {});
  REQUIRE(!other.empty());
  CHECK(cli::describe_parse_error(other) == other + " (run with --help for usage)");
}
