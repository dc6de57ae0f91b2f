// lm/device_math.hpp: the host instances of the CUDA engine's per-element and per-row math,
// against the CPU engine's own functions.  Runs everywhere (no GPU needed), so CI proves the
// formulas the CUDA kernels execute.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lm/device_math.hpp"
#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "num/half.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float random_float_bits(Rng& rng) {
  const std::uint32_t u = static_cast<std::uint32_t>(rng.uniform() * 4294967296.0);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

ModelConfig dm_config(RopeStyle style) {
  ModelConfig c;
  c.vocab_size = 53;
  c.d_model = 48;  // head_dim 12: not a multiple of 32 (the kernel's lane loop has a tail)
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 40;
  c.n_ctx = 192;
  c.rope_style = style;
  return c;
}

}  // namespace

TEST_CASE("lm device math: 16-bit conversions equal num/half.hpp bit for bit") {
  // Truth: num/half.hpp, itself tested against GCC's _Float16 (test_num.cpp).  Exhaustive over
  // the 65536 half patterns, then 2M random float bit patterns and the neighbours of every
  // half-way point.
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    REQUIRE(bits(dm::f16_to_f32(hb)) == bits(num::f16_to_f32(hb)));
    REQUIRE(bits(dm::bf16_to_f32(hb)) == bits(num::bf16_to_f32(hb)));
    const float w = num::f16_to_f32(hb);
    for (std::uint32_t delta : {0u, 1u, 0xfffu, 0x1000u, 0x1001u}) {
      float f;
      const std::uint32_t u = bits(w) + delta;
      std::memcpy(&f, &u, 4);
      REQUIRE(dm::f32_to_f16(f) == num::f32_to_f16(f));
      REQUIRE(dm::f32_to_bf16(f) == num::f32_to_bf16(f));
    }
  }
  Rng rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const float f = random_float_bits(rng);
    REQUIRE(dm::f32_to_f16(f) == num::f32_to_f16(f));
    REQUIRE(dm::f32_to_bf16(f) == num::f32_to_bf16(f));
  }
}

TEST_CASE("lm device math: the two-term 16-bit split keeps the stated precision") {
  // Truth: error analysis.  hi = rn(x) errs by <= u|x|, lo = rn(x - hi) by <= u|x - hi|, so
  // |x - hi - lo| <= u^2 |x| (u = 2^-9 bf16, 2^-11 f16) while lo is a normal number; an f16 lo
  // in the subnormal range adds at most 2^-25 absolutely, below 2^-22 |x| for |x| >= 1.
  // Checked bounds: 2^-17 |x| (bf16), 2^-21 |x| (f16) for |x| in [1, 1000].
  Rng rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>((rng.uniform() < 0.5 ? -1 : 1) * std::exp(rng.uniform(0.0, std::log(1000.0))));
    std::uint16_t hi, lo;
    dm::split2(x, dm::WType::bf16, hi, lo);
    REQUIRE(std::fabs(double(x) - dm::bf16_to_f32(hi) - dm::bf16_to_f32(lo)) <= std::ldexp(std::fabs(x), -17));
    dm::split2(x, dm::WType::f16, hi, lo);
    REQUIRE(std::fabs(double(x) - dm::f16_to_f32(hi) - dm::f16_to_f32(lo)) <= std::ldexp(std::fabs(x), -21));
  }
  // A value the bf16 hi alone misses by far more than the bound: the lo term is needed.
  std::uint16_t hi, lo;
  dm::split2(1.0f + 1.0f / 512 + 1.0f / 4096, dm::WType::bf16, hi, lo);
  CHECK(dm::bf16_to_f32(lo) != 0.0f);
}

