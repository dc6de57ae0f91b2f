// Row filters for tables: "--where 'loss<3'"-style expressions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "io/table.hpp"

namespace icmlkit::io {

/// Rows (0-based, ascending) that satisfy every expression.  An expression is
/// "COLUMN OP VALUE" with OP one of < <= > >= == != (= is ==); numeric when VALUE parses as
/// a number (the column's cells must then be numbers), string equality otherwise.
/// Throws UsageError for a malformed expression and InputError for a missing column or a
/// non-numeric cell (naming file, row and column).
std::vector<std::size_t> filter_rows(const Table& t, const std::vector<std::string>& exprs);

/// Indices of all rows except the `k` with the largest values of `column` (ties: later rows
/// dropped first), ascending.  Throws UsageError when k >= rows.
std::vector<std::size_t> drop_largest(const Table& t, const std::string& column, std::size_t k);

/// Rows (ascending) with no empty cell in any of `columns` (all columns when empty).
/// Throws InputError for a missing column.
std::vector<std::size_t> complete_rows(const Table& t, const std::vector<std::string>& columns);

}  // namespace icmlkit::io
