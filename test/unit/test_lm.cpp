// lm/: half-precision storage, the batch-invariant matmul, the decoder forward against an
// independent double-precision reference, KV-cache views, checkpoints, sampling, tokenizer.
#include <doctest/doctest.h>

#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "io/h5array.hpp"
#include "lm/forward.hpp"
#include "lm/matmul.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "lm/support.hpp"
#include "lm/tokenizer.hpp"
#include "num/half.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

ModelConfig tiny_config(RopeStyle style = RopeStyle::half, bool tied = false) {
  ModelConfig c;
  c.vocab_size = 61;
  c.d_model = 36;   // head_dim 12 (not a multiple of 8: exercises the zero-padded tail)
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 50;
  c.n_ctx = 64;
  c.rope_theta = 10000.0;
  c.rope_style = style;
  c.tied = tied;
  return c;
}

Model tiny_model(RopeStyle style = RopeStyle::half, bool tied = false, std::uint64_t seed = 7) {
  Model m = random_model(tiny_config(style, tied), seed, 0.2);
  // Non-trivial norm weights so that a wrong norm is visible.
  Rng rng(seed + 100);
  for (auto& l : m.layers)
    for (auto* v : {&l.attn_norm, &l.ffn_norm})
      for (auto& w : *v) w = static_cast<float>(0.5 + rng.uniform());
  for (auto& w : m.output_norm) w = static_cast<float>(0.5 + rng.uniform());
  return m;
}

// ---- an independent reference: plain loops in double, full attention over explicit keys ----
struct RefKV {
  std::vector<std::vector<double>> k, v;  // per (layer*n_kv + head): list of vectors
};

using Vec = std::vector<double>;

Vec ref_matvec(const Matrix& W, const Vec& x) {
  Vec y(W.rows, 0.0);
  for (int o = 0; o < W.rows; ++o)
    for (int k = 0; k < W.cols; ++k) y[o] += double(W.row(o)[k]) * x[k];
  return y;
}

Vec ref_norm(const Vec& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double a : x) ss += a * a;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * inv;
  return y;
}

void ref_rope(double* x, int hd, int pos, const ModelConfig& c) {
  for (int i = 0; i < hd / 2; ++i) {
    const double ang = pos * std::pow(c.rope_theta, -2.0 * i / hd);
    const int a = c.rope_style == RopeStyle::half ? i : 2 * i;
    const int b = c.rope_style == RopeStyle::half ? i + hd / 2 : 2 * i + 1;
    const double x1 = x[a], x2 = x[b];
    x[a] = x1 * std::cos(ang) - x2 * std::sin(ang);
    x[b] = x2 * std::cos(ang) + x1 * std::sin(ang);
  }
}

/// Runs tokens[0..n) at positions pos[i]; row i attends keys `keys[i]` = indices of earlier
/// tokens (itself included) per (layer, kv head) — given as a function.  Returns per layer
/// hidden states [n_layers+1][n][d] and logits [n][vocab].
struct RefOut {
  std::vector<std::vector<Vec>> hidden;
  std::vector<Vec> logits;
};

template <class Keys>
RefOut ref_forward(const Model& m, const std::vector<int>& tokens, const std::vector<int>& pos, Keys keys) {
  const auto& c = m.config;
  const int n = tokens.size(), d = c.d_model, hd = c.head_dim();
  RefOut out;
  std::vector<Vec> x(n, Vec(d));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) x[i][j] = m.token_embd.row(tokens[i])[j];
  out.hidden.push_back(x);
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = m.layers[l];
    std::vector<Vec> q(n), k(n), v(n);
    for (int i = 0; i < n; ++i) {
      const Vec xn = ref_norm(x[i], L.attn_norm, c.rms_eps);
      q[i] = ref_matvec(L.wq, xn);
      k[i] = ref_matvec(L.wk, xn);
      v[i] = ref_matvec(L.wv, xn);
      for (int h = 0; h < c.n_heads; ++h) ref_rope(q[i].data() + h * hd, hd, pos[i], c);
      for (int h = 0; h < c.n_kv_heads; ++h) ref_rope(k[i].data() + h * hd, hd, pos[i], c);
    }
    for (int i = 0; i < n; ++i) {
      Vec att(c.n_heads * hd, 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / c.group();
        const std::vector<int> ks = keys(l, g, i);
        Vec s(ks.size());
        double mx = -1e300;
        for (std::size_t j = 0; j < ks.size(); ++j) {
          double dot = 0;
          for (int e = 0; e < hd; ++e) dot += q[i][h * hd + e] * k[ks[j]][g * hd + e];
          s[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& a : s) { a = std::exp(a - mx); z += a; }
        for (std::size_t j = 0; j < ks.size(); ++j)
          for (int e = 0; e < hd; ++e) att[h * hd + e] += s[j] / z * v[ks[j]][g * hd + e];
      }
      const Vec o = ref_matvec(L.wo, att);
      for (int j = 0; j < d; ++j) x[i][j] += o[j];
      const Vec xn = ref_norm(x[i], L.ffn_norm, c.rms_eps);
      const Vec ga = ref_matvec(L.w_gate, xn), up = ref_matvec(L.w_up, xn);
      Vec hmid(c.d_ff);
      for (int j = 0; j < c.d_ff; ++j) hmid[j] = ga[j] / (1.0 + std::exp(-ga[j])) * up[j];
      const Vec dn = ref_matvec(L.w_down, hmid);
      for (int j = 0; j < d; ++j) x[i][j] += dn[j];
    }
    out.hidden.push_back(x);
  }
  for (int i = 0; i < n; ++i) out.logits.push_back(ref_matvec(m.head(), ref_norm(x[i], m.output_norm, c.rms_eps)));
  return out;
}

double max_rel_err(const float* got, const Vec& want) {
  double scale = 1e-3, err = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  return err / scale;
}

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

