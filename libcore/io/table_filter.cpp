#include "io/table_filter.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <numeric>

#include "util/error.hpp"

namespace icmlkit::io {

std::vector<std::size_t> filter_rows(const Table& t, const std::vector<std::string>& exprs) {
  std::vector<char> keep(t.rows(), 1);
  for (const auto& ex : exprs) {
    static const char* ops[] = {"<=", ">=", "!=", "==", "<", ">", "="};
    std::size_t pos = std::string::npos;
    std::string op;
    for (const char* o : ops) {
      const auto p = ex.find(o);
      if (p != std::string::npos && p > 0 && (pos == std::string::npos || p < pos || (p == pos && std::string(o).size() > op.size()))) {
        pos = p;
        op = o;
      }
    }
    if (pos == std::string::npos) throw UsageError(fmt::format("expected COLUMN OP VALUE with OP in < <= > >= == !=, got '{}'", ex), "--where");
    auto strip = [](std::string s) {
      while (!s.empty() && s.front() == ' ') s.erase(s.begin());
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s;
    };
    const std::string col = strip(ex.substr(0, pos));
    const std::string val = strip(ex.substr(pos + op.size()));
    if (col.empty() || val.empty() || val.find_first_of("<>=!") == 0)
      throw UsageError(fmt::format("malformed expression '{}' (operators: < <= > >= == !=)", ex), "--where");
    if (op == "=") op = "==";
    const auto num = parse_double(val);
    if (num) {
      const auto v = t.numbers(col, NumberCheck{false, false});
      for (std::size_t r = 0; r < t.rows(); ++r) {
        const double x = v[r];
        bool ok = false;
        if (op == "<") ok = x < *num;
        else if (op == "<=") ok = x <= *num;
        else if (op == ">") ok = x > *num;
        else if (op == ">=") ok = x >= *num;
        else if (op == "==") ok = x == *num;
        else ok = x != *num;
        keep[r] = keep[r] && ok;
      }
    } else {
      if (op != "==" && op != "!=") throw UsageError(fmt::format("'{}' compares text; only == and != are allowed", ex), "--where");
      const auto v = t.texts(col);
      for (std::size_t r = 0; r < t.rows(); ++r) keep[r] = keep[r] && ((v[r] == val) == (op == "=="));
    }
  }
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < t.rows(); ++r)
    if (keep[r]) out.push_back(r);
  return out;
}

std::vector<std::size_t> drop_largest(const Table& t, const std::string& column, std::size_t k) {
  if (k >= t.rows()) throw UsageError(fmt::format("cannot drop {} of {} rows", k, t.rows()), "--drop-highest");
  const auto v = t.numbers(column, NumberCheck{false, false});
  std::vector<std::size_t> idx(t.rows());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return v[a] > v[b]; });
  std::vector<std::size_t> out(idx.begin() + static_cast<long>(k), idx.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::size_t> complete_rows(const Table& t, const std::vector<std::string>& columns) {
  const std::vector<std::string>& cols = columns.empty() ? t.names() : columns;
  std::vector<char> keep(t.rows(), 1);
  for (const auto& c : cols) {
    const auto v = t.texts(c);
    for (std::size_t r = 0; r < t.rows(); ++r)
      if (v[r].find_first_not_of(" \t") == std::string::npos || v[r] == "nan") keep[r] = 0;
  }
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < t.rows(); ++r)
    if (keep[r]) out.push_back(r);
  return out;
}

}  // namespace icmlkit::io
