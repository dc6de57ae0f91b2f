// Distillation to the hybrid xLSTM student (nn/distill.hpp, issue 35): the student keeps the
// teacher's tensors and, with its gate closed and a full window, the teacher's function; Stage I
// moves only the mixer tensors and lowers the alignment error; the top-k KL hook against an
// independent computation and finite differences; Stage III's merge and its refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "nn/distill.hpp"
#include "nn/layers.hpp"
#include "nn_test_support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

lm::Model tiny_teacher(std::uint64_t seed) {
  lm::ModelConfig c = testing::tiny_config(lm::RopeStyle::half, false);
  c.n_ctx = 32;
  return lm::random_model(c, seed, 0.3);
}

std::vector<int> tokens(int n, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(n);
  for (auto& x : t) x = int(rng.below(vocab));
  return t;
}

/// KL(p_T^(k) || p_S^(k)) of one row in double, the k set chosen by a full sort (independent of
/// the hook's nth_element).
double topk_kl(const float* t, const float* z, int V, int k) {
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [t](int a, int b) { return t[a] > t[b]; });
  double zt = 0, zs = 0;
  for (int i = 0; i < k; ++i) {
    zt += std::exp(double(t[idx[i]]));
    zs += std::exp(double(z[idx[i]]));
  }
  double kl = 0;
  for (int i = 0; i < k; ++i) {
    const double pt = std::exp(double(t[idx[i]])) / zt, ps = std::exp(double(z[idx[i]])) / zs;
    kl += pt * (std::log(pt) - std::log(ps));
  }
  return kl;
}

}  // namespace

TEST_CASE("distill: the student keeps the teacher's tensors, and with o = 0 and a full window its function") {
  const lm::Model t = tiny_teacher(1);
  lm::MlstmConfig mix;
  mix.window = 64;
  mix.sinks = 0;
  lm::Model s = make_student(t, mix, 64);
  CHECK(s.config.n_ctx == 64);
  CHECK(s.config.block_type(1) == lm::BlockType::mlstm_hybrid);
  CHECK(s.layers[1].wq.data == t.layers[1].wq.data);
  CHECK(s.layers[0].w_down.data == t.layers[0].w_down.data);
  CHECK(s.output.data == t.output.data);
  const int hd = s.config.head_dim();
  CHECK(s.layers[0].mlstm_fq.row(hd + 2)[2] == 1.0f);  // head 1's map is the identity
  CHECK(s.layers[0].mlstm_fq.row(hd + 2)[1] == 0.0f);
  CHECK(s.layers[0].mlstm_fgate_b.front() == 3.0f);
  CHECK(s.layers[0].mlstm_fgate_b.back() == 6.0f);
  for (auto& l : s.layers) std::fill(l.mlstm_ogate_b.begin(), l.mlstm_ogate_b.end(), -1e4f);
  const auto tok = tokens(20, t.config.vocab_size, 2);
  lm::KvCache kt(t.config), ks(s.config);
  CHECK(lm::forward(s, ks, lm::Batch::causal(tok, 0)).logits.data == lm::forward(t, kt, lm::Batch::causal(tok, 0)).logits.data);
  // a teacher that is not all llama is refused
  lm::Model bad = t;
  bad.config.block_types = {lm::BlockType::llama, lm::BlockType::mlstm_hybrid};
  CHECK_THROWS_AS(make_student(bad, mix, 64), UsageError);
}

TEST_CASE("distill Stage I: only the mixer tensors move, and the alignment error falls") {
  const lm::Model t = tiny_teacher(3);
  lm::MlstmConfig mix;
  mix.window = 3;
  mix.sinks = 1;
  lm::Model s = make_student(t, mix, 64);
  const lm::Model before = s;
  const auto stream = tokens(4 * 16 + 1, t.config.vocab_size, 4);  // one batch: every step sees the same windows
  AlignOptions o;
  o.seq_len = 16;
  o.batch = 4;
  o.steps = 60;
  o.lr = 3e-2;
  std::vector<double> mse;
  align_layers(t, s, stream, o, [&](const AlignStep& st) { mse.push_back(st.mse); });
  REQUIRE(mse.size() == 60);
  CHECK(mse.back() < 0.5 * mse.front());
  const auto a = lm::tensor_slots(before);
  const auto b = lm::tensor_slots(static_cast<const lm::Model&>(s));
  int moved = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::size_t n = std::size_t(a[i].rows) * std::max(a[i].cols, 1);
    const bool same = std::equal(a[i].data, a[i].data + n, b[i].data);
    INFO(a[i].gguf);
    if (is_mixer_tensor(a[i].gguf)) moved += !same;
    else CHECK(same);
  }
  CHECK(moved >= 8);  // maps and gates of both blocks
}

