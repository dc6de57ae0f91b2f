// PLoRA's packing on this CPU (issue 33): where packed LoRA training gains and what it costs.
// For K jobs of rank r and batch b (b windows of S tokens) on the demo model's shape (random
// weights: timing only), in one run:
//   single    one job of batch b (what `lm-train --lora` runs K times, one after another),
//   packed    K jobs of batch b packed into one pass per step (plora-train),
//   wide      one job of batch K x b (the same rows through one adapter: packing's ceiling),
// each as tokens/s of the median timed step, and the packing ratios packed / wide (target >= 0.9)
// and packed / single (sequential).  Also each size K' in 1, 2, 4, ..., K packed (the throughput
// table plora-plan's model reads, `--table`), and the peak resident memory.
// Prints one JSON object.
// Usage: bench-plora [--jobs K] [--rank r] [--batch b] [--seq-len S] [--steps N] [--threads N]
//                    [--targets q,k,v,o] [--table]
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "lm/model.hpp"
#include "lm/presets.hpp"
#include "nn/gemm.hpp"
#include "nn/plora.hpp"
#include "util/memory.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  int K = 8, rank = 8, batch = 1, S = 256, steps = 5, nthreads = 2;
  std::vector<std::string> targets{"q", "k", "v", "o"};
  bool table = false;
  CLI::App app{"bench-plora: tokens/s of one LoRA job, K packed jobs and one job of K x the batch (one JSON object).\n"
               "Examples:\n  bench-plora --jobs 8 --rank 8 --batch 1\n  bench-plora --jobs 16 --table --steps 3"};
  app.add_option("--jobs", K, "K, the jobs packed")->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--rank", rank, "LoRA rank of every job")->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--batch", batch, "Windows per job and step")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--seq-len", S, "Tokens per window")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--steps", steps, "Timed steps per measurement (after one warm-up; the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--threads", nthreads, "Threads (0 = all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  app.add_option("--targets", targets, "Adapted projections")->delimiter(',')->capture_default_str();
  app.add_flag("--table", table, "Also time every packing size 1, 2, 4, ..., K (plora-plan's throughput table)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "bench-plora: error: " << e.what() << "\n";
    return 2;
  }
  try {
    set_threads(nthreads);
    lm::ModelConfig c = lm::default_shape();
    lm::apply_preset("7m", c, [](const char*) { return false; });
    const lm::Model base = lm::random_model(c, 1, 0.02);
    lm::LoraConfig lc;
    lc.rank = rank;
    lc.alpha = 2.0 * rank;
    lc.targets = targets;
    auto one = [&](int jobs, int b) { return nn::profile_packing(base, S, lc, b, {jobs}, steps).at(0); };
    const nn::PackingTiming single = one(1, batch), packed = one(K, batch), wide = one(1, K * batch);
    auto as_json = [&](const nn::PackingTiming& t) {
      return nlohmann::json{{"jobs", t.jobs}, {"rank", t.rank}, {"batch", t.batch}, {"step_seconds", t.step_seconds},
                            {"tokens_per_s", t.tokens_per_second}};
    };
    nlohmann::json out{{"bench", "plora"},
                       {"model", "7m preset shape (random weights), vocab 4096, d 256, 6 layers"},
                       {"seq_len", S},
                       {"threads", threads()},
                       {"gemm_path", nn::gemm_path_name()},
                       {"targets", targets},
                       {"single", as_json(single)},
                       {"packed", as_json(packed)},
                       {"wide", as_json(wide)},
                       {"packed_over_wide", packed.tokens_per_second / wide.tokens_per_second},
                       {"packed_over_sequential", packed.tokens_per_second / single.tokens_per_second}};
    if (table) {
      std::vector<int> ks;
      for (int k = 1; k < K; k *= 2) ks.push_back(k);
      ks.push_back(K);
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& t : nn::profile_packing(base, S, lc, batch, ks, steps))
        rows.push_back({{"jobs", t.jobs}, {"rank", t.rank}, {"batch", t.batch}, {"step_seconds", t.step_seconds}});
      out["table"] = {{"device", "this CPU"}, {"source", "bench-plora --table: median packed step time, random tokens"},
                      {"seq_len", S}, {"measurements", rows}};
    }
    out["peak_rss_mib"] = double(peak_rss_bytes()) / (1024.0 * 1024.0);
    std::cout << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench-plora: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
