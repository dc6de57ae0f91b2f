// Training speed of the CPU trainer (issues 5 and 24): tokens/s of full AdamW steps (forward,
// backward, clipping, update) on random tokens, the model-FLOP utilisation against the rate of
// a 1024^3 f32 product (nn::gemm) measured on the same threads in the same run, and the peak
// resident memory of the process.
// Prints one JSON object.
// Usage: bench-lm-train [--preset 7m|100m] [--threads N] [--steps N] [--seq-len S] [--batch B]
//                       [--kernels fast|reference]
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "lm/model.hpp"
#include "lm/presets.hpp"
#include "nn/gemm.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "nn/trainer.hpp"
#include "util/memory.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Peak resident set size of this process so far, MiB.
double peak_rss_mib() { return double(peak_rss_bytes()) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  int nthreads = 2, steps = 3, S = 0, batch = 1;
  std::string preset = "7m", kernels = "fast";
  CLI::App app{"bench-lm-train: tokens/s, MFU and peak memory of lm-train's step on random tokens (one JSON object).\n"
               "Examples:\n  bench-lm-train --threads 2 --steps 5\n  bench-lm-train --preset 100m --steps 2\n"
               "  bench-lm-train --kernels reference --threads 1"};
  app.add_option("--preset", preset, "Model shape: 7m (the demo model) or 100m")->capture_default_str()->check(CLI::IsMember({"7m", "100m"}));
  app.add_option("--threads", nthreads, "Threads (0 = all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  app.add_option("--steps", steps, "Timed steps (after one warm-up step)")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--seq-len", S, "Tokens per window (default 1024 for 7m, 512 for 100m; a longer one raises the model's n_ctx)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch", batch, "Windows per step")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--kernels", kernels, "fast or reference (the v1 trainer)")->capture_default_str()->check(CLI::IsMember({"fast", "reference"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "bench-lm-train: error: " << e.what() << "\n";
    return 2;
  }
  if (S == 0) S = preset == "100m" ? 512 : 1024;
  set_threads(nthreads);
  nthreads = threads();
  nn::set_train_kernels(kernels == "reference" ? nn::TrainKernels::reference : nn::TrainKernels::fast);
  lm::ModelConfig c = lm::default_shape();
  lm::apply_preset(preset, c, [](const char*) { return false; });
  c.n_ctx = std::max(c.n_ctx, S);
  const double rss_before_model = peak_rss_mib();
  Rng rng(2);
  std::vector<int> stream(std::size_t(S) * batch * (steps + 2) + 1);
  for (auto& t : stream) t = static_cast<int>(rng.below(c.vocab_size));
  nn::TrainOptions o;
  o.seq_len = S;
  o.batch = batch;
  o.steps = steps + 1;
  o.warmup = 1;
  // The initial model is dropped once the trainer holds its weights (PyTorch builds its model in
  // place, so neither side keeps a second copy).
  nn::Trainer tr(lm::random_model(c, 1, 0.02), stream, o);
  tr.step();  // warm-up (allocation of activations and packing buffers)
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) tr.step();
  const double sec = seconds_since(t0);
  const double tps = double(steps) * S * batch / sec;
  const double flop_per_token = nn::training_flop_per_token(c, S);
  const double achieved = tps * flop_per_token / 1e9;
  const double rss = peak_rss_mib();  // before the GEMM measurement allocates its matrices
  const double mm = nn::gemm_gflops(1024, 3);
  nlohmann::json j{{"bench", "lm-train"},
                   {"preset", preset},
                   {"config", {{"vocab_size", c.vocab_size}, {"d_model", c.d_model}, {"n_layers", c.n_layers},
                               {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_ff", c.d_ff},
                               {"seq_len", S}, {"batch", batch}, {"n_params", c.n_params()}}},
                   {"kernels", kernels},
                   {"gemm_path", nn::gemm_path_name()},
                   {"threads", nthreads},
                   {"steps", steps},
                   {"tokens_per_s", tps},
                   {"step_seconds", sec / steps},
                   {"model_gflop_per_token", flop_per_token / 1e9},
                   {"achieved_gflops", achieved},
                   {"gemm_1024_gflops", mm},
                   {"mfu", achieved / mm},
                   {"peak_rss_mib", rss},
                   {"rss_before_model_mib", rss_before_model}};
  std::cout << j.dump() << std::endl;
}
