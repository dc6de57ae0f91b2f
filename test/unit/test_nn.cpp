// nn/: every layer's backward against central finite differences in double precision, the
// whole-model loss gradient, the training forward against the inference engine (bitwise on
// the reference kernels, within a tolerance on the fast ones),
// AdamW against a hand-computed step, the schedule's closed form, and overfitting one batch.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "lm/engine.hpp"
#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "nn/adamw.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "nn/params.hpp"
#include "nn/schedule.hpp"
#include "nn_test_support.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

using Vec = std::vector<double>;

Vec randn(std::size_t n, Rng& rng, double s = 1.0) {
  Vec v(n);
  for (auto& x : v) x = s * rng.normal();
  return v;
}

using testing::fd;  // central differences (nn_test_support.hpp)
using testing::tiny_config;

/// Checks every entry of `grad` against finite differences of f over x.
void check_grad(const std::function<double()>& f, Vec& x, const Vec& grad, const char* what, double tol = 1e-6) {
  REQUIRE(grad.size() == x.size());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double num = fd(f, x[i]);
    const double err = std::abs(num - grad[i]) / std::max(1.0, std::abs(num));
    worst = std::max(worst, err);
  }
  INFO(std::string(what) << ": worst relative error " << worst);
  CHECK(worst < tol);
}

double dotv(const Vec& a, const Vec& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); }

lm::Model tiny_model(lm::RopeStyle style, bool tied, std::uint64_t seed = 3, double std = 0.3) {
  lm::Model m = lm::random_model(tiny_config(style, tied), seed, std);
  Rng rng(seed + 1);
  for (auto& l : m.layers)
    for (auto* v : {&l.attn_norm, &l.ffn_norm})
      for (auto& w : *v) w = static_cast<float>(0.5 + rng.uniform());
  for (auto& w : m.output_norm) w = static_cast<float>(0.5 + rng.uniform());
  return m;
}

}  // namespace

// Each layer check: L(x, params) = Σ r ⊙ y with a fixed random r, so dL/dy = r; the layer's
// backward must reproduce central differences of L (double precision, tolerance 1e-6 relative).
TEST_CASE("nn layer backward: linear and embedding match finite differences") {
  Rng rng(1);
  const int N = 3, K = 5, O = 4, V = 6, d = 5;
  Vec x = randn(N * K, rng), W = randn(O * K, rng), r = randn(N * O, rng);
  auto f = [&] { Vec y(N * O); linear_forward(x.data(), N, K, W.data(), O, y.data()); return dotv(y, r); };
  Vec dx(N * K), dW(O * K, 0.0);
  linear_backward(r.data(), x.data(), N, K, W.data(), O, dx.data(), dW.data());
  check_grad(f, x, dx, "linear dx");
  check_grad(f, W, dW, "linear dW");
  Vec dx2(N * K, 1.0);  // accumulate mode adds to what is there
  linear_backward(r.data(), x.data(), N, K, W.data(), O, dx2.data(), static_cast<double*>(nullptr), true);
  for (int i = 0; i < N * K; ++i) CHECK(dx2[i] == doctest::Approx(dx[i] + 1.0).epsilon(1e-12));

  Vec E = randn(V * d, rng), re = randn(4 * d, rng);
  const int toks[4] = {2, 0, 2, 5};  // a repeated token accumulates
  auto fe = [&] { Vec y(4 * d); embedding_forward(E.data(), d, toks, 4, y.data()); return dotv(y, re); };
  Vec dE(V * d, 0.0);
  embedding_backward(re.data(), d, toks, 4, dE.data());
  check_grad(fe, E, dE, "embedding dE");
}

TEST_CASE("nn layer backward: RMSNorm matches finite differences") {
  Rng rng(2);
  const int N = 3, d = 7;
  Vec x = randn(N * d, rng), w = randn(d, rng), r = randn(N * d, rng);
  auto f = [&] { Vec y(N * d), rs(N); rmsnorm_forward(x.data(), N, d, w.data(), 1e-5, y.data(), rs.data()); return dotv(y, r); };
  Vec y(N * d), rs(N), dx(N * d, 0.0), dw(d, 0.0);
  rmsnorm_forward(x.data(), N, d, w.data(), 1e-5, y.data(), rs.data());
  rmsnorm_backward(r.data(), x.data(), N, d, w.data(), rs.data(), dx.data(), dw.data());
  check_grad(f, x, dx, "rmsnorm dx");
  check_grad(f, w, dw, "rmsnorm dw");
}

TEST_CASE("nn layer backward: RoPE (both pairings) matches finite differences") {
  for (auto style : {lm::RopeStyle::half, lm::RopeStyle::interleaved}) {
    Rng rng(3);
    const int N = 4, H = 2, hd = 6;
    const int pos[N] = {0, 3, 7, 11};
    Vec cs, sn;
    rope_tables(pos, N, hd, 50.0, cs, sn);
    Vec x = randn(N * H * hd, rng), r = randn(x.size(), rng);
    auto f = [&] { Vec y = x; rope_forward(y.data(), N, H, hd, style, cs.data(), sn.data()); return dotv(y, r); };
    Vec dx = r;
    rope_backward(dx.data(), N, H, hd, style, cs.data(), sn.data());
    check_grad(f, x, dx, style == lm::RopeStyle::half ? "rope half" : "rope interleaved");
  }
}

TEST_CASE("nn layer backward: grouped-query causal attention matches finite differences") {
  Rng rng(4);
  const AttnShape s{2, 5, 4, 2, 3};  // 2 sequences of 5, 4 query heads on 2 KV heads
  const int N = s.B * s.S, dq = s.n_heads * s.head_dim, dkv = s.n_kv_heads * s.head_dim;
  Vec q = randn(N * dq, rng), k = randn(N * dkv, rng), v = randn(N * dkv, rng), r = randn(N * dq, rng);
  auto f = [&] {
    Vec o(N * dq), mx(N * s.n_heads), iv(mx.size());
    attention_forward(q.data(), k.data(), v.data(), s, o.data(), mx.data(), iv.data());
    return dotv(o, r);
  };
  Vec o(N * dq), mx(N * s.n_heads), iv(mx.size()), gq(q.size()), gk(k.size()), gv(v.size());
  attention_forward(q.data(), k.data(), v.data(), s, o.data(), mx.data(), iv.data());
  attention_backward(r.data(), q.data(), k.data(), v.data(), o.data(), mx.data(), iv.data(), s, gq.data(), gk.data(),
                     gv.data());
  check_grad(f, q, gq, "attention dq");
  check_grad(f, k, gk, "attention dk");
  check_grad(f, v, gv, "attention dv");
  // Causality: the first row of a sequence attends only itself, so its output is its own v.
  for (int h = 0; h < s.n_heads; ++h)
    for (int e = 0; e < s.head_dim; ++e) CHECK(o[h * s.head_dim + e] == v[(h / 2) * s.head_dim + e]);
}

