// decode/ and kv/: n-gram pool, Jacobi window, candidate trie and prompt lookup on hand-made
// sequences; compressor keep sets on hand-made attention; losslessness of every method and KV
// policy against a plain AR loop; sampling distributions against exact enumeration.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <map>

#include "decode/decoder.hpp"
#include "decode/ngram.hpp"
#include "kv/policy.hpp"
#include "lm/engine.hpp"
#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::decode;

namespace {

lm::Model small_model(int vocab, int n_ctx, double std, std::uint64_t seed) {
  lm::ModelConfig c;
  c.vocab_size = vocab;
  c.d_model = 36;  // head_dim 12: exercises the kernel's zero-padded tail
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 50;
  c.n_ctx = n_ctx;
  c.eos_id = -1;
  c.bos_id = -1;
  c.add_bos = false;
  return lm::random_model(c, seed, std);
}

/// The truth for greedy decoding: one row per forward call, argmax, commit.
std::vector<int> plain_ar(const lm::Model& m, const std::vector<int>& prompt, int n) {
  lm::KvCache cache(m.config);
  std::vector<int> out;
  int pos = 0;
  int tok = -1;
  for (int t : prompt) {
    lm::Batch b;
    b.add(t, pos++);
    auto fr = lm::forward(m, cache, b);
    cache.commit_all();
    tok = lm::top_ids(fr.logits.row(0), m.config.vocab_size, 1)[0];
  }
  while (static_cast<int>(out.size()) < n) {
    out.push_back(tok);
    if (pos >= m.config.n_ctx || static_cast<int>(out.size()) == n) break;
    lm::Batch b;
    b.add(tok, pos++);
    auto fr = lm::forward(m, cache, b);
    cache.commit_all();
    tok = lm::top_ids(fr.logits.row(0), m.config.vocab_size, 1)[0];
  }
  return out;
}

lm::AttentionRecord rec(int row, int layer, int head, std::vector<std::int32_t> keys, std::vector<float> probs) {
  lm::AttentionRecord r;
  r.row = row;
  r.layer = layer;
  r.head = head;
  r.keys = std::move(keys);
  r.probs = std::move(probs);
  return r;
}

}  // namespace

TEST_CASE("decode: n-gram pool keeps G per key, most recent first, refreshing duplicates") {
  NgramPool pool(2);
  pool.insert({5, 1, 2});
  pool.insert({5, 3, 4});
  pool.insert({6, 1, 1});
  CHECK(pool.lookup(5) == std::vector<std::vector<int>>{{5, 3, 4}, {5, 1, 2}});
  pool.insert({5, 1, 2});  // refresh: moves to the front, no duplicate
  CHECK(pool.lookup(5) == std::vector<std::vector<int>>{{5, 1, 2}, {5, 3, 4}});
  pool.insert({5, 9, 9});  // the least recent ({5,3,4}) is dropped
  CHECK(pool.lookup(5) == std::vector<std::vector<int>>{{5, 9, 9}, {5, 1, 2}});
  CHECK(pool.size() == 3);
  CHECK(pool.lookup(7).empty());
  CHECK_THROWS_AS(pool.insert({1}), InputError);
}

TEST_CASE("decode: lookahead window closes one n-gram per column and shifts a level") {
  Rng rng(1);
  LookaheadWindow w(3, 3, {10, 11, 12}, rng);  // W = 3, N = 3: two levels
  w.set_input(99);
  const std::vector<int> l0{w.token(0, 0), w.token(0, 1), w.token(0, 2)}, l1{w.token(1, 0), w.token(1, 1), w.token(1, 2)};
  CHECK(l0[0] == 99);
  for (int t : {l0[1], l0[2], l1[0], l1[1], l1[2]}) CHECK((t >= 10 && t <= 12));
  NgramPool pool(8);
  w.advance({7, 8, 9}, pool);
  CHECK(pool.size() <= 3);
  CHECK(pool.lookup(99) == std::vector<std::vector<int>>{{99, l1[0], 7}});
  for (int i = 0; i < 3; ++i) CHECK(w.token(0, i) == l1[i]);
  CHECK(w.token(1, 0) == 7);
  CHECK(w.token(1, 2) == 9);
}