TEST_CASE("lm device math: f16 row scales bring any finite row into f16's range, exactly") {
  // Truth: the definition — a power of two s with max_abs * s in [2^14, 2^15) — checked with
  // frexp; and the split of the scaled row, divided back, keeps f16's two-term precision where
  // the unscaled split is infinite.
  for (double m : {1e-30, 1e-7, 6.1e-5, 0.37, 1.0, 2.0, 16384.0, 65504.0, 65520.0, 1e5, 3.3e7, 1e30}) {
    const float s = dm::f16_row_scale(static_cast<float>(m));
    int e = 0;
    CHECK(std::frexp(s, &e) == 0.5);  // a power of two
    const double scaled = double(static_cast<float>(m)) * s;
    INFO("max_abs " << m << " scale " << s);
    CHECK(scaled >= 16384.0);
    CHECK(scaled < 32768.0);
  }
  CHECK(dm::f16_row_scale(0.0f) == 1.0f);
  CHECK(dm::f16_row_scale(INFINITY) == 1.0f);
  CHECK(dm::f16_row_scale(NAN) == 1.0f);
  CHECK(dm::f16_row_scale(1e-45f) == std::ldexp(1.0f, 120));  // clamped: still a normal float
  std::uint16_t hi, lo;
  dm::split2(1e5f, dm::WType::f16, hi, lo);
  CHECK(std::isinf(dm::f16_to_f32(hi)));  // why the engine scales
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>((rng.uniform() < 0.5 ? -1 : 1) * std::exp(rng.uniform(std::log(1e5), std::log(1e9))));
    const float s = dm::f16_row_scale(std::fabs(x) * static_cast<float>(1.0 + 3.0 * rng.uniform()));  // the row's max >= |x|
    dm::split2(x * s, dm::WType::f16, hi, lo);
    const double back = (double(dm::f16_to_f32(hi)) + dm::f16_to_f32(lo)) / s;
    REQUIRE(std::fabs(back - x) <= std::ldexp(std::fabs(x), -21));
  }
}

TEST_CASE("lm device math: chunked split GEMM layout reproduces x W^T") {
  // Truth: the product in double.  The CUDA engine's GEMM schedule is replayed on the host: rows
  // stored through GemmLayout (hi/lo terms, chunks of P rows), one column-block product per chunk
  // as its cublasGemmEx call makes it (offset chunk * nparts * P rows in both buffers), outputs
  // read back through GemmLayout (f16: rows scaled by f16_row_scale, some far beyond f16's range).
  // Tolerance: the split's 2^-17 (bf16) / 2^-21 (f16) relative error of each activation times
  // sum |W||x|, plus float accumulation (K * 2^-24 relative).
  Rng rng(23);
  const int K = 19, O = 7;
  std::vector<float> W(std::size_t(O) * K);
  for (auto& w : W) w = static_cast<float>(rng.normal());
  for (dm::WType t : {dm::WType::f32, dm::WType::f16, dm::WType::bf16})
    for (int P : {1, 3, 64})
      for (int R : {1, 2, 5, 64, 65, 130}) {
        dm::GemmLayout L;
        L.P = P;
        L.nparts = t == dm::WType::f32 ? 1 : 2;
        L.t = t;
        std::vector<float> x(std::size_t(R) * K), sc(R, 1.0f);
        for (std::size_t i = 0; i < x.size(); ++i)  // f16: odd rows far beyond its range, scaled as the engine does
          x[i] = static_cast<float>(rng.normal() * (t == dm::WType::f16 && (i / K) % 2 ? 1e6 : 4.0));
        if (t == dm::WType::f16) {
          for (int r = 0; r < R; ++r) {
            float m = 0.0f;
            for (int k = 0; k < K; ++k) m = std::max(m, std::fabs(x[std::size_t(r) * K + k]));
            sc[r] = dm::f16_row_scale(m);
          }
          L.scale = sc.data();
        }
        const std::size_t rows = L.rows(R);
        std::vector<std::uint16_t> a16(rows * K, 0);
        std::vector<float> a32(rows * K, 0.0f), Y(rows * O, 0.0f);
        std::vector<char> used(rows, 0);
        for (int r = 0; r < R; ++r)
          for (int part = 0; part < L.nparts; ++part) {
            const std::size_t row = L.row(r, part);
            REQUIRE(row < rows);
            REQUIRE(row / (std::size_t(L.nparts) * P) == std::size_t(r / P));  // inside its chunk
            REQUIRE(!used[row]);
            used[row] = 1;
          }
        for (int r = 0; r < R; ++r)
          for (int k = 0; k < K; ++k) {
            if (t == dm::WType::f32) L.store(a32.data(), K, r, k, x[std::size_t(r) * K + k]);
            else L.store(a16.data(), K, r, k, x[std::size_t(r) * K + k] * sc[r]);
          }
        const int n = L.P * L.nparts;
        for (std::size_t ch = 0; ch * n < rows; ++ch)  // one GEMM per chunk: Y_chunk = A_chunk W^T
          for (int col = 0; col < n; ++col) {
            const std::size_t row = ch * n + col;
            for (int o = 0; o < O; ++o) {
              float acc = 0.0f;
              for (int k = 0; k < K; ++k) {
                const float a = t == dm::WType::f32 ? a32[row * K + k] : dm::widen(a16[row * K + k], t);
                acc += a * W[std::size_t(o) * K + k];
              }
              Y[row * O + o] = acc;
            }
          }
        const double rel = t == dm::WType::bf16 ? std::ldexp(1.0, -17) : t == dm::WType::f16 ? std::ldexp(1.0, -21) : 0.0;
        for (int r = 0; r < R; ++r)
          for (int o = 0; o < O; ++o) {
            double truth = 0.0, mag = 0.0;
            for (int k = 0; k < K; ++k) {
              truth += double(x[std::size_t(r) * K + k]) * W[std::size_t(o) * K + k];
              mag += std::fabs(double(x[std::size_t(r) * K + k]) * W[std::size_t(o) * K + k]);
            }
            REQUIRE(std::fabs(L.load(Y.data(), O, r, o) - truth) <= (rel + 2 * K * std::ldexp(1.0, -24)) * mag + 1e-30);
          }
      }
}

