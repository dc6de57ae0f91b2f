// The inference backend interface: one sequence's forward passes and KV cache on a device.
//
// The decode harness (decode/decoder.hpp) and the generating tools talk to an Engine, never
// to a device directly, so the same calls run on the CPU (CpuEngine: lm::forward + KvCache,
// bitwise the CPU engine) or on CUDA (kernels/engine.hpp: cuBLAS + own kernels, weights
// resident on the GPU, results equal to the CPU within the tolerance stated there).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

/// Where an engine computes.
enum class Device { cpu, cuda };

/// Parses "cpu" | "cuda"; UsageError naming `flag` otherwise.
Device parse_device(const std::string& name, const std::string& flag = "--device");
/// "cpu" | "cuda".
const char* device_name(Device d) noexcept;

/// A model bound to one sequence's KV cache on some device.
class Engine {
 public:
  virtual ~Engine() = default;
  /// The model's configuration.
  virtual const ModelConfig& config() const noexcept = 0;
  /// Human-readable device ("cpu", "cuda:0 NVIDIA H200 (...)").
  virtual std::string device() const = 0;
  /// lm::forward() on this engine's cache: same batch semantics, same result fields.
  /// Engines may refuse options they do not provide (UsageError), see each implementation.
  virtual ForwardResult forward(const Batch& batch, const ForwardOptions& options = {}) = 0;
  /// KvCache::commit / commit_all / truncate / clear on this engine's cache.
  virtual void commit(const std::vector<int>& rows) = 0;
  virtual void commit_all() = 0;
  virtual void truncate(int n) = 0;
  virtual void clear() = 0;
  /// Committed slots (every head holds the same number on an engine).
  virtual int size() const = 0;
  /// Engine-specific event counts since construction, by name (the CUDA engine: forwards,
  /// graph_replays, graph_captures, graph_drops); none by default.
  virtual std::vector<std::pair<std::string, long long>> counters() const { return {}; }
  /// The settings in effect, a JSON object that programs record as engine_settings: the CPU
  /// engine {"weights": "f32" | "f16"} (the compute weights, lm::hold_half); the CUDA engine
  /// {"weights": "f32" | "f16" | "bf16", "batch_invariant": bool, "invariant_rows": int,
  /// "cuda_graphs": bool}.  An empty object by default.
  virtual nlohmann::json settings() const;
  /// The committed cache in host memory when the engine keeps one there (the CPU engine), for
  /// compressors that read values (kv::Compressor with an OBCache score); null otherwise.
  virtual const KvCache* host_cache() const noexcept { return nullptr; }
};

/// The CPU engine: lm::forward on a KvCache; outputs bitwise those of lm::forward.
class CpuEngine final : public Engine {
 public:
  /// Binds `model` (kept by reference; must outlive the engine) to an empty cache.
  explicit CpuEngine(const Model& model) : model_(model), cache_(model.config) {}
  const ModelConfig& config() const noexcept override { return model_.config; }
  std::string device() const override { return "cpu"; }
  ForwardResult forward(const Batch& batch, const ForwardOptions& options = {}) override {
    return lm::forward(model_, cache_, batch, options);
  }
  void commit(const std::vector<int>& rows) override { cache_.commit(rows); }
  void commit_all() override { cache_.commit_all(); }
  void truncate(int n) override { cache_.truncate(n); }
  void clear() override { cache_.clear(); }
  int size() const override { return cache_.size(); }
  nlohmann::json settings() const override;
  /// The underlying cache (per-head access for compressors and tests).
  KvCache& cache() noexcept { return cache_; }
  const KvCache* host_cache() const noexcept override { return &cache_; }

 private:
  const Model& model_;
  KvCache cache_;
};

/// An engine that passes every call to another (`inner`, kept by reference, must outlive it):
/// derive and override the calls to observe or alter (recording forwards, added delays, dropped
/// logits in tests and benchmarks).
class EngineWrapper : public Engine {
 public:
  explicit EngineWrapper(Engine& inner) : inner_(inner) {}
  const ModelConfig& config() const noexcept override { return inner_.config(); }
  std::string device() const override { return inner_.device(); }
  ForwardResult forward(const Batch& batch, const ForwardOptions& options = {}) override { return inner_.forward(batch, options); }
  void commit(const std::vector<int>& rows) override { inner_.commit(rows); }
  void commit_all() override { inner_.commit_all(); }
  void truncate(int n) override { inner_.truncate(n); }
  void clear() override { inner_.clear(); }
  int size() const override { return inner_.size(); }
  std::vector<std::pair<std::string, long long>> counters() const override { return inner_.counters(); }
  nlohmann::json settings() const override;
  const KvCache* host_cache() const noexcept override { return inner_.host_cache(); }

 protected:
  Engine& inner_;
};