TEST_CASE("decode: candidate trie shares duplicate prefixes and honours the depth limit") {
  CandidateTrie t;
  t.add({5, 6, 7}, 8);
  t.add({5, 6, 8}, 8);
  t.add({5, 6, 7}, 8);
  t.add({4, 1, 1, 1}, 2);
  CHECK(t.size() == 1 + 4 + 2);
  const int a = t.child(0, 5), b = t.child(a, 6);
  CHECK(t.nodes[b].depth == 2);
  CHECK(t.nodes[b].children.size() == 2);
  CHECK(t.child(t.child(0, 4), 1) > 0);
  CHECK(t.child(t.child(t.child(0, 4), 1), 1) == -1);
}

TEST_CASE("decode: prompt lookup proposes what followed the most recent match of the longest suffix") {
  CHECK(prompt_lookup({1, 2, 3, 4, 5, 1, 2, 3}, 3, 1, 10) == std::vector<int>{4, 5, 1, 2, 3});
  CHECK(prompt_lookup({1, 2, 3, 4, 5, 1, 2, 3}, 3, 1, 2) == std::vector<int>{4, 5});
  // No earlier [2, 7, 8]; [7, 8] last occurred at 3, followed by 2, 7, 8.
  CHECK(prompt_lookup({7, 8, 1, 7, 8, 2, 7, 8}, 3, 1, 10) == std::vector<int>{2, 7, 8});
  CHECK(prompt_lookup({7, 8, 1, 7, 8, 2, 7, 8}, 3, 3, 10).empty());
  CHECK(prompt_lookup({1, 2, 3}, 3, 1, 10).empty());
}

TEST_CASE("decode: streaming keeps sinks plus the most recent slots") {
  lm::ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  kv::PolicyConfig pc;
  pc.budget = 6;
  pc.sinks = 2;
  kv::Compressor comp(c, pc);
  comp.commit({}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, true);
  CHECK(comp.kept(0) == std::vector<std::int32_t>{0, 1, 6, 7, 8, 9});
  comp.commit({}, {-1, 10}, false);
  CHECK(comp.kept(0) == std::vector<std::int32_t>{0, 1, 7, 8, 9, 10});
  CHECK_THROWS_AS(comp.commit({}, {12}, false), InputError);  // slot 11 skipped
}

TEST_CASE("decode: h2o evicts the lowest accumulated attention, summed over the group's heads, never the recent slots") {
  lm::ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  kv::PolicyConfig pc;
  pc.policy = kv::Policy::h2o;
  pc.budget = 3;
  pc.recent = 1;
  kv::Compressor comp(c, pc);
  // Prefill of 4 rows; only row 3's attention is given: slot scores (both heads summed)
  // 0: 0.1+0.1, 1: 0.6+0.0, 2: 0.2+0.1, 3: 0.1+0.8.
  std::vector<lm::AttentionRecord> r{rec(3, 0, 0, {0, 1, 2, 3}, {0.1f, 0.6f, 0.2f, 0.1f}),
                                     rec(3, 0, 1, {0, 1, 2, 3}, {0.1f, 0.0f, 0.1f, 0.8f})};
  comp.commit(r, {0, 1, 2, 3}, true);
  CHECK(comp.kept(0) == std::vector<std::int32_t>{1, 2, 3});  // slot 0 (0.2) evicted
  // A decode row at slot 4 attending new-row keys: -(0 + 1) is itself.
  std::vector<lm::AttentionRecord> d{rec(0, 0, 0, {0, 1, 2, 3, -1}, {0, 0, 0.9f, 0, 0.1f}),
                                     rec(0, 0, 1, {0, 1, 2, 3, -1}, {0, 0, 0.0f, 0, 1.0f})};
  comp.commit(d, {4}, false);
  // Scores now 1: 0.6, 2: 1.2, 3: 0.9; slot 4 is recent.  Evict 1.
  CHECK(comp.kept(0) == std::vector<std::int32_t>{2, 3, 4});
}

