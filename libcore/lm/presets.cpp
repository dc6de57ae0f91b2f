#include "lm/presets.hpp"

#include "cli/run_tool.hpp"
#include "util/error.hpp"

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

}  // namespace icmlkit::lm
