#include "cde/data.hpp"

#include <cmath>
#include <numeric>

#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::cde {

Dataset from_ts(const io::TsData& d, const TimeOptions& to) {
  Dataset out;
  out.class_names = d.class_names;
  out.labels = d.labels;
  const int off = to.time_channel ? 1 : 0;
  out.channels = d.dimensions + off;
  for (const auto& m : d.series) {
    Series s;
    s.time_channel = to.time_channel;
    const Eigen::Index L = m.rows();
    s.t.resize(static_cast<size_t>(L));
    s.x.resize(L, out.channels);
    for (Eigen::Index i = 0; i < L; ++i) {
      s.t[static_cast<size_t>(i)] = static_cast<double>(i) * to.dt;
      if (off) s.x(i, 0) = s.t[static_cast<size_t>(i)];
    }
    s.x.rightCols(d.dimensions) = m;
    out.series.push_back(std::move(s));
  }
  return out;
}

void remap_labels(Dataset& d, const std::vector<std::string>& names, const std::string& where) {
  std::vector<int> map(d.class_names.size(), -1);
  for (size_t i = 0; i < d.class_names.size(); ++i)
    for (size_t j = 0; j < names.size(); ++j)
      if (d.class_names[i] == names[j]) map[i] = static_cast<int>(j);
  for (size_t n = 0; n < d.labels.size(); ++n) {
    const int m = map[static_cast<size_t>(d.labels[n])];
    if (m < 0)
      throw InputError("class label '" + d.class_names[static_cast<size_t>(d.labels[n])] + "' is not one the model was trained on",
                       where + ", case " + std::to_string(n + 1));
    d.labels[n] = m;
  }
  d.class_names = names;
}

Dataset spirals(int n, int length, std::uint64_t seed) {
  constexpr double pi = 3.14159265358979323846;
  Rng rng(seed);
  Dataset d;
  d.channels = 3;
  d.class_names = {"anticlockwise", "clockwise"};
  std::vector<Series> all;
  std::vector<int> lab;
  for (int k = 0; k < n; ++k) {
    Series s;
    s.time_channel = true;
    s.t.resize(static_cast<size_t>(length));
    s.x.resize(length, 3);
    const double start = rng.uniform() * 2 * pi;
    for (int i = 0; i < length; ++i) {
      const double t = 4 * pi * i / (length - 1);
      s.t[static_cast<size_t>(i)] = t;
      double x = std::cos(start + t) / (1 + 0.5 * t);
      if (k < n / 2) x = -x;
      s.x(i, 0) = t;
      s.x(i, 1) = x + 0.01 * rng.normal();
      s.x(i, 2) = std::sin(start + t) / (1 + 0.5 * t) + 0.01 * rng.normal();
    }
    all.push_back(std::move(s));
    lab.push_back(k < n / 2 ? 1 : 0);
  }
  std::vector<size_t> perm(all.size());
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  for (size_t i : perm) {
    d.series.push_back(std::move(all[i]));
    d.labels.push_back(lab[i]);
  }
  return d;
}

void drop_observations(Dataset& d, double rate, std::uint64_t seed) {
  if (!(rate >= 0 && rate < 1)) throw UsageError("drop rate must be in [0, 1)", "--drop-rate");
  if (rate == 0) return;
  Rng rng(seed);
  for (auto& s : d.series) {
    const Eigen::Index L = s.x.rows();
    if (L < 3) continue;
    std::vector<Eigen::Index> idx(static_cast<size_t>(L - 2));
    std::iota(idx.begin(), idx.end(), 1);
    const auto k = static_cast<size_t>(rate * static_cast<double>(L - 2));
    for (size_t i = 0; i < k; ++i) std::swap(idx[i], idx[i + rng.below(idx.size() - i)]);  // partial Fisher-Yates
    for (size_t i = 0; i < k; ++i)
      for (Eigen::Index c = s.time_channel ? 1 : 0; c < s.x.cols(); ++c) s.x(idx[i], c) = NAN;
  }
}

Standardizer Standardizer::fit(const Dataset& d) {
  Standardizer st;
  st.mean.assign(static_cast<size_t>(d.channels), 0.0);
  st.std.assign(static_cast<size_t>(d.channels), 1.0);
  const bool tc = !d.series.empty() && d.series[0].time_channel;
  for (int c = tc ? 1 : 0; c < d.channels; ++c) {
    double sum = 0, sq = 0;
    long n = 0;
    for (const auto& s : d.series)
      for (Eigen::Index i = 0; i < s.x.rows(); ++i)
        if (std::isfinite(s.x(i, c))) { sum += s.x(i, c); ++n; }
    if (n < 2) throw InputError("channel " + std::to_string(c) + " has fewer than 2 observed training values");
    const double mu = sum / static_cast<double>(n);
    for (const auto& s : d.series)
      for (Eigen::Index i = 0; i < s.x.rows(); ++i)
        if (std::isfinite(s.x(i, c))) sq += (s.x(i, c) - mu) * (s.x(i, c) - mu);
    st.mean[static_cast<size_t>(c)] = mu;
    st.std[static_cast<size_t>(c)] = std::sqrt(sq / static_cast<double>(n - 1)) + 1e-8;
  }
  return st;
}

void Standardizer::apply(Dataset& d) const {
  for (auto& s : d.series)
    for (Eigen::Index c = s.time_channel ? 1 : 0; c < s.x.cols(); ++c)
      s.x.col(c) = (s.x.col(c).array() - mean[static_cast<size_t>(c)]) / std[static_cast<size_t>(c)];
}

void split(const Dataset& all, double fraction, std::uint64_t seed, Dataset& train, Dataset& val) {
  train = Dataset{{}, {}, all.class_names, all.channels};
  val = train;
  std::vector<size_t> perm(all.series.size());
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  const auto nval = static_cast<size_t>(std::floor(fraction * static_cast<double>(perm.size())));
  for (size_t k = 0; k < perm.size(); ++k) {
    Dataset& dst = k < perm.size() - nval ? train : val;
    dst.series.push_back(all.series[perm[k]]);
    dst.labels.push_back(all.labels[perm[k]]);
  }
}

}  // namespace icmlkit::cde