TEST_CASE("decode: tova evicts the lowest attention of the newest committed query, averaged over heads") {
  lm::ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  kv::PolicyConfig pc;
  pc.policy = kv::Policy::tova;
  pc.budget = 2;
  kv::Compressor comp(c, pc);
  std::vector<lm::AttentionRecord> r{rec(2, 0, 0, {0, 1, 2}, {0.5f, 0.1f, 0.4f}), rec(2, 0, 1, {0, 1, 2}, {0.1f, 0.2f, 0.7f}),
                                     rec(1, 0, 0, {0, 1}, {0.0f, 1.0f}), rec(1, 0, 1, {0, 1}, {0.0f, 1.0f})};
  comp.commit(r, {0, 1, 2}, true);  // newest = row 2: means 0.3, 0.15, 0.55
  CHECK(comp.kept(0) == std::vector<std::int32_t>{0, 2});
  CHECK(comp.kept(1) == std::vector<std::int32_t>{0, 2});
  CHECK(comp.prefill_rows(3) == std::vector<int>{2});
}

TEST_CASE("decode: snapkv keeps the pooled top prompt slots plus the window, then every new slot") {
  lm::ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  kv::PolicyConfig pc;
  pc.policy = kv::Policy::snapkv;
  pc.budget = 4;
  pc.window = 2;
  pc.kernel = 3;
  kv::Compressor comp(c, pc);
  CHECK(comp.prefill_rows(8) == std::vector<int>{6, 7});
  // Window rows 6, 7 attend slots 0..5 with scores peaking at slot 1 (0.5) and slot 4 (0.3).
  std::vector<lm::AttentionRecord> r{rec(6, 0, 0, {0, 1, 2, 3, 4, 5}, {0.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f}),
                                     rec(7, 0, 0, {0, 1, 2, 3, 4, 5}, {0.0f, 0.0f, 0.0f, 0.0f, 0.3f, 0.0f})};
  comp.commit(r, {0, 1, 2, 3, 4, 5, 6, 7}, true);
  // Max pooling (kernel 3) spreads 0.5 over 0..2 and 0.3 over 3..5; top 2 = slots 0, 1.
  CHECK(comp.kept(0) == std::vector<std::int32_t>{0, 1, 6, 7});
  comp.commit({}, {8}, false);
  CHECK(comp.kept(0) == std::vector<std::int32_t>{0, 1, 6, 7, 8});
  pc.kernel = 2;
  CHECK_THROWS_AS(kv::Compressor(c, pc), UsageError);
}

TEST_CASE("decode: greedy output of every method and KV policy is the AR output token for token") {
  const lm::Model m = small_model(61, 64, 0.3, 11);
  SkipSet skip;
  skip.attn = {1, 0};
  skip.mlp = {0, 1};
  int speculated = 0;  // steps that accepted drafted tokens: the check must see drafts succeed
  for (const std::vector<int>& prompt :
       {std::vector<int>{3}, std::vector<int>{5, 9, 5, 9, 5, 9, 5, 9, 5, 9}, std::vector<int>(40, 7),
        std::vector<int>(62, 4)}) {
    const int n = 64;
    const std::vector<int> truth = plain_ar(m, prompt, std::min<int>(n, 64 - static_cast<int>(prompt.size())));
    std::vector<DecodeConfig> cfgs;
    DecodeConfig base;
    base.max_new_tokens = n;
    base.stop_at_eos = false;
    base.window = 4;
    base.ngram = 3;
    base.guesses = 4;
    for (Method meth : {Method::ar, Method::prompt_lookup, Method::lookahead, Method::self_spec}) {
      DecodeConfig d = base;
      d.method = meth;
      d.skip = skip;
      d.draft_stop = 0.0;
      cfgs.push_back(d);
    }
    for (kv::Policy pol : {kv::Policy::streaming, kv::Policy::h2o, kv::Policy::tova, kv::Policy::snapkv})
      for (int budget : {2, 3, 16}) {
        DecodeConfig d = base;
        d.method = Method::fafo;
        d.kv.policy = pol;
        d.kv.budget = budget;
        d.kv.sinks = 1;
        d.kv.window = 1;
        d.kv.kernel = 3;
        cfgs.push_back(d);
      }
    for (const auto& d : cfgs) {
      CAPTURE(method_name(d.method));
      CAPTURE(kv::policy_name(d.kv.policy));
      CAPTURE(d.kv.budget);
      CAPTURE(prompt.size());
      const DecodeResult r = generate(m, prompt, d);
      CHECK(r.tokens == truth);
      for (const auto& s : r.steps) speculated += s.accepted > 1;
    }
  }
  CHECK(speculated > 50);
}

