#include "cli/count.hpp"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

namespace icmlkit::cli {

CLI::Validator count(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        const auto first = v.find_first_not_of(" \t");
        const std::string t = first == std::string::npos ? "" : v.substr(first, v.find_last_not_of(" \t") - first + 1);
        const auto range_error = [&] { return fmt::format("must be an integer in {}..{}, got {}", lo, hi, v); };
        long long n = 0;
        // from_chars takes no '+': skip one (but not "+-").
        const char* b = t.data() + (t.size() > 1 && t[0] == '+' && t[1] != '-');
        const char* e = t.data() + t.size();
        if (auto r = std::from_chars(b, e, n); r.ec == std::errc() && r.ptr == e) {
          // plain digits: exact for every 64-bit value
        } else if (r.ec == std::errc::result_out_of_range && r.ptr == e) {
          return range_error();
        } else {
          double x = 0;
          const auto rd = std::from_chars(b, e, x);
          if (t.empty() || rd.ec == std::errc::invalid_argument || rd.ptr != e || std::isnan(x)) return "'" + v + "' is not an integer";
          if (rd.ec == std::errc::result_out_of_range || std::isinf(x) || x < double(lo) || x > double(hi)) return range_error();
          if (x != std::floor(x)) return "must be a whole number, got " + v;
          if (std::fabs(x) > 9007199254740992.0) return fmt::format("{} is too large to be exact; write it in plain digits", v);
          n = static_cast<long long>(x);
        }
        if (n < lo || n > hi) return range_error();
        v = std::to_string(n);
        return "";
      },
      fmt::format("INT in {}..{}", lo, hi));
}

}  // namespace icmlkit::cli