std::vector<int> upto(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

// ---- half precision --------------------------------------------------------------------------

TEST_CASE("lm: f16 conversion agrees with the compiler's _Float16 and round-trips every half") {
  // Truth: GCC's _Float16 conversions (libgcc soft-float, IEEE round-to-nearest-even).
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = num::f16_to_f32(static_cast<std::uint16_t>(h));
    _Float16 ref;
    std::uint16_t hb = static_cast<std::uint16_t>(h);
    std::memcpy(&ref, &hb, 2);
    if (std::isnan(f)) { CHECK(std::isnan(static_cast<float>(ref))); continue; }
    REQUIRE(f == static_cast<float>(ref));
    REQUIRE(num::f32_to_f16(f) == h);
  }
  Rng rng(3);
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.bits());
    if (i % 2) u = (u & 0x807fffffu) | ((100u + (u >> 24) % 50u) << 23);  // dense near f16 range
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    std::uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    REQUIRE(num::f32_to_f16(f) == rb);
  }
}

TEST_CASE("lm: bf16 rounds to nearest even and widens exactly") {
  CHECK(num::f32_to_bf16(1.0f) == 0x3f80);
  auto from_bits = [](std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  CHECK(num::f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);  // tie -> even (down)
  CHECK(num::f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(num::f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(num::f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to infinity
  CHECK(std::isnan(num::bf16_to_f32(num::f32_to_bf16(std::nanf("")))));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = num::bf16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(num::f32_to_bf16(f) == h);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    REQUIRE(u == (h << 16));
  }
}

// ---- matmul ------------------------------------------------------------------------------------

TEST_CASE("lm: matmul matches double, and is batch, thread and code-path invariant bitwise") {
  for (const int R : {19, 20}) {  // row tails of 1 and 2 after 3-row tiles
  CAPTURE(R);
  const int K = 45, O = 23;  // K % 8 != 0, O % 4 != 0 (column tails)
  Rng rng(11);
  std::vector<float> x(R * K), W(O * K), y(R * O), y1(O), y2(R * O), y3(R * O);
  for (auto& a : x) a = static_cast<float>(rng.normal());
  for (auto& a : W) a = static_cast<float>(rng.normal());
  matmul_xwt(x.data(), R, K, K, W.data(), O, y.data(), O);
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(x[r * K + k]) * W[o * K + k];
      REQUIRE(std::fabs(y[r * O + o] - ref) < 1e-5 * (1 + std::fabs(ref)));  // f32 rounding, K = 45
    }
  for (int r = 0; r < R; ++r) {  // each row alone
    matmul_xwt(x.data() + r * K, 1, K, K, W.data(), O, y1.data(), O);
    REQUIRE(same_bits(y1.data(), y.data() + r * O, O));
  }
  matmul_xwt_path(x.data(), R, K, K, W.data(), O, y2.data(), O, false, 1);
  CHECK(same_bits(y.data(), y2.data(), y.size()));
  matmul_xwt_path(x.data(), R, K, K, W.data(), O, y3.data(), O, true, 2);
  CHECK(same_bits(y.data(), y3.data(), y.size()));
  CHECK(dot8(x.data(), W.data(), K) == y[0]);
  }
}

// ---- forward against the reference ---------------------------------------------------------------

TEST_CASE("lm: prefill, decode and per-head views match the double-precision reference") {
  for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved})
    for (bool tied : {false, true}) {
      CAPTURE(rope_style_name(style));
      CAPTURE(tied);
      const Model m = tiny_model(style, tied);
      const std::vector<int> toks = {1, 17, 5, 60, 33, 2, 9, 44};
      const std::vector<int> pos = upto(8);
      auto causal = [](int, int, int i) { return upto(i + 1); };
      const RefOut ref = ref_forward(m, toks, pos, causal);
      // Tolerance: float32 end to end on O(1) activations over 2 layers, relative to the
      // largest magnitude of each vector; measured errors are ~1e-6.
      const double tol = 2e-5;

      KvCache cache(m.config);
      ForwardOptions opt;
      opt.hidden = true;
      const ForwardResult pre = forward(m, cache, Batch::causal({toks.begin(), toks.begin() + 7}, 0), opt);
      cache.commit_all();
      for (int l = 0; l <= m.config.n_layers; ++l)
        for (int i = 0; i < 7; ++i) CHECK(max_rel_err(pre.hidden[l].row(i), ref.hidden[l][i]) < tol);
      for (int i = 0; i < 7; ++i) CHECK(max_rel_err(pre.logits.row(i), ref.logits[i]) < tol);

      Batch dec;
      dec.add(toks[7], 7);
      const ForwardResult one = forward(m, cache, dec);
      CHECK(max_rel_err(one.logits.row(0), ref.logits[7]) < tol);

      // A per-head compressed view: the new row sees cache slots {0, 2, 5} and itself.
      Batch vb;
      const int vid = vb.add_view(View::per_head({{0, 2, 5}, {0, 2, 5}}));
      vb.add(toks[7], 7, vid);
      const ForwardResult viewed = forward(m, cache, vb);
      auto sparse = [](int, int, int i) { return i == 7 ? std::vector<int>{0, 2, 5, 7} : upto(i + 1); };
      const RefOut ref_sparse = ref_forward(m, toks, pos, sparse);
      CHECK(max_rel_err(viewed.logits.row(0), ref_sparse.logits[7]) < tol);
      CHECK(max_rel_err(viewed.logits.row(0), ref.logits[7]) > 1e-3);  // the view matters
    }
}

TEST_CASE("lm: a tree-masked batch gives each row the logits it gets decoded alone, bitwise") {
  const Model m = tiny_model();
  KvCache base(m.config);
  forward(m, base, Batch::causal({1, 4, 9, 16}, 0));
  base.commit_all();
  // Tree over positions 4..6: a(4) -> b(5), c(5); b -> d(6); c -> e(6); plus a row with a
  // compressed view mixed in, and a plain AR row.
  Batch t;
  const int a = t.add(7, 4);
  const int b = t.add(8, 5, 0, {a});
  const int cc = t.add(11, 5, 0, {a});
  const int d = t.add(12, 6, 0, {a, b});
  const int e = t.add(13, 6, 0, {a, cc});
  const int vid = t.add_view(View::prefix(2));
  const int f = t.add(20, 4, vid);
  const std::vector<std::vector<int>> ancestors = {{}, {a}, {a}, {a, b}, {a, cc}, {}};
  for (int th : {1, 2}) {
    set_threads(th);
    KvCache cache = base;
    const ForwardResult all = forward(m, cache, t);
    for (int r : {a, b, cc, d, e, f}) {
      CAPTURE(r);
      KvCache alone = base;
      for (int anc : ancestors[r]) {  // commit ancestors by plain sequential decoding
        Batch s;
        s.add(t.rows[anc].token, t.rows[anc].pos);
        forward(m, alone, s);
        alone.commit_all();
      }
      Batch s;
      s.add(t.rows[r].token, t.rows[r].pos);
      if (r == f) s.rows[0].view = s.add_view(View::prefix(2));
      const ForwardResult one = forward(m, alone, s);
      CHECK(same_bits(one.logits.row(0), all.logits.row(r), m.config.vocab_size));
    }
  }
  set_threads(0);
}