TEST_CASE("nn layer backward: SwiGLU and cross-entropy match finite differences") {
  Rng rng(5);
  const int n = 9;
  Vec g = randn(n, rng, 2.0), u = randn(n, rng), r = randn(n, rng);
  auto f = [&] { Vec h(n); swiglu_forward(g.data(), u.data(), n, h.data()); return dotv(h, r); };
  Vec dg(n), du(n);
  swiglu_backward(r.data(), g.data(), u.data(), n, dg.data(), du.data());
  check_grad(f, g, dg, "swiglu dg");
  check_grad(f, u, du, "swiglu du");

  const int N = 4, V = 5;
  Vec logits = randn(N * V, rng, 3.0);
  const int tg[N] = {1, -1, 4, 0};  // row 1 ignored
  auto fl = [&] { return cross_entropy(logits.data(), N, V, tg, static_cast<double*>(nullptr), 0.0); };
  Vec dl(N * V);
  const double loss = cross_entropy(logits.data(), N, V, tg, dl.data(), 1.0);
  check_grad(fl, logits, dl, "cross-entropy dlogits");
  // Closed form of one row: log Σ exp − logit[target].
  double z = 0;
  for (int i = 0; i < V; ++i) z += std::exp(logits[i]);
  double manual = std::log(z) - logits[1];
  for (int n2 : {2, 3}) {
    double zz = 0;
    for (int i = 0; i < V; ++i) zz += std::exp(logits[n2 * V + i]);
    manual += std::log(zz) - logits[n2 * V + tg[n2]];
  }
  CHECK(loss == doctest::Approx(manual).epsilon(1e-12));
}

// The whole model: dL/dθ for every tensor (all entries) of a 2-layer GQA model, both RoPE
// pairings, tied and untied heads, against central differences of the summed loss.
TEST_CASE("nn whole-model loss gradient matches finite differences") {
  for (int variant = 0; variant < 3; ++variant) {
    const auto style = variant == 1 ? lm::RopeStyle::interleaved : lm::RopeStyle::half;
    const bool tied = variant == 2;
    const lm::Model m = tiny_model(style, tied);
    auto P = params_from_model<double>(m);
    const int B = 2, S = 5;
    Rng rng(11);
    std::vector<int> tok(B * S), tgt(B * S);
    for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
    for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
    tgt[3] = -1;
    TrainCache<double> cache;
    P.store.zero_grad();
    llama_loss(P, tok, tgt, B, S, 1.0, cache);
    auto f = [&] { TrainCache<double> c2; return llama_loss(P, tok, tgt, B, S, 0.0, c2); };
    for (auto& p : P.store.params) {
      INFO("variant " << variant << " tensor " << p.name);
      check_grad(f, p.value, p.grad, p.name.c_str(), 2e-6);
    }
  }
}

// Contract v2 (issue 25), the trainer walks a block schedule: with blocks repeated and left
// out, the loss gradient (a repeated block sums its steps' gradients) matches central finite
// differences, and on the reference kernels the logits are bitwise lm::forward's with the same
// schedule.
TEST_CASE("nn a block schedule trains: gradient matches finite differences, logits match the engine") {
  const lm::Model m = tiny_model(lm::RopeStyle::half, false);
  const std::vector<int> schedule{1, 0, 1, 1};
  auto P = params_from_model<double>(m);
  const int B = 2, S = 4;
  Rng rng(21);
  std::vector<int> tok(B * S), tgt(B * S);
  for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
  for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
  TrainCache<double> cache;
  std::vector<double>* const no_logits = nullptr;
  P.store.zero_grad();
  llama_loss(P, tok, tgt, B, S, 1.0, cache, no_logits, schedule);
  CHECK(cache.layers.size() == schedule.size());
  auto f = [&] { TrainCache<double> c2; return llama_loss(P, tok, tgt, B, S, 0.0, c2, no_logits, schedule); };
  for (auto& p : P.store.params) {
    INFO("tensor " << p.name);
    check_grad(f, p.value, p.grad, p.name.c_str(), 2e-6);
  }
  // The gradient differs from the plain block list's (the schedule is not ignored).
  auto Q = params_from_model<double>(m);
  TrainCache<double> c3;
  Q.store.zero_grad();
  llama_loss(Q, tok, tgt, B, S, 1.0, c3);
  CHECK(std::abs(Q.store.params[1].grad[0] - P.store.params[1].grad[0]) > 1e-9);

  const TrainKernels keep = train_kernels();
  set_train_kernels(TrainKernels::reference);
  auto F = params_from_model<float>(m);
  TrainCache<float> c4;
  std::vector<float> logits;
  llama_loss(F, tok, tgt, B, S, 0.0, c4, &logits, schedule);
  set_train_kernels(keep);
  lm::ForwardOptions o;
  o.schedule = schedule;
  int mismatches = 0;
  for (int b = 0; b < B; ++b) {
    lm::KvCache kv(m.config, static_cast<int>(schedule.size()));
    const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
    const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0), o);
    for (int t = 0; t < S; ++t)
      for (int v = 0; v < m.config.vocab_size; ++v)
        mismatches += res.logits.row(t)[v] != logits[(std::size_t(b) * S + t) * m.config.vocab_size + v];
  }
  CHECK(mismatches == 0);
  TrainCache<double> c5;
  CHECK_THROWS_WITH_AS(llama_loss(P, tok, tgt, B, S, 0.0, c5, no_logits, {0, 2}), doctest::Contains("names block 2 of 2"),
                       InputError);
}

// One forward: on the reference kernel set the training forward does the engine's arithmetic,
// so every logit is bitwise equal to lm::forward's (each sequence run alone through the
// engine).  The fast set's products sum in another order (nn/gemm.hpp), so its logits agree
// within a tolerance: float rounding of sums of ~d = 12 terms through two layers is ~1e-6 of
// the logits' scale; lm/README.md states 1e-4 absolute for logits of order 1.
TEST_CASE("nn training forward logits equal lm::forward (reference kernels bitwise, fast within 1e-4)") {
  const TrainKernels keep = train_kernels();
  for (const TrainKernels kernels : {TrainKernels::reference, TrainKernels::fast})
    for (int variant = 0; variant < 3; ++variant) {
      set_train_kernels(kernels);
      const auto style = variant == 1 ? lm::RopeStyle::interleaved : lm::RopeStyle::half;
      lm::Model m = tiny_model(style, variant == 2, 9, 0.1);
      auto P = params_from_model<float>(m);
      const int B = 3, S = 11;
      Rng rng(12);
      std::vector<int> tok(B * S), tgt(B * S, 0);
      for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
      TrainCache<float> cache;
      std::vector<float> logits;
      llama_loss(P, tok, tgt, B, S, 0.0, cache, &logits);
      int mismatches = 0;
      double worst = 0;
      for (int b = 0; b < B; ++b) {
        lm::KvCache kv(m.config);
        const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
        const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0));
        for (int t = 0; t < S; ++t)
          for (int v = 0; v < m.config.vocab_size; ++v) {
            const float got = logits[(std::size_t(b) * S + t) * m.config.vocab_size + v];
            mismatches += res.logits.row(t)[v] != got;
            worst = std::max(worst, double(std::abs(res.logits.row(t)[v] - got)));
          }
      }
      INFO("variant " << variant << (kernels == TrainKernels::fast ? " fast" : " reference") << " worst " << worst);
      if (kernels == TrainKernels::reference) CHECK(mismatches == 0);
      else CHECK(worst < 1e-4);
    }
  set_train_kernels(keep);
}

