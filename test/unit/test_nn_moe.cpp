// Training the moe and latent-moe blocks (nn/llama_train.hpp, issue 31): the loss gradient of
// every tensor against central finite differences in double, for each expert type, router and
// shared-expert setting; and on the reference kernels the training forward's logits bitwise
// lm::forward's (the engine's routed FFN).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "util/rng.hpp"
#include "nn_test_support.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

lm::ModelConfig moe_train_config(lm::BlockType t, lm::ExpertAct act, lm::RouterKind router, int shared, bool norm) {
  lm::ModelConfig c;
  c.vocab_size = 19;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 10;
  c.n_ctx = 16;
  c.rope_theta = 100.0;
  c.block_types = {t, lm::BlockType::llama};
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.d_expert = 6;
  c.moe.d_shared = shared;
  c.moe.d_latent = 4;
  c.moe.act = act;
  c.moe.router = router;
  c.moe.norm_topk = norm;
  c.moe.routed_scaling = 1.3;
  return c;
}

lm::Model moe_train_model(const lm::ModelConfig& c, std::uint64_t seed) {
  lm::Model m = lm::random_model(c, seed, 0.4);
  Rng rng(seed + 5);
  for (auto& l : m.layers)
    for (float& b : l.router_bias) b = static_cast<float>(0.3 * rng.normal());
  return m;
}

using testing::worst_fd_error;  // central differences (nn_test_support.hpp)

}  // namespace

// Every trainable tensor's gradient against central differences of the summed loss (the top-K
// selection is piecewise constant: with these random weights no key lies within the step of a
// tie, so the differences see the smooth piece the gradient is of).  2e-6 relative, as the llama
// whole-model check.
TEST_CASE("nn moe training: the loss gradient matches finite differences for every variant") {
  int checked = 0;
  for (lm::BlockType t : {lm::BlockType::moe, lm::BlockType::latent_moe})
    for (lm::ExpertAct act : {lm::ExpertAct::swiglu, lm::ExpertAct::relu2})
      for (lm::RouterKind router : {lm::RouterKind::softmax, lm::RouterKind::sigmoid})
        for (int variant = 0; variant < 2; ++variant) {
          const int shared = variant == 0 ? 0 : 5;
          const bool norm = variant == 0;
          const lm::ModelConfig c = moe_train_config(t, act, router, shared, norm);
          const lm::Model m = moe_train_model(c, 3);
          auto P = params_from_model<double>(m);
          const int B = 2, S = 4;
          Rng rng(17);
          std::vector<int> tok(B * S), tgt(B * S);
          for (auto& x : tok) x = int(rng.below(c.vocab_size));
          for (auto& x : tgt) x = int(rng.below(c.vocab_size));
          TrainCache<double> cache;
          P.store.zero_grad();
          llama_loss(P, tok, tgt, B, S, 1.0, cache);
          auto f = [&] {
            TrainCache<double> c2;
            return llama_loss(P, tok, tgt, B, S, 0.0, c2);
          };
          for (auto& p : P.store.params) {
            if (p.grad.size() != p.value.size()) continue;  // frozen: the sigmoid router's selection bias
            const double worst = worst_fd_error(f, p);
            INFO(std::string(lm::block_type_name(t)) << " " << std::string(lm::expert_act_name(act)) << " "
                                                     << std::string(lm::router_kind_name(router)) << " shared " << shared << " norm "
                                                     << norm << " tensor " << p.name << " worst " << worst);
            CHECK(worst < 2e-6);
            ++checked;
          }
        }
  CHECK(checked > 100);
}

