#include "lm/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::lm {

void SamplerConfig::validate() const {
  if (!(temperature >= 0.0) || !std::isfinite(temperature)) throw UsageError("temperature must be >= 0", "--temperature");
  if (top_k < 0) throw UsageError("top-k must be >= 0", "--top-k");
  if (!(top_p > 0.0 && top_p <= 1.0)) throw UsageError("top-p must be in (0, 1]", "--top-p");
}

Sampler::Sampler(const SamplerConfig& config) : cfg_(config), rng_(config.seed) { cfg_.validate(); }

namespace {

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace

std::vector<int> top_ids(const float* logits, int vocab, int k) {
  k = std::max(0, std::min(k, vocab));
  std::vector<int> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  auto cmp = [&](int a, int b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), cmp);
  ids.resize(k);
  return ids;
}

double log_softmax_at(const float* logits, int vocab, int id) {
  double mx = logits[0];
  for (int i = 1; i < vocab; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return double(logits[id]) - mx - std::log(sum);
}

int Sampler::sample(const float* logits, int vocab) {
  if (cfg_.temperature == 0.0) return argmax(logits, vocab);
  // Candidates in descending logit order (ties: lower id first), cut to top-k.
  const int k = cfg_.top_k > 0 ? std::min(cfg_.top_k, vocab) : vocab;
  order_ = top_ids(logits, vocab, k);
  probs_.resize(k);
  const double mx = logits[order_[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) { probs_[i] = std::exp((double(logits[order_[i]]) - mx) / cfg_.temperature); sum += probs_[i]; }
  int keep = k;
  if (cfg_.top_p < 1.0) {
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      cum += probs_[i] / sum;
      if (cum >= cfg_.top_p) { keep = i + 1; break; }
    }
  }
  double total = 0.0;
  for (int i = 0; i < keep; ++i) total += probs_[i];
  double u = rng_.uniform() * total;
  for (int i = 0; i < keep; ++i) {
    u -= probs_[i];
    if (u < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace icmlkit::lm
