// kv/obc_score: OBCache's value, key and joint scores against the output change computed directly
// in double (value pruning exactly, key and joint pruning to first order by a central difference
// along the removal), the accumulated-attention special case bit for bit, and the per-slot scores
// of a prefill on a tiny model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kv/obc_score.hpp"
#include "kv/policy.hpp"
#include "kv/prefill_evict.hpp"
#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;

namespace {

/// One head's attention in double: W query rows over n keys, row i attending keys < n - W + i + 1
/// (causal, the window at the end), with keys scaled by (1 - tk) and value j by (1 - tv) for key j.
struct Head {
  int W = 5, n = 11, hd = 4;
  std::vector<double> q, k, v;
  explicit Head(std::uint64_t seed) {
    Rng rng(seed);
    q.resize(std::size_t(W) * hd);
    k.resize(std::size_t(n) * hd);
    v.resize(std::size_t(n) * hd);
    for (auto& x : q) x = 1.5 * rng.normal();
    for (auto& x : k) x = rng.normal();
    for (auto& x : v) x = rng.normal();
  }
  int attended(int i) const { return n - W + i + 1; }
  /// Outputs o [W, hd] with token j's key scaled by (1 - tk) and its value by (1 - tv).
  std::vector<double> outputs(int j, double tk, double tv, std::vector<double>* A = nullptr, std::vector<double>* z = nullptr) const {
    std::vector<double> o(std::size_t(W) * hd, 0.0);
    if (A) A->assign(std::size_t(W) * n, 0.0);
    if (z) z->assign(std::size_t(W) * n, 0.0);
    for (int i = 0; i < W; ++i) {
      const int m = attended(i);
      std::vector<double> s(m);
      double mx = -1e300;
      for (int t = 0; t < m; ++t) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += q[std::size_t(i) * hd + e] * k[std::size_t(t) * hd + e] * (t == j ? 1 - tk : 1.0);
        s[t] = d / std::sqrt(double(hd));
        if (z) (*z)[std::size_t(i) * n + t] = s[t];
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int t = 0; t < m; ++t) {
        const double a = s[t] / sum;
        if (A) (*A)[std::size_t(i) * n + t] = a;
        for (int e = 0; e < hd; ++e) o[std::size_t(i) * hd + e] += a * v[std::size_t(t) * hd + e] * (t == j ? 1 - tv : 1.0);
      }
    }
    return o;
  }
  /// sum_i ||d o_i / dt||^2 along (tk, tv) = t (dk, dv), by a central difference.
  double first_order_change(int j, double dk, double dv) const {
    const double h = 1e-6;
    const auto p = outputs(j, h * dk, h * dv), m = outputs(j, -h * dk, -h * dv);
    double acc = 0;
    for (std::size_t x = 0; x < p.size(); ++x) acc += std::pow((p[x] - m[x]) / (2 * h), 2);
    return acc;
  }
};

/// A tiny model with grouped-query attention (4 query heads over 2 KV heads).
lm::ModelConfig gqa_config(int vocab) {
  lm::ModelConfig c;
  c.vocab_size = vocab;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.n_ctx = 128;
  return c;
}

std::vector<float> to_float(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

/// The scores of every key of `h` under `s`, from float copies of the double attention.
std::vector<double> scores_of(const Head& h, const kv::ObcScore& s) {
  std::vector<double> A, z;
  const auto o = h.outputs(-1, 0, 0, &A, &z);
  const auto Af = to_float(A), zf = to_float(z), Vf = to_float(h.v), Of = to_float(o);
  std::vector<double> out(h.n, 0.0);
  kv::add_head_scores(s, Af.data(), zf.data(), h.W, h.n, h.n, Vf.data(), Of.data(), h.hd, out.data());
  return out;
}

}  // namespace

TEST_CASE("kv obc: value, key and joint scores equal the output change of removing the token") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const Head h(seed);
    // The truth uses the float-rounded tensors the scores see: compare at float precision.
    const auto sv = scores_of(h, kv::ObcScore::value_only());
    const auto sk = scores_of(h, kv::ObcScore::key_only());
    const auto skv = scores_of(h, kv::ObcScore::joint());
    for (int j = 0; j < h.n; ++j) {
      CAPTURE(seed);
      CAPTURE(j);
      // Value pruning is linear in v_j: the change is exactly t * A_ij v_j.
      const double want_v = h.first_order_change(j, 0, 1);
      const double want_k = h.first_order_change(j, 1, 0);
      const double want_kv = h.first_order_change(j, 1, 1);
      CHECK(sv[j] == doctest::Approx(want_v).epsilon(1e-5));
      CHECK(sk[j] == doctest::Approx(want_k).epsilon(1e-4));
      CHECK(skv[j] == doctest::Approx(want_kv).epsilon(1e-4));
    }
    // Without the cross term the joint score is the sum of the other two.
    kv::ObcScore nc = kv::ObcScore::joint();
    nc.cross = false;
    const auto snc = scores_of(h, nc);
    for (int j = 0; j < h.n; ++j) CHECK(snc[j] == doctest::Approx(sv[j] + sk[j]).epsilon(1e-12));
  }
}