// With the load-balancing loss (alpha = 0.3, large so that its gradient matters) the gradient is
// that of the summed cross-entropy plus cache.aux_objective = alpha N L_aux, for both routers; at
// uniform routing L_aux = 1 (here the random router gives a value near it, and above 1 - 1e-9).
TEST_CASE("nn moe training: the load-balancing loss's gradient matches finite differences") {
  for (lm::RouterKind router : {lm::RouterKind::softmax, lm::RouterKind::sigmoid}) {
    const lm::ModelConfig c = moe_train_config(lm::BlockType::latent_moe, lm::ExpertAct::swiglu, router, 0, true);
    const lm::Model m = moe_train_model(c, 5);
    auto P = params_from_model<double>(m);
    P.moe_aux = 0.3;
    const int B = 2, S = 4;
    Rng rng(23);
    std::vector<int> tok(B * S), tgt(B * S);
    for (auto& x : tok) x = int(rng.below(c.vocab_size));
    for (auto& x : tgt) x = int(rng.below(c.vocab_size));
    TrainCache<double> cache;
    P.store.zero_grad();
    llama_loss(P, tok, tgt, B, S, 1.0, cache);
    CHECK(cache.aux_loss > 0.5);
    CHECK(cache.aux_objective == doctest::Approx(0.3 * B * S * cache.aux_loss));
    auto f = [&] {
      TrainCache<double> c2;
      const double ce = llama_loss(P, tok, tgt, B, S, 0.0, c2);
      return ce + c2.aux_objective;
    };
    Param<double>& W = P.layer(0, LlamaParams<double>::router);
    const double worst = worst_fd_error(f, W);
    INFO(std::string(lm::router_kind_name(router)) << " worst " << worst);
    CHECK(worst < 2e-6);
    // and the term is not zero: without it the router's gradient differs
    auto Q = params_from_model<double>(m);
    TrainCache<double> c3;
    Q.store.zero_grad();
    llama_loss(Q, tok, tgt, B, S, 1.0, c3);
    double diff = 0;
    for (std::size_t i = 0; i < W.grad.size(); ++i) diff = std::max(diff, std::abs(W.grad[i] - Q.layer(0, LlamaParams<double>::router).grad[i]));
    CHECK(diff > 1e-4);
  }
}

// On the reference kernels the training forward is the engine's arithmetic: every logit of each
// sequence equals lm::forward's, bit for bit.
TEST_CASE("nn moe training forward logits equal lm::forward on the reference kernels") {
  const TrainKernels keep = train_kernels();
  set_train_kernels(TrainKernels::reference);
  for (lm::BlockType t : {lm::BlockType::moe, lm::BlockType::latent_moe})
    for (lm::RouterKind router : {lm::RouterKind::softmax, lm::RouterKind::sigmoid}) {
      const lm::ModelConfig c = moe_train_config(t, router == lm::RouterKind::softmax ? lm::ExpertAct::swiglu : lm::ExpertAct::relu2,
                                                 router, 5, router == lm::RouterKind::softmax);
      const lm::Model m = moe_train_model(c, 8);
      auto P = params_from_model<float>(m);
      const int B = 3, S = 7;
      Rng rng(4);
      std::vector<int> tok(B * S), tgt(B * S, 0);
      for (auto& x : tok) x = int(rng.below(c.vocab_size));
      TrainCache<float> cache;
      std::vector<float> logits;
      llama_loss(P, tok, tgt, B, S, 0.0, cache, &logits);
      int mismatches = 0;
      for (int b = 0; b < B; ++b) {
        lm::KvCache kv(c);
        const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
        const auto res = lm::forward(m, kv, lm::Batch::causal(seq, 0));
        for (int s = 0; s < S; ++s)
          for (int v = 0; v < c.vocab_size; ++v) mismatches += res.logits.row(s)[v] != logits[(std::size_t(b) * S + s) * c.vocab_size + v];
      }
      INFO(std::string(lm::block_type_name(t)) << " " << std::string(lm::router_kind_name(router)));
      CHECK(mismatches == 0);
    }
  set_train_kernels(keep);
}