/// A CPU engine that, like the CUDA engine, returns no logits when a forward asks for the
/// greedy tokens only: a decoder that still read them would index an empty matrix (ASan) or
/// decode differently.  Counts the forwards of each kind.
class GreedyOnlyEngine final : public lm::EngineWrapper {
 public:
  using EngineWrapper::EngineWrapper;
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& o = {}) override {
    lm::ForwardResult r = inner_.forward(b, o);
    if (o.greedy_only) {
      r.logits = lm::Matrix();
      ++greedy_forwards;
    } else {
      ++logits_forwards;
    }
    return r;
  }
  int greedy_forwards = 0, logits_forwards = 0;
};

TEST_CASE("decode: greedy decoding needs only each row's greedy token, not the logits") {
  // Truth: plain_ar (argmax of full logits).  Every method decodes the same tokens on an engine
  // that drops the logits of greedy-only forwards (self-speculative drafts included: their
  // confidence is ForwardResult::greedy_prob); only sampling asks for logits.
  const lm::Model m = small_model(61, 64, 0.3, 11);
  const std::vector<int> prompt{5, 9, 5, 9, 5, 9, 5, 9, 5, 9};
  const std::vector<int> truth = plain_ar(m, prompt, 40);
  DecodeConfig base;
  base.max_new_tokens = 40;
  base.stop_at_eos = false;
  base.window = 4;
  base.ngram = 3;
  base.guesses = 4;
  base.draft_stop = 0.0;
  base.skip.attn = {1, 0};
  base.skip.mlp = {0, 1};
  for (Method meth : {Method::ar, Method::prompt_lookup, Method::lookahead, Method::self_spec, Method::fafo}) {
    CAPTURE(method_name(meth));
    DecodeConfig d = base;
    d.method = meth;
    if (meth == Method::fafo) {
      d.kv.policy = kv::Policy::h2o;  // needs attention records: greedy_only must not drop them
      d.kv.budget = 3;
      d.kv.sinks = 1;
      d.kv.window = 1;
    }
    lm::CpuEngine cpu(m);
    GreedyOnlyEngine e(cpu);
    const DecodeResult r = generate(e, prompt, d);
    CHECK(r.tokens == truth);
    int drafts = 0;
    for (const StepRecord& s : r.steps) drafts += meth == Method::self_spec ? s.draft_rows : 0;
    CHECK(e.greedy_forwards == static_cast<int>(r.steps.size()) + 1 + drafts);  // prefill, one per step, drafts
    CHECK(e.logits_forwards == 0);
    if (meth == Method::self_spec) CHECK(drafts > 0);
  }
  DecodeConfig sampled = base;
  sampled.method = Method::fafo;
  sampled.sampler.temperature = 0.8;
  sampled.sampler.seed = 3;
  lm::CpuEngine inner(m), cpu(m);
  GreedyOnlyEngine e(inner);
  CHECK(generate(e, prompt, sampled).tokens == generate(cpu, prompt, sampled).tokens);
  CHECK(e.greedy_forwards == 0);
}

/// A CPU engine whose forward and commit each take at least `delay` longer (a sleep): the
/// decoder's per-step engine time must contain every such call.
class SlowEngine final : public lm::EngineWrapper {
 public:
  SlowEngine(lm::Engine& inner, std::chrono::microseconds delay) : EngineWrapper(inner), delay_(delay) {}
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& o = {}) override {
    std::this_thread::sleep_for(delay_);
    return inner_.forward(b, o);
  }
  void commit(const std::vector<int>& rows) override {
    std::this_thread::sleep_for(delay_);
    inner_.commit(rows);
  }

 private:
  std::chrono::microseconds delay_;
};