TEST_CASE("nn AdamW step equals the hand-computed torch.optim.AdamW update") {
  ParamStore<float> st;
  st.add("w", {2}, true);
  st.add("norm", {1}, false);
  st.params[0].value = {1.0f, -2.0f};
  st.params[1].value = {0.5f};
  AdamWOptions o;
  o.beta1 = 0.9; o.beta2 = 0.99; o.eps = 1e-8; o.weight_decay = 0.1;
  AdamW opt(st, o);
  const double lr = 0.01;
  // Two steps with gradients g1, g2; expected values computed in double from the formula.
  const double g1[3] = {0.5, -1.0, 2.0}, g2[3] = {-0.25, 0.5, 1.0};
  double w[3] = {1.0, -2.0, 0.5}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  const bool decay[3] = {true, true, false};
  for (int t = 1; t <= 2; ++t) {
    const double* g = t == 1 ? g1 : g2;
    st.params[0].grad = {float(g[0]), float(g[1])};
    st.params[1].grad = {float(g[2])};
    opt.step(st, lr);
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      if (decay[i]) w[i] *= 1 - lr * 0.1;
      w[i] -= lr / (1 - std::pow(0.9, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8);
    }
  }
  CHECK(st.params[0].value[0] == doctest::Approx(w[0]).epsilon(1e-6));
  CHECK(st.params[0].value[1] == doctest::Approx(w[1]).epsilon(1e-6));
  CHECK(st.params[1].value[0] == doctest::Approx(w[2]).epsilon(1e-6));
  CHECK(opt.steps() == 2);
}

TEST_CASE("nn global-norm clipping and warmup-cosine schedule closed forms") {
  ParamStore<float> st;
  st.add("a", {2}, true);
  st.add("b", {1}, true);
  st.params[0].grad = {3.0f, 0.0f};
  st.params[1].grad = {4.0f};
  CHECK(st.grad_norm() == doctest::Approx(5.0));
  CHECK(st.clip_grad_norm(1.0) == doctest::Approx(5.0));
  CHECK(st.grad_norm() == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(st.clip_grad_norm(10.0) == doctest::Approx(1.0).epsilon(1e-5));  // below the limit: unchanged
  CHECK(st.grad_norm() == doctest::Approx(1.0).epsilon(1e-5));

  WarmupCosine s{1e-3, 1e-4, 10, 110};
  CHECK(s(0) == doctest::Approx(1e-4));       // (0+1)/10 of the peak
  CHECK(s(9) == doctest::Approx(1e-3));       // end of warmup
  CHECK(s(10) == doctest::Approx(1e-3));      // cosine starts at the peak
  CHECK(s(60) == doctest::Approx(5.5e-4));    // half way: (max+min)/2
  CHECK(s(110) == doctest::Approx(1e-4));     // the floor
  CHECK(s(500) == doctest::Approx(1e-4));
}

// Memorising one fixed batch is the standard sanity check of a trainer: a correct gradient and
// optimizer drive the loss from ~log(vocab) = 3.1 to near zero in a few hundred steps.
TEST_CASE("nn overfitting one small batch drives the loss near zero") {
  lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 5, 0.02);
  auto P = params_from_model<float>(m);
  const int B = 2, S = 12, N = B * S;
  Rng rng(6);
  std::vector<int> tok(N), tgt(N);
  for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
  for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
  AdamW opt(P.store, AdamWOptions{0.9, 0.95, 1e-8, 0.0});
  TrainCache<float> cache;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    P.store.zero_grad();
    const double loss = llama_loss(P, tok, tgt, B, S, 1.0 / N, cache) / N;
    if (step == 0) first = loss;
    last = loss;
    P.store.clip_grad_norm(1.0);
    opt.step(P.store, 1e-2);
  }
  CHECK(first == doctest::Approx(std::log(23.0)).epsilon(0.05));
  CHECK(last < 0.05);
}

// ---- corpus, data order, trainer ------------------------------------------------------------

#include <filesystem>
#include <fstream>
#include <hdf5.h>
#include <unistd.h>

#include "nn/corpus.hpp"
#include "nn/trainer.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace {

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("icmlkit_test_nn_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

void write_file(const std::filesystem::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::vector<int> random_stream(int n, int vocab, std::uint64_t seed) {
  // A learnable stream: mostly a repeating pattern with some noise.
  Rng rng(seed);
  std::vector<int> s(n);
  for (int i = 0; i < n; ++i) s[i] = rng.uniform() < 0.8 ? (i * 7) % vocab : int(rng.below(vocab));
  return s;
}

}  // namespace

TEST_CASE("nn corpus: TSV chapters grouped by key, every k-th document held out") {
  const auto p = scratch("c.tsv");
  // 5 chapters (keys up to ':'), 2 verses each; every 2nd chapter is validation.
  std::string s;
  for (int ch = 1; ch <= 5; ++ch)
    for (int v = 1; v <= 2; ++v) s += fmt::format("Ge{}:{}\tverse {} of {}\n", ch, v, v, ch);
  write_file(p, s);
  CorpusOptions o;
  o.column = 2;
  o.doc_column = 1;
  o.val_every = 2;
  const Documents d = read_corpus(p.string(), o);
  REQUIRE(d.train.size() == 3);
  REQUIRE(d.val.size() == 2);
  CHECK(d.train[0] == "verse 1 of 1\nverse 2 of 1");
  CHECK(d.val[0] == "verse 1 of 2\nverse 2 of 2");
  CHECK(d.train[2] == "verse 1 of 5\nverse 2 of 5");
  // Plain text: blank-line separated documents; JSONL: a text field.
  write_file(p, "a b\nc\n\n\nd e\n");
  o.format = "text";
  o.val_every = 0;
  const Documents t = read_corpus(p.string(), o);
  REQUIRE(t.train.size() == 2);
  CHECK(t.train[0] == "a b\nc");
  write_file(p, "{\"text\": \"x\"}\n{\"text\": \"y\", \"id\": 3}\n");
  o.format = "jsonl";
  CHECK(read_corpus(p.string(), o).train.size() == 2);
  write_file(p, "{\"txt\": \"x\"}\n");
  CHECK_THROWS_AS(read_corpus(p.string(), o), InputError);
  write_file(p, "\n\n");
  o.format = "text";
  CHECK_THROWS_AS(read_corpus(p.string(), o), InputError);
}

TEST_CASE("nn data order: each epoch is a seeded permutation, resumable from (epoch, pos)") {
  DataOrder a(42, 7), b(42, 7);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7; ++i) ++seen[a.next()];
  for (int c : seen) CHECK(c == 1);  // a permutation of 0..6
  for (int i = 0; i < 7; ++i) b.next();
  std::vector<std::int64_t> rest_a, rest_b;
  for (int i = 0; i < 10; ++i) rest_a.push_back(a.next());
  DataOrder c(42, 7);
  c.set_position(b.epoch(), b.pos());
  for (int i = 0; i < 10; ++i) rest_b.push_back(c.next());
  CHECK(rest_a == rest_b);
}