TEST_CASE("kv obc: p = 1 without the value norm is accumulated attention, bit for bit") {
  const Head h(7);
  std::vector<double> A, z;
  const auto o = h.outputs(-1, 0, 0, &A, &z);
  const auto Af = to_float(A);
  const auto got = scores_of(h, kv::ObcScore::attention());
  for (int j = 0; j < h.n; ++j) {
    double acc = 0;
    for (int i = 0; i < h.W; ++i) acc += double(Af[std::size_t(i) * h.n + j]);
    CHECK(got[j] == acc);
  }
  // The reference's p = 1 key term reuses sum |v| where ||v||^2 belongs: it differs.
  kv::ObcScore consistent{true, true, true, 1, true, false}, reference = consistent;
  reference.reference_value_norm = true;
  const auto a = scores_of(h, consistent), b = scores_of(h, reference);
  int differ = 0;
  for (int j = 0; j < h.n; ++j) differ += a[j] != b[j];
  CHECK(differ > 0);
  CHECK_THROWS_AS((kv::ObcScore{true, false, false, 3, true, false}.validate()), UsageError);
  CHECK_THROWS_AS((kv::ObcScore{false, false, false, 2, true, false}.validate()), UsageError);
  CHECK(kv::parse_gqa_reduce("max") == kv::GqaReduce::max);
  CHECK_THROWS_AS(kv::parse_gqa_reduce("mean"), UsageError);
}

// On a prefill of a tiny GQA model: the per-slot scores from the engine's attention records of
// the last W rows equal the per-head sums of the records' probabilities (accumulated attention),
// summed or maxed over each KV group; every slot gets a score and slots no row attends get 0.
TEST_CASE("kv obc: per-slot scores of a prefill from the engine's attention records") {
  const lm::ModelConfig c = gqa_config(40);
  const lm::Model m = lm::random_model(c, 5, 0.3);
  std::vector<int> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back((7 * i + 3) % c.vocab_size);
  lm::KvCache cache(c);
  lm::ForwardOptions o;
  const int W = 4, n = static_cast<int>(prompt.size());
  for (int r = n - W; r < n; ++r) o.attn_rows.push_back(r);
  const auto res = lm::forward(m, cache, lm::Batch::causal(prompt, 0), o);
  cache.commit_all();
  std::vector<int> row_slot(n);
  for (int r = 0; r < n; ++r) row_slot[r] = r;
  const auto sum = kv::slot_scores(kv::ObcScore::attention(), kv::GqaReduce::sum, cache, c.n_heads, res.attention, row_slot);
  const auto mx = kv::slot_scores(kv::ObcScore::attention(), kv::GqaReduce::max, cache, c.n_heads, res.attention, row_slot);
  REQUIRE(sum.size() == std::size_t(c.n_layers) * c.n_kv_heads);
  for (int l = 0; l < c.n_layers; ++l)
    for (int g = 0; g < c.n_kv_heads; ++g) {
      std::vector<std::vector<double>> per_head(2, std::vector<double>(n, 0.0));
      for (const auto& rec : res.attention)
        if (rec.layer == l && rec.head / 2 == g)
          for (std::size_t t = 0; t < rec.keys.size(); ++t) per_head[rec.head % 2][-(rec.keys[t] + 1)] += rec.probs[t];
      const auto& s = sum[std::size_t(l) * c.n_kv_heads + g];
      const auto& x = mx[std::size_t(l) * c.n_kv_heads + g];
      REQUIRE(s.size() == std::size_t(n));
      for (int j = 0; j < n; ++j) {
        CHECK(s[j] == doctest::Approx(per_head[0][j] + per_head[1][j]).epsilon(1e-12));
        CHECK(x[j] == doctest::Approx(std::max(per_head[0][j], per_head[1][j])).epsilon(1e-12));
      }
    }
  // The joint score is positive where the window attends and finite everywhere.
  const auto joint = kv::slot_scores(kv::ObcScore::joint(), kv::GqaReduce::sum, cache, c.n_heads, res.attention, row_slot);
  for (const auto& s : joint)
    for (double v : s) CHECK(std::isfinite(v));
  CHECK(joint[0][0] > 0);
}

