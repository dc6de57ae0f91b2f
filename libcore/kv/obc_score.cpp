#include "kv/obc_score.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::kv {

void ObcScore::validate() const {
  if (p != 1 && p != 2) throw UsageError(fmt::format("the score's power p must be 1 or 2, got {}", p), "--p");
  if (!value && !key) throw UsageError("a score needs the value term, the key term or both");
}

void add_head_scores(const ObcScore& s, const float* A, const float* z, int W, int n, int ld, const float* V, const float* O,
                     int hd, double* out) {
  std::vector<double> onorm(W);
  for (int i = 0; i < W; ++i) {
    double acc = 0;
    for (int e = 0; e < hd; ++e) acc += double(O[std::size_t(i) * hd + e]) * O[std::size_t(i) * hd + e];
    onorm[i] = acc;
  }
  const bool cross = s.value && s.key && s.cross;
  for (int j = 0; j < n; ++j) {
    const float* v = V + std::size_t(j) * hd;
    double vsq = 0, vabs = 0;
    for (int e = 0; e < hd; ++e) {
      vsq += double(v[e]) * v[e];
      vabs += std::abs(double(v[e]));
    }
    const double vnorm_p = s.p == 1 ? vabs : vsq;  // sum_d |v_jd|^p
    // ||v_j||^2 in the key and cross terms (the reference reuses S_V's norm there).
    const double vv = s.reference_value_norm && s.value && s.vnorm ? vnorm_p : vsq;
    double attn = 0, key = 0, cr = 0;
    for (int i = 0; i < W; ++i) {
      const double a = A[std::size_t(i) * ld + j];
      if (a == 0.0) continue;  // keys a row does not attend (and their arbitrary logits)
      if (s.value) attn += s.p == 1 ? a : a * a;
      if (s.key || cross) {
        const double zz = z[std::size_t(i) * ld + j];
        double vo = 0;
        const float* o = O + std::size_t(i) * hd;
        for (int e = 0; e < hd; ++e) vo += double(v[e]) * o[e];
        if (s.key) {
          const double az = a * zz;
          key += az * az * (vv + onorm[i] - 2.0 * vo);
        }
        if (cross) cr += 2.0 * a * a * zz * (vv - vo);
      }
    }
    double score = 0;
    if (s.value) score += s.vnorm ? attn * vnorm_p : attn;
    if (s.key) score += key;
    score += cr;
    out[j] += score;
  }
}

GqaReduce parse_gqa_reduce(const std::string& name, const std::string& flag) {
  if (name == "sum") return GqaReduce::sum;
  if (name == "max") return GqaReduce::max;
  throw UsageError("unknown reduction '" + name + "' (sum or max)", flag);
}

std::vector<std::vector<double>> slot_scores(const ObcScore& s, GqaReduce reduce, const lm::KvCache& cache, int n_heads,
                                             const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot) {
  s.validate();
  const int L = cache.n_layers(), nkv = cache.n_kv_heads(), hd = cache.head_dim();
  if (nkv <= 0 || n_heads % nkv != 0) throw InputError("query heads must be a multiple of the KV heads");
  const int group = n_heads / nkv;
  std::vector<std::vector<double>> out(std::size_t(L) * nkv);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < nkv; ++h) out[std::size_t(l) * nkv + h].assign(cache.size(l, h), 0.0);
  // Per (layer, query head): the window's rows, as dense [W, n] over the KV head's slots.
  std::vector<std::vector<const lm::AttentionRecord*>> by_head(std::size_t(L) * n_heads);
  for (const auto& rec : records) {
    if (rec.layer < 0 || rec.layer >= L || rec.head < 0 || rec.head >= n_heads)
      throw InputError(fmt::format("attention record of layer {} head {} outside the cache", rec.layer, rec.head));
    if (rec.row < 0 || rec.row >= static_cast<int>(row_slot.size()) || row_slot[rec.row] < 0) continue;  // not committed
    by_head[std::size_t(rec.layer) * n_heads + rec.head].push_back(&rec);
  }
  std::vector<float> A, z, V, O;
  std::vector<double> head_score;
  for (int l = 0; l < L; ++l)
    for (int qh = 0; qh < n_heads; ++qh) {
      const auto& recs = by_head[std::size_t(l) * n_heads + qh];
      if (recs.empty()) continue;
      const int g = qh / group, n = cache.size(l, g), W = static_cast<int>(recs.size());
      A.assign(std::size_t(W) * n, 0.0f);
      z.assign(A.size(), 0.0f);
      O.resize(std::size_t(W) * hd);
      for (int i = 0; i < W; ++i) {
        const auto& rec = *recs[i];
        for (std::size_t t = 0; t < rec.keys.size(); ++t) {
          const std::int32_t key = rec.keys[t];
          const int slot = key >= 0 ? key : (-(key + 1) < static_cast<int>(row_slot.size()) ? row_slot[-(key + 1)] : -1);
          if (slot < 0 || slot >= n) continue;
          A[std::size_t(i) * n + slot] = rec.probs[t];
          z[std::size_t(i) * n + slot] = rec.scores[t];
        }
        std::copy(rec.output.begin(), rec.output.end(), O.begin() + std::ptrdiff_t(i) * hd);
      }
      V.resize(std::size_t(n) * hd);
      for (int j = 0; j < n; ++j) std::copy_n(cache.value(l, g, j), hd, V.begin() + std::ptrdiff_t(j) * hd);
      head_score.assign(n, 0.0);
      add_head_scores(s, A.data(), z.data(), W, n, n, V.data(), O.data(), hd, head_score.data());
      auto& dst = out[std::size_t(l) * nkv + g];
      const bool first = qh % group == 0;
      for (int j = 0; j < n; ++j)
        dst[j] = reduce == GqaReduce::sum ? dst[j] + head_score[j] : (first ? head_score[j] : std::max(dst[j], head_score[j]));
    }
  return out;
}

}  // namespace icmlkit::kv
