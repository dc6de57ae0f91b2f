#include "io/ts.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::io {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

bool parse_bool(const std::string& v, const std::string& where) {
  const std::string l = lower(v);
  if (l == "true") return true;
  if (l == "false") return false;
  throw InputError("expected true or false, got '" + v + "'", where);
}

}  // namespace

TsData read_ts(const std::string& path, std::string* sha256) {
  const std::string label = is_stdout(path) ? "<stdin>" : path;
  const std::string bytes = read_file(path);
  if (sha256) *sha256 = sha256_hex(bytes);
  TsData d;
  std::map<std::string, std::string> header;
  bool in_data = false, have_labels = false;
  std::optional<bool> equal_length;
  long series_length = -1;
  std::map<std::string, int> label_index;
  std::istringstream in(bytes);
  std::string line;
  long lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = label + ", line " + std::to_string(lineno);
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (!in_data) {
      if (line[0] != '@') throw InputError("expected a @key header line or @data before the cases", where);
      const size_t sp = line.find_first_of(" \t");
      const std::string key = lower(line.substr(1, sp == std::string::npos ? std::string::npos : sp - 1));
      const std::string val = sp == std::string::npos ? std::string() : trim(line.substr(sp));
      if (key == "data") {
        if (!have_labels) throw InputError("no @classLabel header before @data", where);
        in_data = true;
        continue;
      }
      if (header.count(key)) throw InputError("header key @" + key + " given twice", where);
      header[key] = val;
      if (key == "problemname") d.problem = val;
      else if (key == "timestamps") {
        if (parse_bool(val, where)) throw InputError("@timeStamps true is not supported", where);
      } else if (key == "missing" || key == "univariate") parse_bool(val, where);
      else if (key == "dimensions") {
        int v = 0;
        const auto r = std::from_chars(val.data(), val.data() + val.size(), v);
        if (r.ec != std::errc() || r.ptr != val.data() + val.size() || v < 1) throw InputError("@dimensions must be a positive integer", where);
        d.dimensions = v;
      } else if (key == "equallength") equal_length = parse_bool(val, where);
      else if (key == "serieslength") {
        const auto r = std::from_chars(val.data(), val.data() + val.size(), series_length);
        if (r.ec != std::errc() || r.ptr != val.data() + val.size() || series_length < 1) throw InputError("@seriesLength must be a positive integer", where);
      } else if (key == "classlabel") {
        std::istringstream ls(val);
        std::string first, name;
        ls >> first;
        if (!parse_bool(first, where)) throw InputError("@classLabel false: only classification files are supported", where);
        while (ls >> name) {
          if (label_index.count(name)) throw InputError("class label '" + name + "' declared twice", where);
          label_index[name] = static_cast<int>(d.class_names.size());
          d.class_names.push_back(name);
        }
        if (d.class_names.size() < 2) throw InputError("@classLabel true needs at least 2 labels", where);
        have_labels = true;
      } else if (key == "targetlabel") {
        throw InputError("@targetLabel (regression) files are not supported", where);
      } else {
        throw InputError("unknown header key @" + key, where);
      }
      continue;
    }
    // a case: dim1:dim2:...:label
    const auto parts = split(line, ':');
    if (parts.size() < 2) throw InputError("a case needs at least one dimension and a class label", where);
    const int ndim = static_cast<int>(parts.size()) - 1;
    if (d.dimensions == 0) d.dimensions = ndim;
    if (ndim != d.dimensions)
      throw InputError("case has " + std::to_string(ndim) + " dimensions, expected " + std::to_string(d.dimensions), where);
    const std::string lab = trim(parts.back());
    const auto it = label_index.find(lab);
    if (it == label_index.end()) throw InputError("class label '" + lab + "' is not declared in @classLabel", where);
    std::vector<std::vector<double>> cols(static_cast<size_t>(ndim));
    for (int k = 0; k < ndim; ++k) {
      const auto vals = split(parts[static_cast<size_t>(k)], ',');
      bool any = false;
      for (const auto& raw : vals) {
        const std::string v = trim(raw);
        double x = NAN;
        if (v == "?" || lower(v) == "nan") {
          x = NAN;
        } else {
          const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
          if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || !std::isfinite(x))
            throw InputError("bad value '" + v + "' in dimension " + std::to_string(k + 1), where);
          any = true;
        }
        cols[static_cast<size_t>(k)].push_back(x);
      }
      if (!any) throw InputError("dimension " + std::to_string(k + 1) + " has no observed value", where);
      if (k > 0 && cols[static_cast<size_t>(k)].size() != cols[0].size())
        throw InputError("dimensions of unequal length in one case (" + std::to_string(cols[0].size()) + " and " +
                             std::to_string(cols[static_cast<size_t>(k)].size()) + " values)",
                         where);
    }
    const long len = static_cast<long>(cols[0].size());
    if (equal_length.value_or(false) && series_length > 0 && len != series_length)
      throw InputError("case has length " + std::to_string(len) + " but @seriesLength is " + std::to_string(series_length), where);
    Eigen::MatrixXd m(len, ndim);
    for (int k = 0; k < ndim; ++k)
      for (long i = 0; i < len; ++i) m(i, k) = cols[static_cast<size_t>(k)][static_cast<size_t>(i)];
    d.series.push_back(std::move(m));
    d.labels.push_back(it->second);
  }
  if (!in_data) throw InputError("no @data line", label);
  if (d.series.empty()) throw InputError("no cases after @data", label);
  return d;
}

}  // namespace icmlkit::io
