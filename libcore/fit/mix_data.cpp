#include "fit/mix_data.hpp"

#include <fmt/core.h>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "io/json.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace icmlkit::fit {
namespace {

// "{}" in a column pattern replaced by the domain name (patterns are checked by match_columns).
std::string fill(const std::string& pattern, const std::string& domain) {
  std::string out = pattern;
  out.replace(out.find("{}"), 2, domain);
  return out;
}

void check_pattern(const std::string& pattern, const std::string& flag) {
  const auto b = pattern.find("{}");
  if (b == std::string::npos || pattern.find("{}", b + 2) != std::string::npos)
    throw UsageError(fmt::format("pattern '{}' must contain exactly one {{}} (where the domain name goes)", pattern), flag);
}

// Domain names of the columns that match "<prefix>{}<suffix>", in column order.
std::vector<std::pair<std::string, std::string>> match_columns(const io::Table& t, const std::string& pattern,
                                                               const std::string& flag) {
  check_pattern(pattern, flag);
  const auto brace = pattern.find("{}");
  const std::string pre = pattern.substr(0, brace), post = pattern.substr(brace + 2);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : t.names())
    if (n.size() > pre.size() + post.size() && n.compare(0, pre.size(), pre) == 0 &&
        n.compare(n.size() - post.size(), post.size(), post) == 0)
      out.emplace_back(n.substr(pre.size(), n.size() - pre.size() - post.size()), n);
  return out;
}

// Weights (validated: finite, >= 0, rows summing to 1) and per-row N, D into d.
void read_weights_and_sizes(const io::Table& t, const std::vector<std::pair<std::string, std::string>>& wcols,
                            const MixColumns& cols, MixData& d) {
  const Eigen::Index n = static_cast<Eigen::Index>(t.rows()), K = static_cast<Eigen::Index>(wcols.size());
  d.h.resize(n, K);
  for (Eigen::Index i = 0; i < K; ++i) {
    const std::string& col = wcols[static_cast<std::size_t>(i)].second;
    const auto w = t.numbers(col, io::NumberCheck{true, false});
    for (Eigen::Index r = 0; r < n; ++r) {
      if (w[static_cast<std::size_t>(r)] < 0)
        throw InputError(fmt::format("negative mixture weight {}", w[static_cast<std::size_t>(r)]),
                         t.where(static_cast<std::size_t>(r)) + ", column '" + col + "'");
      d.h(r, i) = w[static_cast<std::size_t>(r)];
    }
  }
  for (Eigen::Index r = 0; r < n; ++r) {
    const double s = d.h.row(r).sum();
    if (std::abs(s - 1) > cols.sum_tolerance)
      throw InputError(fmt::format("mixture weights sum to {:.6g}, not 1 (tolerance {})", s, cols.sum_tolerance),
                       t.where(static_cast<std::size_t>(r)));
  }
  auto per_row = [&](const std::string& col, double constant, double scale, const char* what, const char* flag) {
    if (!col.empty()) {
      const auto v = t.numbers(col, io::NumberCheck{true, true});
      return Eigen::ArrayXd(scale * Eigen::Map<const Eigen::ArrayXd>(v.data(), n));
    }
    if (!(constant > 0))
      throw UsageError(fmt::format("give the {} as a column or a positive constant", what), flag);
    return Eigen::ArrayXd(Eigen::ArrayXd::Constant(n, constant));
  };
  d.params = per_row(cols.params_col, cols.params, cols.params_scale, "model size N (millions of parameters)", "--params");
  d.tokens = per_row(cols.tokens_col, cols.tokens, cols.tokens_scale, "training tokens D (billions)", "--tokens");
}

}  // namespace

std::vector<std::string> mix_columns_used(const io::Table& t, const MixColumns& cols) {
  std::vector<std::string> used;
  for (const auto* pat : {&cols.weight_pattern, &cols.loss_pattern})
    for (const auto& [dom, col] : match_columns(t, *pat, pat == &cols.weight_pattern ? "--weight-pattern" : "--loss-pattern"))
      used.push_back(col);
  for (const auto* c : {&cols.params_col, &cols.tokens_col})
    if (!c->empty() && t.has(*c)) used.push_back(*c);
  return used;
}

