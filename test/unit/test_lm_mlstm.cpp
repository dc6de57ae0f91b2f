// The mlstm-hybrid block (issue 35; lm/block_mlstm.cpp, nn/llama_train.cpp): gate 0 with a window
// covering the context is the llama block bit for bit; gate 1 ignores the window; the engine's
// chunkwise prefill, recurrent rows and token-by-token decoding agree; the cache keeps a bounded
// window; the trainer's gradient matches finite differences for every mixer and its logits the
// engine's; checkpoints round-trip and other formats refuse the block.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "io/provenance.hpp"
#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "lm/model_io.hpp"
#include "nn/llama_train.hpp"
#include "nn_test_support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

lm::ModelConfig hybrid_config(lm::MlstmMixer mixer, int window, int sinks, int n_ctx = 40) {
  lm::ModelConfig c = testing::tiny_config(lm::RopeStyle::half, false);
  c.n_ctx = n_ctx;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.block_types = {lm::BlockType::mlstm_hybrid, lm::BlockType::mlstm_hybrid};
  c.mlstm.window = window;
  c.mlstm.sinks = sinks;
  c.mlstm.mixer = mixer;
  return c;
}

/// A random hybrid model: matrices N(0, 0.3^2), gate biases drawn so that forget gates stay open.
lm::Model hybrid_model(const lm::ModelConfig& c, std::uint64_t seed, float ogate_bias = 0.0f) {
  lm::Model m = lm::random_model(c, seed, 0.3);
  Rng rng(seed + 1);
  for (auto& l : m.layers) {
    for (float& b : l.mlstm_igate_b) b = static_cast<float>(rng.normal());
    for (float& b : l.mlstm_fgate_b) b = static_cast<float>(2.0 + rng.normal());
    for (float& b : l.mlstm_ogate_b) b = ogate_bias + static_cast<float>(0.5 * rng.normal());
  }
  return m;
}

std::vector<int> random_tokens(int n, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(n);
  for (auto& x : t) x = int(rng.below(vocab));
  return t;
}

/// The llama model with the hybrid model's shared tensors (the teacher the student came from).
lm::Model as_llama(const lm::Model& h) {
  lm::ModelConfig c = h.config;
  c.block_types.assign(std::size_t(c.n_layers), lm::BlockType::llama);
  lm::Model m = lm::allocate_model(c);
  m.token_embd = h.token_embd;
  m.output = h.output;
  m.output_norm = h.output_norm;
  m.tokenizer_model = h.tokenizer_model;
  for (int l = 0; l < c.n_layers; ++l) {
    const lm::Layer& a = h.layers[std::size_t(l)];
    lm::Layer& b = m.layers[std::size_t(l)];
    b.attn_norm = a.attn_norm; b.ffn_norm = a.ffn_norm;
    b.wq = a.wq; b.wk = a.wk; b.wv = a.wv; b.wo = a.wo;
    b.w_gate = a.w_gate; b.w_up = a.w_up; b.w_down = a.w_down;
  }
  return m;
}

lm::Matrix prefill(const lm::Model& m, const std::vector<int>& tok, bool last_state_only, lm::KvCache* keep = nullptr) {
  lm::KvCache kv(m.config);
  lm::ForwardOptions opt;
  if (last_state_only) opt.state_rows = {int(tok.size()) - 1};
  auto r = lm::forward(m, kv, lm::Batch::causal(tok, 0), opt);
  if (keep) {
    kv.commit_all();
    *keep = kv;
  }
  return r.logits;
}

double max_gap(const lm::Matrix& a, const lm::Matrix& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) w = std::max(w, double(std::abs(a.data[i] - b.data[i])));
  return w;
}

}  // namespace

TEST_CASE("mlstm-hybrid: gate 0 and a window covering the context is the llama block, bit for bit") {
  const auto tok = random_tokens(30, 23, 5);
  for (lm::MlstmMixer mixer : {lm::MlstmMixer::hybrid, lm::MlstmMixer::swa}) {
    // sigmoid(-1e4) is exactly 0 in float
    const lm::Model h = hybrid_model(hybrid_config(mixer, 40, 0), 3, -1e4f);
    const lm::Model t = as_llama(h);
    lm::KvCache kh(h.config), kt(t.config);
    const auto rh = lm::forward(h, kh, lm::Batch::causal(tok, 0));
    const auto rt = lm::forward(t, kt, lm::Batch::causal(tok, 0));
    CHECK(rh.logits.data == rt.logits.data);
    // a narrower window changes the result
    const lm::Model w = hybrid_model(hybrid_config(mixer, 5, 2), 3, -1e4f);
    lm::KvCache kw(w.config);
    CHECK(lm::forward(w, kw, lm::Batch::causal(tok, 0)).logits.data != rt.logits.data);
  }
}

