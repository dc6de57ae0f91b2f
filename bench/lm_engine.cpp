// bench-lm-engine: CPU engine speed — prefill and decode tokens/s, c(k) = time of a k-row
// decode pass / time of a 1-row pass (k = 1..64), decode against the memory-bandwidth limit,
// and our batch-invariant matmul against Eigen's (non-invariant) GEMM as the peer.
// With --dtype f16 the weights are rounded to f16 and held as f16 bits (half the bytes per
// decode step; the kernel widens them exactly).
// Prints one JSON object per model.  Usage: bench-lm-engine [--threads N] [--quick] [--dtype f32|f16]
//
// With --model FILE (any format lm-generate reads; weights held as lm-generate's --weights auto
// holds them) it times that file instead: a k-row pass (k new tokens after a 64-token context,
// logits of every row) for k in 1, 8, 16, 64 and a 256-token prefill, medians of --reps runs —
// what bench/lm_engine_vs_llamacpp.py compares with llama.cpp on the same file; --weights
// bf16-dot holds them as lm-generate --weights bf16-dot does, --act-quant q8 as lm-generate
// --act-quant q8 (a GGUF Q8_0 / Q4_0 file's blocks times activations quantised to Q8_0).  --roofline prints the machine's
// read bandwidth (a 1 GiB buffer), FMA peak, AVX512-BF16 dot-product and AMX-BF16 tile peaks
// (null without them) on --threads threads.
#include <Eigen/Core>
#include <immintrin.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lm/engine.hpp"
#include "lm/forward.hpp"
#include "lm/matmul.hpp"
#include "lm/model.hpp"
#include "lm/model_io.hpp"
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

/// Seconds of one k-row pass over a copy of `base` (a 64-token context at positions 0..63):
/// tokens (i * 31 + 5) mod vocab at position `ctx`, logits of every row (into `logits` if given).
double k_row_pass(const Model& m, const KvCache& base, int ctx, int k, Matrix* logits) {
  KvCache c = base;
  Batch b;
  for (int i = 0; i < k; ++i) b.add((i * 31 + 5) % m.config.vocab_size, ctx);
  Stopwatch s;
  ForwardResult r = forward(m, c, b);
  const double t = s.seconds();
  if (logits) *logits = std::move(r.logits);
  return t;
}

/// The 64-token context every pass extends (tokens (i * 7 + 3) mod vocab).
KvCache context_cache(const Model& m, int ctx) {
  std::vector<int> prompt(ctx);
  for (int i = 0; i < ctx; ++i) prompt[i] = (i * 7 + 3) % m.config.vocab_size;
  KvCache base(m.config);
  forward(m, base, Batch::causal(prompt, 0));
  base.commit_all();
  return base;
}

/// Seconds of a 256-token prefill (tokens (i * 13 + 1) mod vocab) into an empty cache.
double prefill_pass(const Model& m) {
  std::vector<int> long_prompt(256);
  for (int i = 0; i < 256; ++i) long_prompt[i] = (i * 13 + 1) % m.config.vocab_size;
  KvCache c(m.config);
  Stopwatch s;
  forward(m, c, Batch::causal(long_prompt, 0));
  return s.seconds();
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
  const KvCache base = context_cache(m, ctx);
  const double prefill_s = median_seconds(quick ? 1 : 3, [&] { prefill_pass(m); });
  auto pass = [&](int k, Matrix* logits) { return k_row_pass(m, base, ctx, k, logits); };
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
  for (int k : {1, 2, 4, 8, 16, 32, 64}) ck[std::to_string(k)] = k == 1 ? 1.0 : med(k) / t1;
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

/// Sixteen independent chains of AVX512-BF16 pair dot products (32 multiply-adds each), `iters`
/// steps; their sum.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(long iters) {
  __m512 a[16];
  for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), w = (__m512bh)_mm512_set1_epi16(0x3400);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, w);
  float total = 0;
  for (int j = 0; j < 16; ++j) total += _mm512_reduce_add_ps(a[j]);
  return total;
}

/// Four independent AMX-BF16 accumulator tiles, `iters` steps of four tile dot products (16 x 16
/// outputs x 32 bf16 each), operands in tile registers.  The tile unit must be usable (Isa::amx).
__attribute__((target("amx-tile,amx-bf16"))) void amx_chains(long iters) {
  struct alignas(64) {
    std::uint8_t palette = 1, start = 0, reserved[14] = {};
    std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
  } cfg;
  alignas(64) static const std::uint16_t ones[512] = {};
  alignas(64) float out[256];
  _tile_loadconfig(&cfg);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64); _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  if (out[0] == 42.0f) std::cerr << "";
}

