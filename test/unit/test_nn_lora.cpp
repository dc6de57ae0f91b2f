// nn/lora and nn/plora (issue 33): LoRA's gradient against central finite differences (double,
// two packed jobs of different ranks and targets, with dropout), the adapted forward against an
// independently merged model, PEFT's initialisation, and the packing promise: K jobs trained
// packed end with bitwise the adapters each gets trained alone.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "lm/model.hpp"
#include "nn/llama_train.hpp"
#include "nn/lora.hpp"
#include "nn/plora.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "nn_test_support.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

lm::ModelConfig lora_tiny_config(lm::RopeStyle style) { return testing::tiny_config(style, false); }

lm::LoraConfig lora_cfg(int r, double alpha, std::vector<std::string> targets, double dropout = 0, bool rs = false) {
  lm::LoraConfig c;
  c.rank = r;
  c.alpha = alpha;
  c.targets = std::move(targets);
  c.dropout = dropout;
  c.rslora = rs;
  return c;
}

/// Fills every B with N(0, s²) so that the adapters change the function (B = 0 at init).
template <class T>
void randomise_b(LoraParams<T>& P, std::uint64_t seed, double s) {
  Rng rng(seed);
  for (auto& row : P.b)
    for (int i : row)
      if (i >= 0)
        for (T& v : P.store.params[std::size_t(i)].value) v = static_cast<T>(s * rng.normal());
}

}  // namespace

// Truth: central differences of the summed loss (double, h = 1e-5: ~1e-6 absolute at most, see
// test_nn.cpp), for every entry of both jobs' A and B; the base gets no gradient (frozen).
TEST_CASE("nn lora: packed adapters' gradients match finite differences (mixed ranks, targets, dropout)") {
  for (auto style : {lm::RopeStyle::half, lm::RopeStyle::interleaved}) {
    const lm::Model m = lm::random_model(lora_tiny_config(style), 3, 0.3);
    auto P = params_from_model<double>(m);
    for (std::size_t i = 0; i < P.store.params.size(); ++i) P.store.freeze(int(i));
    auto j0 = lora_init<double>(m.config, lora_cfg(2, 4, {"q", "v", "down"}), 1, false);
    auto j1 = lora_init<double>(m.config, lora_cfg(3, 3, {"k", "o", "gate", "up"}, 0.25, true), 2, false);
    randomise_b(j0, 5, 0.3);
    randomise_b(j1, 6, 0.3);
    const int B = 3, S = 5;
    LoraPack<double> pack;
    pack.jobs.push_back({&j0, 0, S, 11});
    pack.jobs.push_back({&j1, S, 3 * S, 12});
    P.lora = &pack;
    Rng rng(11);
    std::vector<int> tok(B * S), tgt(B * S);
    for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
    for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
    tgt[7] = -1;
    TrainCache<double> cache;
    j0.store.zero_grad();
    j1.store.zero_grad();
    llama_loss(P, tok, tgt, B, S, 1.0, cache);
    for (const auto& p : P.store.params) CHECK(p.grad.empty());
    auto f = [&] { TrainCache<double> c2; return llama_loss(P, tok, tgt, B, S, 0.0, c2); };
    for (auto* J : {&j0, &j1})
      for (auto& p : J->store.params) {
        const double worst = testing::worst_fd_error(f, p);
        INFO("tensor " << p.name << " worst relative error " << worst);
        CHECK(worst < 2e-6);
      }
  }
}

// Truth: the same base with each adapted W replaced by W + s·B·A computed in double here (an
// independent merge), run without adapters; the adapted forward must give its loss (1e-10 in
// double: only rounding differs) — for alpha/r and rsLoRA's alpha/sqrt(r).
TEST_CASE("nn lora: the adapted forward equals the merged model W + s B A") {
  const lm::Model m = lm::random_model(lora_tiny_config(lm::RopeStyle::half), 4, 0.3);
  for (bool rs : {false, true}) {
    auto J = lora_init<double>(m.config, lora_cfg(4, 8, {"q", "k", "v", "o", "gate", "up", "down"}, 0.0, rs), 3, false);
    randomise_b(J, 9, 0.2);
    const double s = rs ? 8 / std::sqrt(4.0) : 8 / 4.0;
    CHECK(double(J.scaling) == doctest::Approx(s).epsilon(1e-15));
    auto P = params_from_model<double>(m);
    LoraPack<double> pack;
    pack.jobs.push_back({&J, 0, -1, 0});
    P.lora = &pack;
    auto M = params_from_model<double>(m);
    for (int l = 0; l < m.config.n_layers; ++l)
      for (int slot = 1; slot < kLoraSlots; ++slot) {
        if (!J.has(l, slot)) continue;
        const auto& A = J.store.params[std::size_t(J.a[l][slot])];
        const auto& Bm = J.store.params[std::size_t(J.b[l][slot])];
        auto& W = M.layer(l, LlamaParams<double>::LayerTensor(slot));
        const int r = A.shape[0], in = A.shape[1], out = Bm.shape[0];
        for (int o = 0; o < out; ++o)
          for (int i = 0; i < in; ++i) {
            double acc = 0;
            for (int k = 0; k < r; ++k) acc += Bm.value[std::size_t(o) * r + k] * A.value[std::size_t(k) * in + i];
            W.value[std::size_t(o) * in + i] += s * acc;
          }
      }
    const int B = 2, S = 6;
    Rng rng(2);
    std::vector<int> tok(B * S), tgt(B * S);
    for (auto& t : tok) t = int(rng.below(m.config.vocab_size));
    for (auto& t : tgt) t = int(rng.below(m.config.vocab_size));
    TrainCache<double> c1, c2;
    const double adapted = llama_loss(P, tok, tgt, B, S, 0.0, c1);
    const double merged = llama_loss(M, tok, tgt, B, S, 0.0, c2);
    CHECK(adapted == doctest::Approx(merged).epsilon(1e-10));
    P.lora = nullptr;
    TrainCache<double> c3;
    CHECK(std::abs(llama_loss(P, tok, tgt, B, S, 0.0, c3) - adapted) > 1e-3);  // the adapter matters
  }
}

