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

int greedy_token(const float* logits, int vocab) {
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

double greedy_probability(const float* logits, int vocab, int best) {
  const double mx = logits[best];
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return 1.0 / sum;
}

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
  if (cfg_.temperature == 0.0) return greedy_token(logits, vocab);
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

double TokenDist::prob(int id) const {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return p[i];
  return 0.0;
}

void Sampler::distribution(const float* logits, int vocab, TokenDist& out) const {
  if (cfg_.temperature == 0.0) {
    out.ids.assign(1, greedy_token(logits, vocab));
    out.p.assign(1, 1.0);
    return;
  }
  const int k = cfg_.top_k > 0 ? std::min(cfg_.top_k, vocab) : vocab;
  out.ids = top_ids(logits, vocab, k);
  out.p.resize(k);
  const double mx = logits[out.ids[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) { out.p[i] = std::exp((double(logits[out.ids[i]]) - mx) / cfg_.temperature); sum += out.p[i]; }
  int keep = k;
  if (cfg_.top_p < 1.0) {
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      cum += out.p[i] / sum;
      if (cum >= cfg_.top_p) { keep = i + 1; break; }
    }
  }
  out.ids.resize(keep);
  out.p.resize(keep);
  double total = 0.0;
  for (double v : out.p) total += v;
  for (double& v : out.p) v /= total;
}

int Sampler::draw(const TokenDist& dist) {
  double u = rng_.uniform();
  for (std::size_t i = 0; i < dist.ids.size(); ++i) {
    u -= dist.p[i];
    if (u < 0.0) return dist.ids[i];
  }
  // Rounding left u >= 0: the last id with positive mass.
  for (std::size_t i = dist.ids.size(); i-- > 0;)
    if (dist.p[i] > 0.0) return dist.ids[i];
  return dist.ids.front();
}

}  // namespace icmlkit::lm