/// Measured AMX-BF16 peak in FLOP/s (2 per multiply-add) on nthreads threads.
double amx_peak(int nthreads) {
  const long iters = 500'000;
  const double s = median_seconds(3, [&] {
#pragma omp parallel num_threads(nthreads)
    amx_chains(iters);
  });
  return double(nthreads) * iters * 4 * 16 * 16 * 32 * 2 / s;
}

/// k-row pass times and a 256-token prefill of a model file, held as lm-generate holds it.
nlohmann::json bench_file(const std::string& path, int nthreads, int reps, bool bf16_dot, bool act_q8) {
  Model m = load_any(path);
  // held as lm-generate holds them for --weights auto|bf16-dot and --act-quant none|q8
  hold_weights_for(m, Device::cpu, bf16_dot ? "bf16-dot" : "auto", path, act_q8 ? "q8" : "none");
  const int ctx = 64;
  const KvCache base = context_cache(m, ctx);
  for (int k : {1, 16, 64}) k_row_pass(m, base, ctx, k, nullptr);  // warm-up
  nlohmann::json pass_s = nlohmann::json::object();
  for (int k : {1, 8, 16, 64})
    pass_s[std::to_string(k)] = median_seconds(reps, [&] { k_row_pass(m, base, ctx, k, nullptr); });
  const double prefill_s = median_seconds(std::max(1, reps / 2), [&] { prefill_pass(m); });
  // The weights a pass multiplies: every block matrix and the head (not the embedding lookup).
  double mw = 0, mbytes = 0;
  auto add = [&](const Matrix& w) {
    mw += double(w.rows) * w.cols;
    mbytes += double(w.rows) * weight_row_bytes(w.weight_type(), w.cols);
  };
  for (const Layer& l : m.layers)
    for (const Matrix* w : l.matrices()) add(*w);
  add(m.head());
  // the path the products take: the tile unit runs bf16-dot products only
  const Isa isa = best_isa() == Isa::amx && !bf16_dot ? Isa::avx512 : best_isa();
  return {{"engine", "icmlkit"}, {"file", path}, {"matmul_weights", mw}, {"matmul_weight_bytes", mbytes}, {"threads", nthreads}, {"isa", isa_name(isa)},
          {"weights", weight_type_name(m.layers.empty() ? m.token_embd.weight_type() : m.layers[0].wq.weight_type())},
          {"act_quant", act_q8 ? "q8" : "none"},
          {"n_weights", m.config.n_params()},
          {"weight_bytes", double(m.weight_bytes())}, {"context", ctx}, {"pass_s", pass_s},
          {"prefill_tokens", 256}, {"prefill_s", prefill_s}, {"reps", reps}};
}

/// Read bandwidth in bytes/s: nthreads threads summing disjoint parts of a 1 GiB buffer.
double read_bandwidth(int nthreads) {
  const std::size_t n = std::size_t(1) << 28;  // 1 GiB of floats
  std::vector<float> a(n, 1.0f);
  float sink = 0;
  const double s = median_seconds(5, [&] {
    float total = 0;
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(+ : total)
    for (long c = 0; c < 64; ++c) {
      const float* p = a.data() + c * (n / 64);
      float acc[16] = {};
      for (std::size_t i = 0; i < n / 64; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
      for (float v : acc) total += v;
    }
    sink += total;
  });
  if (sink == 42.0f) std::cerr << "";
  return double(n) * 4 / s;
}

/// Sixteen independent fused multiply-add chains of 512-bit vectors, `iters` steps; their sum.
__attribute__((target("avx512f"))) float fma_chains512(long iters) {
  __m512 a[16];
  for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  float total = 0;
  for (int j = 0; j < 16; ++j) total += _mm512_reduce_add_ps(a[j]);
  return total;
}

/// The same with 256-bit vectors (AVX2 + FMA).
__attribute__((target("avx2,fma"))) float fma_chains256(long iters) {
  __m256 a[16];
  for (int j = 0; j < 16; ++j) a[j] = _mm256_set1_ps(1.0f + j * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  alignas(32) float l[8];
  float total = 0;
  for (int j = 0; j < 16; ++j) {
    _mm256_store_ps(l, a[j]);
    for (float v : l) total += v;
  }
  return total;
}

/// Measured peak of fused multiply-adds in FLOP/s (2 per lane) on nthreads threads, with the
/// widest vectors the kernel uses.
double fma_peak(int nthreads) {
  const long iters = 20'000'000;
  const bool wide = isa_available(Isa::avx512);
  float sink = 0;
  const double s = median_seconds(3, [&] {
    float total = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : total)
    total += wide ? fma_chains512(iters) : fma_chains256(iters);
    sink += total;
  });
  if (sink == 42.0f) std::cerr << "";
  return double(nthreads) * iters * 16 * (wide ? 16 : 8) * 2 / s;
}

/// Measured peak of AVX512-BF16 pair dot products in FLOP/s (2 per multiply-add) on nthreads threads.
/// (On the Sapphire Rapids machine here it is about half the FMA peak: the instruction issues
/// at one every two cycles, measured alone.)  The peaks do not follow ICMLKIT_ISA.
double bf16_dot_peak(int nthreads) {
  const long iters = 20'000'000;
  float sink = 0;
  const double s = median_seconds(3, [&] {
    float total = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : total)
    total += dpbf16_chains(iters);
    sink += total;
  });
  if (sink == 42.0f) std::cerr << "";
  return double(nthreads) * iters * 16 * 32 * 2 / s;
}

}  // namespace

