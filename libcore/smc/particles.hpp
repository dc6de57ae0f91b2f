// A weighted particle population: log-weights, effective sample size, resampling.
#pragma once

#include <Eigen/Core>

#include <vector>

#include "util/rng.hpp"

namespace icmlkit::smc {

/// N particles in R^d with unnormalised log-weights.
struct Population {
  Eigen::MatrixXd x;     ///< [N, d] particle positions
  Eigen::ArrayXd logw;   ///< [N] unnormalised log-weights

  /// Number of particles.
  Eigen::Index size() const { return x.rows(); }
  /// Normalised weights [N] (softmax of logw; uniform when every log-weight is -inf).
  Eigen::ArrayXd weights() const;
  /// Effective sample size 1 / sum w_i^2, in [1, N].
  double ess() const;
  /// Weighted mean of the rows of `f` [N, k] -> [k].
  Eigen::VectorXd weighted_mean(const Eigen::MatrixXd& f) const;
};

/// Resampling schemes.
enum class Resampling { multinomial, systematic };

/// Ancestor indices [N] drawn from normalised weights `w` (sum 1): multinomial (i.i.d.
/// draws) or systematic (one uniform, N evenly spaced points).  Both are unbiased: the
/// expected count of particle i is N w_i.
std::vector<Eigen::Index> resample_indices(const Eigen::ArrayXd& w, Resampling scheme, Rng& rng);

/// Replaces the population by its resampled copy and resets the log-weights to 0.
void resample(Population& pop, Resampling scheme, Rng& rng);

}  // namespace icmlkit::smc