// Contract v2 (issue 25), the early-exit hook: stopping after block l gives bitwise the residual
// and logits of the same model truncated to its first l blocks, run by hand.
TEST_CASE("lm: stop after block l equals running the first l blocks") {
  for (const bool demo : {false, true}) {
  const Model m = demo ? load_checkpoint(std::string(ICMLKIT_REPO_DATA) + "/models/kjv7m.h5") : tiny_model();
  const std::vector<int> prompt{1, 4, 9, 16, 25, 3};
  for (int l = 0; l <= m.config.n_layers; ++l) {
    CAPTURE(l);
    Model cut = m;
    cut.config.n_layers = l;
    cut.layers.resize(l);
    ForwardOptions o;
    o.stop_after = l;
    o.hidden = true;
    KvCache c1(m.config);
    const ForwardResult early = forward(m, c1, Batch::causal(prompt, 0), o);
    REQUIRE(static_cast<int>(early.hidden.size()) == l + 1);
    if (l == 0) {  // no block: the head on the embeddings
      CHECK(same_bits(early.logits.data.data(), apply_head(m, early.hidden[0]).data.data(), early.logits.data.size()));
      continue;
    }
    KvCache c2(cut.config);
    ForwardOptions h;
    h.hidden = true;
    const ForwardResult hand = forward(cut, c2, Batch::causal(prompt, 0), h);
    CHECK(same_bits(early.hidden[l].data.data(), hand.hidden[l].data.data(), hand.hidden[l].data.size()));
    CHECK(same_bits(early.logits.data.data(), hand.logits.data.data(), hand.logits.data.size()));
  }
  ForwardOptions bad;
  bad.stop_after = m.config.n_layers + 1;
  KvCache c3(m.config);
  CHECK_THROWS_WITH_AS(forward(m, c3, Batch::causal(prompt, 0), bad), doctest::Contains("stop_after"), InputError);
  }
}

// On the demo model: a schedule that leaves blocks out is bitwise the self-speculative draft's
// current way of skipping them (both sublayers skipped: the residual passes through).
TEST_CASE("lm: a schedule leaving blocks out equals the self-speculative layer skip") {
  const Model m = load_checkpoint(std::string(ICMLKIT_REPO_DATA) + "/models/kjv7m.h5");
  const std::vector<int> prompt{1, 40, 900, 16, 250, 3, 77};
  ForwardOptions skip;
  skip.skip_attn.assign(m.config.n_layers, 0);
  skip.skip_mlp.assign(m.config.n_layers, 0);
  ForwardOptions sched;
  for (int l = 0; l < m.config.n_layers; ++l) {
    if (l % 2) skip.skip_attn[l] = skip.skip_mlp[l] = 1;
    else sched.schedule.push_back(l);
  }
  KvCache a(m.config), b(m.config, static_cast<int>(sched.schedule.size()));
  const ForwardResult ra = forward(m, a, Batch::causal(prompt, 0), skip);
  const ForwardResult rb = forward(m, b, Batch::causal(prompt, 0), sched);
  CHECK(same_bits(ra.logits.data.data(), rb.logits.data.data(), ra.logits.data.size()));
}

// Contract v2 (issue 25), the block schedule: repeating a block (recurrent depth) or leaving
// blocks out gives bitwise the model whose block list is written out that way, prefill and a
// decode step on the committed cache alike.
TEST_CASE("lm: a block schedule equals the model with its blocks repeated or left out") {
  const Model m = tiny_model();  // 2 blocks
  const std::vector<int> prompt{1, 4, 9, 16, 25};
  for (const std::vector<int>& schedule : {std::vector<int>{0, 1, 1}, {1, 1, 1, 0}, {1}, {0, 0}}) {
    CAPTURE(schedule.size());
    Model unrolled = m;
    unrolled.layers.clear();
    for (int l : schedule) unrolled.layers.push_back(m.layers[l]);
    unrolled.config.n_layers = static_cast<int>(schedule.size());
    ForwardOptions o;
    o.schedule = schedule;
    o.hidden = true;
    KvCache c1(m.config, static_cast<int>(schedule.size())), c2(unrolled.config);
    ForwardOptions h;
    h.hidden = true;
    const ForwardResult a = forward(m, c1, Batch::causal(prompt, 0), o);
    const ForwardResult b = forward(unrolled, c2, Batch::causal(prompt, 0), h);
    REQUIRE(a.hidden.size() == schedule.size() + 1);
    CHECK(same_bits(a.logits.data.data(), b.logits.data.data(), b.logits.data.size()));
    CHECK(same_bits(a.hidden.back().data.data(), b.hidden.back().data.data(), b.hidden.back().data.size()));
    c1.commit_all();
    c2.commit_all();
    Batch step;
    step.add(7, 5);
    const ForwardResult a2 = forward(m, c1, step, o), b2 = forward(unrolled, c2, step, h);
    CHECK(same_bits(a2.logits.data.data(), b2.logits.data.data(), b2.logits.data.size()));
  }
  ForwardOptions o;
  o.schedule = {0, 1, 1};
  KvCache wrong(m.config);  // 2 layers for a 3-step schedule
  CHECK_THROWS_WITH_AS(forward(m, wrong, Batch::causal(prompt, 0), o), doctest::Contains("schedule needs a cache of its length"),
                       InputError);
  o.schedule = {0, 2};
  KvCache two(m.config);
  CHECK_THROWS_WITH_AS(forward(m, two, Batch::causal(prompt, 0), o), doctest::Contains("names block 2 of 2"), InputError);
}