// The Compressor with an OBCache score in place of accumulated attention: with the attention
// score itself (p = 1, no value norm) each policy keeps exactly what its heuristic keeps (two code
// paths, one result), and the joint score keeps other slots; preset names parse as documented.
TEST_CASE("kv obc: compressor presets, and the attention score reproduces the heuristics") {
  const lm::ModelConfig c = gqa_config(50);
  const lm::Model m = lm::random_model(c, 9, 0.4);
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((11 * i + 5) % c.vocab_size);
  const int n = static_cast<int>(prompt.size());
  std::vector<int> row_slot(n);
  for (int r = 0; r < n; ++r) row_slot[r] = r;
  for (const char* base : {"h2o", "snapkv", "tova"}) {
    CAPTURE(base);
    kv::PolicyConfig heur;
    kv::apply_preset(base, heur);
    heur.budget = 12;
    heur.window = 4;
    kv::PolicyConfig same = heur;
    same.obc = true;  // the OBCache path with the accumulated-attention score
    kv::PolicyConfig joint = heur;
    kv::apply_preset(std::string(base) + "+obcVK", joint);
    CHECK(joint.obc);
    CHECK(joint.score.key);
    kv::Compressor a(c, heur), b(c, same), j(c, joint);
    lm::KvCache cache(c);
    lm::ForwardOptions o;
    o.attn_rows = a.prefill_rows(n);
    const auto res = lm::forward(m, cache, lm::Batch::causal(prompt, 0), o);
    cache.commit_all();
    a.commit(res.attention, row_slot, true);
    b.commit(res.attention, row_slot, true, &cache);
    j.commit(res.attention, row_slot, true, &cache);
    CHECK_THROWS_AS(kv::Compressor(c, joint).commit(res.attention, row_slot, true), InputError);
    int differ = 0;
    for (int lh = 0; lh < c.n_layers * c.n_kv_heads; ++lh) {
      CHECK(a.kept(lh) == b.kept(lh));
      CHECK(static_cast<int>(j.kept(lh).size()) == heur.budget);
      CHECK(std::is_sorted(j.kept(lh).begin(), j.kept(lh).end()));
      differ += j.kept(lh) != a.kept(lh);
    }
    CHECK(differ > 0);
  }
  kv::PolicyConfig p;
  kv::apply_preset("snapkv+obcVK_no_cross_p1", p);
  CHECK(p.policy == kv::Policy::snapkv);
  CHECK_FALSE(p.score.cross);
  CHECK(p.score.p == 1);
  kv::apply_preset("tova+obcK", p);
  CHECK(p.policy == kv::Policy::tova);
  CHECK_FALSE(p.score.value);
  CHECK_THROWS_AS(kv::apply_preset("streaming+obcV", p), UsageError);
  CHECK_THROWS_AS(kv::apply_preset("h2o+obcV_no_cross", p), UsageError);
  CHECK_THROWS_AS(kv::apply_preset("h2o+obc", p), UsageError);
  CHECK_THROWS_AS(kv::apply_preset("h2o+obcK_p1", p), UsageError);  // p is the value term's power
  CHECK(kv::preset_names().size() == 22);
}