io::Table pivot_long_losses(const io::Table& t, const std::string& index_col, const std::string& domain_col,
                            const std::string& value_col, const std::string& loss_pattern) {
  check_pattern(loss_pattern, "--loss-pattern");
  auto idx = t.texts(index_col);
  for (auto& s : idx)
    if (auto v = io::parse_double(s)) s = io::format_double(*v);
  const auto dom = t.texts(domain_col);
  const auto val = t.numbers(value_col, io::NumberCheck{true, true});
  std::vector<std::string> order_idx, order_dom;
  std::map<std::string, std::size_t> ipos, dpos;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    if (ipos.emplace(idx[r], order_idx.size()).second) order_idx.push_back(idx[r]);
    if (dpos.emplace(dom[r], order_dom.size()).second) order_dom.push_back(dom[r]);
  }
  std::vector<std::vector<double>> cols(order_dom.size(),
                                        std::vector<double>(order_idx.size(), std::numeric_limits<double>::quiet_NaN()));
  for (std::size_t r = 0; r < t.rows(); ++r) {
    double& cell = cols[dpos[dom[r]]][ipos[idx[r]]];
    if (!std::isnan(cell)) throw InputError(fmt::format("index {} has two losses for domain '{}'", idx[r], dom[r]), t.where(r));
    cell = val[r];
  }
  for (std::size_t d = 0; d < order_dom.size(); ++d)
    for (std::size_t i = 0; i < order_idx.size(); ++i)
      if (std::isnan(cols[d][i]))
        throw InputError(fmt::format("index {} has no loss for domain '{}'", order_idx[i], order_dom[d]), t.source());
  io::Table w;
  w.set_source(t.source());
  w.set_column(index_col, order_idx);
  for (std::size_t d = 0; d < order_dom.size(); ++d)
    w.set_column(fill(loss_pattern, order_dom[d]), std::move(cols[d]));
  return w;
}

MixData mix_queries_from_table(const io::Table& t, const std::vector<std::string>& domains, const MixColumns& cols) {
  check_pattern(cols.weight_pattern, "--weight-pattern");
  std::vector<std::pair<std::string, std::string>> wcols;
  for (const auto& dom : domains) wcols.emplace_back(dom, fill(cols.weight_pattern, dom));
  MixData d;
  d.domains = domains;
  read_weights_and_sizes(t, wcols, cols, d);
  d.loss = Eigen::ArrayXXd::Zero(d.h.rows(), d.h.cols());
  d.mask = Eigen::ArrayXXd::Zero(d.h.rows(), d.h.cols());
  return d;
}

MixData mix_data_from_tables(const io::Table& mixture, const io::Table* losses, const MixColumns& cols,
                             std::vector<std::string>* index) {
  const io::Table& lt = losses ? *losses : mixture;
  const auto wcols = match_columns(mixture, cols.weight_pattern, "--weight-pattern");
  if (wcols.size() < 2)
    throw InputError(fmt::format("found {} weight columns matching '{}' (need at least 2 domains)", wcols.size(),
                                 cols.weight_pattern), mixture.source());
  const auto lcols = match_columns(lt, cols.loss_pattern, "--loss-pattern");
  std::map<std::string, std::string> loss_of;
  for (const auto& [d, c] : lcols) loss_of[d] = c;
  MixData d;
  for (const auto& [dom, c] : wcols) d.domains.push_back(dom);
  for (const auto& [dom, c] : lcols)
    if (std::find(d.domains.begin(), d.domains.end(), dom) == d.domains.end())
      log::info("ignoring loss column '{}': no weight column '{}' (an evaluation-only domain)", c,
                fill(cols.weight_pattern, dom));
  const Eigen::Index n = static_cast<Eigen::Index>(mixture.rows()), K = static_cast<Eigen::Index>(wcols.size());
  if (n == 0) throw InputError("no mixture rows left", mixture.source());

  // Row order of the loss table relative to the mixture table.
  std::vector<std::size_t> lrow(static_cast<std::size_t>(n));
  std::vector<std::string> idx(static_cast<std::size_t>(n));
  if (mixture.has(cols.index_col)) {
    idx = mixture.texts(cols.index_col);
    for (auto& s : idx)
      if (auto v = io::parse_double(s)) s = io::format_double(*v);  // "1" and "1.0" name one index
    std::set<std::string> once;
    for (std::size_t r = 0; r < idx.size(); ++r)
      if (!once.insert(idx[r]).second) throw InputError(fmt::format("index {} appears twice", idx[r]), mixture.where(r));
  } else {
    for (Eigen::Index r = 0; r < n; ++r) idx[static_cast<std::size_t>(r)] = std::to_string(r);
  }
  if (losses) {
    if (!mixture.has(cols.index_col) || !losses->has(cols.index_col))
      throw InputError(fmt::format("both tables need the index column '{}' to be joined", cols.index_col),
                       losses->has(cols.index_col) ? mixture.source() : losses->source());
    auto lidx = losses->texts(cols.index_col);
    std::map<std::string, std::size_t> pos;
    for (std::size_t r = 0; r < lidx.size(); ++r) {
      if (auto v = io::parse_double(lidx[r])) lidx[r] = io::format_double(*v);
      if (!pos.emplace(lidx[r], r).second)
        throw InputError(fmt::format("index {} appears twice", lidx[r]), losses->where(r));
    }
    std::set<std::string> seen;
    for (std::size_t r = 0; r < idx.size(); ++r) {
      if (seen.count(idx[r])) throw InputError(fmt::format("index {} appears twice", idx[r]), mixture.where(r));
      const auto it = pos.find(idx[r]);
      if (it == pos.end()) throw InputError(fmt::format("index {} has no row in the loss table", idx[r]), mixture.where(r));
      lrow[r] = it->second;
      seen.insert(idx[r]);
    }
    for (std::size_t r = 0; r < lidx.size(); ++r)
      if (!seen.count(lidx[r])) throw InputError(fmt::format("index {} has no mixture row", lidx[r]), losses->where(r));
  } else {
    std::iota(lrow.begin(), lrow.end(), std::size_t{0});
  }

  read_weights_and_sizes(mixture, wcols, cols, d);
  d.loss = Eigen::ArrayXXd::Constant(n, K, std::numeric_limits<double>::quiet_NaN());
  for (Eigen::Index i = 0; i < K; ++i) {
    const auto lc = loss_of.find(d.domains[static_cast<std::size_t>(i)]);
    if (lc == loss_of.end()) {
      if (!cols.allow_missing_losses)
        throw InputError(fmt::format("domain '{}' has weights but no loss column '{}' (--allow-missing-losses to accept)",
                                     d.domains[static_cast<std::size_t>(i)],
                                     fill(cols.loss_pattern, d.domains[static_cast<std::size_t>(i)])),
                         lt.source());
      continue;
    }
    const auto l = lt.numbers(lc->second, io::NumberCheck{true, true});
    for (Eigen::Index r = 0; r < n; ++r) d.loss(r, i) = l[lrow[static_cast<std::size_t>(r)]];
  }
  d.set_mask(cols.min_weight);
  if (index) *index = idx;
  return d;
}

