#include "rank/exact.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::rank {

SubsetPosterior::SubsetPosterior(const Eigen::MatrixXd& logw) : n_(static_cast<int>(logw.rows())), logw_(logw) {
  if (n_ < 1 || logw.cols() != n_) throw InputError("the subset DP needs a square [items, ranks] weight matrix");
  if (n_ > subset_dp_max_n)
    throw InputError(fmt::format("exact DP over item subsets is limited to n <= {} items (n = {})", subset_dp_max_n, n_));
  // Scale each rank column by its largest weight so the sums stay in range; log Z adds them back.
  w_.resize(n_, n_);
  double shift = 0;
  for (int r = 0; r < n_; ++r) {
    const double m = logw.col(r).maxCoeff();
    shift += m;
    w_.col(r) = (logw.col(r).array() - m).exp();
  }
  const std::size_t full = std::size_t{1} << n_;
  fwd_.assign(full, 0.0);
  fwd_[0] = 1.0;
  for (std::size_t s = 1; s < full; ++s) {
    const int r = std::popcount(s) - 1;
    double acc = 0;
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      acc += fwd_[s ^ (std::size_t{1} << i)] * w_(i, r);
    }
    fwd_[s] = acc;
  }
  log_norm_ = std::log(fwd_[full - 1]) + shift;
}

Eigen::MatrixXd SubsetPosterior::marginals() const {
  const std::size_t full = std::size_t{1} << n_;
  std::vector<double> bwd(full, 0.0);
  bwd[full - 1] = 1.0;
  for (std::size_t s = full - 1; s-- > 0;) {
    const int r = std::popcount(s);
    double acc = 0;
    for (std::size_t rest = ~s & (full - 1); rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      acc += w_(i, r) * bwd[s | (std::size_t{1} << i)];
    }
    bwd[s] = acc;
  }
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(n_, n_);
  for (std::size_t s = 0; s < full - 1; ++s) {
    const int r = std::popcount(s);
    if (fwd_[s] == 0) continue;
    for (std::size_t rest = ~s & (full - 1); rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      p(i, r) += fwd_[s] * w_(i, r) * bwd[s | (std::size_t{1} << i)];
    }
  }
  return p / fwd_[full - 1];
}

Perm SubsetPosterior::sample(Rng& rng) const {
  Perm r(static_cast<std::size_t>(n_));
  std::size_t s = (std::size_t{1} << n_) - 1;
  for (int k = n_ - 1; k >= 0; --k) {
    // P(item i takes rank k | items S hold ranks 0..k) ∝ f(S \ i) w(i, k).
    double u = rng.uniform() * fwd_[s];
    int pick = -1;
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      pick = i;
      u -= fwd_[s ^ (std::size_t{1} << i)] * w_(i, k);
      if (u < 0) break;
    }
    r[static_cast<std::size_t>(pick)] = k;
    s ^= std::size_t{1} << pick;
  }
  return r;
}

double SubsetPosterior::log_prob(const Perm& r) const {
  double s = 0;
  for (int i = 0; i < n_; ++i) s += logw_(i, r[static_cast<std::size_t>(i)]);
  return s - log_norm_;
}

Eigen::MatrixXd itemwise_log_weights(const RankMatrix& ranks, double alpha, Metric m) {
  if (!is_itemwise(m)) throw InputError(fmt::format("the {} distance does not split over items", metric_name(m)));
  const int n = static_cast<int>(ranks.cols());
  Eigen::MatrixXd c = Eigen::MatrixXd::Zero(n, n);
  for (Eigen::Index j = 0; j < ranks.rows(); ++j)
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < n; ++r) c(i, r) += item_distance(ranks(j, i), r, m);
  return -(alpha / n) * c;
}

}  // namespace icmlkit::rank