// Prefill-only eviction (the paper's protocol): the recent slots are always kept, the budget is
// exact, the rest are the top scores (max-pooled for snapkv), tova keeps no recent slots.
TEST_CASE("kv obc: prefill keep sets hold the recent slots and the top scores, exactly the budget") {
  const int n = 20, recent = 4;
  std::vector<double> sc(n);
  for (int j = 0; j < n; ++j) sc[j] = (j * 7) % 11;  // 0, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0, ...
  const auto h2o = kv::parse_prefill_method("h2o+obcVK");
  const auto k = kv::prefill_keep(h2o, sc, n, 8, recent);
  CHECK(k == std::vector<std::int32_t>{3, 6, 9, 14, 16, 17, 18, 19});  // scores 10, 9, 8, 10 among slots < 16, then the 4 recent
  const auto tova = kv::parse_prefill_method("tova");
  const auto kt = kv::prefill_keep(tova, sc, n, 3, recent);
  CHECK(kt == std::vector<std::int32_t>{3, 6, 14});  // slots 3 and 14 score 10; of the 9s, slot 6 before 17
  const auto snap = kv::parse_prefill_method("snapkv");
  const auto ks = kv::prefill_keep(snap, sc, n, 6, recent, 3);
  CHECK(ks.size() == 6u);
  CHECK(std::is_sorted(ks.begin(), ks.end()));
  for (int s = n - recent; s < n; ++s) CHECK(std::binary_search(ks.begin(), ks.end(), s));
  const auto stream = kv::parse_prefill_method("streaming");
  CHECK(kv::prefill_keep(stream, sc, n, 7, recent) == std::vector<std::int32_t>{0, 1, 2, 3, 17, 18, 19});
  CHECK(kv::prefill_keep(h2o, sc, n, 30, recent).size() == std::size_t(n));
  CHECK_THROWS_AS(kv::prefill_keep(h2o, sc, n, 4, recent), UsageError);
  CHECK(kv::score_rows(h2o, n, recent) == std::vector<int>{16, 17, 18, 19});
  CHECK(kv::score_rows(tova, n, recent) == std::vector<int>{19});
  CHECK(kv::score_rows(stream, n, recent).empty());
}

// The attention-output error of eviction, reconstructed from the full cache's attention records,
// against the engine itself: at layer 0 the evicted cache's forward sees the same inputs, so its
// attention outputs are o' exactly (up to float rounding); keeping everything gives no error.
TEST_CASE("kv obc: evicted output error equals a forward on the evicted cache at layer 0") {
  const lm::ModelConfig c = gqa_config(40);
  const lm::Model m = lm::random_model(c, 9, 0.5);
  std::vector<int> prompt, cont{5, 17, 33};
  for (int i = 0; i < 14; ++i) prompt.push_back((5 * i + 1) % c.vocab_size);
  const int n = static_cast<int>(prompt.size()), G = static_cast<int>(cont.size()), group = c.n_heads / c.n_kv_heads;
  lm::KvCache cache(c);
  lm::forward(m, cache, lm::Batch::causal(prompt, 0));
  cache.commit_all();
  std::vector<std::vector<std::int32_t>> keep(std::size_t(c.n_layers) * c.n_kv_heads, {0, 2, 5, 7, 9, 12, 13}),
      all(keep.size(), std::vector<std::int32_t>(n));
  for (auto& a : all) std::iota(a.begin(), a.end(), 0);
  lm::ForwardOptions o;
  for (int r = 0; r < G; ++r) o.attn_rows.push_back(r);
  lm::KvCache full = cache, ev = kv::evicted_copy(cache, keep);
  const auto rf = lm::forward(m, full, lm::Batch::causal(cont, n), o);
  const auto re = lm::forward(m, ev, lm::Batch::causal(cont, n), o);
  full.commit_all();
  std::vector<int> row_slot{n, n + 1, n + 2};
  int checked = 0;
  for (const auto& rec : rf.attention) {
    const int g = rec.head / group;
    CHECK(kv::evicted_output_error(rec, row_slot, full, g, all[g], n).relative() < 1e-6);
    if (rec.layer != 0) continue;
    const auto same = std::find_if(re.attention.begin(), re.attention.end(),
                                   [&](const lm::AttentionRecord& e) { return e.layer == 0 && e.row == rec.row && e.head == rec.head; });
    REQUIRE(same != re.attention.end());
    double err = 0, norm = 0;
    for (std::size_t d = 0; d < rec.output.size(); ++d) {
      err += std::pow(double(same->output[d]) - rec.output[d], 2);
      norm += std::pow(double(rec.output[d]), 2);
    }
    const double want = std::sqrt(err / norm);
    CHECK(want > 1e-3);  // the eviction changes the output
    const kv::OutputError e = kv::evicted_output_error(rec, row_slot, full, g, keep[g], n);
    CHECK(e.relative() == doctest::Approx(want).epsilon(1e-4));
    CHECK(e.sq_norm == doctest::Approx(norm).epsilon(1e-12));
    ++checked;
  }
  CHECK(checked == G * c.n_heads);
  // Keeping no key of the prompt leaves the row's own key; keeping nothing at all gives o' = 0.
  const kv::OutputError none = kv::evicted_output_error(rf.attention[0], row_slot, full, 0, {}, n + 100);
  CHECK(none.sq_error == doctest::Approx(none.sq_norm).epsilon(1e-12));
  // A key that maps to no slot is refused.
  CHECK_THROWS_AS(kv::evicted_output_error(rf.attention[0], {}, full, 0, keep[0], n), InputError);
}