// Contract v2 (issue 25), unmerged adapters: with B = 0 the logits are bitwise the base model's;
// with random A, B on every projection they equal the model with W + scale·B·A merged (in
// double) within float rounding (1e-4 of the logits' scale: two sums of ~d terms per product).
TEST_CASE("lm: unmerged adapters equal the merged weights") {
  const Model m = tiny_model();
  const ModelConfig& c = m.config;
  Rng rng(17);
  std::vector<Adapter> ads;
  Model merged = m;
  const int rank = 3;
  for (int l = 0; l < c.n_layers; ++l)
    for (Projection p : {Projection::attn_q, Projection::attn_k, Projection::attn_v, Projection::attn_output,
                         Projection::ffn_gate, Projection::ffn_up, Projection::ffn_down}) {
      Matrix* W = nullptr;
      auto& L = merged.layers[l];
      switch (p) {
        case Projection::attn_q: W = &L.wq; break;
        case Projection::attn_k: W = &L.wk; break;
        case Projection::attn_v: W = &L.wv; break;
        case Projection::attn_output: W = &L.wo; break;
        case Projection::ffn_gate: W = &L.w_gate; break;
        case Projection::ffn_up: W = &L.w_up; break;
        case Projection::ffn_down: W = &L.w_down; break;
      }
      Adapter a{l, p, Matrix(rank, W->cols), Matrix(W->rows, rank), 0.5f};
      for (auto& x : a.A.data) x = static_cast<float>(0.3 * rng.normal());
      for (auto& x : a.B.data) x = static_cast<float>(0.3 * rng.normal());
      for (int o = 0; o < W->rows; ++o)
        for (int i = 0; i < W->cols; ++i) {
          double s = 0;
          for (int k = 0; k < rank; ++k) s += double(a.B.data[o * rank + k]) * a.A.data[k * W->cols + i];
          W->data[std::size_t(o) * W->cols + i] = static_cast<float>(W->data[std::size_t(o) * W->cols + i] + 0.5 * s);
        }
      ads.push_back(std::move(a));
    }
  const std::vector<int> prompt{1, 4, 9, 16, 25};
  ForwardOptions o;
  o.adapters = &ads;
  KvCache k1(c), k2(c), k3(c), k4(c);
  const ForwardResult with = forward(m, k1, Batch::causal(prompt, 0), o);
  const ForwardResult ref = forward(merged, k2, Batch::causal(prompt, 0));
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < ref.logits.data.size(); ++i) {
    err = std::max(err, double(std::abs(with.logits.data[i] - ref.logits.data[i])));
    scale = std::max(scale, double(std::abs(ref.logits.data[i])));
  }
  CAPTURE(err);
  CHECK(err < 1e-4 * scale);
  const ForwardResult base = forward(m, k3, Batch::causal(prompt, 0));
  CHECK_FALSE(same_bits(base.logits.data.data(), with.logits.data.data(), base.logits.data.size()));
  std::vector<Adapter> zero = ads;
  for (auto& a : zero) std::fill(a.B.data.begin(), a.B.data.end(), 0.0f);
  o.adapters = &zero;
  const ForwardResult z = forward(m, k4, Batch::causal(prompt, 0), o);
  CHECK(same_bits(base.logits.data.data(), z.logits.data.data(), base.logits.data.size()));
  std::vector<Adapter> bad{Adapter{0, Projection::ffn_down, Matrix(2, c.d_model), Matrix(c.d_model, 2), 1.0f}};
  o.adapters = &bad;  // ffn_down's input is d_ff = 50 wide
  KvCache k5(c);
  CHECK_THROWS_WITH_AS(forward(m, k5, Batch::causal(prompt, 0), o), doctest::Contains("A must be [rank, 50]"), InputError);
  CHECK(parse_projection("attn_v") == Projection::attn_v);
  CHECK_THROWS_AS(parse_projection("qkv"), InputError);
}

// The one table of supported combinations (lm/support.hpp): the CPU engine runs every hook, the
// CUDA engine and the trainer refuse what they lack with a UsageError (exit 2) naming it.
TEST_CASE("lm: the support table refuses what a runner lacks, with exit-2 errors") {
  for (Feature f : {Feature::block_llama, Feature::stop_after, Feature::block_schedule, Feature::adapters,
                    Feature::multi_sequence, Feature::attention_records})
    CHECK(supports(Runner::cpu_engine, f));
  CHECK(supports(Runner::cuda_engine, Feature::block_llama));
  CHECK_FALSE(supports(Runner::cuda_engine, Feature::stop_after));
  CHECK_FALSE(supports(Runner::cuda_engine, Feature::multi_sequence));
  CHECK(supports(Runner::trainer, Feature::multi_sequence));
  CHECK_FALSE(supports(Runner::trainer, Feature::adapters));
  CHECK(supports(Runner::trainer, Feature::block_schedule));
  CHECK_THROWS_WITH_AS(require(Runner::cuda_engine, Feature::adapters, "merge them"),
                       "the CUDA engine does not support unmerged adapters (merge them)", UsageError);
  CHECK_NOTHROW(require(Runner::cpu_engine, Feature::adapters));
  CHECK_NOTHROW(require_blocks(Runner::trainer, tiny_model().config));
}