namespace {
TrainOptions small_options(std::int64_t steps) {
  TrainOptions o;
  o.seq_len = 8;
  o.batch = 2;
  o.accum = 2;
  o.steps = steps;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.warmup = 2;
  o.clip = 0.5;
  o.seed = 9;
  return o;
}
bool same_weights(LlamaParams<float>& a, LlamaParams<float>& b) {
  for (std::size_t i = 0; i < a.store.params.size(); ++i)
    if (a.store.params[i].value != b.store.params[i].value) return false;
  return true;
}
}  // namespace

// Resume: N steps straight equal N/2 steps, checkpoint, a fresh trainer loading it, N/2 steps —
// bit for bit (f32 checkpoint, optimizer moments, step counter and data position restored).
TEST_CASE("nn trainer: N steps straight == N/2 + resume + N/2, bitwise, and thread-invariant") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 8;
  Trainer a(m, stream, small_options(N));
  std::vector<double> losses;
  for (int i = 0; i < N; ++i) losses.push_back(a.step().loss);
  CHECK(losses.back() < losses.front());

  Trainer b(m, stream, small_options(N));
  for (int i = 0; i < N / 2; ++i) b.step();
  const auto ck = scratch("resume.h5");
  io::Provenance prov;
  b.save(ck.string(), prov, nlohmann::json{{"best_val", 1.5}});
  Trainer c(m, stream, small_options(N));
  const auto extra = c.load(ck.string());
  CHECK(extra["best_val"] == 1.5);
  CHECK(c.steps_done() == N / 2);
  for (int i = 0; i < N / 2; ++i) c.step();
  CHECK(same_weights(a.params(), c.params()));
  CHECK(c.tokens_seen() == a.tokens_seen());

  // The same run on one thread gives the same bits.
  const int keep = threads();
  set_threads(1);
  Trainer d(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) d.step();
  set_threads(keep);
  CHECK(same_weights(a.params(), d.params()));

  // Resume refuses a changed option, naming it.
  TrainOptions other = small_options(N);
  other.lr = 1e-2;
  Trainer e(m, stream, other);
  CHECK_THROWS_WITH_AS(e.load(ck.string()), doctest::Contains("option lr"), InputError);
  std::filesystem::remove_all(ck.parent_path());
}

TEST_CASE("nn trainer: a non-finite loss stops with an error and leaves the weights untouched") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 2);
  TrainOptions o = small_options(50);
  o.lr = 1e30;  // explodes the weights within a few steps
  o.warmup = 0;
  o.clip = 0;
  Trainer t(m, stream, o);
  bool threw = false;
  for (int i = 0; i < 20 && !threw; ++i) {
    const auto before = t.params().store.params[1].value;
    try {
      t.step();
    } catch (const RuntimeError& e) {
      threw = true;
      CHECK(std::string(e.what()).find("non-finite training") != std::string::npos);
      CHECK(t.params().store.params[1].value == before);
    }
  }
  CHECK(threw);
  CHECK_THROWS_AS(Trainer(m, stream, [] { auto o2 = small_options(5); o2.seq_len = 17; return o2; }()), InputError);
  CHECK_THROWS_AS(Trainer(m, std::vector<int>(5, 1), small_options(5)), InputError);
}

TEST_CASE("nn evaluate: mean loss over all windows including the short last one") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.3);
  auto P = params_from_model<float>(m);
  const auto stream = random_stream(30, m.config.vocab_size, 3);  // 29 targets: 3 windows of 8 + 5
  const EvalResult r = evaluate(P, stream, 8, 2);
  CHECK(r.tokens == 29);
  // Independent: the engine on each window, log-softmax in double.
  double sum = 0;
  for (int w = 0; w * 8 < 29; ++w) {
    const int len = std::min(8, 29 - w * 8);
    lm::KvCache kv(m.config);
    const std::vector<int> seq(stream.begin() + w * 8, stream.begin() + w * 8 + len);
    const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0));
    for (int t = 0; t < len; ++t) {
      double z = 0;
      for (int v = 0; v < m.config.vocab_size; ++v) z += std::exp(double(res.logits.row(t)[v]));
      sum += std::log(z) - res.logits.row(t)[stream[w * 8 + t + 1]];
    }
  }
  CHECK(r.loss == doctest::Approx(sum / 29).epsilon(1e-6));
  CHECK(r.perplexity() == doctest::Approx(std::exp(sum / 29)).epsilon(1e-6));
  // Top-1 accuracy: a stream whose every other target is the engine's arg-max at its position
  // (set in order: a target does not change its own position's logits), the others random.
  auto greedy = stream;
  auto engine_argmax = [&](const std::vector<int>& st, int p) {  // position p inside its window
    const int w0 = p / 8 * 8;
    lm::KvCache kv(m.config);
    const std::vector<int> seq(st.begin() + w0, st.begin() + p + 1);
    const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0));
    const float* row = res.logits.row(p - w0);
    return static_cast<int>(std::max_element(row, row + m.config.vocab_size) - row);
  };
  for (int p = 0; p < 29; p += 2) greedy[std::size_t(p) + 1] = engine_argmax(greedy, p);
  int truth = 0;
  for (int p = 0; p < 29; ++p) truth += engine_argmax(greedy, p) == greedy[std::size_t(p) + 1];
  const EvalResult g = evaluate(P, greedy, 8, 2);
  CHECK(truth >= 15);
  CHECK(g.correct == truth);
  CHECK(g.top1() == doctest::Approx(truth / 29.0));
}

