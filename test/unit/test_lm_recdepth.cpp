// Recurrent-depth models (issue 36): the trainer's gradient (sandwich blocks, q / k biases, the
// adapter, n_f used twice, truncated backpropagation) against central finite differences; the
// training forward against the engine (bitwise on the reference kernels); the KV layouts (the
// latest-iteration compression against the per-iteration cache); checkpoint round trip; refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "lm/presets.hpp"
#include "lm/recdepth.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "nn/trainer.hpp"
#include "io/provenance.hpp"
#include <nlohmann/json.hpp>
#include <algorithm>
#include "nn_test_support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

/// A tiny recurrent-depth model: 1 prelude, 2 core, 1 coda sandwich blocks on the gradient tests'
/// shape, with non-trivial norms and biases.
lm::Model tiny_recdepth(bool tied, bool qk_bias, std::uint64_t seed = 5, double std = 0.3, int mean = 3) {
  lm::ModelConfig c = testing::tiny_config(lm::RopeStyle::interleaved, tied);
  c.n_layers = 4;
  c.block_types = {lm::BlockType::recdepth_prelude, lm::BlockType::recdepth_core, lm::BlockType::recdepth_core,
                   lm::BlockType::recdepth_coda};
  c.recdepth.mean_recurrence = mean;
  c.recdepth.backprop_depth = 2;
  c.recdepth.qk_bias = qk_bias;
  c.recdepth.embed_scale = 1.7;
  c.recdepth.state_std = 0.6;
  lm::Model m = lm::random_model(c, seed, std);
  Rng rng(seed + 7);
  for (auto& l : m.layers) {
    for (auto* v : {&l.attn_norm, &l.ffn_norm, &l.post_attn_norm, &l.post_ffn_norm})
      for (auto& w : *v) w = static_cast<float>(0.5 + rng.uniform());
    for (auto* v : {&l.q_bias, &l.k_bias})
      for (auto& w : *v) w = static_cast<float>(0.3 * rng.normal());
  }
  for (auto& w : m.output_norm) w = static_cast<float>(0.5 + rng.uniform());
  return m;
}

}  // namespace

TEST_CASE("recdepth trainer gradient matches finite differences (truncated backprop through the last k iterations)") {
  for (int variant = 0; variant < 2; ++variant) {
    const lm::Model m = tiny_recdepth(variant == 1, variant == 0);
    auto P = params_from_model<double>(m);
    const int B = 2, S = 4;
    Rng rng(31);
    std::vector<int> tok(B * S), tgt(B * S);
    for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
    for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
    // n_free iterations without gradient, then n_grad with, from the same initial state.
    auto loss = [&](LlamaParams<double>& params, TrainCache<double>& c, double scale, int n_free, int n_grad) {
      c.rd_no_grad = n_free;
      c.rd_grad = n_grad;
      c.rd_seed = 77;
      return llama_loss(params, tok, tgt, B, S, scale, c);
    };
    auto run = [&](TrainCache<double>& c, double scale) { return loss(P, c, scale, 1, 2); };
    TrainCache<double> cache;
    P.store.zero_grad();
    run(cache, 1.0);
    CHECK(cache.layers.size() == std::size_t(1 + 2 * 2 + 1));
    for (auto& p : P.store.params) {
      INFO("variant " << variant << " tensor " << p.name);
      // Truncation drops what reaches a tensor through the no-gradient iteration: the coda's, n_f's
      // and the head's gradients are exact, the prelude's and the core's are not (checked below).
      const bool after = p.name.find("blk.3.") == 0 || p.name.find("output") == 0;
      if (after) {
        auto f = [&] { TrainCache<double> c2; return run(c2, 0.0); };
        CHECK(testing::worst_fd_error(f, p) < 2e-6);
      }
    }
    // Every tensor, with all three iterations trained (no truncation): the full gradient.
    auto Q = params_from_model<double>(m);
    auto run_full = [&](TrainCache<double>& c, double scale) { return loss(Q, c, scale, 0, 3); };
    TrainCache<double> c3;
    Q.store.zero_grad();
    run_full(c3, 1.0);
    for (auto& p : Q.store.params) {
      INFO("variant " << variant << " full backprop, tensor " << p.name);
      auto f = [&] { TrainCache<double> c2; return run_full(c2, 0.0); };
      CHECK(testing::worst_fd_error(f, p) < 2e-6);
    }
    // Truncation changes the core gradient (the first iteration's contribution is dropped).
    double gap = 0;
    for (std::size_t i = 0; i < P.adapter().grad.size(); ++i) gap = std::max(gap, std::abs(P.adapter().grad[i] - Q.adapter().grad[i]));
    CHECK(gap > 1e-8);
  }
}