TEST_CASE("distill Stage II: the top-k KL hook against an independent computation and finite differences") {
  const lm::Model t = tiny_teacher(5);
  const int S = 6, B = 2, N = B * S, V = t.config.vocab_size;
  const auto tok = tokens(N, V, 6);
  // the teacher's logits, independently through the engine
  std::vector<float> tl(std::size_t(N) * V);
  for (int b = 0; b < B; ++b) {
    lm::KvCache kv(t.config);
    const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
    const auto r = lm::forward(t, kv, lm::Batch::causal(seq, 0));
    std::copy(r.logits.data.begin(), r.logits.data.end(), tl.begin() + std::size_t(b) * S * V);
  }
  Rng rng(7);
  std::vector<float> z(std::size_t(N) * V);
  for (auto& x : z) x = static_cast<float>(2 * rng.normal());
  for (int k : {V, 5}) {
    TopKDistillLoss hook(t, S, k, 0.9, 0.1);
    std::vector<float> g(z.size());
    for (auto& x : g) x = static_cast<float>(rng.normal());  // stands for grad_scale x the CE gradient
    const std::vector<float> ce = g;
    const double scale = 0.25;
    const double kl = hook(tok, z.data(), N, V, g.data(), scale);
    double want = 0;
    for (int n = 0; n < N; ++n) want += topk_kl(tl.data() + std::size_t(n) * V, z.data() + std::size_t(n) * V, V, k);
    CAPTURE(k);
    CHECK(kl == doctest::Approx(want).epsilon(2e-4));
    // d/dz of 0.1 scale KL + 0.9 (the CE part), against central differences of the KL in double
    double worst = 0;
    for (int n : {0, 7})
      for (int v = 0; v < V; ++v) {
        const std::size_t i = std::size_t(n) * V + v;
        float* row = z.data() + std::size_t(n) * V;
        const float keep = row[v];
        const float h = 1e-2f;
        row[v] = keep + h;
        const double up = topk_kl(tl.data() + std::size_t(n) * V, row, V, k);
        row[v] = keep - h;
        const double down = topk_kl(tl.data() + std::size_t(n) * V, row, V, k);
        row[v] = keep;
        const double fd = 0.1 * scale * (up - down) / (2.0 * h) + 0.9 * ce[i];
        worst = std::max(worst, std::abs(fd - g[i]));
      }
    CHECK(worst < 1e-4);
  }
  CHECK_THROWS_AS(TopKDistillLoss(t, S, 0, 0.9, 0.1), UsageError);
  CHECK_THROWS_AS(TopKDistillLoss(t, S, 4, 0.0, 0.0), UsageError);
}

TEST_CASE("distill Stage III: the weighted merge, and its refusals") {
  const lm::Model t = tiny_teacher(8);
  lm::MlstmConfig mix;
  lm::Model a = make_student(t, mix, 64), b = a;
  Rng rng(9);
  for (auto& x : b.layers[0].mlstm_fq.data) x += static_cast<float>(rng.normal());
  for (auto& x : b.token_embd.data) x += static_cast<float>(rng.normal());
  const lm::Model m = merge_experts({a, b}, {0.25, 0.75}, {"a", "b"});
  for (std::size_t i = 0; i < m.token_embd.data.size(); i += 7)
    CHECK(m.token_embd.data[i] == doctest::Approx(0.25 * a.token_embd.data[i] + 0.75 * b.token_embd.data[i]).epsilon(1e-6));
  CHECK(m.layers[0].mlstm_fq.data[3] == doctest::Approx(0.25 * a.layers[0].mlstm_fq.data[3] + 0.75 * b.layers[0].mlstm_fq.data[3]));
  CHECK(merge_experts({a, a}, {0.5, 0.5}, {}).layers[1].wk.data == a.layers[1].wk.data);
  CHECK_THROWS_AS(merge_experts({a, b}, {0.5, 0.4}, {}), UsageError);
  CHECK_THROWS_AS(merge_experts({a, b}, {1.5, -0.5}, {}), UsageError);
  CHECK_THROWS_AS(merge_experts({a, b}, {1.0}, {}), UsageError);
  lm::Model c = b;
  c.tokenizer_model = "other";
  CHECK_THROWS_AS(merge_experts({a, c}, {0.5, 0.5}, {}), InputError);
  lm::MlstmConfig other;
  other.window = 5;
  CHECK_THROWS_AS(merge_experts({a, make_student(t, other, 64)}, {0.5, 0.5}, {}), InputError);
}
