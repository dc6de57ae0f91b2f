// Count flags written the way people write large numbers: "--tokens 3e6".
#pragma once

#include <CLI/CLI.hpp>

namespace icmlkit::cli {

/// Integer flag in lo..hi that may be written in scientific notation ("3e6", "2.5E+5",
/// "3000000"): the text must parse as a number whose value is a whole number in lo..hi
/// (beyond 2^53 only plain digits are exact), and is rewritten to plain digits so CLI11
/// converts it to the option's integer type.  Attach with ->transform(), not ->check() (check()
/// drops the rewrite).  Errors (exit 2 through run_tool): "'x' is not an integer", "must be a
/// whole number, got 2.5", "must be an integer in lo..hi, got 5e20".
CLI::Validator count(long long lo, long long hi);

}  // namespace icmlkit::cli