// Truth: PEFT's reset_lora_parameters: A ~ kaiming_uniform(a = sqrt 5) = U(-1/sqrt(in), 1/sqrt(in)),
// B = 0; the draws' mean square is checked against the uniform's variance bound^2 / 3 on the pooled
// q matrices' 288 draws (relative standard error 5.3%: 15% is ~3 standard errors).
TEST_CASE("nn lora: initialisation is PEFT's (A kaiming-uniform, B zero) and config errors are usage errors") {
  const lm::Model m = lm::random_model(lora_tiny_config(lm::RopeStyle::half), 4, 0.3);
  auto J = lora_init<float>(m.config, lora_cfg(12, 16, {"q"}), 7, false);
  double ss = 0;
  std::size_t n = 0;
  for (int l = 0; l < 2; ++l) {
    const auto& A = J.store.params[std::size_t(J.a[l][1])];
    const auto& Bm = J.store.params[std::size_t(J.b[l][1])];
    CHECK(A.shape == std::vector<int>{12, 12});
    CHECK(Bm.shape == std::vector<int>{12, 12});
    for (float v : A.value) {
      CHECK(std::abs(v) <= 1 / std::sqrt(12.0f));
      ss += double(v) * v;
      ++n;
    }
    for (float v : Bm.value) CHECK(v == 0.0f);
  }
  CHECK(ss / double(n) == doctest::Approx(1.0 / 12 / 3).epsilon(0.15));
  CHECK(lm::lora_param_count(m.config, 12, {"q"}) == 2 * 12 * (12 + 12));
  CHECK_THROWS_AS(lora_init<float>(m.config, lora_cfg(0, 16, {"q"}), 7, false), UsageError);
  CHECK_THROWS_AS(lora_init<float>(m.config, lora_cfg(13, 16, {"q"}), 7, false), UsageError);  // above min(in, out)
  CHECK_THROWS_AS(lora_init<float>(m.config, lora_cfg(2, 16, {"qq"}), 7, false), UsageError);
}

// Truth: the same job trained alone (a trainer holding only it).  Three jobs of different ranks,
// batches, targets, learning rates and dropout, packed for 4 steps (the third leaving after 2),
// end bitwise equal to each trained alone, with the same per-step losses; the base is unchanged.
TEST_CASE("nn plora: packed jobs equal the same jobs trained alone, bitwise") {
  lm::ModelConfig c = lora_tiny_config(lm::RopeStyle::interleaved);
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.n_ctx = 32;
  c.vocab_size = 61;
  const lm::Model m = lm::random_model(c, 8, 0.2);
  Rng rng(4);
  std::vector<int> stream(2000);
  for (int& t : stream) t = int(rng.below(61));
  std::vector<LoraJobOptions> jobs(3);
  jobs[0].lora = lora_cfg(4, 8, {"q", "v"});
  jobs[0].batch = 2;
  jobs[0].steps = 4;
  jobs[0].lr = 3e-3;
  jobs[0].seed = 1;
  jobs[1].lora = lora_cfg(8, 16, {"k", "o", "gate", "up", "down"}, 0.1, true);
  jobs[1].batch = 1;
  jobs[1].steps = 4;
  jobs[1].lr = 1e-2;
  jobs[1].warmup = 2;
  jobs[1].seed = 2;
  jobs[2].lora = lora_cfg(2, 2, {"q", "k", "v", "o"});
  jobs[2].batch = 3;
  jobs[2].steps = 2;
  jobs[2].clip = 1e-3;  // clipping active
  jobs[2].seed = 3;
  const int S = 24;
  PackedLoraTrainer packed(m, S);
  for (auto& j : jobs) packed.add_job(j, &stream);
  std::vector<std::vector<double>> packed_loss(3);
  for (int s = 0; s < 4; ++s) {
    std::vector<int> ids;
    for (int j = 0; j < 3; ++j)
      if (!packed.finished(j)) ids.push_back(j);
    for (const auto& st : packed.step(ids)) packed_loss[std::size_t(st.job)].push_back(st.loss);
  }
  for (int j = 0; j < 3; ++j) {
    PackedLoraTrainer alone(m, S);
    alone.add_job(jobs[std::size_t(j)], &stream);
    std::vector<double> loss;
    while (!alone.finished(0)) loss.push_back(alone.step({0})[0].loss);
    INFO("job " << j);
    CHECK(loss == packed_loss[std::size_t(j)]);
    const auto& a = alone.job_params(0).store.params;
    const auto& b = packed.job_params(j).store.params;
    REQUIRE(a.size() == b.size());
    bool same = true, moved = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      same = same && a[i].value == b[i].value;
      for (float v : a[i].value) moved = moved || (a[i].name.find("lora_b") != std::string::npos && v != 0.0f);
    }
    CHECK(same);
    CHECK(moved);  // B left zero: the adapters trained
  }
  // evaluation through the adapter differs from the base's and is deterministic
  const EvalResult e1 = packed.evaluate(0, stream, 4, 200), e2 = packed.evaluate(0, stream, 2, 200);
  CHECK(e1.loss == doctest::Approx(e2.loss).epsilon(1e-12));
  CHECK(e1.tokens == 200);
  CHECK_THROWS_AS(packed.step({2}), UsageError);  // finished
}