TEST_CASE("lm device math: RMSNorm row equals lm::rms_norm bit for bit") {
  // Truth: lm::rms_norm (the CPU engine's norm); same formula and order, so bitwise.
  Rng rng(5);
  for (int d : {1, 7, 48, 257}) {
    std::vector<float> x(3 * d), w(d), y_cpu(x.size()), y_dm(x.size());
    for (auto& v : x) v = static_cast<float>(rng.normal() * 3.0);
    for (auto& v : w) v = static_cast<float>(0.5 + rng.uniform());
    rms_norm(x.data(), 3, d, w.data(), 1e-5, y_cpu.data());
    for (int r = 0; r < 3; ++r) dm::rms_norm_row(x.data() + r * d, d, w.data(), 1e-5, y_dm.data() + r * d);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(bits(y_dm[i]) == bits(y_cpu[i]));
  }
}

TEST_CASE("lm device math: the RoPE cache gives rope_tables' bits, across blocks and on reuse") {
  // Truth: lm::rope_tables (computed per call).  Positions straddle the 256-position blocks,
  // repeat (a cached block), and reach n_ctx - 1.
  ModelConfig c = dm_config(RopeStyle::half);
  c.n_ctx = 600;
  c.rope_theta = 500000.0;
  RopeCache cache(c);
  const int half = c.head_dim() / 2;
  for (const std::vector<int>& positions : {std::vector<int>{0, 255, 256, 599}, {3, 256, 257, 0, 511, 512}}) {
    Batch b;
    for (int pos : positions) b.add(0, pos);
    std::vector<float> cs, sn, ccs(std::size_t(b.size()) * half), csn(ccs.size());
    rope_tables(c, b, cs, sn);
    cache.tables(b, ccs.data(), csn.data());
    for (std::size_t i = 0; i < cs.size(); ++i) {
      REQUIRE(bits(ccs[i]) == bits(cs[i]));
      REQUIRE(bits(csn[i]) == bits(sn[i]));
    }
  }
}

TEST_CASE("lm device math: RoPE tables and rotation equal the CPU engine for both pairings") {
  // Truth: lm::rope_tables and lm::apply_rope (the CPU engine's); bitwise.
  for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
    ModelConfig c = dm_config(style);
    c.rope_theta = 500000.0;
    Batch b;
    for (int pos : {0, 1, 5, 191}) b.add(0, pos);
    std::vector<float> cs, sn;
    rope_tables(c, b, cs, sn);
    const int hd = c.head_dim(), half = hd / 2;
    Rng rng(9);
    for (int r = 0; r < b.size(); ++r) {
      for (int i = 0; i < half; ++i) {
        float cc, ss;
        dm::rope_cos_sin(b.rows[r].pos, i, hd, c.rope_theta, cc, ss);
        REQUIRE(bits(cc) == bits(cs[r * half + i]));
        REQUIRE(bits(ss) == bits(sn[r * half + i]));
      }
      std::vector<float> x(hd), y;
      for (auto& v : x) v = static_cast<float>(rng.normal());
      y = x;
      apply_rope(x.data(), hd, style, cs.data() + r * half, sn.data() + r * half);
      dm::rope_head(y.data(), hd, style == RopeStyle::interleaved, cs.data() + r * half, sn.data() + r * half);
      for (int e = 0; e < hd; ++e) REQUIRE(bits(x[e]) == bits(y[e]));
    }
  }
}