// Contract v2 (issue 25): rows of several independent sequences in one pass, each with its own
// positions, cache and causal mask (and a per-head view in one of them), give every row bitwise
// the logits and K/V it gets with its own sequence alone.
TEST_CASE("lm: two sequences in one pass give each its bits alone") {
  for (const bool demo : {false, true}) {
  const Model m = demo ? load_checkpoint(std::string(ICMLKIT_REPO_DATA) + "/models/kjv7m.h5") : tiny_model();
  KvCache ca(m.config), cb(m.config);
  forward(m, ca, Batch::causal({1, 4, 9, 16, 25}, 0));
  ca.commit_all();
  forward(m, cb, Batch::causal({1, 30, 2}, 0));
  cb.commit_all();
  // Sequence 0: a 3-token continuation at positions 5..7; sequence 1: 4 tokens at 3..6, the
  // last one through a prefix view of the cache.
  const Batch a = Batch::causal({7, 8, 11}, 5);
  Batch b = Batch::causal({12, 13, 14, 15}, 3);
  b.rows[3].view = b.add_view(View::prefix(2));
  for (int th : {1, 2}) {
    set_threads(th);
    KvCache a1 = ca, b1 = cb, a2 = ca, b2 = cb;
    const ForwardResult ra = forward(m, a1, a), rb = forward(m, b1, b);
    // Sequence 1's rows first, then sequence 0's: batch indices differ from either alone.
    Batch both;
    both.append(b, 1);
    both.append(a, 0);
    const ForwardResult rab = forward(m, std::vector<KvCache*>{&a2, &b2}, both);
    REQUIRE(rab.logits.rows == a.size() + b.size());
    for (int r = 0; r < b.size(); ++r) CHECK(same_bits(rab.logits.row(r), rb.logits.row(r), m.config.vocab_size));
    for (int r = 0; r < a.size(); ++r)
      CHECK(same_bits(rab.logits.row(b.size() + r), ra.logits.row(r), m.config.vocab_size));
    for (int l = 0; l < m.config.n_layers; ++l)
      for (int h = 0; h < m.config.n_kv_heads; ++h) {
        for (int r = 0; r < a.size(); ++r)
          CHECK(same_bits(a2.pending_key(l, h, r), a1.pending_key(l, h, r), m.config.head_dim()));
        for (int r = 0; r < b.size(); ++r)
          CHECK(same_bits(b2.pending_value(l, h, r), b1.pending_value(l, h, r), m.config.head_dim()));
      }
    a2.commit_all();
    CHECK(a2.size() == ca.size() + a.size());
  }
  set_threads(0);
  // A row may not attend another sequence's row, nor name a sequence without a cache.
  Batch bad;
  bad.add(3, 5, 0, {}, 0);
  bad.add(4, 3, 0, {0}, 1);
  KvCache x = ca, y = cb;
  CHECK_THROWS_WITH_AS(forward(m, std::vector<KvCache*>{&x, &y}, bad), doctest::Contains("another sequence"), InputError);
  Batch far;
  far.add(3, 5, 0, {}, 2);
  CHECK_THROWS_WITH_AS(forward(m, std::vector<KvCache*>{&x, &y}, far), doctest::Contains("sequence 2 outside the 2 cache(s)"),
                       InputError);
  CHECK_THROWS_WITH_AS(forward(m, x, far), doctest::Contains("outside the 1 cache(s)"), InputError);
  }
}

TEST_CASE("lm: logits of a row do not depend on batch size or thread count") {
  const Model m = tiny_model(RopeStyle::interleaved);
  KvCache base(m.config);
  forward(m, base, Batch::causal({3, 1, 4, 1, 5, 9}, 0));
  base.commit_all();
  Matrix ref;
  for (int th : {1, 2}) {
    set_threads(th);
    for (int k : {1, 2, 3, 7, 16}) {
      Batch b;
      for (int i = 0; i < k; ++i) b.add(i == 0 ? 26 : (5 * i) % 61, 6);  // independent drafts
      KvCache cache = base;
      const ForwardResult r = forward(m, cache, b);
      if (ref.rows == 0) ref = r.logits;
      CHECK(same_bits(r.logits.row(0), ref.row(0), m.config.vocab_size));
    }
  }
  set_threads(0);
}

TEST_CASE("lm: KV cache truncate and retain agree with views") {
  const Model m = tiny_model();
  KvCache cache(m.config);
  forward(m, cache, Batch::causal({5, 6, 7, 8, 9, 10}, 0));
  cache.commit({0, 1, 2, 3, 4, 5});
  CHECK(cache.size() == 6);
  // Per-head view {1, 3, 4} on the full cache == full view on the cache retaining {1, 3, 4}.
  Batch vb;
  vb.rows.push_back({30, 6, vb.add_view(View::per_head({{1, 3, 4}, {1, 3, 4}})), {}});
  KvCache c1 = cache;
  const ForwardResult a = forward(m, c1, vb);
  KvCache c2 = cache;
  c2.retain({{1, 3, 4}, {1, 3, 4}});
  CHECK(c2.size() == 3);
  CHECK(c2.position(0, 0, 1) == 3);
  Batch fb;
  fb.add(30, 6);
  const ForwardResult b = forward(m, c2, fb);
  CHECK(same_bits(a.logits.row(0), b.logits.row(0), m.config.vocab_size));
  // Rollback: truncate to 4 then decode equals the prefix view on the longer cache.
  KvCache c3 = cache;
  c3.truncate(4);
  Batch p;
  p.rows.push_back({30, 4, p.add_view(View::prefix(4)), {}});
  KvCache c4 = cache;
  Batch q;
  q.add(30, 4);
  CHECK(same_bits(forward(m, c4, p).logits.row(0), forward(m, c3, q).logits.row(0), m.config.vocab_size));
  CHECK_THROWS_AS(c2.retain({{0, 0}, {1}}), InputError);
  CHECK_THROWS_AS(cache.commit({9}), InputError);
  Batch bad;
  bad.rows.push_back({30, 6, bad.add_view(View::per_head({{1, 9}, {1}})), {}});
  CHECK_THROWS_AS(forward(m, c1, bad), InputError);
}