// --max-tokens N (lm-eval) scores exactly the first N targets: the same as the stream cut to
// N + 1 tokens.  Truth: the engine on the windows of the cut stream ([0, 8) and [8, 13) for
// N = 13), log-softmax in double; tolerance float logits, as above.  Before the fix the cap was
// checked per batch of windows, so 13 scored all 29 (or 16) targets.
TEST_CASE("nn evaluate and engine_loss: max_tokens scores exactly the first max_tokens targets") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.3);
  auto P = params_from_model<float>(m);
  const auto stream = random_stream(30, m.config.vocab_size, 5);
  for (const int n : {13, 8, 3}) {
    double sum = 0;
    for (int o = 0; o < n; o += 8) {
      const int len = std::min(8, n - o);
      lm::KvCache kv(m.config);
      const std::vector<int> seq(stream.begin() + o, stream.begin() + o + len);
      const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0));
      for (int t = 0; t < len; ++t) {
        double z = 0;
        for (int v = 0; v < m.config.vocab_size; ++v) z += std::exp(double(res.logits.row(t)[v]));
        sum += std::log(z) - res.logits.row(t)[stream[o + t + 1]];
      }
    }
    const EvalResult r = evaluate(P, stream, 8, 2, n);
    CHECK(r.tokens == n);
    CHECK(r.loss == doctest::Approx(sum / n).epsilon(1e-6));
    const auto engine = lm::open_engine(m, lm::Device::cpu);
    std::int64_t counted = 0;
    const double esum = lm::engine_loss(*engine, stream, 8, n, counted);
    CHECK(counted == n);
    CHECK(esum / n == doctest::Approx(sum / n).epsilon(1e-6));
  }
  // A cap beyond the stream scores it all.
  CHECK(evaluate(P, stream, 8, 2, 1000).tokens == 29);
}

// Gradient accumulation: accum micro-batches of b windows take the same step as one batch of
// accum x b windows (same windows in the same order; only float summation order differs, so
// the tolerance is float rounding, 1e-5 after one AdamW step of lr 3e-3).
TEST_CASE("nn trainer: gradient accumulation equals the larger batch") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 5);
  TrainOptions big = small_options(4);
  big.batch = 4;
  big.accum = 1;
  TrainOptions acc = small_options(4);
  acc.batch = 1;
  acc.accum = 4;
  Trainer a(m, stream, big), b(m, stream, acc);
  for (int i = 0; i < 2; ++i) {
    const auto sa = a.step(), sb = b.step();
    CHECK(sa.loss == doctest::Approx(sb.loss).epsilon(1e-6));
    CHECK(sa.grad_norm == doctest::Approx(sb.grad_norm).epsilon(1e-5));
    CHECK(sa.tokens == sb.tokens);
  }
  double worst = 0;
  for (std::size_t i = 0; i < a.params().store.params.size(); ++i)
    for (std::size_t j = 0; j < a.params().store.params[i].numel(); ++j)
      worst = std::max(worst, double(std::abs(a.params().store.params[i].value[j] - b.params().store.params[i].value[j])));
  CHECK(worst < 1e-5);
}

// ---- LayerSkip's early-exit loss (issue 28) ------------------------------------------------

#include "lm/layerwise.hpp"
#include "nn/exit_loss.hpp"

