// Building law inputs from a `Table`, with row/column-precise validation.
#pragma once

#include <map>
#include <string>

#include "fit/infolaw.hpp"
#include "fit/law.hpp"
#include "io/table.hpp"

namespace icmlkit::fit {

/// Column names for each input role ("params", "tokens", "unique_tokens", "loss",
/// "source_tokens") and the prefix of InfoLaw's weight columns.
struct ColumnMap {
  std::map<std::string, std::string> role = {{"params", "params"},
                                             {"tokens", "tokens"},
                                             {"unique_tokens", "unique_tokens"},
                                             {"loss", "loss"},
                                             {"source_tokens", "source_tokens"}};
  std::string weight_prefix = "w";  ///< InfoLaw weight columns are <prefix>0, <prefix>1, ...
};

/// Inputs of `law` from `t`.  Every input must be finite and > 0; the loss too when
/// `with_loss`; unique_tokens <= tokens.  Throws InputError naming file, row and column.
LawData law_data_from_table(const Law& law, const io::Table& t, const ColumnMap& cols, bool with_loss);

/// InfoLaw runs from `t`: params, tokens (> 1), source_tokens, the weight columns
/// <prefix>0..<prefix>(B-1) (B = shares.size(), each >= 0, each row summing to 1 within
/// `sum_tolerance`) and, when `with_loss`, the loss.  Throws InputError naming row and column.
InfoLawData infolaw_data_from_table(const io::Table& t, const ColumnMap& cols, const Eigen::ArrayXd& shares,
                                    bool with_loss, double sum_tolerance = 1e-3);

}  // namespace icmlkit::fit
