// bench-gpu-engine: the CUDA engine's decode speed (built only with CUDA; run by
// scripts/gpu_check.sh from `make -f Makefile.shortcuts gpu-check`).  Prints one JSON object:
//   - bandwidth: measured device-to-device copy bandwidth (bytes read + written per second);
//   - decode_b1: batch-1 greedy decode tokens/s of a random-weight Llama-3.2-1B-shaped model
//     (1.24 B parameters, bf16, generated on the device), the weight bytes one token reads, and
//     the share of the measured bandwidth reached (bytes/token * tokens/s / bandwidth), and the
//     nodes of the captured decode-step graph (our launches plus cuBLAS's);
//   - c_k: c(k) = time(k-row forward) / time(1-row forward) for k = 1..64 at the stated context,
//     rows forming a causal chain (a verification batch), LM head and argmax for every row; in the
//     batch-invariant mode (fixed GEMM chunks of kInvariantRows = 32 rows), the plain mode (GEMM
//     of k rows) and the invariant mode with 16- and 64-row chunks (decode_b1 too:
//     batch_invariant_rows_16, batch_invariant_rows_64).
// Usage: bench-gpu-engine [--ctx N] [--tokens N] [--kmax N] [--reps N] [--model llama-1b|tiny]
//                         [--copy-mib N]
// --model tiny (2 layers, d_model 128) and a small --copy-mib are for rehearsing this program on
// the CUDA emulator (test/cuda_emu), whose numbers are CPU timings and mean nothing.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device.hpp"
#include "kernels/engine.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

lm::ModelConfig llama_1b() {
  lm::ModelConfig c;
  c.vocab_size = 128256;
  c.d_model = 2048;
  c.n_layers = 16;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.d_ff = 8192;
  c.n_ctx = 2048;
  c.rope_theta = 500000.0;
  c.tied = true;
  return c;
}

/// A 2-layer model for rehearsals on the CUDA emulator.
lm::ModelConfig tiny() {
  lm::ModelConfig c;
  c.vocab_size = 512;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 256;
  c.n_ctx = 1024;
  c.tied = true;
  return c;
}

/// Prefills `ctx` tokens (chunks of 256 rows) into an empty cache.
void prefill(kernels::CudaEngine& e, int ctx) {
  e.clear();
  lm::ForwardOptions none;
  none.all_logits = false;
  for (int at = 0; at < ctx; at += 256) {
    const int n = std::min(256, ctx - at);
    std::vector<int> toks(n);
    for (int i = 0; i < n; ++i) toks[i] = (at + i) * 7919 % e.config().vocab_size;
    e.forward(lm::Batch::causal(toks, at), none);
    e.commit_all();
  }
}