// The plan's weights against torchtune's closed forms: sum_l over active layers (l + 1)
// cumulated, e_scale on the intermediate ones, normalised; the rotational set moves one block
// per step; the gradual one turns on from the last block down and is complete at half the run.
TEST_CASE("nn early-exit plan: LayerSkip's weights and curricula") {
  ExitLossOptions o;
  o.scale = 1;
  o.curriculum = ExitCurriculum::all;
  ExitPlan p = exit_loss_plan(o, 4, 0, 10);  // exits after blocks 0, 1, 2; final block 3
  CHECK(p.steps == std::vector<int>{0, 1, 2});
  REQUIRE(p.weights.size() == 3);
  CHECK(p.weights[0] == doctest::Approx(1.0 / 20));  // cumsum(1, 2, 3, 4) = 1, 3, 6, 10
  CHECK(p.weights[1] == doctest::Approx(3.0 / 20));
  CHECK(p.weights[2] == doctest::Approx(6.0 / 20));
  CHECK(p.final_weight == doctest::Approx(10.0 / 20));
  o.scale = 0.5;  // intermediate raw weights halved: 0.5, 1.5, 3 against 10
  p = exit_loss_plan(o, 4, 0, 10);
  CHECK(p.weights[2] == doctest::Approx(3.0 / 15));
  CHECK(p.final_weight == doctest::Approx(10.0 / 15));
  o.scale = 1;
  o.weights = ExitWeights::l;
  p = exit_loss_plan(o, 4, 0, 10);
  CHECK(p.weights[0] == doctest::Approx(1.0 / 10));
  CHECK(p.final_weight == doctest::Approx(4.0 / 10));
  o.weights = ExitWeights::one;
  CHECK(exit_loss_plan(o, 4, 0, 10).final_weight == doctest::Approx(0.25));

  o.weights = ExitWeights::sum_l;
  o.curriculum = ExitCurriculum::rotational;
  o.every = 2;  // blocks 1, 3, 5 (+ the final 7) at step 0; 0, 2, 4, 6 at step 1; back at step 2
  CHECK(exit_loss_plan(o, 8, 0, 10).steps == std::vector<int>{1, 3, 5});
  CHECK(exit_loss_plan(o, 8, 1, 10).steps == std::vector<int>{0, 2, 4, 6});
  CHECK(exit_loss_plan(o, 8, 2, 10).steps == std::vector<int>{1, 3, 5});
  p = exit_loss_plan(o, 8, 0, 10);  // cumsum over active layers 2, 4, 6, 8: 2, 6, 12, 20
  CHECK(p.weights[0] == doctest::Approx(2.0 / 40));
  CHECK(p.final_weight == doctest::Approx(20.0 / 40));

  o.curriculum = ExitCurriculum::gradual;
  o.every = 1;  // block l on once step/100 >= 0.5 (8 - l)/8
  CHECK(exit_loss_plan(o, 8, 0, 100).steps.empty());
  CHECK(exit_loss_plan(o, 8, 0, 100).final_weight == 1.0);
  CHECK(exit_loss_plan(o, 8, 13, 100).steps == std::vector<int>{6});  // 0.13 >= 0.125
  CHECK(exit_loss_plan(o, 8, 50, 100).steps == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
  o.scale = 0;
  CHECK(exit_loss_plan(o, 8, 50, 100).steps.empty());
  o.scale = 1;
  o.every = 0;
  CHECK_THROWS_AS(exit_loss_plan(o, 8, 0, 10), UsageError);
}

// The exit losses are the cross-entropy of the inference engine's logit lens (the final norm and
// head after a block, lm::LayerwiseForward::head), and the gradient of the weighted objective
// matches central finite differences for every tensor (the exits' gradients reach the shared
// head and final norm and every block below them).
TEST_CASE("nn early-exit loss: exit losses are the engine's logit lens, gradient matches finite differences") {
  lm::ModelConfig c = tiny_config(lm::RopeStyle::half, false);
  c.n_layers = 3;
  lm::Model m = lm::random_model(c, 5, 0.3);
  const int B = 2, S = 4, V = c.vocab_size;
  Rng rng(31);
  std::vector<int> tok(B * S), tgt(B * S);
  for (auto& t : tok) t = int(rng.below(V));
  for (auto& t : tgt) t = int(rng.below(V));
  tgt[2] = -1;
  ExitPlan plan;
  plan.steps = {0, 1};
  plan.weights = {0.2, 0.3};
  plan.final_weight = 0.5;

  // Exit losses against the engine, sequence by sequence.
  auto P = params_from_model<double>(m);
  TrainCache<double> cache;
  const double final_loss = llama_loss(P, tok, tgt, B, S, 0.0, cache, static_cast<std::vector<double>*>(nullptr), {}, &plan);
  std::vector<double> lens(3, 0.0);  // after blocks 1, 2, 3
  for (int b = 0; b < B; ++b) {
    lm::KvCache kv(c);
    const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
    const lm::Batch batch = lm::Batch::causal(seq, 0);
    lm::LayerwiseForward pass(m, kv, batch);
    std::vector<int> rows(S);
    std::iota(rows.begin(), rows.end(), 0);
    for (int l = 0; l < 3; ++l) {
      pass.run(1);
      const lm::Matrix z = pass.head(rows);
      for (int t = 0; t < S; ++t) {
        const int y = tgt[b * S + t];
        if (y < 0) continue;
        double mx = -1e300, sum = 0;
        for (int v = 0; v < V; ++v) mx = std::max(mx, double(z.row(t)[v]));
        for (int v = 0; v < V; ++v) sum += std::exp(double(z.row(t)[v]) - mx);
        lens[l] += mx + std::log(sum) - z.row(t)[y];
      }
    }
  }
  REQUIRE(plan.losses.size() == 2);
  CHECK(plan.losses[0] == doctest::Approx(lens[0]).epsilon(1e-5));
  CHECK(plan.losses[1] == doctest::Approx(lens[1]).epsilon(1e-5));
  CHECK(final_loss == doctest::Approx(lens[2]).epsilon(1e-5));
  CHECK(std::abs(lens[0] - lens[2]) > 1e-3);  // the exits are not the final layer

  P.store.zero_grad();
  TrainCache<double> c1;
  llama_loss(P, tok, tgt, B, S, 1.0, c1, static_cast<std::vector<double>*>(nullptr), {}, &plan);
  auto f = [&] {
    TrainCache<double> c2;
    ExitPlan q = plan;
    const double last = llama_loss(P, tok, tgt, B, S, 0.0, c2, static_cast<std::vector<double>*>(nullptr), {}, &q);
    return q.weights[0] * q.losses[0] + q.weights[1] * q.losses[1] + q.final_weight * last;
  };
  for (auto& p : P.store.params) {
    INFO("tensor " << p.name);
    check_grad(f, p.value, p.grad, p.name.c_str(), 2e-6);
  }
  ExitPlan bad = plan;
  bad.steps = {0, 2};  // step 2 is the final block
  TrainCache<double> c3;
  CHECK_THROWS_AS(llama_loss(P, tok, tgt, B, S, 0.0, c3, static_cast<std::vector<double>*>(nullptr), {}, &bad), InputError);
}

namespace {
/// Trains N/2 steps with `o`, saves to scratch `name`, resumes in a fresh trainer for N/2 more:
/// the weights must equal `straight`'s (N steps in one go).  Returns the checkpoint path.
std::filesystem::path check_resume_bitwise(const lm::Model& m, const std::vector<int>& stream, const TrainOptions& o, int N,
                                           Trainer& straight, const std::string& name) {
  Trainer b(m, stream, o);
  for (int i = 0; i < N / 2; ++i) b.step();
  const auto ck = scratch(name);
  io::Provenance prov;
  b.save(ck.string(), prov);
  Trainer r(m, stream, o);
  r.load(ck.string());
  for (int i = 0; i < N / 2; ++i) r.step();
  CHECK(same_weights(straight.params(), r.params()));
  return ck;
}
}  // namespace

// A run with the early-exit loss resumes bit-identically, its trajectory differs from the plain
// run's, and a resume that drops or changes the exit options is refused.
TEST_CASE("nn trainer: the early-exit loss resumes bitwise and is part of the run's options") {
  lm::ModelConfig c = tiny_config(lm::RopeStyle::half, false);
  c.n_layers = 4;
  const lm::Model m = lm::random_model(c, 4, 0.02);
  const auto stream = random_stream(300, c.vocab_size, 1);
  const int N = 6;
  TrainOptions o = small_options(N);
  o.exit.scale = 1;
  o.exit.every = 2;
  Trainer a(m, stream, o);
  StepStats last;
  for (int i = 0; i < N; ++i) last = a.step();
  REQUIRE(last.exit_losses.size() == 2);  // step 6 (t = 5): blocks 0 and 2, layers 1 and 3
  CHECK(last.exit_losses[0].first == 1);
  CHECK(last.exit_losses[1].first == 3);
  CHECK(last.objective != last.loss);
  Trainer plain(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) plain.step();
  CHECK_FALSE(same_weights(a.params(), plain.params()));

  const auto ck = check_resume_bitwise(m, stream, o, N, a, "exit-resume.h5");
  Trainer dropped(m, stream, small_options(N));
  CHECK_THROWS_WITH_AS(dropped.load(ck.string()), doctest::Contains("early-exit loss; pass the same options: --exit-loss 1.0 --exit-every 2"), InputError);
  TrainOptions other = o;
  other.exit.every = 3;
  Trainer changed(m, stream, other);
  CHECK_THROWS_WITH_AS(changed.load(ck.string()), doctest::Contains("option exit_every"), InputError);
  std::filesystem::remove_all(ck.parent_path());
}

// FOAM through the trainer (issue 29): a run resumes bit-identically with its folded moments, and a
// resume with another fold level is refused.
TEST_CASE("nn trainer: FOAM resumes bitwise and its level is part of the run's options") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 6;
  TrainOptions o = small_options(N);
  o.optimizer = "foam";
  o.foam.level = 1;
  Trainer a(m, stream, o);
  for (int i = 0; i < N; ++i) a.step();
  Trainer plain(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) plain.step();
  CHECK_FALSE(same_weights(a.params(), plain.params()));
  CHECK(a.optimizer_state_bytes() < plain.optimizer_state_bytes());
  const auto ck = check_resume_bitwise(m, stream, o, N, a, "foam-resume.h5");
  TrainOptions other = o;
  other.foam.level = 2;
  Trainer changed(m, stream, other);
  CHECK_THROWS_WITH_AS(changed.load(ck.string()), doctest::Contains("option foam_level"), InputError);
  std::filesystem::remove_all(ck.parent_path());
}

