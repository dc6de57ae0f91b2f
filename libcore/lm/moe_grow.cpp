#include "lm/moe_grow.hpp"

#include <cmath>
#include <fmt/format.h>

#include "io/hdf5.hpp"
#include "lm/model_io.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::lm {

const char* depth_growth_name(DepthGrowth g) noexcept { return g == DepthGrowth::interpose ? "interpose" : "stack"; }
const char* width_growth_name(WidthGrowth g) noexcept { return g == WidthGrowth::noisy ? "noisy" : "random"; }

DepthGrowth parse_depth_growth(const std::string& name, const std::string& flag) {
  if (name == "interpose") return DepthGrowth::interpose;
  if (name == "stack") return DepthGrowth::stack;
  throw UsageError("depth growth must be interpose or stack (got '" + name + "')", flag);
}

WidthGrowth parse_width_growth(const std::string& name, const std::string& flag) {
  if (name == "noisy") return WidthGrowth::noisy;
  if (name == "random") return WidthGrowth::random;
  throw UsageError("width growth must be noisy or random (got '" + name + "')", flag);
}

Model grow_depth(const Model& m, DepthGrowth g, int factor) {
  if (factor < 2) throw UsageError(fmt::format("the depth factor must be >= 2 (got {})", factor), "--depth-factor");
  const int n = m.config.n_layers;
  Model out = m;
  out.layers.clear();
  out.config.block_types.clear();
  const std::vector<BlockType> types = m.config.all_block_types();
  for (int i = 0; i < n * factor; ++i) {
    const int src = g == DepthGrowth::interpose ? i / factor : i % n;
    out.layers.push_back(m.layers[std::size_t(src)]);
    if (!m.config.block_types.empty()) out.config.block_types.push_back(types[std::size_t(src)]);
  }
  out.config.n_layers = n * factor;
  out.config.validate("grown model");
  return out;
}

namespace {

/// Population standard deviation of v (0 for fewer than 2 values).
double population_std(const std::vector<float>& v) {
  if (v.size() < 2) return 0.0;
  double mean = 0;
  for (float x : v) mean += x;
  mean /= double(v.size());
  double ss = 0;
  for (float x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(v.size()));
}

/// v (the N experts' rows, expert-major) followed by factor - 1 new blocks of the same size:
/// noisy copies (v + N(0, (alpha sigma)^2)) or random rows N(0, sigma^2), sigma = std(v).
std::vector<float> widen(const std::vector<float>& v, int factor, WidthGrowth g, double alpha, std::uint64_t seed) {
  const double sigma = population_std(v);
  const double s = g == WidthGrowth::noisy ? alpha * sigma : sigma;
  std::vector<float> out(v);
  out.reserve(v.size() * std::size_t(factor));
  Rng rng(seed);
  for (int j = 1; j < factor; ++j)
    for (float x : v) {
      const double base = g == WidthGrowth::noisy ? double(x) : 0.0;
      out.push_back(static_cast<float>(s > 0 ? base + s * rng.normal() : base));
    }
  return out;
}

}  // namespace

Model grow_width(const Model& m, WidthGrowth g, int factor, double alpha, std::uint64_t seed) {
  const ModelConfig& c = m.config;
  if (!c.has_moe())
    throw UsageError("width growth needs a model with moe or latent-moe blocks (this one is dense)", "--width");
  if (factor < 2) throw UsageError(fmt::format("the width factor must be >= 2 (got {})", factor), "--width-factor");
  if (!(alpha >= 0) || !std::isfinite(alpha)) throw UsageError(fmt::format("alpha must be >= 0 (got {})", alpha), "--alpha");
  Model out = m;
  MoeConfig& e = out.config.moe;
  e.n_experts *= factor;
  e.top_k *= factor;
  // Every copy of a selected expert is selected with it: a sigmoid router without normalisation
  // would sum factor times the weight, so its scaling shrinks by factor (softmax scores split).
  if (e.router == RouterKind::sigmoid && !e.norm_topk) e.routed_scaling /= factor;
  std::uint64_t stream = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!is_moe_block(c.block_type(l))) continue;
    Layer& L = out.layers[std::size_t(l)];
    const auto next = [&] { return derive_seed(seed, (std::uint64_t(l) << 8) | ++stream); };
    for (Matrix* w : {&L.router, &L.gate_exps, &L.up_exps, &L.down_exps}) {
      if (w->rows == 0) continue;  // relu2 experts have no gate
      w->data = widen(w->data, factor, g, alpha, next());
      w->rows *= factor;
    }
    for (const Matrix* w : {&L.router, &L.gate_exps, &L.up_exps, &L.down_exps})
      for (float x : w->data)
        if (!std::isfinite(x))
          throw UsageError(fmt::format("alpha = {} makes non-finite weights in block {}: choose a smaller alpha", alpha, l), "--alpha");
    if (!L.router_bias.empty()) {  // the selection bias: copied with its expert, 0 for random experts
      const std::size_t n = L.router_bias.size();
      for (int j = 1; j < factor; ++j)
        for (std::size_t i = 0; i < n; ++i) L.router_bias.push_back(g == WidthGrowth::noisy ? L.router_bias[i] : 0.0f);
    }
    stream = 0;
  }
  out.config.validate("grown model");
  return out;
}

nlohmann::json depth_recipe(DepthGrowth g, int factor) { return {{"depth", depth_growth_name(g)}, {"factor", factor}}; }

nlohmann::json width_recipe(WidthGrowth g, int factor, double alpha, std::uint64_t seed) {
  nlohmann::json j = {{"width", width_growth_name(g)}, {"factor", factor}, {"seed", seed}};
  if (g == WidthGrowth::noisy) j["alpha"] = alpha;
  return j;
}

nlohmann::json growth_history(const std::string& path) {
  if (detect_format(path) != ModelFormat::native_h5) return nlohmann::json::array();
  const io::h5::Handle file = io::h5::open_file(path);
  const io::h5::Handle root = io::h5::open_group(file, "/", path);
  std::string meta;
  if (!io::h5::read_attr(root, "meta", meta)) return nlohmann::json::array();
  const nlohmann::json j = nlohmann::json::parse(meta, nullptr, false);
  if (j.is_object() && j.contains("growth") && j["growth"].is_array()) return j["growth"];
  return nlohmann::json::array();
}

}  // namespace icmlkit::lm
