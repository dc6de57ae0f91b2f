// Next-token sampling: greedy, temperature, top-k, top-p (nucleus), seeded.
#pragma once

#include <cstdint>
#include <vector>

#include "util/rng.hpp"

namespace icmlkit::lm {

/// Sampling settings.  temperature = 0 means greedy (argmax, lowest id on ties).
struct SamplerConfig {
  double temperature = 0.0;  ///< >= 0
  int top_k = 0;             ///< keep the k most likely tokens; 0 = all
  double top_p = 1.0;        ///< keep the smallest set with probability >= top_p; in (0, 1]
  std::uint64_t seed = 0;
  /// Throws UsageError for a negative temperature, negative top_k or top_p outside (0, 1].
  void validate() const;
};

/// A next-token distribution after temperature / top-k / top-p: the kept ids in descending
/// logit order (ties: lower id first) and their probabilities, summing to 1.
struct TokenDist {
  std::vector<int> ids;
  std::vector<double> p;
  /// Probability of `id` (0 when not kept).
  double prob(int id) const;
};

/// Draws token ids from logits with a private seeded generator (same seed, same logits ->
/// same ids on every machine).
class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);
  /// A token id from logits [vocab].  Ties are broken toward the lowest id.
  int sample(const float* logits, int vocab);
  const SamplerConfig& config() const noexcept { return cfg_; }
  /// The distribution sample() draws from: greedy is a point mass at the argmax.
  void distribution(const float* logits, int vocab, TokenDist& out) const;
  /// A uniform number in [0, 1) from this sampler's generator (speculative acceptance tests).
  double uniform() { return rng_.uniform(); }
  /// Draws an id from `dist` with this sampler's generator (inverse CDF, one uniform).
  int draw(const TokenDist& dist);

 private:
  SamplerConfig cfg_;
  Rng rng_;
  std::vector<int> order_;
  std::vector<double> probs_;
};

/// Greedy token of logits [vocab]: the largest logit, the lowest id on ties (the rule of
/// dm::greedy_better, which the CUDA engine's argmax reduction uses).
int greedy_token(const float* logits, int vocab);

/// softmax(logits)[best] for the greedy token `best` = greedy_token(logits, vocab):
/// 1 / sum_i exp(l_i - l_best), in double (self-speculative decoding's draft confidence).
double greedy_probability(const float* logits, int vocab, int best);

/// log softmax(logits)[id], computed in double.
double log_softmax_at(const float* logits, int vocab, int id);

/// The k largest logits' ids, descending (ties: lower id first).
std::vector<int> top_ids(const float* logits, int vocab, int k);

}  // namespace icmlkit::lm