// Token dropping (LlamaParams::moe_capacity): with the moe block last and K = 1, a capacity of
// one entry per expert keeps exactly the first row routed to each expert.  Every row's logits
// must then equal the engine's without dropping (a kept row) or the engine's with that block's
// experts silenced (down_exps = 0: a dropped row), the first row is always kept, and the dropped
// count is the rows that were not.  A capacity factor of E / K (cap = every row) changes nothing.
TEST_CASE("nn moe training: capacity-factor token dropping against the engine's kept and silenced rows") {
  const TrainKernels keep = train_kernels();
  set_train_kernels(TrainKernels::reference);
  lm::ModelConfig c = moe_train_config(lm::BlockType::moe, lm::ExpertAct::swiglu, lm::RouterKind::softmax, 0, true);
  c.block_types = {lm::BlockType::llama, lm::BlockType::moe};
  c.moe.top_k = 1;
  const lm::Model m = moe_train_model(c, 11);
  lm::Model silent = m;
  std::fill(silent.layers[1].down_exps.data.begin(), silent.layers[1].down_exps.data.end(), 0.0f);
  const int B = 2, S = 6, N = B * S, V = c.vocab_size;
  Rng rng(9);
  std::vector<int> tok(N), tgt(N, 0);
  for (auto& x : tok) x = int(rng.below(V));
  auto P = params_from_model<float>(m);
  std::vector<float> full, dropped;
  TrainCache<float> cache;
  llama_loss(P, tok, tgt, B, S, 0.0, cache, &full);
  CHECK(P.moe_dropped[1] == 0);
  P.moe_capacity = double(c.moe.n_experts) / c.moe.top_k;  // cap = N K / E x E / K = N: nothing dropped
  P.moe_dropped.assign(2, 0.0);
  std::vector<float> same;
  llama_loss(P, tok, tgt, B, S, 0.0, cache, &same);
  CHECK(same == full);
  CHECK(P.moe_dropped[1] == 0);
  P.moe_capacity = 1e-6;  // cap = ceil(tiny) = 1 entry per expert
  P.moe_dropped.assign(2, 0.0);
  llama_loss(P, tok, tgt, B, S, 0.0, cache, &dropped);
  int kept = 0, neither = 0;
  std::vector<bool> row_kept(N);
  for (int b = 0; b < B; ++b) {
    const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
    lm::KvCache k1(c), k2(c);
    const auto on = lm::forward(m, k1, lm::Batch::causal(seq, 0));
    const auto off = lm::forward(silent, k2, lm::Batch::causal(seq, 0));
    for (int s = 0; s < S; ++s) {
      const float* got = dropped.data() + std::size_t(b * S + s) * V;
      bool eq_on = true, eq_off = true;
      double gap = 0;
      for (int v = 0; v < V; ++v) {
        eq_on = eq_on && got[v] == on.logits.row(s)[v];
        eq_off = eq_off && got[v] == off.logits.row(s)[v];
        gap = std::max(gap, double(std::abs(on.logits.row(s)[v] - off.logits.row(s)[v])));
      }
      CHECK(gap > 1e-3);  // the two references are distinguishable
      row_kept[std::size_t(b * S + s)] = eq_on;
      kept += eq_on;
      neither += !eq_on && !eq_off;
    }
  }
  CHECK(neither == 0);
  CHECK(row_kept[0]);
  CHECK(kept >= 2);
  CHECK(kept <= c.moe.n_experts);
  CHECK(P.moe_dropped[1] == N - kept);
  CHECK(P.moe_dropped[0] == 0);  // the llama block has no router
  set_train_kernels(keep);
}

// The gradient with entries dropped (factor 0.5: cap = ceil(N K / 2E) of the N K entries) is
// still the loss's, for both block types and with norm_topk on and off: a dropped entry's gate
// weight has no gradient, the row's other weights keep their normalisation.
TEST_CASE("nn moe training: the loss gradient with token dropping matches finite differences") {
  for (lm::BlockType t : {lm::BlockType::moe, lm::BlockType::latent_moe})
    for (bool norm : {true, false}) {
      const lm::ModelConfig c = moe_train_config(t, lm::ExpertAct::swiglu, lm::RouterKind::softmax, 0, norm);
      const lm::Model m = moe_train_model(c, 13);
      auto P = params_from_model<double>(m);
      P.moe_capacity = 0.5;
      const int B = 2, S = 4;
      Rng rng(29);
      std::vector<int> tok(B * S), tgt(B * S);
      for (auto& x : tok) x = int(rng.below(c.vocab_size));
      for (auto& x : tgt) x = int(rng.below(c.vocab_size));
      TrainCache<double> cache;
      P.store.zero_grad();
      llama_loss(P, tok, tgt, B, S, 1.0, cache);
      CHECK(P.moe_dropped[0] >= B * S * c.moe.top_k / 2);  // at least half the entries dropped
      auto f = [&] {
        TrainCache<double> c2;
        return llama_loss(P, tok, tgt, B, S, 0.0, c2);
      };
      using LP = LlamaParams<double>;
      for (const auto& [name, slot] : {std::pair{"router", LP::router}, std::pair{"gate_exps", LP::gate_exps},
                                       std::pair{"down_exps", LP::down_exps}}) {
        const double worst = worst_fd_error(f, P.layer(0, slot));
        INFO(std::string(lm::block_type_name(t)) << " norm " << norm << " " << name << " worst " << worst);
        CHECK(worst < 2e-6);
      }
    }
}