TEST_CASE("mlstm-hybrid: gate 1 gives the mLSTM branch (the window does not matter), gate 0 the windowed attention") {
  const auto tok = random_tokens(25, 23, 6);
  const lm::Model a = hybrid_model(hybrid_config(lm::MlstmMixer::hybrid, 3, 1), 4, 1e4f);
  const lm::Model b = hybrid_model(hybrid_config(lm::MlstmMixer::hybrid, 20, 0), 4, 1e4f);
  const lm::Model lin = hybrid_model(hybrid_config(lm::MlstmMixer::linear, 3, 1), 4, 1e4f);
  CHECK(prefill(a, tok, false).data == prefill(b, tok, false).data);
  CHECK(prefill(a, tok, false).data != prefill(lin, tok, false).data);  // the gates i, f matter
  // with o = 0 the mLSTM tensors do not matter
  lm::Model z = hybrid_model(hybrid_config(lm::MlstmMixer::hybrid, 3, 1), 4, -1e4f);
  const lm::Matrix before = prefill(z, tok, false);
  for (auto& l : z.layers) l.mlstm_fq.data.assign(l.mlstm_fq.data.size(), 0.7f);
  CHECK(prefill(z, tok, false).data == before.data);
  const lm::Model swa = hybrid_model(hybrid_config(lm::MlstmMixer::swa, 3, 1), 4);
  CHECK(prefill(swa, tok, false).data == before.data);
}

TEST_CASE("mlstm-hybrid: chunkwise prefill, recurrent rows and token-by-token decoding agree, and the window stays bounded") {
  for (lm::MlstmMixer mixer : {lm::MlstmMixer::hybrid, lm::MlstmMixer::linear, lm::MlstmMixer::swa}) {
    const lm::ModelConfig c = hybrid_config(mixer, 4, 2, 400);
    const lm::Model m = hybrid_model(c, 9);
    const auto tok = random_tokens(150, 23, 7);  // > 2 chunks of 64
    lm::KvCache chunk_cache(c), rec_cache(c);
    const lm::Matrix chunked = prefill(m, tok, true, &chunk_cache);
    const lm::Matrix recurrent = prefill(m, tok, false, &rec_cache);
    INFO(std::string(lm::mlstm_mixer_name(mixer)));
    CHECK(max_gap(chunked, recurrent) < 1e-4);
    for (int l = 0; l < c.n_layers; ++l)
      for (int i = 0; i < chunk_cache.state_size(l); ++i)
        CHECK(std::abs(chunk_cache.state(l)[i] - rec_cache.state(l)[i]) <= 1e-5f * (1 + std::abs(rec_cache.state(l)[i])));
    // decoding one token at a time from an empty cache
    lm::KvCache kv(c);
    double worst = 0;
    std::size_t most = 0;
    for (std::size_t t = 0; t < tok.size(); ++t) {
      lm::Batch b;
      b.add(tok[t], int(t), b.add_view(lm::View::full()), {});
      const auto r = lm::forward(m, kv, b);
      kv.commit_all();
      for (int v = 0; v < c.vocab_size; ++v) worst = std::max(worst, double(std::abs(r.logits.row(0)[v] - recurrent.row(int(t))[v])));
      for (int l = 0; l < c.n_layers; ++l) most = std::max(most, std::size_t(kv.size(l, 0)));
    }
    CHECK(worst < 1e-4);
    // the sinks and the window at most (+ the one slot a future query no longer needs), never the context
    CHECK(most <= std::size_t(mixer == lm::MlstmMixer::linear ? 0 : c.mlstm.sinks + c.mlstm.window));
  }
}

TEST_CASE("mlstm-hybrid: commit refuses a row whose state was not kept, and a row continuing a later row") {
  const lm::ModelConfig c = hybrid_config(lm::MlstmMixer::hybrid, 4, 1);
  const lm::Model m = hybrid_model(c, 2);
  const auto tok = random_tokens(6, 23, 1);
  lm::KvCache kv(c);
  lm::ForwardOptions opt;
  opt.state_rows = {5};
  lm::forward(m, kv, lm::Batch::causal(tok, 0), opt);
  CHECK_THROWS_AS(kv.commit({0, 1, 2}), InputError);
  CHECK_NOTHROW(kv.commit({0, 1, 2, 3, 4, 5}));
  lm::KvCache kv2(c);
  lm::Batch b;
  const int v = b.add_view(lm::View::full());
  b.add(tok[0], 0, v, {1});
  b.add(tok[1], 1, v, {});
  CHECK_THROWS_AS(lm::forward(m, kv2, b), InputError);
}