// Adam-mini through the trainer (issue 29): its per-block second moments resume bit-identically.
TEST_CASE("nn trainer: Adam-mini resumes bitwise") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 6;
  TrainOptions o = small_options(N);
  o.optimizer = "adam-mini";
  Trainer a(m, stream, o);
  for (int i = 0; i < N; ++i) a.step();
  Trainer plain(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) plain.step();
  CHECK_FALSE(same_weights(a.params(), plain.params()));
  const auto ck = check_resume_bitwise(m, stream, o, N, a, "adam-mini-resume.h5");
  // One value of the saved second moments changed in place (the file stays valid HDF5): the
  // resume is refused by the state checksum instead of training on.
  {
    hid_t f = H5Fopen(ck.string().c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    hid_t ds = H5Dopen2(f, "/train/optim/v/blk.0.attn_q.weight", H5P_DEFAULT);
    REQUIRE(ds >= 0);
    std::vector<float> v(H5Sget_simple_extent_npoints(H5Dget_space(ds)));
    REQUIRE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
    v[0] *= 2.0f;
    REQUIRE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
  }
  Trainer r(m, stream, o);
  CHECK_THROWS_WITH_AS(r.load(ck.string()), doctest::Contains("do not match the checksum"), InputError);
  TrainOptions foam = o;
  foam.optimizer = "foam";
  Trainer other(m, stream, foam);  // another optimizer is named as such, before its own options
  CHECK_THROWS_WITH_AS(other.load(ck.string()), doctest::Contains("option optimizer is \"foam\" here but \"adam-mini\""), InputError);
  std::filesystem::remove_all(ck.parent_path());
}

// GaLore through the trainer (issue 29): bitwise resume with its projections in the checkpoint,
// on one thread as on two.
TEST_CASE("nn trainer: GaLore resumes bitwise and does not depend on the thread count") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 6;
  TrainOptions o = small_options(N);
  o.optimizer = "galore";
  o.galore.rank = 2;
  o.galore.update_gap = 2;
  Trainer a(m, stream, o);
  for (int i = 0; i < N; ++i) a.step();
  const auto ck = check_resume_bitwise(m, stream, o, N, a, "galore-resume.h5");
  const int keep = threads();
  set_threads(1);
  Trainer one(m, stream, o);
  for (int i = 0; i < N; ++i) one.step();
  set_threads(keep);
  CHECK(same_weights(a.params(), one.params()));
  std::filesystem::remove_all(ck.parent_path());
}

// POET-X through the trainer (issue 29): bitwise resume across a merge (W0, Q and the moments in the
// checkpoint, the permutations redrawn from the seed), thread invariance, the memory the paper's
// formula gives (W0: mn frozen; Q: (m + n)(b - 1)/2 trained, two moments each), and a resume
// with another block size refused.
TEST_CASE("nn trainer: POET-X resumes bitwise across a merge and holds the paper's memory") {
  lm::ModelConfig c = tiny_config(lm::RopeStyle::half, false);
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  const lm::Model m = lm::random_model(c, 4, 0.02);
  const auto stream = random_stream(300, c.vocab_size, 1);
  const int N = 6;
  TrainOptions o = small_options(N);
  o.optimizer = "poet-x";
  o.poet.block = 4;
  o.poet.merge_every = 2;  // merges after steps 2, 4 and 6; the resume at 3 sits between two
  o.poet.lr = 1e-2;
  Trainer a(m, stream, o);
  for (int i = 0; i < N; ++i) a.step();
  Trainer plain(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) plain.step();
  // (m + n)(b - 1)/2 per matrix: q 16x16, k and v 8x16, o 16x16, gate and up 24x16, down 16x24
  const std::int64_t q_entries = 2 * (32 + 24 + 24 + 32 + 40 + 40 + 40) * 3 / 2;
  const std::int64_t other = std::int64_t(c.vocab_size) * 16 * 2 + 16 * 5;  // embedding, head, norms
  const std::int64_t frozen = 2 * (256 + 128 + 128 + 256 + 3 * 384);
  CHECK(a.trainable_bytes() == 4 * (q_entries + other));
  CHECK(a.frozen_bytes() == 4 * frozen);
  CHECK(a.optimizer_state_bytes() == 2 * a.trainable_bytes());
  CHECK(plain.frozen_bytes() == 0);
  CHECK(plain.trainable_bytes() == 4 * (frozen + other));
  const auto ck = check_resume_bitwise(m, stream, o, N, a, "poet-resume.h5");
  const int keep = threads();
  set_threads(1);
  Trainer one(m, stream, o);
  for (int i = 0; i < N; ++i) one.step();
  set_threads(keep);
  CHECK(same_weights(a.params(), one.params()));
  // The clip ramp after each merge (calc_poet_grad_clipping_value): T = 4, 10 ramp steps, so the
  // limit stays below c through the cycle; none before the first merge or past clip_ramp_until.
  {
    TrainOptions r = o;
    r.steps = 12;
    r.clip = 2.0;
    r.poet.merge_every = 4;
    r.poet.clip_ramp_until = 9;
    Trainer t(m, stream, r);
    std::vector<double> limits;
    for (int i = 0; i < 11; ++i) {
      limits.push_back(t.clip_limit());
      t.step();
    }
    const std::vector<double> want{2, 2, 2, 2, 0.2, 0.38, 0.56, 0.74, 0.2, 0.38, 2};
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(limits[i] == doctest::Approx(want[i]));
    CHECK(plain.clip_limit() == o.clip);
  }
  TrainOptions other_b = o;
  other_b.poet.block = 2;
  Trainer changed(m, stream, other_b);
  CHECK_THROWS_WITH_AS(changed.load(ck.string()), doctest::Contains("option poet_block"), InputError);
  std::filesystem::remove_all(ck.parent_path());
}

// Sparse training through the trainer (issue 30, SMET and its baselines).
namespace {
/// Every sparse matrix: entries outside the mask exactly 0, the exact block count, a gradient
/// sized to the active entries.
void check_masks_hold(Trainer& t, double density) {
  REQUIRE_FALSE(t.sparse_masks().empty());
  for (const auto& [i, mask] : t.sparse_masks()) {
    const Param<float>& W = t.params().store.params[std::size_t(i)];
    CHECK(mask.blocks.size() == sparse_block_count(W.numel(), mask.block, density));
    std::vector<char> on(W.numel(), 0);
    for (std::int32_t j : mask.entries()) on[std::size_t(j)] = 1;
    std::size_t off_nonzero = 0;
    for (std::size_t j = 0; j < W.numel(); ++j) off_nonzero += !on[j] && W.value[j] != 0.0f;
    CHECK(off_nonzero == 0);
    CHECK(W.grad.size() == mask.active_entries());
  }
}
}  // namespace

