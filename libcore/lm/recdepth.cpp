#include "lm/recdepth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "lm/block.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::lm {

int recdepth_cache_layers(const ModelConfig& c, CoreKv kv, int recurrence) {
  if (!c.is_recdepth()) return 0;
  const int C = c.recdepth_core();
  return c.n_layers - C + C * (kv == CoreKv::latest ? 1 : std::max(recurrence, 1));
}

int recdepth_core_layer(const ModelConfig& c, CoreKv kv, int iteration, int j) noexcept {
  const int P = c.recdepth_prelude(), C = c.recdepth_core();
  return kv == CoreKv::latest ? P + j : P + iteration * C + j;
}

void draw_state(std::uint64_t seed, int pos, int d, double std, float* out) {
  if (!(std > 0)) {
    std::fill_n(out, d, 0.0f);
    return;
  }
  Rng rng(derive_seed(seed, static_cast<std::uint64_t>(pos)));
  for (int i = 0; i < d; ++i) {
    double z = rng.normal();
    while (std::abs(z) > 3.0) z = rng.normal();  // truncated to ±3 std (torch.nn.init.trunc_normal_'s a, b)
    out[i] = static_cast<float>(std * z);
  }
}

void sandwich_block_forward(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), d = c.d_model, dq = c.n_heads * c.head_dim(), dkv = c.n_kv_heads * c.head_dim();
  attention_input(st, w, x);
  if (!L.q_bias.empty())  // Huginn's qk_bias: added before RoPE
    for (int r = 0; r < R; ++r) {
      float* q = w.q.data() + std::size_t(r) * dq;
      float* k = w.k.data() + std::size_t(r) * dkv;
      for (int i = 0; i < dq; ++i) q[i] += L.q_bias[std::size_t(i)];
      for (int i = 0; i < dkv; ++i) k[i] += L.k_bias[std::size_t(i)];
    }
  rope_store_kv(st, w);
  rope_queries(st, w.q.data());
  attention_core(st, w.q.data(), w.att.data(), res, -1, 0);
  attention_output(st, w, x);
  rms_norm(x, R, d, L.post_attn_norm.data(), c.rms_eps, x);  // n2 (row by row: in place is safe)
  llama_mlp(st, w, x);                                         // x += MLP(n3 x), n3 = ffn_norm
  rms_norm(x, R, d, L.post_ffn_norm.data(), c.rms_eps, x);   // n4
}

namespace {
/// Returns `o` after refusing what a recurrent-depth forward does not take (UsageError).
const ForwardOptions& checked_options(const ModelConfig& c, const Batch& b, const ForwardOptions& o) {
  if (!c.is_recdepth()) throw UsageError("not a recurrent-depth model (its blocks are not recdepth-prelude / core / coda)");
  auto refuse = [](bool bad, const char* what) {
    if (bad) throw UsageError(fmt::format("a recurrent-depth forward does not take {}", what));
  };
  refuse(!o.schedule.empty(), "a block schedule");
  refuse(!o.skip_attn.empty() || !o.skip_mlp.empty(), "layer skip lists");
  refuse(o.stop_after >= 0, "stop_after (early exit: iterate fewer times instead)");
  refuse(o.hidden, "hidden states");
  refuse(o.adapters && !o.adapters->empty(), "unmerged adapters");
  refuse(o.recurrence < 0, "a negative recurrence");
  for (const View& v : b.views) refuse(v.is_per_head(), "per-head views");
  return o;
}
}  // namespace

RecurrentDepthForward::RecurrentDepthForward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options)
    : model_(model), batch_(batch), opt_(checked_options(model.config, batch, options)), pass_(model, cache, batch, options) {}

void RecurrentDepthForward::prelude() {
  const ModelConfig& c = model_.config;
  std::vector<float>& x = pass_.residual();
  const float scale = static_cast<float>(c.recdepth.embed_scale);
  if (scale != 1.0f)
    for (float& v : x) v *= scale;
  for (int l = 0; l < c.recdepth_prelude(); ++l) pass_.run_block(l, l);
  e_ = x;
  s_.assign(e_.size(), 0.0f);
}

void RecurrentDepthForward::init_state(std::uint64_t seed) {
  const ModelConfig& c = model_.config;
  const int d = c.d_model;
  s_.resize(std::size_t(batch_.size()) * d);
  for (int r = 0; r < batch_.size(); ++r) draw_state(seed, batch_.rows[r].pos, d, c.recdepth.state_std, s_.data() + std::size_t(r) * d);
}

void RecurrentDepthForward::iterate(int n) {
  const ModelConfig& c = model_.config;
  const int R = batch_.size(), d = c.d_model, P = c.recdepth_prelude(), C = c.recdepth_core();
  if (e_.empty()) throw InputError("iterate: run the prelude first");
  if (s_.size() != e_.size()) throw InputError("iterate: the state must hold rows x d_model values");
  std::vector<float>& x = pass_.residual();
  cat_.resize(std::size_t(R) * 2 * d);
  for (int it = 0; it < n; ++it, ++iter_) {
    const int kept = (pass_.steps() - c.n_layers + C) / C;  // iterations the cache has layers for
    if (opt_.core_kv == CoreKv::full && iter_ >= kept)
      throw InputError(fmt::format("iteration {}: the full-KV cache keeps {} iterations", iter_ + 1, kept));
    for (int r = 0; r < R; ++r) {  // [s; e], the adapter's input (Huginn: torch.cat([x, input_embeds]))
      std::copy_n(s_.data() + std::size_t(r) * d, d, cat_.data() + std::size_t(r) * 2 * d);
      std::copy_n(e_.data() + std::size_t(r) * d, d, cat_.data() + std::size_t(r) * 2 * d + d);
    }
    matmul_weight(cat_.data(), R, 2 * d, 2 * d, model_.adapter, d, x.data(), d);
    for (int j = 0; j < C; ++j) pass_.run_block(P + j, recdepth_core_layer(c, opt_.core_kv, iter_, j));
    s_ = x;
  }
}

void RecurrentDepthForward::run_coda() {
  const ModelConfig& c = model_.config;
  const int R = batch_.size(), d = c.d_model, P = c.recdepth_prelude(), C = c.recdepth_core(), D = c.recdepth_coda();
  std::vector<float>& x = pass_.residual();
  rms_norm(s_.data(), R, d, model_.output_norm.data(), c.rms_eps, x.data());  // Huginn's ln_f after the recurrence
  const int first_coda_layer = pass_.steps() - D;
  for (int k = 0; k < D; ++k) pass_.run_block(P + C + k, first_coda_layer + k);
  coda_done_ = true;
}

Matrix RecurrentDepthForward::coda() {
  run_coda();
  return pass_.head(logits_rows_of(opt_, batch_.size()));
}

ForwardResult RecurrentDepthForward::finish() {
  if (!coda_done_) throw InputError("finish: run the coda first");
  return pass_.finish();
}

ForwardResult recdepth_forward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options) {
  const int r = options.recurrence > 0 ? options.recurrence : model.config.recdepth.mean_recurrence;
  RecurrentDepthForward f(model, cache, batch, options);
  f.prelude();
  f.init_state(options.state_seed);
  f.iterate(r);
  f.run_coda();
  return f.finish();
}

}  // namespace icmlkit::lm