TEST_CASE("decode: a step's engine time holds its forwards and commits, never more than its wall time") {
  // Truth: each forward and commit sleeps 2 ms, so a step's engine_s is at least 2 ms times its
  // engine calls (one forward and one commit; self-spec adds a forward and a commit per draft
  // token), and the engine calls lie inside the step's wall time.
  const lm::Model m = small_model(61, 64, 0.3, 11);
  const std::vector<int> prompt{5, 9, 5, 9, 5, 9, 5, 9, 5, 9};
  const double delay = 0.002;
  for (Method meth : {Method::ar, Method::self_spec, Method::fafo}) {
    CAPTURE(method_name(meth));
    DecodeConfig d;
    d.method = meth;
    d.max_new_tokens = 12;
    d.stop_at_eos = false;
    d.window = 3;
    d.ngram = 3;
    d.guesses = 2;
    d.draft_stop = 0.0;
    d.draft_max = 2;
    d.skip.attn = {1, 0};
    d.skip.mlp = {0, 0};
    lm::CpuEngine cpu(m);
    SlowEngine e(cpu, std::chrono::microseconds(2000));
    const DecodeResult r = generate(e, prompt, d);
    REQUIRE(!r.steps.empty());
    for (const StepRecord& s : r.steps) {
      const int calls = 2 + (meth == Method::self_spec ? 2 * s.draft_rows : 0);
      CHECK(s.engine_s >= calls * delay);
      CHECK(s.engine_s <= s.wall_s);
    }
  }
}

TEST_CASE("decode: decoding stops right after eos, even inside an accepted n-gram") {
  lm::Model m = small_model(61, 64, 0.3, 11);
  const std::vector<int> prompt{5, 9, 5, 9, 5, 9, 5, 9};
  const std::vector<int> free_run = plain_ar(m, prompt, 40);
  // Make the 12th generated token the eos id: every method must stop right after it.
  m.config.eos_id = free_run[11];
  int first = 0;
  while (free_run[first] != m.config.eos_id) ++first;
  for (Method meth : {Method::ar, Method::prompt_lookup, Method::lookahead, Method::fafo}) {
    DecodeConfig d;
    d.method = meth;
    d.max_new_tokens = 40;
    d.window = 4;
    d.ngram = 4;
    d.guesses = 4;
    d.kv.budget = 4;
    const DecodeResult r = generate(m, prompt, d);
    CHECK(r.eos);
    CHECK(r.tokens == std::vector<int>(free_run.begin(), free_run.begin() + first + 1));
  }
}

TEST_CASE("decode: bad settings and prompts are refused") {
  const lm::Model m = small_model(61, 16, 0.3, 11);
  DecodeConfig d;
  d.method = Method::lookahead;
  d.window = 0;
  CHECK_THROWS_AS(generate(m, {1, 2}, d), UsageError);
  d.window = 4;
  d.ngram = 1;
  CHECK_THROWS_AS(generate(m, {1, 2}, d), UsageError);
  d.method = Method::fafo;
  d.ngram = 3;
  d.kv.budget = 0;
  CHECK_THROWS_AS(generate(m, {1, 2}, d), UsageError);
  d.method = Method::self_spec;
  CHECK_THROWS_AS(generate(m, {1, 2}, d), UsageError);  // no skip set
  d.method = Method::ar;
  CHECK_THROWS_AS(generate(m, std::vector<int>(16, 1), d), InputError);  // fills the context
  CHECK_THROWS_AS(generate(m, {}, d), InputError);
  CHECK_THROWS_AS(generate(m, {61}, d), InputError);
}

namespace {

/// Exact distribution of generated tokens (k+1, k+2) (0-based positions k, k+1 of the
/// continuation) given `prompt`, by enumerating every continuation of length k+2 with the
/// model's softmax at temperature T.
std::vector<double> exact_pair(const lm::Model& m, const std::vector<int>& prompt, int k, double T) {
  const int V = m.config.vocab_size;
  std::vector<double> out(V * V, 0.0);
  lm::SamplerConfig sc;
  sc.temperature = T;
  const lm::Sampler s(sc);
  std::vector<int> seq = prompt;
  std::function<void(double, int)> rec = [&](double p, int depth) {
    lm::KvCache cache(m.config);
    lm::ForwardOptions opt;
    opt.all_logits = false;
    opt.logits_rows = {static_cast<int>(seq.size()) - 1};
    auto fr = lm::forward(m, cache, lm::Batch::causal(seq, 0), opt);
    lm::TokenDist dist;
    s.distribution(fr.logits.row(0), V, dist);
    for (std::size_t i = 0; i < dist.ids.size(); ++i) {
      const double q = p * dist.p[i];
      seq.push_back(dist.ids[i]);
      if (depth == k + 1) out[seq[seq.size() - 2] * V + seq.back()] += q;
      else rec(q, depth + 1);
      seq.pop_back();
    }
  };
  rec(1.0, 0);
  return out;
}

/// Pearson chi-square of counts against probabilities, cells with expected < 5 pooled; returns
/// the statistic and sets df.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n, int& df) {
  double stat = 0.0, pool_e = 0.0, pool_o = 0.0;
  df = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    if (e < 5.0) {
      pool_e += e;
      pool_o += counts[i];
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (pool_e > 0.0) {
    stat += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-12);
    ++df;
  }
  return stat;
}

