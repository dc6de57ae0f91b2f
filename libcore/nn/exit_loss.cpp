#include "nn/exit_loss.hpp"

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::nn {

const char* to_string(ExitCurriculum c) noexcept {
  switch (c) {
    case ExitCurriculum::all: return "all";
    case ExitCurriculum::rotational: return "rot";
    case ExitCurriculum::gradual: return "gradual";
  }
  return "?";
}

const char* to_string(ExitWeights w) noexcept {
  switch (w) {
    case ExitWeights::sum_l: return "sum_l";
    case ExitWeights::l: return "l";
    case ExitWeights::one: return "one";
  }
  return "?";
}

ExitCurriculum parse_exit_curriculum(const std::string& s) {
  for (ExitCurriculum c : {ExitCurriculum::all, ExitCurriculum::rotational, ExitCurriculum::gradual})
    if (s == to_string(c)) return c;
  throw UsageError(fmt::format("unknown exit curriculum '{}' (all, rot or gradual)", s), "--exit-curriculum");
}

ExitWeights parse_exit_weights(const std::string& s) {
  for (ExitWeights w : {ExitWeights::sum_l, ExitWeights::l, ExitWeights::one})
    if (s == to_string(w)) return w;
  throw UsageError(fmt::format("unknown exit weights '{}' (sum_l, l or one)", s), "--exit-weights");
}

nlohmann::json ExitLossOptions::to_json() const {
  return {{"exit_loss", scale}, {"exit_every", every}, {"exit_curriculum", to_string(curriculum)},
          {"exit_weights", to_string(weights)}};
}

ExitPlan exit_loss_plan(const ExitLossOptions& opt, int n_steps, std::int64_t step, std::int64_t total_steps) {
  if (opt.every < 1) throw UsageError("exits every R >= 1 layers", "--exit-every");
  if (opt.scale < 0) throw UsageError("the exit-loss scale must be >= 0", "--exit-loss");
  ExitPlan plan;
  if (!opt.enabled() || n_steps < 2) return plan;
  const std::int64_t R = opt.every;
  for (int l = 0; l + 1 < n_steps; ++l) {
    std::int64_t phase = l + 1;
    if (opt.curriculum == ExitCurriculum::rotational) phase -= step;
    if (((phase % R) + R) % R != 0) continue;
    if (opt.curriculum == ExitCurriculum::gradual && total_steps > 0 &&
        double(step) / double(total_steps) < 0.5 * double(n_steps - l) / double(n_steps))
      continue;
    plan.steps.push_back(l);
  }
  // Raw weights over the active exits in depth order, the final layer (n_steps - 1) last.
  std::vector<double> raw;
  double cum = 0;
  auto weight_of = [&](int l) {
    switch (opt.weights) {
      case ExitWeights::sum_l: cum += l + 1; return cum;
      case ExitWeights::l: return double(l + 1);
      case ExitWeights::one: return 1.0;
    }
    return 1.0;
  };
  for (int l : plan.steps) raw.push_back(opt.scale * weight_of(l));
  const double last = weight_of(n_steps - 1);
  double total = last;
  for (double w : raw) total += w;
  for (double w : raw) plan.weights.push_back(w / total);
  plan.final_weight = last / total;
  plan.losses.assign(plan.steps.size(), 0.0);
  return plan;
}

}  // namespace icmlkit::nn