// Contract v2 (issue 25), per-layer state other than a KV cache (mLSTM-style blocks): a forward
// records each row's recurrent parent (the last in-batch row it attends), and commit takes the
// state after the last committed row only when the committed rows are a chain of parents from
// the committed state; a state cannot be rolled back, and clear() zeroes it.
TEST_CASE("lm: a recurrent layer state commits along a chain of rows and cannot roll back") {
  const Model m = tiny_model();
  CHECK(m.config.block_state_floats(0) == 0);
  KvCache plain(m.config);
  CHECK_FALSE(plain.has_state());
  KvCache cache(m.config);
  cache.set_state_size(1, 3);
  REQUIRE(cache.has_state());
  CHECK(cache.state_size(0) == 0);
  CHECK(cache.state(1)[2] == 0.0f);
  // A tree batch: root 0, children 1 and 2 of 0, 3 a child of 2.
  Batch tree;
  tree.add(5, 0);
  tree.add(6, 1, 0, {0});
  tree.add(7, 1, 0, {0});
  tree.add(8, 2, 0, {0, 2});
  forward(m, cache, tree);
  CHECK(cache.pending_parent(0) == -1);
  CHECK(cache.pending_parent(1) == 0);
  CHECK(cache.pending_parent(2) == 0);
  CHECK(cache.pending_parent(3) == 2);
  for (int r = 0; r < 4; ++r)  // what a recurrent block would write: the state after row r
    for (int i = 0; i < 3; ++i) cache.pending_state(1, r)[i] = float(10 * r + i);
  KvCache bad = cache;
  CHECK_THROWS_WITH_AS(bad.commit({0, 1, 3}), doctest::Contains("chain of rows"), InputError);
  CHECK_THROWS_WITH_AS(bad.commit({2}), doctest::Contains("chain of rows"), InputError);
  CHECK(bad.size() == 0);  // a refused commit leaves the cache as it was
  cache.commit({0, 2, 3});  // the path root -> 2 -> 3
  CHECK(cache.size() == 3);
  CHECK(cache.state(1)[0] == 30.0f);
  CHECK(cache.state(1)[2] == 32.0f);
  CHECK_THROWS_WITH_AS(cache.commit({1}), doctest::Contains("already took rows"), InputError);
  CHECK_THROWS_WITH_AS(cache.truncate(1), doctest::Contains("cannot roll back"), InputError);
  CHECK_NOTHROW(cache.truncate(3));
  // The next forward continues from the committed state: a causal batch is a chain.
  Batch step = Batch::causal({9, 10}, 3);
  forward(m, cache, step);
  CHECK(cache.pending_parent(0) == -1);
  CHECK(cache.pending_parent(1) == 0);
  cache.pending_state(1, 0)[0] = 99.0f;
  cache.commit({0});
  CHECK(cache.state(1)[0] == 99.0f);
  cache.clear();
  CHECK(cache.state(1)[0] == 0.0f);
  CHECK_THROWS_AS(cache.set_state_size(2, 1), InputError);
}

TEST_CASE("lm: attention records and apply_head are consistent with the logits") {
  const Model m = tiny_model();
  KvCache cache(m.config);
  ForwardOptions opt;
  opt.hidden = true;
  opt.attn_rows = {3};
  const Batch b = Batch::causal({2, 3, 5, 7}, 0);
  const ForwardResult r = forward(m, cache, b, opt);
  REQUIRE(r.attention.size() == std::size_t(m.config.n_layers * m.config.n_heads));
  for (const auto& rec : r.attention) {
    CHECK(rec.row == 3);
    REQUIRE(rec.keys.size() == 4);   // rows 0..3 of the batch, no cache
    CHECK(rec.keys[0] == -1);
    double s = 0;
    for (float p : rec.probs) s += p;
    CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
    // output = sum_j p_j v_j with v from the pending cache rows.
    const int g = rec.head / m.config.group();
    for (int e = 0; e < m.config.head_dim(); ++e) {
      double o = 0;
      for (std::size_t j = 0; j < rec.keys.size(); ++j) o += rec.probs[j] * cache.pending_value(rec.layer, g, -rec.keys[j] - 1)[e];
      CHECK(rec.output[e] == doctest::Approx(o).epsilon(1e-5));
    }
  }
  Matrix last(1, m.config.d_model);
  std::copy_n(r.hidden.back().row(2), m.config.d_model, last.row(0));
  const Matrix full = apply_head(m, last);
  CHECK(same_bits(full.row(0), r.logits.row(2), m.config.vocab_size));
  const Matrix sub = apply_head(m, last, {5, 0, 60});
  CHECK(sub.row(0)[0] == full.row(0)[5]);
  CHECK(sub.row(0)[2] == full.row(0)[60]);
}

// ---- checkpoints --------------------------------------------------------------------------------

namespace {
std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("icmlkit_test_lm_" + name)).string();
}
}  // namespace

TEST_CASE("lm: checkpoint round trip in f32, f16 and bf16") {
  Model m = tiny_model(RopeStyle::interleaved, true);
  m.config.bos_id = 1;
  m.config.eos_id = 2;
  io::Provenance prov;
  prov.tool = "test";
  for (auto st : {io::h5::FloatStorage::f32, io::h5::FloatStorage::f16, io::h5::FloatStorage::bf16}) {
    const std::string p = tmp_path(std::string(io::h5::storage_name(st)) + ".h5");
    save_checkpoint(p, m, st, prov);
    const Model back = load_checkpoint(p);
    Model want = m;
    round_weights(want, st);
    CHECK(back.config.rope_style == RopeStyle::interleaved);
    CHECK(back.config.tied);
    CHECK(back.stored == st);
    CHECK(same_bits(back.token_embd.data.data(), want.token_embd.data.data(), want.token_embd.data.size()));
    CHECK(same_bits(back.layers[1].w_down.data.data(), want.layers[1].w_down.data.data(), want.layers[1].w_down.data.size()));
    CHECK(same_bits(back.layers[0].attn_norm.data(), m.layers[0].attn_norm.data(), m.config.d_model));  // norms stay f32
    if (st != io::h5::FloatStorage::f32) CHECK_FALSE(same_bits(back.layers[0].wq.data.data(), m.layers[0].wq.data.data(), m.layers[0].wq.data.size()));
    std::filesystem::remove(p);
  }
}

