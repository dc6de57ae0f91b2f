// Building `MixData` from tables: one wide table (h_<domain>, loss_<domain> columns) or a
// mixture table and a loss table joined on an index column; splits for fitting.
#pragma once

#include <string>
#include <vector>

#include "fit/mixlaw.hpp"
#include "io/table.hpp"

namespace icmlkit::fit {

/// Where the mixture data live in the tables.  Patterns hold "{}" where the domain name goes.
struct MixColumns {
  std::string weight_pattern = "h_{}";    ///< mixture weight columns
  std::string loss_pattern = "loss_{}";   ///< validation loss columns
  std::string index_col = "index";        ///< join key (and the key split files refer to)
  std::string params_col, tokens_col;     ///< per-row N and D columns (empty: use the constants)
  double params = 0, tokens = 0;          ///< constant N (millions) and D (billions) when no column
  double params_scale = 1, tokens_scale = 1;  ///< multiply the N and D columns by these (e.g. 1e-6, 1e-9)
  double sum_tolerance = 0.01;            ///< allowed |sum_i h_i - 1| per row
  double min_weight = 0;                  ///< entries count when h_i > min_weight
  bool allow_missing_losses = false;      ///< a weight domain may lack a loss column
};

/// Reads mixtures (and losses, from `losses` when not null, joined on index_col).  Throws
/// InputError naming file, row and column for: negative or non-finite weights, rows not
/// summing to 1, non-finite or non-positive losses, a domain with weights but no loss column
/// (unless allowed), a loss column without weights, and index mismatches between the tables.
/// `index` receives each row's index value as text (row number when there is no index column).
MixData mix_data_from_tables(const io::Table& mixture, const io::Table* losses, const MixColumns& cols,
                             std::vector<std::string>* index);

/// Names of the columns of `t` that the mixture data use: weight and loss columns (per the
/// patterns) and the N and D columns.  Throws UsageError for a malformed pattern.
std::vector<std::string> mix_columns_used(const io::Table& t, const MixColumns& cols);

/// Turns a long loss table (one row per (index, domain, loss), e.g. JSON Lines) into a wide
/// one with an index column and one `loss_pattern` column per domain.  Throws InputError for
/// a repeated (index, domain) pair or a missing value (a NaN cell is left for absent pairs).
io::Table pivot_long_losses(const io::Table& t, const std::string& index_col, const std::string& domain_col,
                            const std::string& value_col, const std::string& loss_pattern);

/// Mixtures to predict for: the weight columns of `domains` (per cols.weight_pattern) and
/// N, D, validated as in mix_data_from_tables; losses are zero and the mask empty.
MixData mix_queries_from_table(const io::Table& t, const std::vector<std::string>& domains, const MixColumns& cols);

/// A train/validation split as row positions.
struct MixSplit {
  std::vector<Eigen::Index> train, val;
  std::string how;  ///< description for the output
};

/// Split from a JSON file {"train_index": [...], "val_index": [...]} matched on index values.
/// Throws InputError for an index that is not in the data.
MixSplit split_from_file(const std::string& path, const std::vector<std::string>& index);
/// Random split: a seeded permutation, the last round(fraction * n) rows for validation.
MixSplit split_random(Eigen::Index n, double fraction, std::uint64_t seed);
/// Extrapolation split: validation = rows with the largest value of `key` (N or D),
/// training = the rest.  Throws InputError when all rows share one value.
MixSplit split_extrapolate(const MixData& d, const std::string& key);

}  // namespace icmlkit::fit