/// Summed next-token cross-entropy (nats) of `stream` on `engine`, over the windows
/// nn::evaluate uses: non-overlapping windows of `seq_len` targets (the last, shorter one
/// included); max_tokens > 0 scores only the first max_tokens targets (as nn::evaluate).  Each
/// window is one causal forward from an empty cache, log-softmax in double.  `tokens` receives the
/// targets counted.  Throws what engine.forward throws.
/// `on_progress(done, total)` (optional) is called after each window with the targets scored so far.
double engine_loss(Engine& engine, const std::vector<int>& stream, int seq_len, std::int64_t max_tokens, std::int64_t& tokens,
                   const std::function<void(std::int64_t, std::int64_t)>& on_progress = {});

}  // namespace icmlkit::lm

#if defined(ICMLKIT_HAVE_CUDA)
namespace icmlkit::kernels {
/// Defined in kernels/engine.cu (linked when the build has CUDA).
std::unique_ptr<lm::Engine> make_cuda_engine(const lm::Model& model, bool batch_invariant, const std::string& weights);
}  // namespace icmlkit::kernels
#endif

namespace icmlkit::lm {

/// An engine for `model` on `device`, for programs that link icmlkit::kernels when CUDA is
/// built (the tools do).  CUDA: weights uploaded once in `weights` precision ("auto": 16-bit
/// when the model is stored so and exactly representable; "f32", "f16", "bf16"), batch-invariant
/// GEMM shapes (see kernels/engine.hpp); `weights` is unused on the CPU.  Throws UsageError for
/// another `weights`, InputError "--device cuda: built without CUDA" in a build without CUDA,
/// and "--device cuda: no usable CUDA GPU or driver found (...)" when the driver reports none.
/// Defined inline so that the CUDA choice is made by the program that links the kernels, not
/// by the core library.
inline std::unique_ptr<Engine> open_engine(const Model& model, Device device, const std::string& weights = "auto") {
  if (device == Device::cpu) return std::make_unique<CpuEngine>(model);
#if defined(ICMLKIT_HAVE_CUDA)
  return kernels::make_cuda_engine(model, true, weights);
#else
  (void)weights;
  throw InputError("--device cuda: built without CUDA (configure with -DICMLKIT_CUDA=ON and nvcc)");
#endif
}

/// Holds `model`'s weights as a tool's --weights and --act-quant ask (lm::add_weights_flag,
/// lm::add_act_quant_flag) for an engine on `device`: on the CPU, "auto" holds the
/// weights as f16 (bf16) when the file stores f16 (bf16) and every weight is exact in it
/// (lm::hold_half, half the bytes per decode step, the same logits), "f16" and "bf16" require
/// exactness (InputError naming `where` otherwise), "f32" keeps f32; matrices read from GGUF
/// Q8_0 / Q4_0 stay quantised under "auto" (lm::hold_quant: the same logits, about a quarter or an
/// eighth of the bytes) and are widened under "f32"; "bf16-dot" (CPU only, UsageError on CUDA)
/// rounds every weight to bfloat16 and computes in bf16 arithmetic (lm::hold_bf16_dot, lossy);
/// on CUDA the host copy stays as loaded and `weights` is the device precision (open_engine).
/// `act_quant` "q8" (`--act-quant`, CPU and --weights auto only, UsageError otherwise) has the
/// Q8_0 / Q4_0 matrices multiply activations quantised to Q8_0 blocks (lm::hold_act_q8, lossy;
/// InputError naming `where` when the model holds none).
inline void hold_weights_for(Model& model, Device device, const std::string& weights, const std::string& where,
                             const std::string& act_quant = "none") {
  if (act_quant == "q8") {
    if (device != Device::cpu) throw UsageError("--act-quant q8 is a CPU mode", "--act-quant");
    if (weights != "auto")
      throw UsageError("--act-quant q8 multiplies the file's Q8_0 / Q4_0 blocks: use it with --weights auto", "--act-quant");
    if (hold_quant(model) == 0 || hold_act_q8(model) == 0)
      throw InputError("--act-quant q8 needs Q8_0 or Q4_0 weights (a GGUF file; write one with lm-convert --dtype q8_0)", where);
  } else if (weights == "bf16-dot") {
    if (device != Device::cpu) throw UsageError("--weights bf16-dot is a CPU mode (use bf16 with --device cuda)", "--weights");
    hold_bf16_dot(model);
  } else if (device == Device::cpu) {
    const bool bf16 = weights == "bf16" || (weights == "auto" && model.stored == io::h5::FloatStorage::bf16);
    const bool f16 = weights == "f16" || (weights == "auto" && model.stored == io::h5::FloatStorage::f16);
    if ((f16 || bf16) && !hold_half(model, bf16) && weights != "auto")
      throw InputError("--weights " + weights + " needs " + weights + "-representable weights (convert with lm-convert --dtype " +
                           weights + ")", where);
    if (weights == "auto") hold_quant(model);
    else drop_quant(model);
  }
}

/// open_engine for a tool's --weights and --act-quant: hold_weights_for, then open_engine.
/// Throws what those throw.
inline std::unique_ptr<Engine> open_engine_for(Model& model, Device device, const std::string& weights, const std::string& where,
                                               const std::string& act_quant = "none") {
  hold_weights_for(model, device, weights, where, act_quant);
  return open_engine(model, device, weights);
}

}  // namespace icmlkit::lm