/// Chi-square quantile at upper tail 0.001 (Wilson-Hilferty, z = 3.0902).
double chi2_crit(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 3.0902 * std::sqrt(a), 3.0);
}

}  // namespace

TEST_CASE("decode: sampled continuations follow the model's distribution for every drafting method") {
  // Truth: exact enumeration of the joint law of generated tokens 4 and 5 (vocab 6, T = 1).
  // Test: Pearson chi-square over 3000 seeded runs at upper-tail 0.001 (a correct sampler fails
  // with probability 0.001 per method; the seeds are fixed, so the outcome is deterministic).
  // Power: the same test must reject AR sampling at T = 1.4 against the T = 1 law.
  const lm::Model m = small_model(6, 32, 0.8, 5);
  const std::vector<int> prompt{1, 2, 3, 1, 2, 3, 1, 2};
  const int k = 3, runs = 3000, V = 6;
  const std::vector<double> truth = exact_pair(m, prompt, k, 1.0);
  auto counts_for = [&](DecodeConfig d, int& speculated) {
    std::vector<int> counts(V * V, 0);
    d.max_new_tokens = k + 2;
    d.stop_at_eos = false;
    d.time_attention = false;
    for (int s = 0; s < runs; ++s) {
      d.sampler.seed = 1000 + s;
      const DecodeResult r = generate(m, prompt, d);
      REQUIRE(r.tokens.size() == std::size_t(k + 2));
      ++counts[r.tokens[k] * V + r.tokens[k + 1]];
      for (const auto& st : r.steps) speculated += st.accepted > 1;
    }
    return counts;
  };
  DecodeConfig base;
  base.sampler.temperature = 1.0;
  base.window = 3;
  base.ngram = 3;
  base.guesses = 4;
  base.kv.budget = 3;
  base.kv.sinks = 1;
  for (Method meth : {Method::ar, Method::prompt_lookup, Method::lookahead, Method::fafo}) {
    CAPTURE(method_name(meth));
    DecodeConfig d = base;
    d.method = meth;
    int speculated = 0;
    const auto counts = counts_for(d, speculated);
    int df = 0;
    const double stat = chi_square(counts, truth, runs, df);
    CAPTURE(stat);
    CAPTURE(df);
    CHECK(df >= 10);
    CHECK(stat < chi2_crit(df));
    if (meth != Method::ar) CHECK(speculated > runs / 10);  // drafts were accepted often
  }
  DecodeConfig hot = base;
  hot.method = Method::ar;
  hot.sampler.temperature = 1.4;
  int unused = 0;
  const auto counts = counts_for(hot, unused);
  int df = 0;
  const double stat = chi_square(counts, truth, runs, df);
  CHECK(stat > chi2_crit(df));
}

TEST_CASE("decode: a forward pass skipping every sublayer is the LM head applied to the embedding") {
  // Truth: with every attention and MLP sublayer skipped the residual stream is the token
  // embedding, so the logits must equal apply_head(embedding row) bit for bit.
  const lm::Model m = small_model(61, 16, 0.3, 11);
  lm::KvCache cache(m.config);
  lm::ForwardOptions opt;
  opt.skip_attn = {1, 1};
  opt.skip_mlp = {1, 1};
  lm::Batch b;
  b.add(17, 0);
  const auto fr = lm::forward(m, cache, b, opt);
  lm::Matrix h(1, m.config.d_model);
  m.token_embd.row_f32(17, h.row(0));
  const lm::Matrix want = lm::apply_head(m, h);
  CHECK(std::equal(want.data.begin(), want.data.end(), fr.logits.row(0)));
  opt.skip_mlp = {1, 0};  // not skipping changes the logits
  const auto fr2 = lm::forward(m, cache, b, opt);
  CHECK(!std::equal(want.data.begin(), want.data.end(), fr2.logits.row(0)));
  opt.skip_mlp = {1};
  CHECK_THROWS_AS(lm::forward(m, cache, b, opt), InputError);
}
