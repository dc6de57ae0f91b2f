// Training speed of the CPU trainer (issue 5): tokens/s of full AdamW steps (forward, backward,
// clipping, update) for the demo configuration, and the model FLOPs utilisation against the
// measured rate of the engine's matmul on the same threads.
// Prints one JSON object.  Usage: bench-lm-train [--threads N] [--steps N] [--seq-len S]
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "lm/matmul.hpp"
#include "lm/model.hpp"
#include "lm/presets.hpp"
#include "nn/trainer.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// GFLOP/s of matmul_xwt on the shapes of one training step's largest products.
double matmul_gflops(int S, int d, int ff) {
  std::vector<float> x(std::size_t(S) * ff, 0.5f), w(std::size_t(ff) * ff, 0.25f), y(std::size_t(S) * ff);
  double flops = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 5; ++rep) {
    lm::matmul_xwt(x.data(), S, d, d, w.data(), ff, y.data(), ff);  // [S,d]·[ff,d]^T (gate/up)
    lm::matmul_xwt(x.data(), S, ff, ff, w.data(), d, y.data(), d);  // [S,ff]·[d,ff]^T (down)
    flops += 2.0 * 2 * S * d * ff;
  }
  return flops / seconds_since(t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int nthreads = 2, steps = 3, S = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) nthreads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seq-len")) S = std::atoi(argv[i + 1]);
  }
  set_threads(nthreads);
  lm::ModelConfig c = lm::default_shape();
  lm::apply_preset("7m", c, [](const char*) { return false; });
  c.n_ctx = std::max(c.n_ctx, S);
  const lm::Model m = lm::random_model(c, 1, 0.02);
  Rng rng(2);
  std::vector<int> stream(std::size_t(S) * (steps + 2) + 1);
  for (auto& t : stream) t = static_cast<int>(rng.below(c.vocab_size));
  nn::TrainOptions o;
  o.seq_len = S;
  o.batch = 1;
  o.steps = steps + 1;
  o.warmup = 1;
  nn::Trainer tr(m, stream, o);
  tr.step();  // warm-up (allocation of activations)
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) tr.step();
  const double sec = seconds_since(t0);
  const double tps = double(steps) * S / sec;
  // Model FLOPs per token (fwd + bwd = 3 x fwd): 6 x matmul weights (LM head included, embedding
  // lookup not) + causal attention 6 x n_layers x S x d (QK^T and PV, half the square, x 3).
  const double w_mat = double(c.n_params()) - double(c.vocab_size) * c.d_model * (c.tied ? 0 : 1) -
                       double(c.d_model) * (2 * c.n_layers + 1);
  const double flop_per_token = 6.0 * w_mat + 6.0 * c.n_layers * S * c.d_model;
  const double achieved = tps * flop_per_token / 1e9;
  const double mm = matmul_gflops(S, c.d_model, c.d_ff);
  nlohmann::json j{{"bench", "lm-train"},
                   {"config", {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                               {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_ff", c.d_ff},
                               {"seq_len", S}, {"batch", 1}, {"n_params", c.n_params()}}},
                   {"threads", nthreads},
                   {"steps", steps},
                   {"tokens_per_s", tps},
                   {"step_seconds", sec / steps},
                   {"model_gflop_per_token", flop_per_token / 1e9},
                   {"achieved_gflops", achieved},
                   {"matmul_gflops", mm},
                   {"mfu_vs_matmul", achieved / mm}};
  std::cout << j.dump() << std::endl;
}
