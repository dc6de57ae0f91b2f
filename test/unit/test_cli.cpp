// cli/: flag validators.  Truth: the decimal values of the texts given (3e6 = 3000000, ...) and
// the documented range rules.
#include <doctest/doctest.h>

#include <cstdint>
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
    CHECK_MESSAGE(err.find("is not a number") != std::string::npos, bad);
  }
  parse_count("inf", 0, 1LL << 40, err);
  CHECK(err.find("must be an integer in") != std::string::npos);
}

TEST_CASE("cli: a failed conversion is reported with the flag and the value, other messages unchanged") {
  // Truth: CLI11 2.1's own ConversionError text for an int option given "99999999999" (out of
  // range), taken from a real parse, not written by hand.
  CLI::App app("t");
  int w = 0;
  app.add_option("--window", w);
  std::vector<std::string> args = {"99999999999", "--window"};
  std::string what;
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    what = e.what();
  }
  REQUIRE(!what.empty());
  CHECK(cli::describe_parse_error(what) == "--window: cannot read '99999999999' (not a number of the right kind, or out of range)");
  CHECK(cli::describe_parse_error("--n: must be > 0") == "--n: must be > 0");
}