// Contract v2 (issue 25): a v1 file loads unchanged (every block llama, arithmetic version 1);
// written again it is v2 with the block list, and gives bitwise the same tensors and logits.
TEST_CASE("lm: a v1 checkpoint loads, is written as v2 and gives bitwise the same logits") {
#ifdef ICMLKIT_REPO_DATA
  const std::string v1 = std::string(ICMLKIT_REPO_DATA) + "/models/kjv7m.h5";
  {
    io::h5::Handle f(H5Fopen(v1.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    io::h5::Handle root(H5Gopen2(f.get(), "/", H5P_DEFAULT));
    std::string format;
    REQUIRE(io::h5::read_attr(root, "format", format));
    REQUIRE(format == "icmlkit-lm-v1");  // the shipped demo model predates v2
  }
  const Model a = load_checkpoint(v1);
  CHECK(a.config.block_types.empty());
  CHECK(a.config.all_block_types() == std::vector<BlockType>(a.config.n_layers, BlockType::llama));
  CHECK(a.config.arith_version == 1);
  io::Provenance prov;
  prov.tool = "test";
  const std::string v2 = tmp_path("v2.h5");
  save_checkpoint(v2, a, io::h5::FloatStorage::bf16, prov);  // the demo model's matrices are bf16
  {
    io::h5::Handle f(H5Fopen(v2.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    io::h5::Handle root(H5Gopen2(f.get(), "/", H5P_DEFAULT));
    std::string format, types;
    REQUIRE(io::h5::read_attr(root, "format", format));
    CHECK(format == "icmlkit-lm-v2");
    REQUIRE(io::h5::read_attr(root, "block_types", types));
    CHECK(types == "llama,llama,llama,llama,llama,llama");
  }
  const Model b = load_checkpoint(v2);
  CHECK(b.config.all_block_types() == a.config.all_block_types());
  CHECK(b.config.arith_version == 1);
  const auto sa = tensor_slots(a), sb = tensor_slots(b);
  REQUIRE(sa.size() == sb.size());
  int differing = 0;
  for (std::size_t i = 0; i < sa.size(); ++i)
    differing += !same_bits(sa[i].data, sb[i].data, std::size_t(sa[i].rows) * std::max(sa[i].cols, 1));
  CHECK(differing == 0);
  const std::vector<int> prompt{1, 45, 300, 7, 2048, 99, 5};
  KvCache ka(a.config), kb(b.config);
  const auto la = forward(a, ka, Batch::causal(prompt, 0)), lb = forward(b, kb, Batch::causal(prompt, 0));
  CHECK(same_bits(la.logits.data.data(), lb.logits.data.data(), la.logits.data.size()));
  std::filesystem::remove(v2);
#else
  MESSAGE("skipped: the repository's data/ is not available");
#endif
}

TEST_CASE("lm: bad checkpoints are refused with the tensor named") {
  const Model m = tiny_model();
  io::Provenance prov;
  prov.tool = "test";
  const std::string p = tmp_path("bad.h5");
  auto edit = [&](auto&& f) {
    save_checkpoint(p, m, io::h5::FloatStorage::f32, prov);
    io::h5::quiet_errors();
    hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    f(file);
    H5Fclose(file);
  };
  auto message = [&]() -> std::string {
    try { load_checkpoint(p); } catch (const InputError& e) { return e.message(); }
    return "";
  };
  edit([](hid_t f) { H5Ldelete(f, "blk.1.ffn_up.weight", H5P_DEFAULT); });
  CHECK(message().find("block 1 (llama): missing tensor blk.1.ffn_up.weight") != std::string::npos);
  edit([](hid_t f) { H5Ldelete(f, "output_norm.weight", H5P_DEFAULT); });
  CHECK(message().find("missing tensor output_norm.weight") != std::string::npos);
  // Contract v2's block list: an unknown type is refused naming the block; the count must match.
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr(root, "block_types", "llama,mamba");
    root.release();
  });
  CHECK(message().find("block 1: unknown block type 'mamba' (this build reads: llama, moe, latent-moe, mlstm-hybrid, recdepth-prelude, recdepth-core, recdepth-coda)") != std::string::npos);
  // a moe block needs the routed FFN's settings
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr(root, "block_types", "llama,moe");
    root.release();
  });
  CHECK(message().find("missing config attribute 'moe_n_experts'") != std::string::npos);
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr(root, "block_types", "llama");
    root.release();
  });
  CHECK(message().find("block_types lists 1 blocks but n_layers is 2") != std::string::npos);
  edit([&](hid_t f) { H5Adelete(f, "block_types"); });
  CHECK(message().find("missing config attribute 'block_types'") != std::string::npos);
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr(root, "format", "icmlkit-lm-v3");
    root.release();
  });
  CHECK(message().find("neither icmlkit-lm-v1 nor icmlkit-lm-v2") != std::string::npos);
  edit([&](hid_t f) {
    H5Ldelete(f, "blk.0.attn_k.weight", H5P_DEFAULT);
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    std::vector<float> w(12 * 35, 0.1f);
    io::h5::write_floats(root, "blk.0.attn_k.weight", w.data(), {12, 35});
    root.release();
  });
  CHECK(message().find("shape mismatch: expected [12, 36], got [12, 35]") != std::string::npos);
  edit([&](hid_t f) {
    H5Ldelete(f, "output_norm.weight", H5P_DEFAULT);
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    std::vector<float> w(36, 1.0f);
    w[7] = std::nanf("");
    io::h5::write_floats(root, "output_norm.weight", w.data(), {36});
    root.release();
  });
  CHECK(message().find("non-finite weight at flat index 7") != std::string::npos);
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr_int(root, "n_kv_heads", 2);
    root.release();
  });
  CHECK(message().find("not divisible by n_kv_heads") != std::string::npos);
  edit([&](hid_t f) {
    H5Ldelete(f, "blk.0.attn_q.weight", H5P_DEFAULT);
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    std::vector<float> w(36 * 36, 0.5f);
    io::h5::write_floats(root, "blk.0.attn_q.weight", w.data(), {36, 36}, io::h5::FloatStorage::f16);
    io::h5::Handle ds(H5Dopen2(f, "blk.0.attn_q.weight", H5P_DEFAULT));
    io::h5::write_attr(ds, "dtype", "fp8");
    ds.release();
    root.release();
  });
  CHECK(message().find("unknown dtype 'fp8'") != std::string::npos);
  edit([&](hid_t f) {
    io::h5::Handle root(H5Gopen2(f, "/", H5P_DEFAULT));
    io::h5::write_attr(root, "rope_style", "yarn");
    root.release();
  });
  CHECK(message().find("unknown rope_style 'yarn'") != std::string::npos);
  // A tokenizer whose vocabulary differs from vocab_size (61).
  Model with_tok = m;
  TokenizerTrainOptions topt;
  topt.vocab_size = 300;
  with_tok.tokenizer_model = train_tokenizer(std::vector<std::string>(50, "and the evening and the morning were the first day\n"), topt);
  save_checkpoint(p, with_tok, io::h5::FloatStorage::f32, prov);
  CHECK(message().find("tokenizer has 300 pieces but vocab_size is 61") != std::string::npos);
  std::filesystem::remove(p);
}