/// Best-of-reps seconds of a k-row causal verification batch at the current context.
double time_rows(kernels::CudaEngine& e, int k, int reps) {
  const int n_past = e.size();
  std::vector<int> toks(k);
  for (int i = 0; i < k; ++i) toks[i] = (i * 104729) % e.config().vocab_size;
  const lm::Batch b = lm::Batch::causal(toks, n_past);
  for (int w = 0; w < 3; ++w) e.forward_greedy(b);  // warm-up: allocations, graph capture
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    e.synchronize();
    const auto t0 = Clock::now();
    e.forward_greedy(b);  // every row's LM head and greedy token; returns after the ids reach the host
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench-gpu-engine [--ctx N] [--tokens N] [--kmax N] [--reps N] [--model llama-1b|tiny] [--copy-mib N]\n"
    "  Prints JSON: copy bandwidth, batch-1 decode tokens/s and share of bandwidth, c(k) for k = 1..kmax.\n"
    "  Defaults: --ctx 512 --tokens 128 --kmax 64 --reps 5 --model llama-1b --copy-mib 1024.\n";

int main(int argc, char** argv) {
  int ctx = 512, tokens = 128, kmax = 64, reps = 5, copy_mib = 1024;
  std::string model = "llama-1b";
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    int* dst = a == "--ctx" ? &ctx : a == "--tokens" ? &tokens : a == "--kmax" ? &kmax : a == "--reps" ? &reps
             : a == "--copy-mib" ? &copy_mib : nullptr;
    if (dst == nullptr && a != "--model") {
      std::fprintf(stderr, "bench-gpu-engine: error: unknown option %s (--help)\n", a.c_str());
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench-gpu-engine: error: %s needs a value (--help)\n", a.c_str());
      return 2;
    }
    const std::string val = argv[i + 1];
    if (a == "--model") {
      model = val;
      if (model != "llama-1b" && model != "tiny") {
        std::fprintf(stderr, "bench-gpu-engine: error: --model is llama-1b or tiny (got '%s')\n", val.c_str());
        return 2;
      }
      continue;
    }
    int v = 0;
    const auto [end, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (ec != std::errc() || end != val.data() + val.size() || v < 1) {
      std::fprintf(stderr, "bench-gpu-engine: error: %s needs a positive integer (got '%s')\n", a.c_str(), val.c_str());
      return 2;
    }
    *dst = v;
  }
  const lm::ModelConfig c = model == "tiny" ? tiny() : llama_1b();
  if (ctx + std::max(tokens + 3, kmax) > c.n_ctx) {
    std::fprintf(stderr, "bench-gpu-engine: error: --ctx %d plus max(--tokens + 3, --kmax) exceeds the model's n_ctx %d\n", ctx, c.n_ctx);
    return 2;
  }
  if (kernels::device_count() == 0) {
    std::fprintf(stderr, "bench-gpu-engine: error: no CUDA device\n");
    return 1;
  }
  try {
    nlohmann::json out;
    out["device"] = kernels::device_name(0);
    const double bw = kernels::measure_copy_bandwidth(std::size_t(copy_mib) << 20, 10);
    out["bandwidth"] = {{"method", "cudaMemcpy device-to-device, " + std::to_string(copy_mib) + " MiB, best of 10, (read + write) bytes / s"},
                        {"bytes_per_s", bw}, {"GB_per_s", bw / 1e9}};

    kernels::CudaEngine e(c, 42, kernels::WeightPrecision::bf16, 0.02, true);
    const double bytes = double(e.bytes_per_forward());
    nlohmann::json dec;
    dec["model"] = {{"shape", model == "tiny" ? "tiny (rehearsal)" : "Llama-3.2-1B (random weights, generated on the device)"}, {"params", c.n_params()},
                    {"weights", "bf16"}, {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"vocab", c.vocab_size}};
    dec["context_start"] = ctx;
    dec["tokens"] = tokens;
    dec["weight_bytes_per_token"] = bytes;
    // The default mode first (gpu_check.sh's targets read it), then without graphs, the plain
    // mode, and smaller invariant chunks: a chunk of P rows makes each GEMM P (x2 with 16-bit
    // weights) columns wide even at batch 1, so P trades decode arithmetic against c(k > P).
    struct Mode { std::string name; bool inv, graphs; int rows; };
    const int def_rows = e.invariant_rows();
    std::vector<Mode> modes{{"batch_invariant", true, true, def_rows}, {"batch_invariant_no_graphs", true, false, def_rows},
                            {"plain", false, true, def_rows}};
    for (int rows : {16, 32, 64})
      if (rows != def_rows) modes.push_back({"batch_invariant_rows_" + std::to_string(rows), true, true, rows});
    dec["invariant_rows"] = def_rows;
    for (const Mode& mode : modes) {
      e.set_batch_invariant(mode.inv);
      e.set_invariant_rows(mode.rows);
      e.set_graphs(mode.graphs);
      prefill(e, ctx);
      lm::ForwardOptions last;
      last.all_logits = false;
      last.logits_rows = {0};
      int tok = 1;
      double elapsed = 0;
      for (int t = 0; t < tokens + 3; ++t) {
        lm::Batch b;
        b.add(tok, e.size());
        const auto t0 = Clock::now();
        tok = e.forward_greedy(b, last)[0];  // argmax on the device
        e.commit_all();
        if (t >= 3) elapsed += seconds_since(t0);  // 3 warm-up steps (the graph is captured at the third)
      }
      const double tps = tokens / elapsed;
      dec[mode.name] = {{"tokens_per_s", tps}, {"share_of_bandwidth", bytes * tps / bw}, {"graphs", e.graphs()},
                        {"graph_nodes", e.graphs() ? nlohmann::json(e.graph_nodes()) : nlohmann::json(nullptr)}};
    }
    e.set_graphs(true);
    out["decode_b1"] = dec;

    nlohmann::json ck;
    ck["context"] = ctx;
    ck["definition"] = "best-of-reps time of a k-row causal verification forward (the LM head and greedy token of every row, on the device) / the 1-row time";
    for (const Mode& mode : modes) {
      if (!mode.graphs) continue;  // c(k) is measured with graphs, as decoding runs
      e.set_batch_invariant(mode.inv);
      e.set_invariant_rows(mode.rows);
      prefill(e, ctx);
      std::vector<double> t(kmax + 1, 0.0), cc;
      for (int k = 1; k <= kmax; ++k) t[k] = time_rows(e, k, reps);
      for (int k = 1; k <= kmax; ++k) cc.push_back(t[k] / t[1]);
      nlohmann::json c16 = nullptr;  // not measured below k = 16
      if (kmax >= 16) c16 = cc[15];
      ck[mode.name] = {{"t1_s", t[1]}, {"c", cc}, {"c16", c16}};
    }
    e.set_invariant_rows(def_rows);
    out["c_k"] = ck;
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench-gpu-engine: error: %s\n", ex.what());
    return 1;
  }
  return 0;
}
