// `Table`: named columns read from CSV/TSV, JSON (array of records or JSON Lines) or an
// HDF5 group with one 1-D dataset per column; written back to any of them.
//
// Cells keep their text (CSV) or their number (JSON/HDF5); `numbers()` converts a column
// on demand and names the file, row and column of the first bad cell.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/provenance.hpp"

namespace icmlkit::io {

/// How to read a table.
struct TableReadOptions {
  bool header = true;     ///< CSV: first row holds names; false names columns c1, c2, ...
  char delimiter = '\0';  ///< CSV: '\0' = by extension (',' or '\t' for .tsv)
  int skip_lines = 0;     ///< CSV: lines to skip before the header/data (e.g. scikit-learn's "n,p,..." line)
};

/// Checks applied by `Table::numbers`.
struct NumberCheck {
  bool finite = true;     ///< reject NaN and +-inf
  bool positive = false;  ///< reject values <= 0
};

/// An in-memory table of equal-length named columns.
class Table {
 public:
  /// Reads `path` ("-" = stdin), format from the extension: .csv .tsv .txt -> CSV, .json,
  /// .jsonl, .h5/.hdf5 (optionally "file.h5:/group"); a text format with .gz appended is
  /// gunzipped first (CRC checked; the hash is of the text).  stdin is JSON when it starts with
  /// '[' or '{', CSV otherwise.  Throws InputError with file and row on malformed input,
  /// ragged rows, duplicate or empty column names, or an empty table.
  static Table read(const std::string& path, const TableReadOptions& opt = {});
  /// Parses CSV text; `label` names the source in errors.
  static Table parse_csv(const std::string& text, const std::string& label, const TableReadOptions& opt = {});
  /// Parses a JSON array of records, {"rows": [...]} or JSON Lines text.
  static Table parse_json(const std::string& text, const std::string& label, bool lines);

  /// Number of data rows.
  std::size_t rows() const noexcept { return rows_; }
  /// Number of columns.
  std::size_t cols() const noexcept { return names_.size(); }
  /// Column names in order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  /// Whether a column exists.
  bool has(const std::string& name) const;
  /// Source label used in error messages (file path).
  const std::string& source() const noexcept { return source_; }
  /// Sets the label used in error messages (for tables derived from a file).
  void set_source(std::string label) { source_ = std::move(label); }
  /// SHA-256 of the bytes read (empty for tables built in memory).
  const std::string& sha256() const noexcept { return sha256_; }

  /// Column `name` as numbers.  Throws InputError "(file, row R, column 'name')" for a
  /// missing column, an empty or non-numeric cell, or a value failing `check`.
  std::vector<double> numbers(const std::string& name, const NumberCheck& check = {}) const;
  /// Column `name` as text (numbers in their shortest round-trip form).  Throws when absent.
  std::vector<std::string> texts(const std::string& name) const;
  /// Whether every cell of `name` parses as a number.
  bool is_numeric(const std::string& name) const;
  /// "file, row R" for data row `r` (0-based), with the line number for CSV.
  std::string where(std::size_t r) const;

  /// Appends or replaces a numeric column; its length must equal rows() (or the table is empty).
  void set_column(const std::string& name, std::vector<double> values);
  /// Appends or replaces a text column.
  void set_column(const std::string& name, std::vector<std::string> values);
  /// A new table with rows `keep` (0-based indices into this table), in that order.
  Table select_rows(const std::vector<std::size_t>& keep) const;

  /// Array-of-records JSON (numbers stay numbers).
  nlohmann::ordered_json to_records() const;
  /// Serialises as CSV text with a header row.
  std::string to_csv(char delimiter = ',') const;
  /// Writes atomically; format from the extension (.csv .tsv .json .jsonl .h5 .hdf5), "-"
  /// for JSON on stdout.  JSON carries {"meta", "rows"}; JSON Lines starts with a {"meta"}
  /// record; HDF5 gets root attributes; CSV gets a sidecar "<path>.meta.json".
  void write(const std::string& path, const Provenance* prov = nullptr) const;

 private:
  struct Column {
    std::vector<std::string> text;    // used when !numeric
    std::vector<double> num;          // used when numeric
    bool numeric = false;
  };
  const Column& column(const std::string& name) const;
  std::size_t index_of(const std::string& name) const;

  std::vector<std::string> names_;
  std::vector<Column> columns_;
  std::vector<std::size_t> lines_;  // CSV: 1-based line of each data row; empty otherwise
  std::size_t rows_ = 0;
  std::string source_ = "<memory>";
  std::string sha256_;
  std::string row_word_ = "row";
};

/// Parses a whole string as a double (leading/trailing blanks allowed).  Returns nullopt on
/// anything else (empty, trailing junk).
std::optional<double> parse_double(std::string_view s);

/// Formats a double with the shortest text that round-trips.
std::string format_double(double v);

/// Reads a whole file ("-" = stdin) into a string.  Throws InputError when unreadable.
std::string read_file(const std::string& path);

}  // namespace icmlkit::io
