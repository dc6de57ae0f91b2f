// bench-lm-engine: CPU engine speed — prefill and decode tokens/s, c(k) = time of a k-row
// decode pass / time of a 1-row pass (k = 1..64), decode against the memory-bandwidth limit,
// and our batch-invariant matmul against Eigen's (non-invariant) GEMM as the peer.
// With --dtype f16 the weights are rounded to f16 and held as f16 bits (half the bytes per
// decode step; the kernel widens them exactly).
// Prints one JSON object per model.  Usage: bench-lm-engine [--threads N] [--quick] [--dtype f32|f16]
#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lm/forward.hpp"
#include "lm/matmul.hpp"
#include "lm/model.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Stopwatch s;
    f();
    t.push_back(s.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Copy bandwidth in bytes/s (read + write counted once each, as a decode step reads weights).
double copy_bandwidth(int nthreads) {
  const std::size_t n = std::size_t(1) << 27;  // 512 MiB of floats per buffer
  std::vector<float> a(n, 1.0f), b(n);
  const double s = median_seconds(5, [&] {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long c = 0; c < 64; ++c) std::memcpy(b.data() + c * (n / 64), a.data() + c * (n / 64), n / 64 * 4);
  });
  return 2.0 * n * 4 / s;
}

nlohmann::json bench_model(const std::string& name, const ModelConfig& cfg, int nthreads, bool quick, double bw, bool f16) {
  Model m = random_model(cfg, 1);
  Matrix w_gate = m.layers[0].w_gate;  // float32 (after rounding, for f16) for the Eigen peer
  if (f16) {
    round_weights(m, io::h5::FloatStorage::f16);
    w_gate = m.layers[0].w_gate;
    if (!hold_half(m)) throw std::runtime_error("rounded weights are not f16-representable");
  }
  const int ctx = 64;
  std::vector<int> prompt(ctx);
  for (int i = 0; i < ctx; ++i) prompt[i] = (i * 7 + 3) % cfg.vocab_size;
  KvCache base(cfg);
  forward(m, base, Batch::causal(prompt, 0));
  base.commit_all();

  // Prefill: 256 tokens in one causal batch.
  std::vector<int> long_prompt(256);
  for (int i = 0; i < 256; ++i) long_prompt[i] = (i * 13 + 1) % cfg.vocab_size;
  const double prefill_s = median_seconds(quick ? 1 : 3, [&] {
    KvCache c(cfg);
    forward(m, c, Batch::causal(long_prompt, 0));
  });

  // Decode: one row, full view over a 64-token cache; logits of the row only.
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
  const int reps = quick ? 7 : 15;
  for (int k : {1, 16}) pass(k, nullptr);  // warm caches and the thread pool before timing
  auto med = [&](int k) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) t.push_back(pass(k, nullptr));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double t1 = med(1);
  nlohmann::json ck = nlohmann::json::object();
  for (int k : {1, 2, 4, 8, 16, 32, 64}) ck[std::to_string(k)] = med(k) / t1;
  Matrix one, many;
  pass(1, &one);
  pass(16, &many);
  const bool invariant = std::memcmp(one.row(0), many.row(0), sizeof(float) * cfg.vocab_size) == 0;

  // Peer: Eigen GEMM (not batch-invariant) on the largest matrix, 1 and 16 rows.
  const Matrix& W = w_gate;
  const Matrix& Wm = m.layers[0].w_gate;  // as the model holds it (f32 or f16 bits)
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> We(W.data.data(), W.rows, W.cols);
  nlohmann::json peer = nlohmann::json::object();
  for (int R : {1, 16}) {
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> X = Eigen::MatrixXf::Random(R, W.cols), Y(R, W.rows);
    std::vector<float> y(std::size_t(R) * W.rows);
    const double ours = median_seconds(15, [&] {
      if (Wm.is_half()) matmul_xwt_f16(X.data(), R, W.cols, W.cols, Wm.half.data(), W.rows, y.data(), W.rows);
      else matmul_xwt(X.data(), R, W.cols, W.cols, Wm.data.data(), W.rows, y.data(), W.rows);
    });
    Eigen::setNbThreads(nthreads);
    const double eig = median_seconds(15, [&] { Y.noalias() = X * We.transpose(); });
    peer["rows_" + std::to_string(R)] = {{"ours_s", ours}, {"eigen_s", eig}, {"eigen_over_ours", eig / ours}};
  }

  const double bytes = double(m.weight_bytes());
  const double limit_tok_s = bw / bytes;
  const double decode_tok_s = 1.0 / t1;
  return {{"model", name}, {"weight_dtype", f16 ? "f16" : "f32"}, {"n_params", cfg.n_params()}, {"weight_bytes", bytes}, {"threads", nthreads},
          {"prefill_tokens", 256}, {"prefill_tokens_per_s", 256 / prefill_s},
          {"decode_context", ctx}, {"decode_tokens_per_s", decode_tok_s},
          {"copy_bandwidth_gb_s", bw / 1e9}, {"bandwidth_limit_tokens_per_s", limit_tok_s},
          {"decode_vs_bandwidth_limit", limit_tok_s / decode_tok_s},
          {"c_k", ck}, {"c16", ck["16"]}, {"batch_invariant_16_vs_1", invariant},
          {"matmul_peer_eigen_w_gate", peer},
          {"targets", {{"c16_7m", "<= 2.0"}, {"decode_vs_bandwidth_limit_100m", "<= 1.5"}}}};
}

}  // namespace

int main(int argc, char** argv) {
  int nthreads = 2;
  bool quick = false, f16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) nthreads = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") quick = true;
    else if (a == "--dtype" && i + 1 < argc && (std::string(argv[i + 1]) == "f32" || std::string(argv[i + 1]) == "f16"))
      f16 = std::string(argv[++i]) == "f16";
    else { std::cerr << "usage: bench-lm-engine [--threads N] [--quick] [--dtype f32|f16]\n"; return 2; }
  }
  set_threads(nthreads);
  const double bw = copy_bandwidth(nthreads);
  ModelConfig small;
  small.vocab_size = 4096; small.d_model = 256; small.n_layers = 6; small.n_heads = 8; small.n_kv_heads = 4;
  small.d_ff = 688; small.n_ctx = 1024;
  std::cout << bench_model("7m", small, nthreads, quick, bw, f16).dump() << std::endl;
  if (!quick) {
    ModelConfig big;
    big.vocab_size = 32000; big.d_model = 768; big.n_layers = 12; big.n_heads = 12; big.n_kv_heads = 4;
    big.d_ff = 2048; big.n_ctx = 2048;
    std::cout << bench_model("100m", big, nthreads, quick, bw, f16).dump() << std::endl;
  }
  return 0;
}
