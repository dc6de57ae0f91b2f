// bench-moe-decode: CPU engine decode and prefill tokens/s of mixture-of-experts models (block
// types moe and latent-moe, issue 31) against the dense model of equal active FFN weights, the
// peer measured in the same run: d 256, 6 layers, 8/4 heads, vocab 4096; dense d_ff 512; standard
// MoE 8 experts top-2 of width 256 (the same active FFN weights); LatentMoE l = 64 (alpha 4), 32
// experts top-8 of width 256 (the same expert FLOPs, plus W_down/W_up).  Target: MoE decode within
// 1.3x of dense.  Prints one JSON object.  Usage: bench-moe-decode [--threads N] [--quick]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

ModelConfig shape() {
  ModelConfig c;
  c.vocab_size = 4096;
  c.d_model = 256;
  c.n_layers = 6;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.d_ff = 512;
  c.n_ctx = 512;
  return c;
}

struct Timing {
  double decode_tok_s = 0, prefill_tok_s = 0;
  bool invariant = false;
};

Timing time_model(const ModelConfig& cfg, bool quick) {
  const Model m = random_model(cfg, 1);
  const int ctx = 64;
  std::vector<int> prompt(ctx);
  for (int i = 0; i < ctx; ++i) prompt[i] = (i * 7 + 3) % cfg.vocab_size;
  KvCache base(cfg);
  forward(m, base, Batch::causal(prompt, 0));
  base.commit_all();
  auto pass = [&](int k, Matrix* logits) {
    KvCache c = base;
    Batch b;
    for (int i = 0; i < k; ++i) b.add((i * 31 + 5) % cfg.vocab_size, ctx);
    Stopwatch s;
    ForwardResult r = forward(m, c, b);
    const double t = s.seconds();
    if (logits) *logits = std::move(r.logits);
    return t;
  };
  pass(1, nullptr);
  std::vector<double> t;
  for (int i = 0; i < (quick ? 9 : 31); ++i) t.push_back(pass(1, nullptr));
  std::sort(t.begin(), t.end());
  Timing out;
  out.decode_tok_s = 1.0 / t[t.size() / 2];
  std::vector<int> long_prompt(256);
  for (int i = 0; i < 256; ++i) long_prompt[i] = (i * 13 + 1) % cfg.vocab_size;
  std::vector<double> p;
  for (int i = 0; i < (quick ? 1 : 3); ++i) {
    KvCache c(cfg);
    Stopwatch s;
    forward(m, c, Batch::causal(long_prompt, 0));
    p.push_back(s.seconds());
  }
  std::sort(p.begin(), p.end());
  out.prefill_tok_s = 256 / p[p.size() / 2];
  Matrix one, many;
  pass(1, &one);
  pass(16, &many);
  out.invariant = std::memcmp(one.row(0), many.row(0), sizeof(float) * cfg.vocab_size) == 0;
  return out;
}

// Weights a decode step multiplies (the active ones: attention, router, K experts, shared,
// projections, head), x 4 bytes.
double active_bytes(const ModelConfig& c) {
  double n = double(c.vocab_size) * c.d_model * (c.tied ? 1 : 2);
  for (int l = 0; l < c.n_layers; ++l) n += double(c.block_active_params(l));
  return 4 * n;
}

}  // namespace

int main(int argc, char** argv) {
  int nthreads = 2;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) nthreads = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") quick = true;
    else {
      std::cerr << "usage: bench-moe-decode [--threads N] [--quick]\n";
      return 2;
    }
  }
  set_threads(nthreads);
  const ModelConfig dense = shape();
  ModelConfig moe = dense, latent = dense;
  moe.block_types.assign(6, BlockType::moe);
  moe.moe.n_experts = 8, moe.moe.top_k = 2, moe.moe.d_expert = 256;
  latent.block_types.assign(6, BlockType::latent_moe);
  latent.moe.n_experts = 32, latent.moe.top_k = 8, latent.moe.d_expert = 256, latent.moe.d_latent = 64;
  nlohmann::json rows = nlohmann::json::array();
  const Timing td = time_model(dense, quick);
  for (const auto& [name, cfg] : {std::pair{"dense", dense}, {"moe-8x-top2", moe}, {"latent-moe-32x-top8-l64", latent}}) {
    const Timing t = name == std::string("dense") ? td : time_model(cfg, quick);
    rows.push_back({{"model", name},
                    {"n_params", cfg.n_params()},
                    {"active_weight_bytes", active_bytes(cfg)},
                    {"decode_tokens_per_s", t.decode_tok_s},
                    {"prefill_tokens_per_s", t.prefill_tok_s},
                    {"dense_over_this_decode", td.decode_tok_s / t.decode_tok_s},
                    {"batch_invariant_16_vs_1", t.invariant}});
  }
  std::cout << nlohmann::json{{"bench", "moe_decode"}, {"threads", nthreads}, {"decode_context", 64}, {"models", rows},
                              {"target", "dense_over_this_decode <= 1.3 for the MoE models"}}
                   .dump()
            << "\n";
}