MixSplit split_from_file(const std::string& path, const std::vector<std::string>& index) {
  const nlohmann::json j = io::read_json(path);
  MixSplit s;
  s.how = "index lists from " + path;
  std::map<std::string, Eigen::Index> pos;
  for (std::size_t r = 0; r < index.size(); ++r) pos[index[r]] = static_cast<Eigen::Index>(r);
  auto take = [&](const char* key, std::vector<Eigen::Index>& out) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_array())
      throw InputError(fmt::format("split file needs an array \"{}\"", key), path);
    for (const auto& e : j[key]) {
      std::string k = e.is_string() ? e.get<std::string>() : (e.is_number() ? io::format_double(e.get<double>()) : e.dump());
      const auto it = pos.find(k);
      if (it == pos.end()) throw InputError(fmt::format("index {} of \"{}\" is not in the data", k, key), path);
      out.push_back(it->second);
    }
  };
  take("train_index", s.train);
  take("val_index", s.val);
  std::set<Eigen::Index> seen;
  for (const auto* side : {&s.train, &s.val})
    for (auto r : *side)
      if (!seen.insert(r).second)
        throw InputError(fmt::format("index {} appears twice in the split (train and val must be disjoint)",
                                     index[static_cast<std::size_t>(r)]), path);
  if (s.train.empty()) throw InputError("the split has no training rows", path);
  return s;
}

MixSplit split_random(Eigen::Index n, double fraction, std::uint64_t seed) {
  if (!(fraction > 0 && fraction < 1)) throw UsageError("the validation fraction must be in (0, 1)", "--val-fraction");
  std::vector<Eigen::Index> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), Eigen::Index{0});
  Rng rng(seed);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  const auto n_val = static_cast<std::size_t>(std::lround(fraction * static_cast<double>(n)));
  if (n_val == 0 || n_val >= perm.size()) throw UsageError("the split leaves an empty side", "--val-fraction");
  MixSplit s;
  s.train.assign(perm.begin(), perm.end() - static_cast<long>(n_val));
  s.val.assign(perm.end() - static_cast<long>(n_val), perm.end());
  s.how = fmt::format("random, validation fraction {}, seed {}", fraction, seed);
  return s;
}

MixSplit split_extrapolate(const MixData& d, const std::string& key) {
  const Eigen::ArrayXd& v = key == "params" ? d.params : d.tokens;
  const double top = v.maxCoeff();
  MixSplit s;
  for (Eigen::Index r = 0; r < v.size(); ++r) (v[r] == top ? s.val : s.train).push_back(r);
  if (s.train.empty()) throw InputError(fmt::format("every row has the same {}: nothing to extrapolate from", key));
  s.how = fmt::format("extrapolation: fit on {} < {:g}, evaluate on {} = {:g}", key, top, key, top);
  return s;
}

}  // namespace icmlkit::fit