// Masks hold at every step (pruned weights exactly 0, the density exact, gradients only for active
// entries), topology updates happen every u steps with pruned = regrown per matrix, the run resumes
// bitwise across an update (masks, local steps and sparse state in the checkpoint) for SMET, SET and
// RigL, and a sparse checkpoint is refused by a dense run.
TEST_CASE("nn trainer: sparse masks hold, the density stays exact, and resume across a topology update is bitwise") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 8;
  for (SparseMethod method : {SparseMethod::smet, SparseMethod::set, SparseMethod::rigl}) {
    INFO(sparse_method_name(method));
    TrainOptions o = small_options(N);
    o.sparse.method = method;
    o.sparse.density = 0.5;
    o.sparse.update_every = 3;  // updates after steps 3 and 6; the resume at 4 sits between them
    o.sparse.block = method == SparseMethod::set ? 3 : 1;
    o.sparse.prune_rate = 0.3;
    resolve_sparse_options(o.sparse, false);
    Trainer a(m, stream, o);
    check_masks_hold(a, 0.5);
    const auto before = a.sparse_masks();
    int updates = 0;
    for (int s = 1; s <= N; ++s) {
      const StepStats st = a.step();
      check_masks_hold(a, 0.5);
      if (st.topology) {
        ++updates;
        CHECK(st.step % 3 == 0);
        for (const auto& L : st.topology->layers) {
          CHECK(L.pruned == L.regrown);
          CHECK(L.pruned > 0);
        }
      }
      CHECK(std::isnan(st.probe_loss) == !(s == 2 || s == 4 || s == 5 || s == 7 || s == 8));
    }
    CHECK(updates == 2);
    CHECK(a.sparse_masks()[0].second.blocks != before[0].second.blocks);
    const auto ck = check_resume_bitwise(m, stream, o, N, a, "sparse-resume.h5");
    Trainer dense(m, stream, small_options(N));
    CHECK_THROWS_WITH_AS(dense.load(ck.string()), doctest::Contains("trained sparse"), InputError);
    std::filesystem::remove_all(ck.parent_path());
  }
  // static: the mask never changes, and the probe batch is logged at the would-be updates (the
  // control of the optimizer spike): u - 1 (-1), u (0), u + 1 .. (k)
  TrainOptions o = small_options(N);
  o.sparse.method = SparseMethod::fixed;
  o.sparse.density = 0.5;
  o.sparse.update_every = 3;
  Trainer t(m, stream, o);
  const auto mask0 = t.sparse_masks();
  std::vector<int> since;
  for (int s = 1; s <= N; ++s) {
    const StepStats st = t.step();
    CHECK_FALSE(st.topology);
    since.push_back(std::isnan(st.probe_loss) ? 99 : st.since_update);
  }
  CHECK(since == std::vector<int>{99, -1, 0, 1, -1, 0, 1, 2});
  CHECK(t.sparse_masks()[0].second.blocks == mask0[0].second.blocks);
  check_masks_hold(t, 0.5);
}

// --probe-control: the run itself is bit-identical to one without it (the branch rewinds weights,
// optimizer state, counts and data order; RigL keeps its scoring gradient), and the branch's probe
// losses are those of a run that simply skips the update: the same options with update_every 2u
// (no update at u, the same trajectory up to it) probed after steps u + 1 .. u + k, bit for bit.
TEST_CASE("nn trainer: the paired spike control leaves the run untouched and is the run without the update") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 8, U = 3, K = 2;
  for (SparseMethod method : {SparseMethod::set, SparseMethod::rigl, SparseMethod::smet}) {
    INFO(sparse_method_name(method));
    TrainOptions o = small_options(N);
    o.sparse.method = method;
    o.sparse.density = 0.5;
    o.sparse.update_every = U;
    o.sparse.prune_rate = 0.3;
    o.sparse.probe_steps = K;
    resolve_sparse_options(o.sparse, false);
    TrainOptions c = o;
    c.sparse.probe_control = true;
    Trainer plain(m, stream, o), paired(m, stream, c);
    std::vector<double> control;
    for (int s = 1; s <= N; ++s) {
      const StepStats a = plain.step(), b = paired.step();
      CHECK(a.loss == b.loss);
      CHECK((std::isnan(a.probe_loss) ? std::isnan(b.probe_loss) : a.probe_loss == b.probe_loss));
      REQUIRE(bool(a.topology) == bool(b.topology));
      if (b.topology) {
        CHECK(a.topology->control_probe.empty());
        CHECK(b.topology->control_probe.size() == std::size_t(K));
        CHECK(a.topology->probe_after == b.topology->probe_after);
        if (s == U) control = b.topology->control_probe;
      }
    }
    CHECK(same_weights(plain.params(), paired.params()));
    CHECK(plain.sparse_masks()[0].second.blocks == paired.sparse_masks()[0].second.blocks);
    CHECK(plain.optimizer_state_bytes() == paired.optimizer_state_bytes());
    TrainOptions skip = o;
    skip.sparse.update_every = 2 * U;
    Trainer t(m, stream, skip);
    for (int s = 1; s <= U; ++s) t.step();
    REQUIRE(control.size() == std::size_t(K));
    for (int k = 0; k < K; ++k) {
      t.step();
      CHECK(t.probe_loss() == control[std::size_t(k)]);
    }
  }
}

// --density 1 keeps every matrix dense: each method is plain AdamW training bit for bit (the SMET
// warm-up in the paper's form acts on sparse entries only); the sparse backward's gathered gradient
// is the dense gradient at the active entries, bit for bit, and nothing else.
TEST_CASE("nn trainer: density 1 is dense training bit for bit, and the sparse gradient is the dense one gathered") {
  const lm::Model m = lm::random_model(tiny_config(lm::RopeStyle::half, false), 4, 0.02);
  const auto stream = random_stream(300, m.config.vocab_size, 1);
  const int N = 5;
  Trainer plain(m, stream, small_options(N));
  for (int i = 0; i < N; ++i) plain.step();
  for (SparseMethod method : {SparseMethod::fixed, SparseMethod::set, SparseMethod::rigl, SparseMethod::smet}) {
    TrainOptions o = small_options(N);
    o.sparse.method = method;
    o.sparse.density = 1.0;
    o.sparse.update_every = 2;
    resolve_sparse_options(o.sparse, false);
    Trainer t(m, stream, o);
    CHECK(t.sparse_masks().empty());
    for (int i = 0; i < N; ++i) t.step();
    INFO(sparse_method_name(method));
    CHECK(same_weights(plain.params(), t.params()));
  }
  LlamaParams<float> dense = params_from_model<float>(m), sparse = dense;
  const int wq = 1 + LlamaParams<float>::wq;
  sparse.sparse.assign(sparse.store.params.size(), {});
  sparse.sparse[wq] = {0, 5, 6, 17, 40};
  sparse.store.params[wq].grad.assign(5, 0.0f);
  std::vector<int> in(stream.begin(), stream.begin() + 16), tg(stream.begin() + 1, stream.begin() + 17);
  TrainCache<float> c1, c2;
  llama_loss(dense, in, tg, 2, 8, 0.1, c1);
  llama_loss(sparse, in, tg, 2, 8, 0.1, c2);
  for (std::size_t k = 0; k < 5; ++k) CHECK(sparse.store.params[wq].grad[k] == dense.store.params[wq].grad[std::size_t(sparse.sparse[wq][k])]);
  CHECK(sparse.store.params[wq + 1].grad == dense.store.params[wq + 1].grad);
}

