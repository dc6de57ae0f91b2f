#include "nn/moe_cost.hpp"

#include <cmath>
#include <limits>

#include <fmt/core.h>

#include "util/error.hpp"

namespace icmlkit::nn {

ExpertType parse_expert_type(const std::string& name) {
  if (name == "swiglu") return ExpertType::swiglu;
  if (name == "relu2") return ExpertType::relu2;
  throw UsageError(fmt::format("unknown expert type '{}' (swiglu or relu2)", name), "--expert");
}

std::string expert_type_name(ExpertType t) { return t == ExpertType::swiglu ? "swiglu" : "relu2"; }

int expert_matrices(ExpertType t) noexcept { return t == ExpertType::swiglu ? 3 : 2; }

std::string moe_variant_name(MoeVariant v) {
  switch (v) {
    case MoeVariant::standard: return "standard";
    case MoeVariant::eff: return "eff";
    case MoeVariant::acc: return "acc";
  }
  return "?";
}

double latent_width(const MoeCostConfig& c) noexcept { return c.latent > 0 ? c.latent : c.d / c.alpha; }

namespace {
void require_positive(double x, const char* what, const char* flag) {
  if (!(x > 0) || !std::isfinite(x)) throw UsageError(fmt::format("{} must be a positive number (got {})", what, x), flag);
}
void require_non_negative(double x, const char* what, const char* flag) {
  if (!(x >= 0) || !std::isfinite(x)) throw UsageError(fmt::format("{} must be >= 0 (got {})", what, x), flag);
}
// alpha x n as a whole number, or UsageError
int scaled_count(double alpha, int n, const char* what, const char* flag) {
  const double x = alpha * n, r = std::round(x);
  if (std::abs(x - r) > 1e-9 * std::max(1.0, x) || r > 1e9)
    throw UsageError(fmt::format("alpha x {} = {} x {} = {} is not a whole number of experts; choose l so that d / l x {} is one", what,
                                 alpha, n, x, what),
                     flag);
  return static_cast<int>(r);
}
}  // namespace

void check_moe_cost_config(const MoeCostConfig& c) {
  auto whole = [](double x, const char* what, const char* flag) {
    if (x != std::floor(x) || x > 1e12)
      throw UsageError(fmt::format("{} must be a whole number of dimensions (got {})", what, x), flag);
  };
  require_positive(c.d, "d", "--d");
  whole(c.d, "d", "--d");
  require_positive(c.m, "the expert width m", "--m");
  whole(c.m, "the expert width m", "--m");
  require_non_negative(c.m_shared, "the shared expert width", "--m-shared");
  whole(c.m_shared, "the shared expert width", "--m-shared");
  require_non_negative(c.latent, "the latent width l", "--latent");
  whole(c.latent, "the latent width l", "--latent");
  if (c.latent == 0) {
    require_positive(c.alpha, "alpha", "--alpha");
    if (c.d / c.alpha != std::floor(c.d / c.alpha))
      throw UsageError(fmt::format("l = d / alpha = {} / {} = {} is not a whole number of dimensions", c.d, c.alpha, c.d / c.alpha), "--alpha");
  }
  if (latent_width(c) > c.d) throw UsageError(fmt::format("the latent width l = {} exceeds d = {}", latent_width(c), c.d), "--latent");
  if (c.experts < 1) throw UsageError(fmt::format("N must be >= 1 expert (got {})", c.experts), "--experts");
  if (c.top_k < 1 || c.top_k > c.experts)
    throw UsageError(fmt::format("K must lie in [1, N = {}] (got {})", c.experts, c.top_k), "--top-k");
  if (c.shared < 0) throw UsageError(fmt::format("S must be >= 0 (got {})", c.shared), "--shared");
  if (c.layers < 1) throw UsageError(fmt::format("layers must be >= 1 (got {})", c.layers), "--layers");
  if (c.ep < 1) throw UsageError(fmt::format("the EP degree must be >= 1 (got {})", c.ep), "--ep");
  require_positive(c.tokens, "tokens in flight", "--tokens");
  require_positive(c.decode_batch, "the decode batch", "--decode-batch");
  require_positive(c.flops, "the FLOP rate", "--flops");
  require_positive(c.hbm_bw, "the HBM bandwidth", "--hbm-bw");
  require_positive(c.link_bw, "the link bandwidth", "--link-bw");
  require_positive(c.weight_bytes, "bytes per weight", "--weight-bytes");
  require_non_negative(c.act_bytes, "bytes per activation", "--act-bytes");
  require_non_negative(c.dispatch_bytes, "dispatch bytes", "--dispatch-bytes");
  require_non_negative(c.combine_bytes, "combine bytes", "--combine-bytes");
  if (c.cost_matrices < 0) throw UsageError(fmt::format("--cost-matrices must be >= 0 (got {})", c.cost_matrices), "--cost-matrices");
  require_non_negative(c.other_params, "other parameters", "--other-params");
}

MoeShape moe_shape(const MoeCostConfig& c, MoeVariant v) {
  if (v == MoeVariant::standard) return {v, c.experts, c.top_k, c.d};
  const double l = latent_width(c), alpha = c.d / l;
  MoeShape s{v, scaled_count(alpha, c.experts, "N", "--latent"), c.top_k, l};
  if (v == MoeVariant::acc) s.top_k = scaled_count(alpha, c.top_k, "K", "--latent");
  return s;
}

double roofline_tokens(double w, double m, double ridge, double weight_bytes, double act_bytes) noexcept {
  const double denom = 2 * w * m - ridge * act_bytes * (w + m);
  if (!(denom > 0)) return std::numeric_limits<double>::infinity();
  return ridge * weight_bytes * w * m / denom;
}

double expected_distinct_experts(int n, int k, double tokens) noexcept {
  return double(n) * (1.0 - std::pow(1.0 - double(k) / double(n), tokens));
}

MoeVariantCost moe_cost(const MoeCostConfig& c, MoeVariant v) {
  check_moe_cost_config(c);
  MoeVariantCost r;
  r.shape = moe_shape(c, v);
  const double w = r.shape.width, d = c.d, l = latent_width(c);
  const int mats = expert_matrices(c.expert);
  r.alpha = v == MoeVariant::standard ? 1.0 : d / l;
  r.expert_params = mats * w * c.m;
  r.routed_params = r.shape.experts * r.expert_params;
  r.shared_params = c.shared * mats * d * (c.m_shared > 0 ? c.m_shared : c.m);
  r.router_params = r.shape.experts * d;
  r.projection_params = v == MoeVariant::standard ? 0.0 : 2 * d * l;
  const double always = r.shared_params + r.router_params + r.projection_params;
  r.layer_total = r.routed_params + always;
  r.layer_active = r.shape.top_k * r.expert_params + always;
  r.total_params = c.layers * r.layer_total + c.other_params;
  r.active_params = c.layers * r.layer_active + c.other_params;
  r.decode_experts = expected_distinct_experts(r.shape.experts, r.shape.top_k, c.decode_batch);
  r.decode_weight_bytes = c.weight_bytes * (c.layers * (r.decode_experts * r.expert_params + always) + c.other_params);
  r.tokens_per_expert = c.tokens * r.shape.top_k / r.shape.experts;
  const double t = r.tokens_per_expert;
  r.intensity = 2 * t * w * c.m / (c.weight_bytes * w * c.m + c.act_bytes * t * (w + c.m));
  r.roof_tokens = roofline_tokens(w, c.m, c.flops / c.hbm_bw, c.weight_bytes, c.act_bytes);
  const double per_gpu = double(r.shape.experts) / c.ep;
  r.comm_bytes = (c.dispatch_bytes + c.combine_bytes) * per_gpu * t * w;
  r.comp_flops = 2.0 * (c.cost_matrices > 0 ? c.cost_matrices : mats) * per_gpu * t * w * c.m;
  r.comm_seconds = r.comm_bytes / c.link_bw;
  r.comp_seconds = r.comp_flops / c.flops;
  r.comm_comp_ratio = r.comm_seconds / r.comp_seconds;
  return r;
}

}  // namespace icmlkit::nn