// ---- sampling -------------------------------------------------------------------------------------

TEST_CASE("lm: greedy, top-k, top-p and temperature sampling") {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  Sampler greedy({0.0, 0, 1.0, 1});
  CHECK(greedy.sample(logits.data(), 5) == 1);  // tie 1/3 -> lower id
  Sampler k1({1.0, 1, 1.0, 2});
  CHECK(k1.sample(logits.data(), 5) == 1);
  // Frequencies at temperature 0.7 against the softmax (truth); 20000 draws, 5-sigma bound.
  Sampler s({0.7, 0, 1.0, 3});
  std::vector<int> count(5, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) count[s.sample(logits.data(), 5)]++;
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  for (int i = 0; i < 5; ++i) {
    const double p = std::exp(logits[i] / 0.7) / z;
    CHECK(std::fabs(count[i] - n * p) < 5 * std::sqrt(n * p * (1 - p)) + 1);
  }
  // top-p 0.5: the two tied leaders already hold > 50% of the mass -> only the first (id 1) is
  // needed (ties ordered by id), so every draw is 1.
  Sampler tp({1.0, 0, 0.4, 4});
  for (int i = 0; i < 200; ++i) CHECK(tp.sample(logits.data(), 5) == 1);
  CHECK(log_softmax_at(logits.data(), 5, 1) == doctest::Approx(2.0 - std::log(std::exp(0.1) + 2 * std::exp(2.0) + std::exp(-1.0) + std::exp(0.5))));
  CHECK(top_ids(logits.data(), 5, 3) == std::vector<int>{1, 3, 4});
  CHECK_THROWS_AS(Sampler({-1.0, 0, 1.0, 0}), UsageError);
  CHECK_THROWS_AS(Sampler({1.0, 0, 0.0, 0}), UsageError);
}

// ---- tokenizer ------------------------------------------------------------------------------------

TEST_CASE("lm: tokenizer round-trips newlines and UTF-8, and refuses invalid UTF-8") {
  std::vector<std::string> text;
  for (int i = 0; i < 200; ++i)
    text.push_back("In the beginning God created the heaven and the earth " + std::to_string(i) +
                   ".\nAnd the earth was without form, and void;\n\tand darkness was upon the face of the deep.");
  TokenizerTrainOptions opt;
  opt.vocab_size = 300;
  const Tokenizer tok(train_tokenizer(text, opt), "test");
  CHECK(tok.vocab_size() == 300);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  for (const std::string s : {"And God said,\nLet there be light:\n\nand there was light.", "  two  spaces\tand tab",
                              "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 unseen characters"}) {
    const auto ids = tok.encode(s, "x");
    CHECK(tok.decode(ids) == s);
  }
  CHECK_THROWS_AS(tok.encode("bad \xc3\x28 byte", "x"), InputError);
  CHECK_FALSE(valid_utf8("\xed\xa0\x80"));   // surrogate
  CHECK_FALSE(valid_utf8("\xc0\xaf"));       // overlong
  CHECK(valid_utf8("\xf4\x8f\xbf\xbf"));     // U+10FFFF
  CHECK_THROWS_AS(Tokenizer("not a model", "x"), InputError);
}

TEST_CASE("lm: f16-held weights give bitwise the logits of their float32 widening") {
  Model wide = tiny_model(RopeStyle::half, false);
  Model copy = wide;
  CHECK_FALSE(hold_half(copy));  // N(0, 0.2) draws are not f16-representable: refused
  CHECK_FALSE(copy.token_embd.is_half());
  round_weights(wide, io::h5::FloatStorage::f16);
  Model half = wide;
  REQUIRE(hold_half(half));
  CHECK(half.layers[0].wq.is_half());
  CHECK(half.weight_bytes() < wide.weight_bytes());
  const Batch b = Batch::causal({4, 8, 15, 16, 23, 42}, 0);
  KvCache c1(wide.config), c2(half.config);
  const ForwardResult a = forward(wide, c1, b), h = forward(half, c2, b);
  CHECK(same_bits(a.logits.data.data(), h.logits.data.data(), a.logits.data.size()));
  Matrix hid(1, wide.config.d_model);
  for (auto& v : hid.data) v = 0.3f;
  CHECK(same_bits(apply_head(wide, hid, {3, 9}).data.data(), apply_head(half, hid, {3, 9}).data.data(), 2));
  CHECK_THROWS_AS(tensor_slots(half), RuntimeError);
  // Kernel: f16 AVX2 and portable paths agree bitwise with the f32 kernel on widened weights.
  const int K = 37, O = 13, R = 5;
  Rng rng(2);
  std::vector<float> x(R * K), wf(O * K), y1(R * O), y2(R * O), y3(R * O);
  std::vector<std::uint16_t> wh(O * K);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (int i = 0; i < O * K; ++i) { wh[i] = num::f32_to_f16(static_cast<float>(rng.normal())); wf[i] = num::f16_to_f32(wh[i]); }
  matmul_xwt(x.data(), R, K, K, wf.data(), O, y1.data(), O);
  matmul_xwt_f16_path(x.data(), R, K, K, wh.data(), O, y2.data(), O, true, 2);
  matmul_xwt_f16_path(x.data(), R, K, K, wh.data(), O, y3.data(), O, false, 1);
  CHECK(same_bits(y1.data(), y2.data(), y1.size()));
  CHECK(same_bits(y1.data(), y3.data(), y1.size()));
}