/// argv value v of `flag` as an integer in [lo, hi], or a one-line usage error (exit 2).
int int_arg(const std::string& flag, const char* v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || n < lo || n > hi) {
    std::cerr << "bench-lm-engine: error: " << flag << " needs an integer in " << lo << ".." << hi << ", not '" << v << "'\n";
    std::exit(2);
  }
  return static_cast<int>(n);
}

int main(int argc, char** argv) {
  int nthreads = 2, reps = 9;
  bool quick = false, f16 = false, roofline = false, bf16_dot = false, act_q8 = false, reps_set = false, weights_set = false,
       dtype_set = false;
  std::string file;
  const char* usage =
      "usage: bench-lm-engine [--threads N] [--quick] [--dtype f32|f16] | --model FILE [--reps N] [--weights auto|bf16-dot] [--act-quant none|q8] "
      "| --roofline [--threads N]\n";
  auto fail = [&](const std::string& why) {
    std::cerr << "bench-lm-engine: error: " << why << "\n" << usage;
    std::exit(2);
  };
  std::vector<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (std::find(seen.begin(), seen.end(), a) != seen.end()) fail(a + " given twice");
    seen.push_back(a);
    if (a == "--threads" && has_value) nthreads = int_arg(a, argv[++i], 1, 1024);
    else if (a == "--quick") quick = true;
    else if (a == "--model" && has_value) file = argv[++i];
    else if (a == "--reps" && has_value) reps = int_arg(a, argv[++i], 1, 100000), reps_set = true;
    else if (a == "--roofline") roofline = true;
    else if (a == "--weights" && has_value) {
      const std::string v = argv[++i];
      if (v != "auto" && v != "bf16-dot") fail("--weights is auto or bf16-dot, not '" + v + "'");
      bf16_dot = v == "bf16-dot", weights_set = true;
    } else if (a == "--act-quant" && has_value) {
      const std::string v = argv[++i];
      if (v != "none" && v != "q8") fail("--act-quant is none or q8, not '" + v + "'");
      act_q8 = v == "q8", weights_set = true;
    } else if (a == "--dtype" && has_value) {
      const std::string v = argv[++i];
      if (v != "f32" && v != "f16") fail("--dtype is f32 or f16, not '" + v + "'");
      f16 = v == "f16", dtype_set = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << usage;
      return 0;
    } else fail("unknown or incomplete argument '" + a + "'");
  }
  if (roofline && (!file.empty() || quick || dtype_set || reps_set || weights_set))
    fail("--roofline takes only --threads");
  if (file.empty() && (reps_set || weights_set)) fail("--reps, --weights and --act-quant need --model FILE");
  if (bf16_dot && act_q8) fail("--act-quant q8 multiplies the file's Q8_0 / Q4_0 blocks: not with --weights bf16-dot");
  if (!file.empty() && (quick || dtype_set)) fail("--quick and --dtype are for the synthetic models, not --model");
  set_threads(nthreads);
  try {
    if (roofline) {
      std::cout << nlohmann::json{{"threads", nthreads}, {"isa", isa_name(best_isa())},
                                  {"read_bandwidth_gb_s", read_bandwidth(nthreads) / 1e9},
                                  {"fma_peak_gflop_s", fma_peak(nthreads) / 1e9},
                                  {"bf16_dot_peak_gflop_s", have_avx512_bf16() ? nlohmann::json(bf16_dot_peak(nthreads) / 1e9)
                                                                               : nlohmann::json(nullptr)},
                                  {"amx_bf16_peak_gflop_s", isa_available(Isa::amx) ? nlohmann::json(amx_peak(nthreads) / 1e9)
                                                                                     : nlohmann::json(nullptr)}}.dump() << std::endl;
      return 0;
    }
    if (!file.empty()) {
      std::cout << bench_file(file, nthreads, reps, bf16_dot, act_q8).dump() << std::endl;
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "bench-lm-engine: error: " << e.what() << (file.empty() ? "" : " (" + file + ")") << "\n";
    return 1;
  }
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
