#include "lm/presets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cli/run_tool.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::lm {

void apply_preset(const std::string& name, ModelConfig& c, const std::function<bool(const char*)>& is_set) {
  struct P { int vocab, d, layers, heads, kv, ff, ctx; };
  P p{};
  if (name == "tiny") p = P{512, 64, 2, 4, 2, 172, 512};
  else if (name == "7m") p = P{4096, 256, 6, 8, 4, 688, 1024};
  else if (name == "100m") p = P{32000, 768, 12, 12, 4, 2048, 2048};
  else throw UsageError("unknown preset '" + name + "'", "--preset");
  auto fill = [&](const char* flag, int& field, int value) { if (!is_set(flag)) field = value; };
  fill("--vocab-size", c.vocab_size, p.vocab);
  fill("--d-model", c.d_model, p.d);
  fill("--n-layers", c.n_layers, p.layers);
  fill("--n-heads", c.n_heads, p.heads);
  fill("--n-kv-heads", c.n_kv_heads, p.kv);
  fill("--d-ff", c.d_ff, p.ff);
  fill("--n-ctx", c.n_ctx, p.ctx);
}

ModelConfig default_shape() {
  ModelConfig c;
  apply_preset("tiny", c, [](const char*) { return false; });
  c.vocab_size = 0;
  return c;
}

void add_shape_flags(CLI::App& app, ModelConfig& c) {
  app.add_option("--d-model", c.d_model, "Residual width")->check(cli::int_range(2, 1 << 16));
  app.add_option("--n-layers", c.n_layers, "Decoder blocks")->check(cli::int_range(1, 1024));
  app.add_option("--n-heads", c.n_heads, "Query heads")->check(cli::int_range(1, 1024));
  app.add_option("--n-kv-heads", c.n_kv_heads, "Key/value heads (divides --n-heads)")->check(cli::int_range(1, 1024));
  app.add_option("--d-ff", c.d_ff, "SwiGLU hidden width")->check(cli::int_range(1, 1 << 18));
  app.add_option("--n-ctx", c.n_ctx, "Context length")->check(cli::int_range(1, 1 << 20));
}

void add_moe_flags(CLI::App& app, ModelConfig& c, MoeFlags& f) {
  app.add_option("--moe", f.kind, "Every block's FFN routed: standard (N experts of width d_model, top-K) or latent (LatentMoE: experts at width --latent behind shared projections)")
      ->check(CLI::IsMember({"standard", "latent"}));
  app.add_option("--experts", c.moe.n_experts, "moe: routed experts N per block")->capture_default_str()->check(cli::int_range(1, 1 << 16));
  app.add_option("--top-k", c.moe.top_k, "moe: experts per token K")->capture_default_str()->check(cli::int_range(1, 1 << 16));
  app.add_option("--d-expert", c.moe.d_expert, "moe: a routed expert's hidden width m (default: --d-ff)")->check(cli::int_range(1, 1 << 18));
  app.add_option("--d-shared", c.moe.d_shared, "moe: the shared expert's hidden width (0 = no shared expert)")->capture_default_str()->check(cli::int_range(0, 1 << 18));
  app.add_option("--latent", c.moe.d_latent, "moe latent: the latent width l (default d_model / 4, the paper's alpha = 4)")->check(cli::int_range(1, 1 << 16));
  app.add_option("--expert-act", f.act, "moe: expert MLP, swiglu or relu2 (squared ReLU, no gate)")->capture_default_str()->check(CLI::IsMember({"swiglu", "relu2"}));
  app.add_option("--router", f.router, "moe: softmax (top-K of softmax scores) or sigmoid (top-K of sigmoid scores + a selection-only bias)")->capture_default_str()->check(CLI::IsMember({"softmax", "sigmoid"}));
  app.add_option("--routed-scaling", c.moe.routed_scaling, "moe: factor on the routed experts' weighted sum (routed_scaling_factor)")->capture_default_str()->check(cli::positive());
  app.add_flag("--no-norm-topk", f.no_norm_topk, "moe: keep the selected scores as they are (default: renormalised to sum 1)");
}

void apply_moe_flags(const MoeFlags& f, ModelConfig& c, const std::function<bool(const char* flag)>& is_set) {
  if (f.kind.empty()) {
    for (const char* flag : {"--experts", "--top-k", "--d-expert", "--d-shared", "--latent", "--expert-act", "--router", "--routed-scaling",
                             "--no-norm-topk"})
      if (is_set(flag)) throw UsageError(std::string(flag) + " needs --moe standard or latent", flag);
    return;
  }
  if (f.kind == "standard" && is_set("--latent")) throw UsageError("--latent needs --moe latent", "--latent");
  const BlockType t = f.kind == "latent" ? BlockType::latent_moe : BlockType::moe;
  c.block_types.assign(std::size_t(c.n_layers), t);
  if (!is_set("--d-expert")) c.moe.d_expert = c.d_ff;
  if (t == BlockType::latent_moe && !is_set("--latent")) c.moe.d_latent = std::max(1, c.d_model / 4);
  c.moe.act = parse_expert_act(f.act, "--expert-act");
  c.moe.router = parse_router_kind(f.router, "--router");
  c.moe.norm_topk = !f.no_norm_topk;
  if (c.moe.top_k > c.moe.n_experts)
    throw UsageError("--top-k " + std::to_string(c.moe.top_k) + " exceeds --experts " + std::to_string(c.moe.n_experts), "--top-k");
  if (t == BlockType::latent_moe && c.moe.d_latent > c.d_model)
    throw UsageError("--latent " + std::to_string(c.moe.d_latent) + " exceeds --d-model " + std::to_string(c.d_model), "--latent");
}