TEST_CASE("mlstm-hybrid training: the loss gradient matches finite differences for every mixer") {
  int checked = 0;
  for (lm::MlstmMixer mixer : {lm::MlstmMixer::hybrid, lm::MlstmMixer::linear, lm::MlstmMixer::swa}) {
    lm::ModelConfig c = hybrid_config(mixer, 3, 1, 16);
    c.block_types = {lm::BlockType::mlstm_hybrid, lm::BlockType::llama};
    const lm::Model m = hybrid_model(c, 11);
    auto P = params_from_model<double>(m);
    const int B = 2, S = 6;
    const auto tok = random_tokens(B * S, c.vocab_size, 3), tgt = random_tokens(B * S, c.vocab_size, 4);
    TrainCache<double> cache;
    P.store.zero_grad();
    llama_loss(P, tok, tgt, B, S, 1.0, cache);
    auto f = [&] {
      TrainCache<double> c2;
      return llama_loss(P, tok, tgt, B, S, 0.0, c2);
    };
    for (auto& p : P.store.params) {
      if (p.name.rfind("blk.0.", 0) != 0 && p.name != "token_embd.weight") continue;
      const double worst = testing::worst_fd_error(f, p);
      INFO(std::string(lm::mlstm_mixer_name(mixer)) << " " << p.name << " worst " << worst);
      CHECK(worst < 2e-6);
      ++checked;
    }
  }
  CHECK(checked == 3 * 18);
}

TEST_CASE("mlstm-hybrid training: the float forward's logits agree with the engine's") {
  for (lm::MlstmMixer mixer : {lm::MlstmMixer::hybrid, lm::MlstmMixer::linear, lm::MlstmMixer::swa}) {
    const lm::ModelConfig c = hybrid_config(mixer, 5, 2, 80);
    const lm::Model m = hybrid_model(c, 13);
    auto P = params_from_model<float>(m);
    const int B = 2, S = 70;
    const auto tok = random_tokens(B * S, c.vocab_size, 8);
    std::vector<int> tgt(tok.size(), 0);
    TrainCache<float> cache;
    std::vector<float> logits;
    llama_loss(P, tok, tgt, B, S, 0.0, cache, &logits);
    double worst = 0;
    for (int b = 0; b < B; ++b) {
      const std::vector<int> seq(tok.begin() + b * S, tok.begin() + (b + 1) * S);
      const lm::Matrix e = prefill(m, seq, true);
      for (int s = 0; s < S; ++s)
        for (int v = 0; v < c.vocab_size; ++v)
          worst = std::max(worst, double(std::abs(e.row(s)[v] - logits[(std::size_t(b) * S + s) * c.vocab_size + v])));
    }
    INFO(std::string(lm::mlstm_mixer_name(mixer)));
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("mlstm-hybrid: a checkpoint round-trips, and GGUF and Hugging Face output refuse the block") {
  const lm::ModelConfig c = hybrid_config(lm::MlstmMixer::swa, 7, 3);
  const lm::Model m = hybrid_model(c, 21);
  const auto dir = std::filesystem::temp_directory_path() / "icmlkit_test_mlstm";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "h.h5").string();
  io::Provenance prov;
  prov.tool = "test";
  lm::save_checkpoint(path, m, io::h5::FloatStorage::f32, prov);
  const lm::Model r = lm::load_checkpoint(path);
  CHECK(r.config.mlstm.window == 7);
  CHECK(r.config.mlstm.sinks == 3);
  CHECK(r.config.mlstm.mixer == lm::MlstmMixer::swa);
  CHECK(r.layers[1].mlstm_ogate.data == m.layers[1].mlstm_ogate.data);
  CHECK(r.layers[1].mlstm_fgate_b == m.layers[1].mlstm_fgate_b);
  CHECK_THROWS_AS(lm::save_any((dir / "h.gguf").string(), lm::ModelFormat::gguf, m, io::h5::FloatStorage::f32, prov), UsageError);
  std::filesystem::remove_all(dir);
}