TEST_CASE("lm device math: online-softmax attention over gathered views matches the CPU forward") {
  // Truth: lm::forward's attention records (two-pass softmax, double normaliser) on a batch
  // with a per-head view, a prefix view and tree masks.  The kernel's schedule is replayed on
  // the host: keys by dm::key_of, splits of 128 keys, 4 warps of 32 keys each forming a chunk
  // softmax, warps merged in order, splits merged in order (kernels/engine.cu attention_kernel).  Keys must match exactly; outputs within 2e-6 * max|v| * 4 (float rounding
  // of a convex combination, a few ulps per term, different order).
  for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
    const ModelConfig c = dm_config(style);
    const Model m = random_model(c, 21, 0.3);
    KvCache cache(c);
    std::vector<int> prompt(150);  // 150 + 4 keys: two splits of 128, all four warps of a split
    for (int i = 0; i < 150; ++i) prompt[i] = (i * 37 + 5) % c.vocab_size;
    forward(m, cache, Batch::causal(prompt, 0));
    cache.commit_all();
    const int n_past = cache.size();
    std::vector<std::vector<std::int32_t>> lists(std::size_t(c.n_layers) * c.n_kv_heads);
    for (std::size_t i = 0; i < lists.size(); ++i)
      for (int s = 0; s < n_past; ++s)
        if ((s + int(i)) % 3 != 1) lists[i].push_back(s);
    Batch b;
    const int pv = b.add_view(View::per_head(lists)), pre = b.add_view(View::prefix(4));
    b.add(3, n_past);
    b.add(4, n_past + 1, 0, {0});
    b.add(6, n_past + 1, 0, {0});
    b.add(7, n_past + 2, pv, {0, 2});
    b.add(8, n_past + 3, pre, {0, 2, 3});
    ForwardOptions opt;
    for (int r = 0; r < b.size(); ++r) opt.attn_rows.push_back(r);
    const ForwardResult fr = forward(m, cache, b, opt);
    REQUIRE(fr.attention.size() == std::size_t(b.size()) * c.n_layers * c.n_heads);
    const int hd = c.head_dim();
    for (const AttentionRecord& rec : fr.attention) {
      const int g = rec.head / c.group(), lh = cache.lh(rec.layer, g);
      const View& view = b.views[b.rows[rec.row].view];
      const int nslots = view.count(lh, cache.size(rec.layer, g));
      std::vector<std::int32_t> nb = b.rows[rec.row].attend;
      nb.push_back(rec.row);
      std::sort(nb.begin(), nb.end());
      const std::int32_t* slots = view.lists() ? (*view.lists())[lh].data() : nullptr;
      const int nkeys = nslots + static_cast<int>(nb.size());
      REQUIRE(nkeys == static_cast<int>(rec.keys.size()));
      REQUIRE(nkeys > 0);
      // The kernel's schedule: splits of 128 keys, warps of 32, chunk softmax per warp, warps
      // merged in order inside a split (weights cw), splits merged in order.
      float vmax = 0.0f;
      dm::OnlineSoftmax tot;
      std::vector<float> out(hd, 0.0f);
      for (int split = 0; split * dm::kAttnBlockKeys < nkeys; ++split) {
        dm::OnlineSoftmax blk;
        std::vector<float> bacc(hd, 0.0f);
        std::vector<std::vector<float>> wacc;
        std::vector<float> cw;
        for (int w = 0; w * dm::kAttnWarpKeys < dm::kAttnBlockKeys; ++w) {
          const int j0 = split * dm::kAttnBlockKeys + w * dm::kAttnWarpKeys;
          const int n = std::min(dm::kAttnWarpKeys, nkeys - j0);
          dm::OnlineSoftmax ws;  // empty warp: m = -inf, l = 0
          std::vector<float> acc(hd, 0.0f), pw(dm::kAttnWarpKeys);
          if (n > 0) {
            ws = dm::chunk_softmax(rec.scores.data() + j0, n, pw.data());
            for (int i = 0; i < n; ++i) {
              const std::int32_t key = dm::key_of(j0 + i, nslots, slots, nb.data());
              REQUIRE(key == rec.keys[j0 + i]);
              const float* v = key >= 0 ? cache.value(rec.layer, g, key) : cache.pending_value(rec.layer, g, -key - 1);
              for (int e = 0; e < hd; ++e) {
                acc[e] += pw[i] * v[e];
                vmax = std::max(vmax, std::fabs(v[e]));
              }
            }
          }
          if (w == 0) {
            blk = ws;
            cw.push_back(1.0f);
          } else {
            float cs, co;
            blk.merge(ws, cs, co);
            for (float& u : cw) u *= cs;
            cw.push_back(co);
          }
          wacc.push_back(acc);
        }
        for (int e = 0; e < hd; ++e)
          for (std::size_t w = 0; w < wacc.size(); ++w) bacc[e] += wacc[w][e] * cw[w];
        if (split == 0) {
          tot = blk;
          out = bacc;
        } else {
          float cs, co;
          tot.merge(blk, cs, co);
          for (int e = 0; e < hd; ++e) out[e] = out[e] * cs + bacc[e] * co;
        }
      }
      for (int e = 0; e < hd; ++e) CHECK(std::fabs(out[e] / tot.l - rec.output[e]) <= 8e-6 * (vmax + 1e-30f));
      for (int j = 0; j < nkeys; ++j) CHECK(std::fabs(std::exp(rec.scores[j] - tot.m) / tot.l - rec.probs[j]) <= 1e-6);
    }
  }
}