void add_recdepth_flags(CLI::App& app, ModelConfig& c, RecdepthFlags& f) {
  app.add_option("--arch", f.arch, "llama (blocks as the other flags say) or recurrent-depth (Huginn: prelude, a core looped r times, coda)")
      ->capture_default_str()->check(CLI::IsMember({"llama", "recurrent-depth"}));
  app.add_option("--prelude", f.prelude, "recurrent-depth: prelude blocks P")->capture_default_str()->check(cli::int_range(0, 256));
  app.add_option("--core", f.core, "recurrent-depth: core blocks C (applied r times)")->capture_default_str()->check(cli::int_range(1, 256));
  app.add_option("--coda", f.coda, "recurrent-depth: coda blocks D")->capture_default_str()->check(cli::int_range(0, 256));
  app.add_option("--mean-recurrence", c.recdepth.mean_recurrence, "recurrent-depth: mean core iterations r (training distribution's mean; inference default)")
      ->check(cli::int_range(1, 4096));
  app.add_option("--backprop-depth", c.recdepth.backprop_depth, "recurrent-depth: iterations trained with gradient k (truncated backpropagation; default min(8, r))")
      ->check(cli::int_range(1, 4096));
  app.add_flag("--no-qk-bias", f.no_qk_bias, "recurrent-depth: no q / k biases");
}

void apply_recdepth_flags(const RecdepthFlags& f, ModelConfig& c, const std::function<bool(const char* flag)>& is_set) {
  if (f.arch != "recurrent-depth") {
    for (const char* flag : {"--prelude", "--core", "--coda", "--mean-recurrence", "--backprop-depth", "--no-qk-bias"})
      if (is_set(flag)) throw UsageError(std::string(flag) + " needs --arch recurrent-depth", flag);
    return;
  }
  if (is_set("--n-layers")) throw UsageError("--arch recurrent-depth sets the blocks with --prelude, --core and --coda", "--n-layers");
  if (is_set("--moe")) throw UsageError("--arch recurrent-depth has no routed FFN", "--moe");
  c.n_layers = f.prelude + f.core + f.coda;
  c.block_types.assign(std::size_t(f.prelude), BlockType::recdepth_prelude);
  c.block_types.insert(c.block_types.end(), std::size_t(f.core), BlockType::recdepth_core);
  c.block_types.insert(c.block_types.end(), std::size_t(f.coda), BlockType::recdepth_coda);
  if (!is_set("--mean-recurrence")) c.recdepth.mean_recurrence = 16;
  if (!is_set("--backprop-depth")) c.recdepth.backprop_depth = std::min(8, c.recdepth.mean_recurrence);
  if (c.recdepth.backprop_depth > c.recdepth.mean_recurrence)
    throw UsageError(fmt::format("--backprop-depth {} exceeds --mean-recurrence {}", c.recdepth.backprop_depth, c.recdepth.mean_recurrence),
                     "--backprop-depth");
  c.recdepth.qk_bias = !f.no_qk_bias;
  c.recdepth.embed_scale = std::sqrt(double(c.d_model));
  c.recdepth.state_std = std::sqrt(0.4);
  if (!is_set("--rope-style")) c.rope_style = RopeStyle::interleaved;
}

Model random_recdepth_model(const ModelConfig& config, std::uint64_t seed) {
  Model m = allocate_model(config);
  const ModelConfig& c = m.config;
  const double s = std::sqrt(2.0 / (5.0 * c.d_model));
  const double depth = c.recdepth_prelude() + double(c.recdepth_core()) * c.recdepth.mean_recurrence + c.recdepth_coda();
  const double out_s = s / std::sqrt(2.0 * depth);
  std::uint64_t stream = 0;
  for (auto& t : tensor_slots(m)) {
    if (!t.is_matrix()) continue;
    const bool out_proj = t.gguf.find("attn_output") != std::string::npos || t.gguf.find("ffn_down") != std::string::npos;
    const double sd = out_proj ? out_s : s;
    Rng rng(derive_seed(seed, ++stream));
    for (std::size_t i = 0; i < std::size_t(t.rows) * t.cols; ++i) {
      double z = rng.normal();
      while (std::abs(z) > 3.0) z = rng.normal();
      t.data[i] = static_cast<float>(sd * z);
    }
  }
  return m;
}

}  // namespace icmlkit::lm