TEST_CASE("recdepth training forward logits equal the engine's (reference kernels bitwise)") {
  const TrainKernels keep = train_kernels();
  set_train_kernels(TrainKernels::reference);
  const lm::Model m = tiny_recdepth(false, true, 9, 0.2);
  auto P = params_from_model<float>(m);
  const int S = 7;
  Rng rng(4);
  std::vector<int> tok(S), tgt(S, 0);
  for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
  TrainCache<float> cache;
  cache.rd_no_grad = 5;
  cache.rd_grad = 0;
  cache.rd_seed = 123;
  std::vector<float> logits;
  llama_loss(P, tok, tgt, 1, S, 0.0, cache, &logits);
  set_train_kernels(keep);
  lm::KvCache kv(m.config);
  lm::ForwardOptions o;
  o.recurrence = 5;
  o.state_seed = 123;
  const auto res = lm::forward(m, kv, lm::Batch::causal(tok, 0), o);
  int mismatches = 0;
  for (int t = 0; t < S; ++t)
    for (int v = 0; v < m.config.vocab_size; ++v) mismatches += res.logits.row(t)[v] != logits[std::size_t(t) * m.config.vocab_size + v];
  CHECK(mismatches == 0);
  // The state seed matters (the initial state is part of the function), and so does r.
  lm::KvCache kv2(m.config);
  o.state_seed = 124;
  const auto other = lm::forward(m, kv2, lm::Batch::causal(tok, 0), o);
  CHECK(other.logits.row(S - 1)[0] != res.logits.row(S - 1)[0]);
}

TEST_CASE("recdepth engine: batch-invariant rows, the compressed cache is the per-iteration cache's latest entries") {
  const lm::Model m = tiny_recdepth(false, true, 13, 0.25, 4);
  const lm::ModelConfig& c = m.config;
  const std::vector<int> prompt{3, 7, 1, 9, 4};
  const int r = 4, P = c.recdepth_prelude(), C = c.recdepth_core(), D = c.recdepth_coda();
  lm::ForwardOptions latest;
  latest.recurrence = r;
  latest.state_seed = 5;
  lm::ForwardOptions full = latest;
  full.core_kv = lm::CoreKv::full;
  // Prefill both ways: the same logits (no earlier positions to read), and the compressed cache
  // holds exactly the per-iteration cache's last iteration.
  lm::KvCache kl(c), kf(c, lm::recdepth_cache_layers(c, lm::CoreKv::full, r));
  CHECK(kl.n_layers() == P + C + D);
  CHECK(kf.n_layers() == P + C * r + D);
  const auto a = lm::forward(m, kl, lm::Batch::causal(prompt, 0), latest);
  const auto b = lm::forward(m, kf, lm::Batch::causal(prompt, 0), full);
  CHECK(a.logits.data == b.logits.data);
  kl.commit_all();
  kf.commit_all();
  const int hd = c.head_dim();
  int differ = 0, same = 0;
  for (int j = 0; j < C; ++j)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int s = 0; s < kl.size(); ++s) {
        const int last = lm::recdepth_core_layer(c, lm::CoreKv::full, r - 1, j);
        const int first = lm::recdepth_core_layer(c, lm::CoreKv::full, 0, j);
        for (int e = 0; e < hd; ++e) {
          same += kl.key(P + j, h, s)[e] == kf.key(last, h, s)[e] && kl.value(P + j, h, s)[e] == kf.value(last, h, s)[e];
          differ += kl.key(P + j, h, s)[e] != kf.key(first, h, s)[e];
        }
      }
  CHECK(same == C * c.n_kv_heads * kl.size() * hd);
  CHECK(differ > 0);  // the iterations' entries differ: the compression keeps the latest, not the first
  // Decoding one more token: the compressed cache reads the earlier positions' latest entries.  A
  // per-iteration cache whose every iteration's layers hold those latest entries (what a "latest"
  // lookup of the uncompressed cache reads) gives the same logits bitwise; its own same-step
  // entries give different ones.
  lm::KvCache kf_latest(c, lm::recdepth_cache_layers(c, lm::CoreKv::full, r));
  // Built by a per-iteration prefill whose pending entries of iterations 0..r-2 are overwritten
  // with the last iteration's before the commit.
  lm::forward(m, kf_latest, lm::Batch::causal(prompt, 0), full);
  for (int i = 0; i + 1 < r; ++i)
    for (int j = 0; j < C; ++j) {
      const int dst = lm::recdepth_core_layer(c, lm::CoreKv::full, i, j), src = lm::recdepth_core_layer(c, lm::CoreKv::full, r - 1, j);
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int s = 0; s < static_cast<int>(prompt.size()); ++s) {
          std::copy_n(kf_latest.pending_key(src, h, s), hd, kf_latest.pending_key(dst, h, s));
          std::copy_n(kf_latest.pending_value(src, h, s), hd, kf_latest.pending_value(dst, h, s));
        }
    }
  kf_latest.commit_all();
  lm::Batch next;
  next.add(6, static_cast<int>(prompt.size()));
  const auto dl = lm::forward(m, kl, next, latest);
  const auto df = lm::forward(m, kf_latest, next, full);
  const auto ds = lm::forward(m, kf, next, full);
  CHECK(dl.logits.data == df.logits.data);
  CHECK(dl.logits.data != ds.logits.data);
  // With the per-iteration cache a row's logits do not depend on its batch: the last prompt row
  // decoded alone after the others were committed reads their iteration-i entries, as in the
  // prefill.  (The compressed cache's decode reads their last iteration's: a different function.)
  lm::KvCache k1(c, lm::recdepth_cache_layers(c, lm::CoreKv::full, r));
  const std::vector<int> head(prompt.begin(), prompt.end() - 1);
  lm::forward(m, k1, lm::Batch::causal(head, 0), full);
  k1.commit_all();
  lm::Batch last;
  last.add(prompt.back(), static_cast<int>(prompt.size()) - 1);
  const auto one = lm::forward(m, k1, last, full);
  for (int v = 0; v < c.vocab_size; ++v) CHECK(one.logits.row(0)[v] == a.logits.row(static_cast<int>(prompt.size()) - 1)[v]);
}