TEST_CASE("lm device math: greedy reduction equals the sampler's argmax with lowest-id ties") {
  // Truth: lm::top_ids(logits, vocab, 1) and lm::Sampler at temperature 0.  Integer-valued
  // logits make ties frequent; lane counts cover 1, a warp, a block and more than the vocabulary.
  Rng rng(13);
  Sampler greedy(SamplerConfig{});
  for (int vocab : {1, 2, 31, 100, 1000}) {
    std::vector<float> lg(vocab);
    for (int trial = 0; trial < 20; ++trial) {
      for (auto& v : lg) v = static_cast<float>(std::floor(rng.uniform() * 5.0));
      const int truth = top_ids(lg.data(), vocab, 1)[0];
      REQUIRE(greedy.sample(lg.data(), vocab) == truth);
      REQUIRE(greedy_token(lg.data(), vocab) == truth);
      for (int lanes : {1, 3, 32, 256, 2000}) REQUIRE(dm::greedy_strided(lg.data(), vocab, lanes) == truth);
    }
  }
}

TEST_CASE("lm device math: the greedy token's probability is the sampler's softmax at temperature 1") {
  // Truth: lm::Sampler's distribution (temperature 1, no truncation) at the greedy token.
  Rng rng(29);
  SamplerConfig sc;
  sc.temperature = 1.0;
  Sampler full(sc);
  TokenDist dist;
  for (int vocab : {1, 2, 50, 3000}) {
    std::vector<float> lg(vocab);
    for (int trial = 0; trial < 10; ++trial) {
      for (auto& v : lg) v = static_cast<float>(rng.normal() * (trial + 1));
      const int best = greedy_token(lg.data(), vocab);
      full.distribution(lg.data(), vocab, dist);
      CHECK(greedy_probability(lg.data(), vocab, best) == doctest::Approx(dist.prob(best)).epsilon(1e-12));
    }
  }
}

TEST_CASE("lm device math: SwiGLU equals the CPU forward's expression") {
  // Truth: forward.cpp's MLP line g / (1 + exp(-g)) * u in float; bitwise.
  Rng rng(17);
  for (int i = 0; i < 10000; ++i) {
    const float g = static_cast<float>(rng.normal() * 6.0), u = static_cast<float>(rng.normal());
    REQUIRE(bits(dm::silu_mul(g, u)) == bits(g / (1.0f + std::exp(-g)) * u));
  }
}
