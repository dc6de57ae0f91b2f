#include "fit/law_data.hpp"

#include <fmt/core.h>

#include <cmath>

#include "util/error.hpp"

namespace icmlkit::fit {

LawData law_data_from_table(const Law& law, const io::Table& t, const ColumnMap& cols, bool with_loss) {
  const auto inputs = law.input_names();
  LawData d;
  d.x.resize(static_cast<Eigen::Index>(t.rows()), static_cast<Eigen::Index>(inputs.size()));
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string& col = cols.role.at(inputs[k]);
    const auto v = t.numbers(col, io::NumberCheck{true, true});
    for (std::size_t r = 0; r < v.size(); ++r) d.x(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(k)) = v[r];
  }
  if (law.name() == "data-constrained") {
    for (Eigen::Index r = 0; r < d.x.rows(); ++r)
      if (d.x(r, 2) > d.x(r, 1))
        throw InputError(fmt::format("unique tokens {} exceed total tokens {}", d.x(r, 2), d.x(r, 1)),
                         t.where(static_cast<std::size_t>(r)) + ", column '" + cols.role.at("unique_tokens") + "'");
  }
  if (with_loss) {
    const auto l = t.numbers(cols.role.at("loss"), io::NumberCheck{true, true});
    d.loss = Eigen::Map<const Eigen::ArrayXd>(l.data(), static_cast<Eigen::Index>(l.size()));
  }
  return d;
}

InfoLawData infolaw_data_from_table(const io::Table& t, const ColumnMap& cols, const Eigen::ArrayXd& shares,
                                    bool with_loss, double sum_tolerance) {
  InfoLawData d;
  auto col = [&](const std::string& role) {
    const auto v = t.numbers(cols.role.at(role), io::NumberCheck{true, true});
    return Eigen::ArrayXd(Eigen::Map<const Eigen::ArrayXd>(v.data(), static_cast<Eigen::Index>(v.size())));
  };
  d.params = col("params");
  d.tokens = col("tokens");
  d.source = col("source_tokens");
  for (Eigen::Index r = 0; r < d.tokens.size(); ++r)
    if (!(d.tokens[r] > 1))
      throw InputError("tokens must be > 1 (InfoLaw divides by ln K)",
                       t.where(static_cast<std::size_t>(r)) + ", column '" + cols.role.at("tokens") + "'");
  const Eigen::Index nb = shares.size();
  d.shares = shares;
  d.weights.resize(static_cast<Eigen::Index>(t.rows()), nb);
  for (Eigen::Index b = 0; b < nb; ++b) {
    const std::string name = fmt::format("{}{}", cols.weight_prefix, b);
    const auto v = t.numbers(name, io::NumberCheck{true, false});
    for (std::size_t r = 0; r < v.size(); ++r) {
      if (v[r] < 0) throw InputError(fmt::format("negative mixture weight {}", v[r]), t.where(r) + ", column '" + name + "'");
      d.weights(static_cast<Eigen::Index>(r), b) = v[r];
    }
  }
  for (Eigen::Index r = 0; r < d.weights.rows(); ++r) {
    const double s = d.weights.row(r).sum();
    if (std::abs(s - 1) > sum_tolerance)
      throw InputError(fmt::format("mixture weights {}0..{}{} sum to {}, not 1", cols.weight_prefix, cols.weight_prefix, nb - 1, s),
                       t.where(static_cast<std::size_t>(r)));
  }
  if (with_loss) d.loss = col("loss");
  return d;
}

}  // namespace icmlkit::fit