TEST_CASE("recdepth checkpoint round trip, contract checks and refusals") {
  const lm::Model m = tiny_recdepth(false, true);
  const auto path = std::filesystem::temp_directory_path() / "icmlkit_recdepth_rt.h5";
  lm::save_checkpoint(path.string(), m, io::h5::FloatStorage::f32, {});
  const lm::Model r = lm::load_checkpoint(path.string());
  std::filesystem::remove(path);
  CHECK(r.config.is_recdepth());
  CHECK(r.config.recdepth.mean_recurrence == 3);
  CHECK(r.config.recdepth.embed_scale == doctest::Approx(1.7));
  CHECK(r.adapter.data == m.adapter.data);
  CHECK(r.layers[1].q_bias == m.layers[1].q_bias);
  CHECK(r.layers[2].post_ffn_norm == m.layers[2].post_ffn_norm);
  CHECK(m.config.n_params() == [&] {
    std::int64_t n = 0;
    for (const auto& t : lm::tensor_slots(m)) n += std::int64_t(t.rows) * std::max(t.cols, 1);
    return n;
  }());
  lm::ModelConfig bad = m.config;
  bad.block_types = {lm::BlockType::recdepth_core, lm::BlockType::recdepth_prelude, lm::BlockType::recdepth_core,
                     lm::BlockType::recdepth_coda};
  CHECK_THROWS_WITH_AS(bad.validate("x"), doctest::Contains("ordered prelude, core, coda"), InputError);
  bad = m.config;
  bad.recdepth.mean_recurrence = 0;
  CHECK_THROWS_WITH_AS(bad.validate("x"), doctest::Contains("mean_recurrence"), InputError);
  lm::KvCache kv(m.config);
  lm::ForwardOptions o;
  o.schedule = {0, 1};
  CHECK_THROWS_AS(lm::forward(m, kv, lm::Batch::causal({1, 2}, 0), o), UsageError);
  // Huginn's recurrence sampler: k = min(k̄, p) >= 1, n + k = p, and the mean near r̄ + 1 (p = Poisson + 1).
  double sum = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto [n, k] = sample_recurrence(16, 4, derive_seed(9, std::uint64_t(i)));
    CHECK(k >= 1);
    CHECK(k <= 4);
    CHECK((n == 0 || k == 4));
    sum += n + k;
  }
  CHECK(sum / 4000 == doctest::Approx(17.0).epsilon(0.04));
}

// lm-train's guarantees for a recurrent-depth model: the per-step recurrence is drawn from (seed,
// step, micro-batch), so N steps straight equal N/2 + checkpoint + resume + N/2 bitwise, and the
// steps' sampled recurrences vary.
TEST_CASE("recdepth trainer: resume is bitwise and the sampled recurrence varies by step") {
  const lm::Model m = tiny_recdepth(false, true, 4, 0.1, 4);
  Rng rng(1);
  std::vector<int> stream(300);
  for (int i = 0; i < 300; ++i) stream[std::size_t(i)] = rng.uniform() < 0.8 ? (i * 7) % m.config.vocab_size : int(rng.below(23));
  TrainOptions o;
  o.seq_len = 8;
  o.batch = 2;
  o.accum = 2;
  o.steps = 6;
  o.lr = 3e-3;
  o.warmup = 2;
  o.seed = 9;
  Trainer a(m, stream, o);
  std::vector<double> rec;
  for (int i = 0; i < 6; ++i) rec.push_back(a.step().recurrence);
  CHECK(*std::min_element(rec.begin(), rec.end()) != *std::max_element(rec.begin(), rec.end()));
  Trainer b(m, stream, o);
  for (int i = 0; i < 3; ++i) b.step();
  const auto ck = std::filesystem::temp_directory_path() / "icmlkit_recdepth_resume.h5";
  b.save(ck.string(), io::Provenance{}, nlohmann::json::object());
  Trainer c(m, stream, o);
  c.load(ck.string());
  std::filesystem::remove(ck);
  for (int i = 0; i < 3; ++i) CHECK(c.step().recurrence == rec[std::size_t(3 + i)]);
  bool same = true;
  for (std::size_t i = 0; i < a.params().store.params.size(); ++i)
    same = same && a.params().store.params[i].value == c.params().store.params[i].value;
  CHECK(same);
}
