#include "io/table.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <unordered_set>

#include "io/atomic_file.hpp"
#include "io/gzip.hpp"
#include "io/hdf5.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"

namespace icmlkit::io {
namespace {

std::string lower_ext(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

bool is_hdf5_ext(const std::string& e) { return e == ".h5" || e == ".hdf5"; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    // from_chars reports under/overflow; follow strtod semantics (0 or +-inf).
    return std::strtod(std::string(s).c_str(), nullptr);
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string read_file(const std::string& path) {
  if (is_stdout(path)) {
    std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return s;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw unreadable_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_file(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError("error while reading file", path);
  return s;
}

// ---- reading ----------------------------------------------------------------------

Table Table::read(const std::string& path, const TableReadOptions& opt) {
  // "file.h5:/group" selects an HDF5 group.
  std::string file = path, group = "/";
  if (const auto colon = path.find(".h5:"); colon != std::string::npos) {
    file = path.substr(0, colon + 3);
    group = path.substr(colon + 4);
  } else if (const auto c2 = path.find(".hdf5:"); c2 != std::string::npos) {
    file = path.substr(0, c2 + 5);
    group = path.substr(c2 + 6);
  }
  // "x.csv.gz" is read as "x.csv" after gunzip (the hash is of the decompressed text).
  const bool gz = !is_stdout(file) && is_gzip_path(file);
  const std::string ext = lower_ext(gz ? file.substr(0, file.size() - 3) : file);
  if (!is_stdout(file) && is_hdf5_ext(ext)) {
    h5::Handle f = h5::open_file(file);
    h5::Handle g = h5::open_group(f, group.empty() ? "/" : group, file);
    Table t;
    t.source_ = path;
    std::vector<std::string> names = h5::dataset_names(g);
    if (std::string order; h5::read_attr(g, "columns", order)) {
      // Our own files record the column order; use it when it names exactly these datasets.
      const auto j = nlohmann::json::parse(order, nullptr, false);
      if (j.is_array() && j.size() == names.size()) {
        std::vector<std::string> ordered;
        for (const auto& e : j)
          if (e.is_string() && std::find(names.begin(), names.end(), e.get<std::string>()) != names.end())
            ordered.push_back(e.get<std::string>());
        if (ordered.size() == names.size()) names = ordered;
      }
    }
    if (names.empty()) throw InputError("HDF5 group holds no datasets", path);
    for (const auto& n : names) {
      h5::Column c = h5::read_column(g, n, file + ":" + (group == "/" ? "" : group) + "/" + n);
      if (auto* v = std::get_if<std::vector<double>>(&c)) t.set_column(n, std::move(*v));
      else t.set_column(n, std::move(std::get<std::vector<std::string>>(c)));
    }
    if (t.rows() == 0) throw InputError("table has no rows", path);
    t.sha256_ = sha256_file(file);
    return t;
  }
  const std::string text = read_maybe_gzip(file);
  const std::string label = is_stdout(file) ? "<stdin>" : file;
  Table t;
  bool json = ext == ".json" || ext == ".jsonl";
  if (is_stdout(file)) {
    const auto p = text.find_first_not_of(" \t\r\n");
    json = p != std::string::npos && (text[p] == '[' || text[p] == '{');
  }
  if (json) {
    const bool lines = ext == ".jsonl" || (is_stdout(file) && text[text.find_first_not_of(" \t\r\n")] == '{' &&
                                           text.find("\n{") != std::string::npos);
    t = parse_json(text, label, lines);
  } else {
    TableReadOptions o = opt;
    if (o.delimiter == '\0') o.delimiter = ext == ".tsv" ? '\t' : ',';
    if (is_stdout(file) && opt.delimiter == '\0') {
      // stdin: a first line with tabs and no commas is TSV.
      const std::string first = text.substr(0, text.find('\n'));
      if (first.find('\t') != std::string::npos && first.find(',') == std::string::npos) o.delimiter = '\t';
    }
    t = parse_csv(text, label, o);
  }
  t.sha256_ = sha256_hex(text);
  return t;
}

Table Table::parse_csv(const std::string& text, const std::string& label, const TableReadOptions& opt) {
  const char delim = opt.delimiter == '\0' ? ',' : opt.delimiter;
  std::vector<std::vector<std::string>> records;
  std::vector<std::size_t> record_lines;
  std::size_t line = 1, i = 0;
  const std::size_t n = text.size();
  if (n >= 3 && static_cast<unsigned char>(text[0]) == 0xEF && static_cast<unsigned char>(text[1]) == 0xBB &&
      static_cast<unsigned char>(text[2]) == 0xBF)
    i = 3;  // UTF-8 byte-order mark
  for (int k = 0; k < opt.skip_lines && i < n; ++k) {
    while (i < n && text[i] != '\n') ++i;
    ++i;
    ++line;
  }
  while (i < n) {
    const std::size_t start_line = line;
    std::vector<std::string> fields;
    std::string field;
    bool in_quotes = false, quoted = false, at_field_start = true;
    // Blank lines and (before any record) '#' comment lines are skipped.
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    if (records.empty() && text[i] == '#') {
      while (i < n && text[i] != '\n') ++i;
      ++i;
      ++line;
      continue;
    }
    for (;;) {
      if (i >= n) {
        if (in_quotes) throw InputError("unterminated quoted field", fmt::format("{}, line {}", label, start_line));
        fields.push_back(quoted ? field : std::string(trim(field)));
        break;
      }
      const char c = text[i];
      if (in_quotes) {
        if (c == '"') {
          if (i + 1 < n && text[i + 1] == '"') { field += '"'; i += 2; continue; }
          in_quotes = false;
          ++i;
          continue;
        }
        if (c == '\n') ++line;
        field += c;
        ++i;
        continue;
      }
      if (c == '"' && at_field_start) { in_quotes = quoted = true; at_field_start = false; ++i; continue; }
      if (c == delim) {
        fields.push_back(quoted ? field : std::string(trim(field)));
        field.clear();
        quoted = false;
        at_field_start = true;
        ++i;
        continue;
      }
      if (c == '\n' || c == '\r') {
        fields.push_back(quoted ? field : std::string(trim(field)));
        if (c == '\r' && i + 1 < n && text[i + 1] == '\n') ++i;
        ++i;
        ++line;
        break;
      }
      if (at_field_start && (c == ' ' || c == '\t') && delim != c) { field += c; ++i; continue; }
      at_field_start = false;
      field += c;
      ++i;
    }
    records.push_back(std::move(fields));
    record_lines.push_back(start_line);
  }
  if (records.empty()) throw InputError("table is empty", label);

  Table t;
  t.source_ = label;
  std::size_t first = 0;
  std::vector<std::string> names;
  if (opt.header) {
    names = records[0];
    first = 1;
    std::unordered_set<std::string> seen;
    for (std::size_t c = 0; c < names.size(); ++c) {
      if (names[c].empty()) {
        // pandas writes an unnamed index column first; name it rather than refuse the file.
        if (c == 0) names[c] = "index";
        else throw InputError(fmt::format("column {} has an empty name", c + 1), fmt::format("{}, line {}", label, record_lines[0]));
      }
      if (!seen.insert(names[c]).second)
        throw InputError(fmt::format("duplicate column name '{}' (if the first line is data, not column names, give --no-header)",
                                     names[c]),
                         fmt::format("{}, line {}", label, record_lines[0]));
    }
  } else {
    for (std::size_t c = 0; c < records[0].size(); ++c) names.push_back(fmt::format("c{}", c + 1));
  }
  if (records.size() == first) throw InputError("table has a header but no data rows", label);
  t.names_ = names;
  t.columns_.resize(names.size());
  for (std::size_t r = first; r < records.size(); ++r) {
    auto& rec = records[r];
    if (rec.size() != names.size())
      throw InputError(fmt::format("row has {} fields, expected {}", rec.size(), names.size()),
                       fmt::format("{}, row {}, line {}", label, r - first + 1, record_lines[r]));
    for (std::size_t c = 0; c < names.size(); ++c) t.columns_[c].text.push_back(std::move(rec[c]));
    t.lines_.push_back(record_lines[r]);
  }
  t.rows_ = records.size() - first;
  return t;
}

Table Table::parse_json(const std::string& text, const std::string& label, bool lines) {
  using ojson = nlohmann::ordered_json;
  std::vector<ojson> recs;
  if (lines) {
    std::istringstream in(text);
    std::string l;
    std::size_t ln = 0;
    while (std::getline(in, l)) {
      ++ln;
      if (trim(l).empty()) continue;
      ojson j = ojson::parse(l, nullptr, false);
      if (j.is_discarded()) throw InputError("malformed JSON", fmt::format("{}, line {}", label, ln));
      if (!j.is_object()) throw InputError("each JSON line must be an object", fmt::format("{}, line {}", label, ln));
      if (j.contains("meta") && j.size() == 1) continue;  // our own provenance record
      recs.push_back(std::move(j));
    }
  } else {
    ojson j = ojson::parse(text, nullptr, false);
    if (j.is_discarded()) throw InputError("malformed JSON", label);
    if (j.is_object() && j.contains("rows")) {
      ojson rows = j["rows"];
      j = std::move(rows);
    }
    if (!j.is_array()) throw InputError("a JSON table must be an array of records (or {\"rows\": [...]})", label);
    for (auto& e : j) recs.push_back(std::move(e));
  }
  if (recs.empty()) throw InputError("table is empty", label);
  Table t;
  t.source_ = label;
  t.row_word_ = lines ? "record" : "record";
  // Columns in first-seen key order.
  std::unordered_set<std::string> seen;
  for (std::size_t r = 0; r < recs.size(); ++r) {
    if (!recs[r].is_object()) throw InputError("record is not an object", fmt::format("{}, record {}", label, r + 1));
    for (auto it = recs[r].begin(); it != recs[r].end(); ++it)
      if (seen.insert(it.key()).second) t.names_.push_back(it.key());
  }
  t.columns_.resize(t.names_.size());
  for (std::size_t c = 0; c < t.names_.size(); ++c) {
    auto& col = t.columns_[c];
    bool all_num = true;
    for (const auto& rec : recs) {
      const auto it = rec.find(t.names_[c]);
      if (it == rec.end() || it->is_null() || !it->is_number()) { all_num = false; break; }
    }
    col.numeric = all_num;
    for (const auto& rec : recs) {
      const auto it = rec.find(t.names_[c]);
      if (all_num) {
        col.num.push_back(it->get<double>());
      } else if (it == rec.end() || it->is_null()) {
        col.text.emplace_back();
      } else if (it->is_string()) {
        col.text.push_back(it->get<std::string>());
      } else if (it->is_number()) {
        col.text.push_back(format_double(it->get<double>()));
      } else {
        col.text.push_back(it->dump());
      }
    }
  }
  t.rows_ = recs.size();
  return t;
}

// ---- access -------------------------------------------------------------------------

bool Table::has(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::size_t Table::index_of(const std::string& name) const {
  const auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) {
    std::string avail;
    for (const auto& n : names_) avail += (avail.empty() ? "" : ", ") + n;
    throw InputError(fmt::format("missing column '{}' (columns: {})", name, avail), source_);
  }
  return static_cast<std::size_t>(it - names_.begin());
}

const Table::Column& Table::column(const std::string& name) const { return columns_[index_of(name)]; }

std::string Table::where(std::size_t r) const {
  if (r < lines_.size()) return fmt::format("{}, row {}, line {}", source_, r + 1, lines_[r]);
  return fmt::format("{}, {} {}", source_, row_word_, r + 1);
}

std::vector<double> Table::numbers(const std::string& name, const NumberCheck& check) const {
  const Column& col = column(name);
  std::vector<double> out(rows_);
  for (std::size_t r = 0; r < rows_; ++r) {
    double v;
    if (col.numeric) {
      v = col.num[r];
    } else {
      const auto p = parse_double(col.text[r]);
      if (!p) {
        if (trim(col.text[r]).empty())
          throw InputError(fmt::format("empty cell in numeric column '{}'", name), where(r));
        throw InputError(fmt::format("not a number: '{}' in column '{}'", col.text[r], name), where(r));
      }
      v = *p;
    }
    if (check.finite && !std::isfinite(v))
      throw InputError(fmt::format("non-finite value {} in column '{}'", format_double(v), name), where(r));
    if (check.positive && !(v > 0))
      throw InputError(fmt::format("value {} in column '{}' must be > 0", format_double(v), name), where(r));
    out[r] = v;
  }
  return out;
}

bool Table::is_numeric(const std::string& name) const {
  const Column& col = column(name);
  if (col.numeric) return true;
  return std::all_of(col.text.begin(), col.text.end(), [](const std::string& s) { return parse_double(s).has_value(); });
}

std::vector<std::string> Table::texts(const std::string& name) const {
  const Column& col = column(name);
  if (!col.numeric) return col.text;
  std::vector<std::string> out;
  out.reserve(rows_);
  for (double v : col.num) out.push_back(format_double(v));
  return out;
}

void Table::set_column(const std::string& name, std::vector<double> values) {
  if (!names_.empty() && values.size() != rows_)
    throw RuntimeError(fmt::format("column '{}' has {} values, table has {} rows", name, values.size(), rows_));
  Column c;
  c.numeric = true;
  c.num = std::move(values);
  if (names_.empty()) rows_ = c.num.size();
  if (has(name)) columns_[index_of(name)] = std::move(c);
  else { names_.push_back(name); columns_.push_back(std::move(c)); }
}

void Table::set_column(const std::string& name, std::vector<std::string> values) {
  if (!names_.empty() && values.size() != rows_)
    throw RuntimeError(fmt::format("column '{}' has {} values, table has {} rows", name, values.size(), rows_));
  Column c;
  c.text = std::move(values);
  if (names_.empty()) rows_ = c.text.size();
  if (has(name)) columns_[index_of(name)] = std::move(c);
  else { names_.push_back(name); columns_.push_back(std::move(c)); }
}

Table Table::select_rows(const std::vector<std::size_t>& keep) const {
  Table t;
  t.names_ = names_;
  t.source_ = source_;
  t.sha256_ = sha256_;
  t.row_word_ = row_word_;
  t.columns_.resize(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    t.columns_[c].numeric = columns_[c].numeric;
    for (std::size_t r : keep) {
      if (columns_[c].numeric) t.columns_[c].num.push_back(columns_[c].num.at(r));
      else t.columns_[c].text.push_back(columns_[c].text.at(r));
    }
  }
  if (!lines_.empty())
    for (std::size_t r : keep) t.lines_.push_back(lines_.at(r));
  t.rows_ = keep.size();
  return t;
}

// ---- writing ------------------------------------------------------------------------

namespace {
// Text columns whose every cell is a number (as read from CSV) are written as numbers.
std::vector<std::vector<double>> numeric_views(const std::vector<std::string>& names,
                                               const std::function<bool(std::size_t)>& is_text,
                                               const std::function<const std::vector<std::string>&(std::size_t)>& text) {
  std::vector<std::vector<double>> out(names.size());
  for (std::size_t c = 0; c < names.size(); ++c) {
    if (!is_text(c)) continue;
    std::vector<double> v;
    bool ok = !text(c).empty();
    for (const auto& s : text(c)) {
      // A cell becomes a number only when that loses nothing: finite, no leading zero before a
      // digit ("00123" is an id), at most 15 significant digits (long ids stay exact text).
      const auto x = parse_double(s);
      if (!x || !std::isfinite(*x)) { ok = false; break; }
      const std::string_view t = trim(s);
      const std::size_t first = t.find_first_not_of("+-");
      if (first != std::string_view::npos && t.size() > first + 1 && t[first] == '0' &&
          std::isdigit(static_cast<unsigned char>(t[first + 1]))) { ok = false; break; }
      int digits = 0;
      bool leading = true;
      for (char ch : t) {
        if (ch == 'e' || ch == 'E') break;
        if (!std::isdigit(static_cast<unsigned char>(ch))) continue;
        if (leading && ch == '0') continue;
        leading = false;
        ++digits;
      }
      if (digits > 15) { ok = false; break; }
      v.push_back(*x);
    }
    if (ok) out[c] = std::move(v);
  }
  return out;
}
}  // namespace

nlohmann::ordered_json Table::to_records() const {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  const auto nums = numeric_views(
      names_, [&](std::size_t c) { return !columns_[c].numeric; },
      [&](std::size_t c) -> const std::vector<std::string>& { return columns_[c].text; });
  for (std::size_t r = 0; r < rows_; ++r) {
    nlohmann::ordered_json rec = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < names_.size(); ++c) {
      const Column& col = columns_[c];
      if (col.numeric || !nums[c].empty()) {
        const double v = col.numeric ? col.num[r] : nums[c][r];
        rec[names_[c]] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
      } else {
        rec[names_[c]] = col.text[r];
      }
    }
    arr.push_back(std::move(rec));
  }
  return arr;
}

namespace {
std::string csv_quote(const std::string& s, char delim) {
  if (s.find_first_of(std::string("\"\n\r") + delim) == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += "\"\"";
    else o += c;
  }
  return o + "\"";
}
}  // namespace

std::string Table::to_csv(char delimiter) const {
  std::string out;
  for (std::size_t c = 0; c < names_.size(); ++c) out += (c ? std::string(1, delimiter) : "") + csv_quote(names_[c], delimiter);
  out += '\n';
  for (std::size_t r = 0; r < rows_; ++r) {
    for (std::size_t c = 0; c < names_.size(); ++c) {
      if (c) out += delimiter;
      const Column& col = columns_[c];
      out += col.numeric ? format_double(col.num[r]) : csv_quote(col.text[r], delimiter);
    }
    out += '\n';
  }
  return out;
}

void Table::write(const std::string& path, const Provenance* prov) const {
  // stdout and streams (/dev/null, a pipe) take the default JSON unless their name says otherwise
  const std::string named = lower_ext(path);
  const bool known = named == ".json" || named == ".jsonl" || named == ".csv" || named == ".tsv" || is_hdf5_ext(named);
  const std::string ext = is_stdout(path) || (is_stream_path(path) && !known) ? ".json" : named;
  if (ext == ".json") {
    nlohmann::ordered_json j;
    if (prov) j["meta"] = prov->to_json();
    j["rows"] = to_records();
    write_text(path, j.dump(2) + "\n");
  } else if (ext == ".jsonl") {
    std::string s;
    if (prov) s += nlohmann::json{{"meta", prov->to_json()}}.dump() + "\n";
    for (const auto& rec : to_records()) s += rec.dump() + "\n";
    write_text(path, s);
  } else if (ext == ".csv" || ext == ".tsv") {
    if (prov) {
      // Both files are staged before either is renamed, so a failure leaves neither.
      AtomicFile data(path), meta(path + ".meta.json");
      {
        std::ofstream o(data.temp_path(), std::ios::binary);
        o << to_csv(ext == ".tsv" ? '\t' : ',');
        if (!o.flush()) throw RuntimeError("cannot write output file", path);
      }
      {
        std::ofstream o(meta.temp_path(), std::ios::binary);
        o << nlohmann::json{{"meta", prov->to_json()}}.dump(2) << "\n";
        if (!o.flush()) throw RuntimeError("cannot write output file", path + ".meta.json");
      }
      meta.commit();  // the sidecar first: a failed data rename then leaves the old CSV untouched
      data.commit();
    } else {
      write_text(path, to_csv(ext == ".tsv" ? '\t' : ','));
    }
  } else if (is_hdf5_ext(ext)) {
    AtomicFile file(path);
    {
      h5::Handle f = h5::create_file(file.temp_path().string());
      h5::Handle root(H5Gopen2(f.get(), "/", H5P_DEFAULT));
      nlohmann::json order = names_;
      const auto nums = numeric_views(
          names_, [&](std::size_t c) { return !columns_[c].numeric; },
          [&](std::size_t c) -> const std::vector<std::string>& { return columns_[c].text; });
      for (std::size_t c = 0; c < names_.size(); ++c) {
        if (columns_[c].numeric) h5::write_doubles(root, names_[c], columns_[c].num);
        else if (!nums[c].empty()) h5::write_doubles(root, names_[c], nums[c]);
        else h5::write_strings(root, names_[c], columns_[c].text);
      }
      h5::write_attr(root, "columns", order.dump());
      if (prov) h5::write_provenance(f, *prov);
      root.reset();
      h5::close_file(f, path);
    }
    file.commit();
  } else {
    throw UsageError(fmt::format("unknown output format '{}' (use .json, .jsonl, .csv, .tsv or .h5)", ext), path);
  }
}

}  // namespace icmlkit::io
