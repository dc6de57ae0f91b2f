#include "lm/engine.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "lm/sampler.hpp"

namespace icmlkit::lm {

Device parse_device(const std::string& name, const std::string& flag) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw UsageError("unknown device '" + name + "' (cpu or cuda)", flag);
}

const char* device_name(Device d) noexcept { return d == Device::cuda ? "cuda" : "cpu"; }

nlohmann::json Engine::settings() const { return nlohmann::json::object(); }

nlohmann::json CpuEngine::settings() const {
  // The block matrices' precision (the first block's query projection stands for them).
  const Matrix& w = model_.layers.empty() ? model_.token_embd : model_.layers[0].wq;
  nlohmann::json s = {{"weights", weight_type_name(block_format(w.weight_type()))}};
  // act-q8 on any matrix (a merged LoRA adapter leaves its matrices exact and the rest act-q8)
  bool aq = is_act_q8(model_.head().weight_type());
  for (const Layer& l : model_.layers)
    for (const Matrix* m : l.matrices()) aq = aq || is_act_q8(m->weight_type());
  if (aq) s["act_quant"] = "q8";
  // bf16-dot's bits depend on the unit that runs it (lm/matmul.hpp): recorded for reproduction
  if (w.weight_type() == WeightType::bf16_dot) s["bf16_unit"] = bf16_dot_unit();
  return s;
}

nlohmann::json EngineWrapper::settings() const { return inner_.settings(); }

double engine_loss(Engine& engine, const std::vector<int>& stream, int S, std::int64_t max_tokens, std::int64_t& tokens,
                   const std::function<void(std::int64_t, std::int64_t)>& on_progress) {
  tokens = 0;
  double sum = 0.0;
  if (stream.size() < 2 || S < 1) return 0.0;
  const std::int64_t all = std::int64_t(stream.size()) - 1;
  const std::int64_t targets = max_tokens > 0 ? std::min(all, max_tokens) : all, full = targets / S;  // the first ones
  const int V = engine.config().vocab_size;
  auto window = [&](std::size_t o, int n) {
    engine.clear();
    const std::vector<int> in(stream.begin() + o, stream.begin() + o + n);
    const ForwardResult fr = engine.forward(Batch::causal(in, 0));
    for (int t = 0; t < n; ++t) sum -= log_softmax_at(fr.logits.row(t), V, stream[o + t + 1]);
    tokens += n;
    if (on_progress) on_progress(tokens, targets);
  };
  for (std::int64_t w = 0; w < full; ++w) window(std::size_t(w) * S, S);
  const std::int64_t rest = targets - full * S;
  if (rest > 0) window(std::size_t(full) * S, static_cast<int>(rest));
  engine.clear();
  return sum;
}

}  // namespace icmlkit::lm
