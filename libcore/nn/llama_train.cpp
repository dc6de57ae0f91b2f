#include "nn/llama_train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>

#include "lm/moe.hpp"
#include "lm/recdepth.hpp"
#include "lm/support.hpp"
#include "nn/layers.hpp"
#include "nn/mlstm.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"
#include "util/error.hpp"

namespace icmlkit::nn {

std::vector<std::tuple<int, std::string, std::vector<int>>> layer_param_shapes(const lm::ModelConfig& c, int l) {
  using LP = LlamaParams<float>;
  const int d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const std::string p = fmt::format("blk.{}.", l);
  std::vector<std::tuple<int, std::string, std::vector<int>>> t{
      {LP::attn_norm, p + "attn_norm.weight", {d}}, {LP::wq, p + "attn_q.weight", {dq, d}},
      {LP::wk, p + "attn_k.weight", {dkv, d}},      {LP::wv, p + "attn_v.weight", {dkv, d}},
      {LP::wo, p + "attn_output.weight", {d, dq}},  {LP::ffn_norm, p + "ffn_norm.weight", {d}}};
  const lm::BlockType type = c.block_type(l);
  if (!lm::is_moe_block(type)) {
    t.emplace_back(LP::w_gate, p + "ffn_gate.weight", std::vector<int>{c.d_ff, d});
    t.emplace_back(LP::w_up, p + "ffn_up.weight", std::vector<int>{c.d_ff, d});
    t.emplace_back(LP::w_down, p + "ffn_down.weight", std::vector<int>{d, c.d_ff});
    if (type == lm::BlockType::mlstm_hybrid) {  // lm::tensor_slots order
      const int nh = c.n_heads;
      t.emplace_back(LP::mlstm_fq, p + "mlstm_fq.weight", std::vector<int>{dq, hd});
      t.emplace_back(LP::mlstm_fk, p + "mlstm_fk.weight", std::vector<int>{dkv, hd});
      t.emplace_back(LP::mlstm_iw, p + "mlstm_igate.weight", std::vector<int>{nh, d});
      t.emplace_back(LP::mlstm_ib, p + "mlstm_igate.bias", std::vector<int>{nh});
      t.emplace_back(LP::mlstm_fw, p + "mlstm_fgate.weight", std::vector<int>{nh, d});
      t.emplace_back(LP::mlstm_fb, p + "mlstm_fgate.bias", std::vector<int>{nh});
      t.emplace_back(LP::mlstm_ow, p + "mlstm_ogate.weight", std::vector<int>{nh, dq + 2 * dkv});
      t.emplace_back(LP::mlstm_ob, p + "mlstm_ogate.bias", std::vector<int>{nh});
    }
    if (lm::is_recdepth_block(type)) {  // lm::tensor_slots order
      t.emplace_back(LP::post_attn_norm, p + "post_attn_norm.weight", std::vector<int>{d});
      t.emplace_back(LP::post_ffn_norm, p + "post_ffn_norm.weight", std::vector<int>{d});
      if (c.recdepth.qk_bias) {
        t.emplace_back(LP::q_bias, p + "attn_q.bias", std::vector<int>{dq});
        t.emplace_back(LP::k_bias, p + "attn_k.bias", std::vector<int>{dkv});
      }
    }
    return t;
  }
  // the routed FFN, in lm::tensor_slots order
  const lm::MoeConfig& e = c.moe;
  const bool swiglu = e.act == lm::ExpertAct::swiglu, latent = type == lm::BlockType::latent_moe;
  const int w = latent ? e.d_latent : d, N = e.n_experts, m = e.d_expert, ms = e.d_shared;
  t.emplace_back(LP::router, p + "ffn_gate_inp.weight", std::vector<int>{N, d});
  if (e.router == lm::RouterKind::sigmoid) t.emplace_back(LP::router_bias, p + "exp_probs_b.bias", std::vector<int>{N});
  if (swiglu) t.emplace_back(LP::gate_exps, p + "ffn_gate_exps.weight", std::vector<int>{N * m, w});
  t.emplace_back(LP::up_exps, p + "ffn_up_exps.weight", std::vector<int>{N * m, w});
  t.emplace_back(LP::down_exps, p + "ffn_down_exps.weight", std::vector<int>{N * w, m});
  if (ms > 0) {
    if (swiglu) t.emplace_back(LP::gate_shexp, p + "ffn_gate_shexp.weight", std::vector<int>{ms, d});
    t.emplace_back(LP::up_shexp, p + "ffn_up_shexp.weight", std::vector<int>{ms, d});
    t.emplace_back(LP::down_shexp, p + "ffn_down_shexp.weight", std::vector<int>{d, ms});
  }
  if (latent) {
    t.emplace_back(LP::latent_down, p + "ffn_latent_down.weight", std::vector<int>{e.d_latent, d});
    t.emplace_back(LP::latent_up, p + "ffn_latent_up.weight", std::vector<int>{d, e.d_latent});
  }
  return t;
}

std::vector<std::pair<std::string, std::vector<int>>> llama_param_shapes(const lm::ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<int>>> t;
  t.emplace_back("token_embd.weight", std::vector<int>{c.vocab_size, c.d_model});
  for (int l = 0; l < c.n_layers; ++l)
    for (auto& [kind, name, shape] : layer_param_shapes(c, l)) t.emplace_back(std::move(name), std::move(shape));
  if (c.is_recdepth()) t.emplace_back("recdepth_adapter.weight", std::vector<int>{c.d_model, 2 * c.d_model});
  t.emplace_back("output_norm.weight", std::vector<int>{c.d_model});
  if (!c.tied) t.emplace_back("output.weight", std::vector<int>{c.vocab_size, c.d_model});
  return t;
}

template <class T>
LlamaParams<T>::LlamaParams(const lm::ModelConfig& c, bool frozen) : config(c) {
  store.add("token_embd.weight", {c.vocab_size, c.d_model}, true, frozen);
  slots.resize(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    slots[std::size_t(l)].fill(-1);
    for (auto& [kind, name, shape] : layer_param_shapes(c, l)) {
      const int i = store.add(name, shape, shape.size() > 1, frozen);
      slots[std::size_t(l)][std::size_t(kind)] = i;
      if (kind == router_bias) store.freeze(i);  // selection only: moved by the load-balancing update, not by gradient
    }
  }
  if (c.is_recdepth()) adapter_index = store.add("recdepth_adapter.weight", {c.d_model, 2 * c.d_model}, true, frozen);
  out_norm_index = store.add("output_norm.weight", {c.d_model}, false, frozen);
  if (!c.tied) store.add("output.weight", {c.vocab_size, c.d_model}, true, frozen);
}

namespace {

/// The model's vector for layer tensor t (matrices: their float data).
template <class L>
auto& model_tensor(L& layer, int t) {
  using LP = LlamaParams<float>;
  switch (t) {
    case LP::attn_norm: return layer.attn_norm;
    case LP::wq: return layer.wq.data;
    case LP::wk: return layer.wk.data;
    case LP::wv: return layer.wv.data;
    case LP::wo: return layer.wo.data;
    case LP::ffn_norm: return layer.ffn_norm;
    case LP::w_gate: return layer.w_gate.data;
    case LP::w_up: return layer.w_up.data;
    case LP::w_down: return layer.w_down.data;
    case LP::router: return layer.router.data;
    case LP::router_bias: return layer.router_bias;
    case LP::gate_exps: return layer.gate_exps.data;
    case LP::up_exps: return layer.up_exps.data;
    case LP::down_exps: return layer.down_exps.data;
    case LP::gate_shexp: return layer.gate_shexp.data;
    case LP::up_shexp: return layer.up_shexp.data;
    case LP::down_shexp: return layer.down_shexp.data;
    case LP::latent_down: return layer.latent_down.data;
    case LP::mlstm_fq: return layer.mlstm_fq.data;
    case LP::mlstm_fk: return layer.mlstm_fk.data;
    case LP::mlstm_iw: return layer.mlstm_igate.data;
    case LP::mlstm_ib: return layer.mlstm_igate_b;
    case LP::mlstm_fw: return layer.mlstm_fgate.data;
    case LP::mlstm_fb: return layer.mlstm_fgate_b;
    case LP::mlstm_ow: return layer.mlstm_ogate.data;
    case LP::mlstm_ob: return layer.mlstm_ogate_b;
    case LP::post_attn_norm: return layer.post_attn_norm;
    case LP::post_ffn_norm: return layer.post_ffn_norm;
    case LP::q_bias: return layer.q_bias;
    case LP::k_bias: return layer.k_bias;
    default: return layer.latent_up.data;
  }
}

/// Calls f(param, float vector of the model) pairwise, in store order.
template <class T, class M, class F>
void zip_model(LlamaParams<T>& P, M& m, F&& f) {
  f(P.embd(), m.token_embd.data);
  for (int l = 0; l < P.config.n_layers; ++l)
    for (int t = 0; t < LlamaParams<T>::kLayerTensors; ++t)
      if (P.has(l, typename LlamaParams<T>::LayerTensor(t))) f(P.layer(l, typename LlamaParams<T>::LayerTensor(t)), model_tensor(m.layers[l], t));
  if (P.config.is_recdepth()) f(P.adapter(), m.adapter.data);
  f(P.out_norm(), m.output_norm);
  if (!P.config.tied) f(P.head(), m.output.data);
}

}  // namespace

template <class T>
LlamaParams<T> params_from_model(const lm::Model& model, bool frozen) {
  lm::require_blocks(lm::Runner::trainer, model.config);  // before the llama layout is assumed
  LlamaParams<T> P(model.config, frozen);
  zip_model(P, model, [](Param<T>& p, const std::vector<float>& v) {
    if (v.size() != p.numel()) throw InputError("model tensor has the wrong size", p.name);
    std::copy(v.begin(), v.end(), p.value.begin());
  });
  return P;
}

template <class T>
void params_to_model(LlamaParams<T>& P, lm::Model& model) {
  PoetWork<T> work;
  std::vector<T> eff;
  zip_model(P, model, [&](Param<T>& p, std::vector<float>& v) {
    v.resize(p.numel());
    const std::size_t index = std::size_t(&p - P.store.params.data());
    const T* src = p.value.data();
    if (index < P.poet_of.size() && P.poet_of[index] >= 0) {  // POET-X: the effective weight
      PoetLinear<T>& pl = P.poet[P.poet_of[index]];
      pl.prepare(P.store, work);
      eff.resize(p.numel());
      pl.effective_weight(p.value.data(), eff.data());
      src = eff.data();
    }
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(src[i]);
  });
}

std::vector<int> attention_mlp_matrices(const lm::ModelConfig& c) {
  std::vector<int> t;
  int i = 1;  // after token_embd
  for (int l = 0; l < c.n_layers; ++l)
    for (const auto& [kind, name, shape] : layer_param_shapes(c, l)) {
      using LP = LlamaParams<float>;
      if (kind == LP::wq || kind == LP::wk || kind == LP::wv || kind == LP::wo || kind == LP::w_gate || kind == LP::w_up ||
          kind == LP::w_down)
        t.push_back(i);
      ++i;
    }
  return t;
}

namespace {

/// enable_poet's checks on the matrices (name, [rows, cols]).
void check_poet_matrices(const std::vector<std::pair<std::string, std::vector<int>>>& mats, const PoetOptions& opt) {
  const int b = opt.block;
  if (b < 2) throw UsageError(fmt::format("the POET-X block size must be >= 2 (got {})", b), "--poet-block");
  cayley_coefficients(opt.polynomial, opt.terms);  // k >= 1
  std::vector<std::pair<int, int>> dims;
  int small = std::numeric_limits<int>::max();
  for (const auto& [name, shape] : mats) {
    dims.emplace_back(shape[0], shape[1]);
    small = std::min({small, shape[0], shape[1]});
  }
  for (const auto& [name, shape] : mats) {
    const int m = shape[0], n = shape[1];
    if (opt.fully_stochastic ? (b > m || b > n) : (m % b != 0 || n % b != 0))
      throw UsageError(opt.fully_stochastic
                           ? fmt::format("POET-FS block size {} is larger than {} [{}, {}]; blocks up to {} fit every matrix", b,
                                         name, m, n, small)
                           : fmt::format("POET-X block size {} does not divide {} [{}, {}]; sizes that divide every matrix: {}", b,
                                         name, m, n, poet_block_sizes(dims)),
                       "--poet-block");
  }
}
}  // namespace

void check_poet_shapes(const lm::ModelConfig& config, const PoetOptions& opt) {
  const auto shapes = llama_param_shapes(config);
  std::vector<std::pair<std::string, std::vector<int>>> mats;
  for (int i : attention_mlp_matrices(config)) mats.push_back(shapes[i]);
  check_poet_matrices(mats, opt);
}

template <class T>
void enable_poet(LlamaParams<T>& P, const PoetOptions& opt, std::uint64_t seed) {
  if (!P.poet.empty()) throw UsageError("POET-X is already enabled on this model");
  const int b = opt.block;
  const std::vector<int> targets = attention_mlp_matrices(P.config);
  std::vector<std::pair<std::string, std::vector<int>>> mats;
  for (int i : targets) mats.emplace_back(P.store.params[i].name, P.store.params[i].shape);
  check_poet_matrices(mats, opt);
  const std::vector<double> coeffs = cayley_coefficients(opt.polynomial, opt.terms);
  P.poet_of.assign(P.store.params.size(), -1);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    PoetLinear<T> pl;
    Param<T>& w = P.store.params[targets[i]];
    pl.rows = w.shape[0];
    pl.cols = w.shape[1];
    pl.b = b;
    pl.out_blocks = opt.fully_stochastic ? 1 : pl.rows / b;
    pl.in_blocks = opt.fully_stochastic ? 1 : pl.cols / b;
    pl.coeffs = coeffs;
    pl.weight = targets[i];
    if (opt.normalize)  // W0 = W / |row| (replace_linear_with_poet's normalize_weights)
      for (int r = 0; r < pl.rows; ++r) {
        T* row = w.value.data() + std::size_t(r) * pl.cols;
        double ss = 0;
        for (int c = 0; c < pl.cols; ++c) ss += double(row[c]) * row[c];
        const T inv = T(1.0 / std::sqrt(ss));
        if (ss > 0)
          for (int c = 0; c < pl.cols; ++c) row[c] *= inv;
      }
    const std::string name = w.name.substr(0, w.name.size() - std::string(".weight").size()) + ".poet_q";
    P.store.freeze(targets[i]);
    pl.q = P.store.add(name, {pl.out_blocks + pl.in_blocks, b * (b - 1) / 2}, false);
    pl.draw_permutations(poet_permutation_seed(seed, 0, static_cast<int>(i)));
    P.poet_of.resize(P.store.params.size(), -1);
    P.poet_of[targets[i]] = static_cast<int>(P.poet.size());
    P.poet.push_back(std::move(pl));
  }
  P.poet_of.resize(P.store.params.size(), -1);
}

template <class T>
void poet_merge(LlamaParams<T>& P, std::uint64_t seed, std::int64_t merges) {
  PoetWork<T> work;
  std::vector<T> eff;
  for (std::size_t i = 0; i < P.poet.size(); ++i) {
    PoetLinear<T>& pl = P.poet[i];
    Param<T>& w = P.store.params[pl.weight];
    pl.prepare(P.store, work);
    eff.resize(w.numel());
    pl.effective_weight(w.value.data(), eff.data());
    pl.draw_permutations(poet_permutation_seed(seed, merges, static_cast<int>(i)));
    for (int a = 0; a < pl.rows; ++a)  // W0[a][e] = W[perm_out_inv[a]][perm_in_inv[e]], so that R = I gives W back
      for (int e = 0; e < pl.cols; ++e)
        w.value[std::size_t(a) * pl.cols + e] = eff[std::size_t(pl.perm_out_inv[a]) * pl.cols + pl.perm_in_inv[e]];
    std::fill(P.store.params[pl.q].value.begin(), P.store.params[pl.q].value.end(), T(0));
  }
}

std::pair<int, int> sample_recurrence(int mean, int backprop, std::uint64_t seed) {
  const int s = std::max(backprop, 1), t = std::max(mean - s, 0);
  Rng rng(seed);
  const double sigma = 0.5, mu = std::log(double(t + s)) - sigma * sigma / 2;
  const double rate = std::exp(mu + sigma * rng.normal());
  // Poisson(rate) by Knuth's product of uniforms, in log space (rate may reach a few hundred)
  int p = 0;
  for (double acc = 0.0;; ++p) {
    acc += -std::log(1.0 - rng.uniform());
    if (acc > rate) break;
  }
  p += 1;
  return {std::max(p - s, 0), std::min(s, p)};
}

double training_flop_per_token(const lm::ModelConfig& c, int S) noexcept {
  const double embd = double(c.vocab_size) * c.d_model;  // the lookup table (the head when tied)
  const double norms = double(c.d_model) * (2 * c.n_layers + 1);
  // the weights a token multiplies: every block's active ones (a moe block: K experts, router,
  // shared expert, projections; its router bias does not multiply)
  double active = embd * (c.tied ? 1 : 2) + c.d_model;
  for (int l = 0; l < c.n_layers; ++l) {
    active += double(c.block_active_params(l));
    if (lm::is_moe_block(c.block_type(l)) && c.moe.router == lm::RouterKind::sigmoid) active -= c.moe.n_experts;
  }
  const double matrix = active - norms - (c.tied ? 0.0 : embd);
  if (c.is_recdepth()) {  // forward (2 FLOP per weight) at r̄ iterations, backward (4) through k̄ of them
    const double r = c.recdepth.mean_recurrence, k = std::min(c.recdepth.backprop_depth, c.recdepth.mean_recurrence);
    double core = 2.0 * c.d_model * c.d_model;  // the adapter
    for (int l = 0; l < c.n_layers; ++l)
      if (c.block_type(l) == lm::BlockType::recdepth_core) core += double(c.block_active_params(l)) - 2.0 * c.d_model;
    const double rest = matrix - core, attn = 2.0 * double(S) * c.d_model;  // per block pass, forward
    const double blocks_fwd = c.n_layers - c.recdepth_core() + r * c.recdepth_core();
    const double blocks_bwd = c.n_layers - c.recdepth_core() + k * c.recdepth_core();
    return 6.0 * rest + (2.0 * r + 4.0 * k) * core + attn * (blocks_fwd + 2.0 * blocks_bwd);
  }
  return 6.0 * matrix + 6.0 * c.n_layers * double(S) * c.d_model;
}

namespace {

/// The shapes of one llama block pass over B sequences of S rows.
struct Dims {
  Dims(const lm::ModelConfig& c, int B, int S)
      : N(B * S), d(c.d_model), hd(c.head_dim()), nh(c.n_heads), nkv(c.n_kv_heads), dq(nh * hd), dkv(nkv * hd), ff(c.d_ff),
        attn{B, S, nh, nkv, hd} {}
  int N, d, hd, nh, nkv, dq, dkv, ff;
  AttnShape attn;
};

/// One matrix product of layer l's tensor t: y [N, O] = x [N, K] W^T, through POET-X when the
/// matrix is one (its y0 kept in A), else the plain linear layer.
template <class T>
void mat_forward(LlamaParams<T>& P, int l, typename LlamaParams<T>::LayerTensor t, const T* x, int N, int K, int O, T* y,
                 typename TrainCache<T>::LayerActs& A, TrainCache<T>& C) {
  Param<T>& W = P.layer(l, t);
  if (PoetLinear<T>* pl = P.poet_matrix(l, t))
    pl->forward(x, N, W.value.data(), y, A.poet_y0[t], C.poet);
  else
    linear_forward(x, N, K, W.value.data(), O, y);
  if (P.lora && int(t) < kLoraSlots) lora_forward(*P.lora, l, int(t), x, N, K, O, y, A.lora_u[t], A.lora_xd[t], C.lora_tmp);
}

/// The weight-gradient buffer of a norm: its gradient, or a scratch that is discarded when frozen.
template <class T>
T* norm_grad(Param<T>& w, TrainCache<T>& C) {
  if (!w.grad.empty()) return w.grad.data();
  C.frozen_dw.resize(w.numel());
  return C.frozen_dw.data();
}

/// Its backward: dx (= or += by `accumulate_dx`) and the gradient of W (or of POET-X's R blocks).
template <class T>
void mat_backward(LlamaParams<T>& P, int l, typename LlamaParams<T>::LayerTensor t, const T* dy, const T* x, int N, int K,
                  int O, T* dx, bool accumulate_dx, typename TrainCache<T>::LayerActs& A, TrainCache<T>& C) {
  Param<T>& W = P.layer(l, t);
  if (PoetLinear<T>* pl = P.poet_matrix(l, t))
    pl->backward(dy, x, N, W.value.data(), dx, accumulate_dx, A.poet_y0[t], C.poet);
  else if (const std::size_t i = P.index(l, t); i < P.sparse.size() && !P.sparse[i].empty()) {
    // a sparse matrix: its dense gradient in a transient buffer, the active entries gathered
    std::vector<T>& dw = C.dw;
    dw.assign(std::size_t(O) * K, T(0));
    linear_backward(dy, x, N, K, W.value.data(), O, dx, dw.data(), accumulate_dx);
    const std::vector<std::int32_t>& idx = P.sparse[i];
    T* g = W.grad.data();
    for (std::size_t k = 0; k < idx.size(); ++k) g[k] += dw[std::size_t(idx[k])];
    if (i < P.dense_grad.size() && !P.dense_grad[i].empty())
      for (std::size_t j = 0; j < dw.size(); ++j) P.dense_grad[i][j] += dw[j];
  } else {
    linear_backward(dy, x, N, K, W.value.data(), O, dx, W.grad.empty() ? nullptr : W.grad.data(), accumulate_dx);
  }
  if (P.lora && int(t) < kLoraSlots) lora_backward(*P.lora, l, int(t), dy, x, N, K, O, dx, A.lora_u[t], A.lora_xd[t], C.lora_tmp);
}

/// The attention input (every block type): A.x_in = x, A.xn1 = n1(x), A.q, A.k, A.v (before RoPE);
/// A.att, A.amx, A.ainv sized.
template <class T>
void qkv_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                       const T* x) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, nh = z.nh, dq = z.dq, dkv = z.dkv;
  const std::size_t nx = std::size_t(N) * d;
  A.x_in.assign(x, x + nx);
  A.xn1.resize(nx); A.rstd1.resize(N);
  A.q.resize(std::size_t(N) * dq); A.k.resize(std::size_t(N) * dkv); A.v.resize(A.k.size());
  A.att.resize(A.q.size()); A.amx.resize(std::size_t(N) * nh); A.ainv.resize(A.amx.size());
  rmsnorm_forward(x, N, d, P.layer(l, LP::attn_norm).value.data(), c.rms_eps, A.xn1.data(), A.rstd1.data());
  mat_forward(P, l, LP::wq, A.xn1.data(), N, d, dq, A.q.data(), A, C);
  mat_forward(P, l, LP::wk, A.xn1.data(), N, d, dkv, A.k.data(), A, C);
  mat_forward(P, l, LP::wv, A.xn1.data(), N, d, dkv, A.v.data(), A, C);
  if (P.has(l, LP::q_bias))  // recdepth blocks' q / k biases (Huginn's qk_bias), before RoPE
    for (int n = 0; n < N; ++n) {
      const T* bq = P.layer(l, LP::q_bias).value.data();
      const T* bk = P.layer(l, LP::k_bias).value.data();
      for (int i = 0; i < dq; ++i) A.q[std::size_t(n) * dq + i] += bq[i];
      for (int i = 0; i < dkv; ++i) A.k[std::size_t(n) * dkv + i] += bk[i];
    }
}

/// The attention output: x [N, d] += Wo A.att; A.x_mid = x.
template <class T>
void attn_out_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                            T* x) {
  const Dims z(P.config, B, S);
  const std::size_t nx = std::size_t(z.N) * z.d;
  std::vector<T>& tmp = C.tmp;
  tmp.resize(nx);
  mat_forward(P, l, LlamaParams<T>::wo, A.att.data(), z.N, z.dq, z.d, tmp.data(), A, C);
  for (std::size_t i = 0; i < nx; ++i) x[i] += tmp[i];
  A.x_mid.assign(x, x + nx);
}

/// The attention sublayer's training forward (every block type but mlstm-hybrid): x [N, d] +=
/// attention, activations kept in A (x_in, xn1 .. ainv, x_mid).
template <class T>
void attention_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                             T* x) {
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  qkv_train_forward(P, l, B, S, C, A, x);
  rope_forward(A.q.data(), z.N, z.nh, z.hd, c.rope_style, C.cs.data(), C.sn.data());
  rope_forward(A.k.data(), z.N, z.nkv, z.hd, c.rope_style, C.cs.data(), C.sn.data());
  attention_forward(A.q.data(), A.k.data(), A.v.data(), z.attn, A.att.data(), A.amx.data(), A.ainv.data());
  attn_out_train_forward(P, l, B, S, C, A, x);
}

/// The mlstm-hybrid block's token mixer, training forward (lm::mlstm_block_forward's arithmetic
/// with the mLSTM in its parallel form): x [N, d] += Wo · mix, activations kept in A.
template <class T>
void mlstm_mixer_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                               typename TrainCache<T>::LayerActs& A, T* x) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, hd = z.hd, nh = z.nh, nkv = z.nkv, dq = z.dq, dkv = z.dkv, group = nh / nkv;
  const int dc = dq + 2 * dkv, ldg = 3 * nh;
  const lm::MlstmMixer mixer = c.mlstm.mixer;
  qkv_train_forward(P, l, B, S, C, A, x);
  const int nthreads = threads();
  if (mixer != lm::MlstmMixer::swa) {
    A.h_q0 = A.q;
    A.h_k0 = A.k;
    A.h_gates.resize(std::size_t(N) * ldg);
    T* g = A.h_gates.data();
    if (mixer == lm::MlstmMixer::linear) {
      for (int r = 0; r < N; ++r)
        for (int h = 0; h < nh; ++h) {
          g[std::size_t(r) * ldg + h] = T(0);
          g[std::size_t(r) * ldg + nh + h] = std::numeric_limits<T>::infinity();
          g[std::size_t(r) * ldg + 2 * nh + h] = T(1);
        }
    } else {
      std::vector<T>& tmp = C.tmp;
      tmp.resize(std::size_t(N) * nh);
      A.h_cat.resize(std::size_t(N) * dc);
      for (int r = 0; r < N; ++r) {
        T* cr = A.h_cat.data() + std::size_t(r) * dc;
        std::copy_n(A.q.data() + std::size_t(r) * dq, dq, cr);
        std::copy_n(A.k.data() + std::size_t(r) * dkv, dkv, cr + dq);
        std::copy_n(A.v.data() + std::size_t(r) * dkv, dkv, cr + dq + dkv);
      }
      const typename LP::LayerTensor W[3] = {LP::mlstm_iw, LP::mlstm_fw, LP::mlstm_ow};
      const typename LP::LayerTensor bias[3] = {LP::mlstm_ib, LP::mlstm_fb, LP::mlstm_ob};
      for (int j = 0; j < 3; ++j) {
        const T* in = j < 2 ? A.xn1.data() : A.h_cat.data();
        linear_forward(in, N, j < 2 ? d : dc, P.layer(l, W[j]).value.data(), nh, tmp.data());
        const T* bv = P.layer(l, bias[j]).value.data();
        for (int r = 0; r < N; ++r)
          for (int h = 0; h < nh; ++h) {
            const T v = tmp[std::size_t(r) * nh + h] + bv[h];
            g[std::size_t(r) * ldg + j * nh + h] = j < 2 ? v : T(1) / (T(1) + std::exp(-v));
          }
      }
    }
    A.h_fq.resize(std::size_t(N) * dq);
    A.h_fk.resize(std::size_t(N) * dkv);
    for (int h = 0; h < nh; ++h)
      feature_map_forward(A.h_q0.data() + h * hd, dq, N, hd, P.layer(l, LP::mlstm_fq).value.data() + std::size_t(h) * hd * hd,
                          A.h_fq.data() + h * hd, dq);
    for (int kv = 0; kv < nkv; ++kv)
      feature_map_forward(A.h_k0.data() + kv * hd, dkv, N, hd, P.layer(l, LP::mlstm_fk).value.data() + std::size_t(kv) * hd * hd,
                          A.h_fk.data() + kv * hd, dkv);
    A.h_m.assign(std::size_t(N) * dq, T(0));
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (nthreads > 1 && B * nh > 1)
    for (int task = 0; task < B * nh; ++task) {
      const int b = task / nh, h = task % nh, kv = h / group;
      const std::size_t r0 = std::size_t(b) * S;
      MlstmHead<T> xh;
      xh.S = S; xh.dk = hd; xh.dv = hd;
      xh.q = {A.h_fq.data() + r0 * dq + h * hd, dq};
      xh.k = {A.h_fk.data() + r0 * dkv + kv * hd, dkv};
      xh.v = {A.v.data() + r0 * dkv + kv * hd, dkv};
      xh.ig = {A.h_gates.data() + r0 * ldg + h, ldg};
      xh.fg = {A.h_gates.data() + r0 * ldg + nh + h, ldg};
      mlstm_parallel(xh, A.h_m.data() + r0 * dq + h * hd, dq);
    }
  }
  rope_forward(A.q.data(), N, nh, hd, c.rope_style, C.cs.data(), C.sn.data());
  rope_forward(A.k.data(), N, nkv, hd, c.rope_style, C.cs.data(), C.sn.data());
  if (mixer != lm::MlstmMixer::linear) {
    A.h_sa.assign(std::size_t(N) * dq, T(0));
    A.amx.resize(std::size_t(N) * nh);
    A.ainv.resize(A.amx.size());
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (nthreads > 1 && B * nh > 1)
    for (int task = 0; task < B * nh; ++task) {
      const int b = task / nh, h = task % nh, kv = h / group;
      const std::size_t r0 = std::size_t(b) * S;
      std::vector<T> mx(static_cast<std::size_t>(S)), inv(static_cast<std::size_t>(S));
      window_attention_forward<T>(S, hd, c.mlstm.window, c.mlstm.sinks, {A.q.data() + r0 * dq + h * hd, dq},
                                  {A.k.data() + r0 * dkv + kv * hd, dkv}, {A.v.data() + r0 * dkv + kv * hd, dkv},
                                  A.h_sa.data() + r0 * dq + h * hd, dq, mx.data(), inv.data());
      for (int t = 0; t < S; ++t) {
        A.amx[(r0 + t) * nh + h] = mx[std::size_t(t)];
        A.ainv[(r0 + t) * nh + h] = inv[std::size_t(t)];
      }
    }
  }
  for (int r = 0; r < N; ++r)
    for (int h = 0; h < nh; ++h) {
      const std::size_t at = std::size_t(r) * dq + h * hd;
      const T o = mixer == lm::MlstmMixer::hybrid ? A.h_gates[std::size_t(r) * ldg + 2 * nh + h] : T(0);
      for (int e = 0; e < hd; ++e)
        A.att[at + e] = mixer == lm::MlstmMixer::linear ? A.h_m[at + e]
                        : mixer == lm::MlstmMixer::swa  ? A.h_sa[at + e]
                                                        : o * A.h_m[at + e] + (T(1) - o) * A.h_sa[at + e];
    }
  attn_out_train_forward(P, l, B, S, C, A, x);
}

/// Its backward: dx [N, d], the gradient at x_mid, becomes the gradient at the block's input.
template <class T>
void mlstm_mixer_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                                typename TrainCache<T>::LayerActs& A, T* dx) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, hd = z.hd, nh = z.nh, nkv = z.nkv, dq = z.dq, dkv = z.dkv, group = nh / nkv;
  const int dc = dq + 2 * dkv, ldg = 3 * nh;
  const lm::MlstmMixer mixer = c.mlstm.mixer;
  std::vector<T>&dxn = C.dxn, &datt = C.datt, &dqv = C.dqv, &dk = C.dk, &dv = C.dv;
  dxn.resize(std::size_t(N) * d);
  datt.resize(std::size_t(N) * dq);
  dqv.assign(datt.size(), T(0));
  dk.assign(std::size_t(N) * dkv, T(0));
  dv.assign(dk.size(), T(0));
  mat_backward(P, l, LP::wo, dx, A.att.data(), N, dq, d, datt.data(), false, A, C);
  // the mix: att = o m + (1 - o) sa
  std::vector<T> dm, dsa, dgates;
  if (mixer != lm::MlstmMixer::swa) dm.assign(std::size_t(N) * dq, T(0));
  if (mixer != lm::MlstmMixer::linear) dsa.assign(std::size_t(N) * dq, T(0));
  if (mixer != lm::MlstmMixer::swa) dgates.assign(std::size_t(N) * ldg, T(0));
  for (int r = 0; r < N; ++r)
    for (int h = 0; h < nh; ++h) {
      const std::size_t at = std::size_t(r) * dq + h * hd;
      if (mixer == lm::MlstmMixer::linear) {
        std::copy_n(datt.data() + at, hd, dm.data() + at);
      } else if (mixer == lm::MlstmMixer::swa) {
        std::copy_n(datt.data() + at, hd, dsa.data() + at);
      } else {
        const T o = A.h_gates[std::size_t(r) * ldg + 2 * nh + h];
        T dout = 0;
        for (int e = 0; e < hd; ++e) {
          dout += datt[at + e] * (A.h_m[at + e] - A.h_sa[at + e]);
          dm[at + e] = o * datt[at + e];
          dsa[at + e] = (T(1) - o) * datt[at + e];
        }
        dgates[std::size_t(r) * ldg + 2 * nh + h] = dout * o * (T(1) - o);  // through the sigmoid
      }
    }
  const int nthreads = threads();
  if (mixer != lm::MlstmMixer::linear) {  // windowed attention on the rotated q, k: one task per (sequence, KV head)
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (nthreads > 1 && B * nkv > 1)
    for (int task = 0; task < B * nkv; ++task) {
      const int b = task / nkv, kv = task % nkv;
      const std::size_t r0 = std::size_t(b) * S;
      std::vector<T> mx(static_cast<std::size_t>(S)), inv(static_cast<std::size_t>(S));
      for (int h = kv * group; h < (kv + 1) * group; ++h) {
        for (int t = 0; t < S; ++t) {
          mx[std::size_t(t)] = A.amx[(r0 + t) * nh + h];
          inv[std::size_t(t)] = A.ainv[(r0 + t) * nh + h];
        }
        window_attention_backward<T>(S, hd, c.mlstm.window, c.mlstm.sinks, {A.q.data() + r0 * dq + h * hd, dq},
                                     {A.k.data() + r0 * dkv + kv * hd, dkv}, {A.v.data() + r0 * dkv + kv * hd, dkv},
                                     A.h_sa.data() + r0 * dq + h * hd, dq, mx.data(), inv.data(), dsa.data() + r0 * dq + h * hd,
                                     dqv.data() + r0 * dq + h * hd, dk.data() + r0 * dkv + kv * hd, dv.data() + r0 * dkv + kv * hd);
      }
    }
  }
  rope_backward(dqv.data(), N, nh, hd, c.rope_style, C.cs.data(), C.sn.data());
  rope_backward(dk.data(), N, nkv, hd, c.rope_style, C.cs.data(), C.sn.data());
  if (mixer != lm::MlstmMixer::swa) {
    std::vector<T> dfq(std::size_t(N) * dq, T(0)), dfk(std::size_t(N) * dkv, T(0));
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (nthreads > 1 && B * nkv > 1)
    for (int task = 0; task < B * nkv; ++task) {
      const int b = task / nkv, kv = task % nkv;
      const std::size_t r0 = std::size_t(b) * S;
      for (int h = kv * group; h < (kv + 1) * group; ++h) {
        MlstmHead<T> xh;
        xh.S = S; xh.dk = hd; xh.dv = hd;
        xh.q = {A.h_fq.data() + r0 * dq + h * hd, dq};
        xh.k = {A.h_fk.data() + r0 * dkv + kv * hd, dkv};
        xh.v = {A.v.data() + r0 * dkv + kv * hd, dkv};
        xh.ig = {A.h_gates.data() + r0 * ldg + h, ldg};
        xh.fg = {A.h_gates.data() + r0 * ldg + nh + h, ldg};
        mlstm_parallel_backward(xh, dm.data() + r0 * dq + h * hd, dq, dfq.data() + r0 * dq + h * hd, dfk.data() + r0 * dkv + kv * hd,
                                dv.data() + r0 * dkv + kv * hd, dgates.data() + r0 * ldg + h, dgates.data() + r0 * ldg + nh + h);
      }
    }
    Param<T>&Fq = P.layer(l, LP::mlstm_fq), &Fk = P.layer(l, LP::mlstm_fk);
    for (int h = 0; h < nh; ++h)
      feature_map_backward(A.h_q0.data() + h * hd, dq, N, hd, Fq.value.data() + std::size_t(h) * hd * hd, A.h_fq.data() + h * hd, dq,
                           dfq.data() + h * hd, dqv.data() + h * hd, Fq.grad.empty() ? nullptr : Fq.grad.data() + std::size_t(h) * hd * hd);
    for (int kv = 0; kv < nkv; ++kv)
      feature_map_backward(A.h_k0.data() + kv * hd, dkv, N, hd, Fk.value.data() + std::size_t(kv) * hd * hd, A.h_fk.data() + kv * hd,
                           dkv, dfk.data() + kv * hd, dk.data() + kv * hd,
                           Fk.grad.empty() ? nullptr : Fk.grad.data() + std::size_t(kv) * hd * hd);
  }
  std::vector<T> dcat;
  if (mixer == lm::MlstmMixer::hybrid) {  // the output gate's input [q; k; v] (before RoPE)
    std::vector<T> dg(std::size_t(N) * nh);
    for (int r = 0; r < N; ++r) std::copy_n(dgates.data() + std::size_t(r) * ldg + 2 * nh, nh, dg.data() + std::size_t(r) * nh);
    Param<T>&Wo = P.layer(l, LP::mlstm_ow), &bo = P.layer(l, LP::mlstm_ob);
    dcat.resize(std::size_t(N) * dc);
    linear_backward(dg.data(), A.h_cat.data(), N, dc, Wo.value.data(), nh, dcat.data(), Wo.grad.empty() ? nullptr : Wo.grad.data());
    if (!bo.grad.empty())
      for (int r = 0; r < N; ++r)
        for (int h = 0; h < nh; ++h) bo.grad[std::size_t(h)] += dg[std::size_t(r) * nh + h];
    for (int r = 0; r < N; ++r) {
      const T* cr = dcat.data() + std::size_t(r) * dc;
      for (int i = 0; i < dq; ++i) dqv[std::size_t(r) * dq + i] += cr[i];
      for (int i = 0; i < dkv; ++i) {
        dk[std::size_t(r) * dkv + i] += cr[dq + i];
        dv[std::size_t(r) * dkv + i] += cr[dq + dkv + i];
      }
    }
  }
  qkv_train_backward(P, l, B, S, C, A, dx, [&](std::vector<T>& dxn_) {
    if (mixer != lm::MlstmMixer::hybrid) return;
    std::vector<T> dg(std::size_t(N) * nh);  // the input and forget gates read n1(x)
    const typename LP::LayerTensor W[2] = {LP::mlstm_iw, LP::mlstm_fw};
    const typename LP::LayerTensor bias[2] = {LP::mlstm_ib, LP::mlstm_fb};
    for (int j = 0; j < 2; ++j) {
      for (int r = 0; r < N; ++r) std::copy_n(dgates.data() + std::size_t(r) * ldg + j * nh, nh, dg.data() + std::size_t(r) * nh);
      Param<T>&Wg = P.layer(l, W[j]), &bg = P.layer(l, bias[j]);
      linear_backward(dg.data(), A.xn1.data(), N, d, Wg.value.data(), nh, dxn_.data(), Wg.grad.empty() ? nullptr : Wg.grad.data(), true);
      if (!bg.grad.empty())
        for (int r = 0; r < N; ++r)
          for (int h = 0; h < nh; ++h) bg.grad[std::size_t(h)] += dg[std::size_t(r) * nh + h];
    }
  });
}

/// The SwiGLU MLP sublayer's training forward (llama, mlstm-hybrid and sandwich blocks): x [N, d]
/// += Wdown (silu(Wgate n(x)) ⊙ Wup n(x)), n = ffn_norm; A.x_mid must hold x (the norm's input).
template <class T>
void mlp_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A, T* x) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, ff = z.ff;
  const std::size_t nx = std::size_t(N) * d;
  std::vector<T>& tmp = C.tmp;
  tmp.resize(nx);
  A.xn2.resize(nx); A.rstd2.resize(N);
  A.gate.resize(std::size_t(N) * ff); A.up.resize(A.gate.size()); A.h.resize(A.gate.size());
  rmsnorm_forward(x, N, d, P.layer(l, LP::ffn_norm).value.data(), c.rms_eps, A.xn2.data(), A.rstd2.data());
  mat_forward(P, l, LP::w_gate, A.xn2.data(), N, d, ff, A.gate.data(), A, C);
  mat_forward(P, l, LP::w_up, A.xn2.data(), N, d, ff, A.up.data(), A, C);
  swiglu_forward(A.gate.data(), A.up.data(), std::int64_t(N) * ff, A.h.data());
  mat_forward(P, l, LP::w_down, A.h.data(), N, ff, d, tmp.data(), A, C);
  for (std::size_t i = 0; i < nx; ++i) x[i] += tmp[i];
}

/// The llama block's training forward: x [N, d] += attention, then += MLP, activations kept in A.
template <class T>
void llama_block_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                               typename TrainCache<T>::LayerActs& A, T* x) {
  if (P.config.block_type(l) == lm::BlockType::mlstm_hybrid) mlstm_mixer_train_forward(P, l, B, S, C, A, x);
  else attention_train_forward(P, l, B, S, C, A, x);
  mlp_train_forward(P, l, B, S, C, A, x);
}

/// A sandwich block's post-norm in place: A's y = x, then x = n(y) (rstd kept).
template <class T>
void post_norm_forward(const T* w, double eps, int N, int d, std::vector<T>& y, std::vector<T>& rstd, T* x) {
  y.assign(x, x + std::size_t(N) * d);
  rstd.resize(std::size_t(N));
  rmsnorm_forward(y.data(), N, d, w, eps, x, rstd.data());
}

/// Its backward: dx [N, d], the gradient at n(y), becomes the gradient at y; the weight's gradient is accumulated.
template <class T>
void post_norm_backward(Param<T>& w, double eps, int N, int d, const std::vector<T>& y, const std::vector<T>& rstd, T* dx,
                        TrainCache<T>& C) {
  std::vector<T>& g = C.tmp;
  g.assign(std::size_t(N) * d, T(0));
  rmsnorm_backward(dx, y.data(), N, d, w.value.data(), rstd.data(), g.data(), norm_grad(w, C));
  std::copy(g.begin(), g.end(), dx);
}

/// The recdepth-* (sandwich) block's training forward (lm::sandwich_block_forward's arithmetic):
/// x = n2(x + attention); x = n4(x + MLP(n3 x)), q / k biases before RoPE; activations kept in A.
template <class T>
void sandwich_block_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                                  typename TrainCache<T>::LayerActs& A, T* x) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  attention_train_forward(P, l, B, S, C, A, x);
  post_norm_forward(P.layer(l, LP::post_attn_norm).value.data(), c.rms_eps, z.N, z.d, A.sw_y1, A.sw_r1, x);
  A.x_mid.assign(x, x + std::size_t(z.N) * z.d);  // n3's input
  mlp_train_forward(P, l, B, S, C, A, x);
  post_norm_forward(P.layer(l, LP::post_ffn_norm).value.data(), c.rms_eps, z.N, z.d, A.sw_y2, A.sw_r2, x);
}

/// The attention input's backward: from C.dqv, C.dk, C.dv (the gradients at q, k, v before RoPE)
/// to dx [N, d], the gradient at the block's input (written), through Wq, Wk, Wv and n1; `extra`
/// may add to the gradient at n1(x) (C.dxn) before the norm's backward.
template <class T, class Extra>
void qkv_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A, T* dx,
                        Extra&& extra) {
  using LP = LlamaParams<T>;
  const Dims z(P.config, B, S);
  const int N = z.N, d = z.d;
  std::vector<T>& dxn = C.dxn;
  dxn.resize(std::size_t(N) * d);
  for (auto [t, g, w] : {std::tuple{LP::q_bias, C.dqv.data(), z.dq}, std::tuple{LP::k_bias, C.dk.data(), z.dkv}}) {
    if (!P.has(l, t) || P.layer(l, t).grad.empty()) continue;
    T* gb = P.layer(l, t).grad.data();
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < w; ++i) gb[i] += g[std::size_t(n) * w + i];
  }
  mat_backward(P, l, LP::wq, C.dqv.data(), A.xn1.data(), N, d, z.dq, dxn.data(), false, A, C);
  mat_backward(P, l, LP::wk, C.dk.data(), A.xn1.data(), N, d, z.dkv, dxn.data(), true, A, C);
  mat_backward(P, l, LP::wv, C.dv.data(), A.xn1.data(), N, d, z.dkv, dxn.data(), true, A, C);
  extra(dxn);
  rmsnorm_backward(dxn.data(), A.x_in.data(), N, d, P.layer(l, LP::attn_norm).value.data(), A.rstd1.data(), dx,
                   norm_grad(P.layer(l, LP::attn_norm), C));
}

/// The attention sublayer's backward: dx [N, d], the gradient at x_mid, becomes the gradient at
/// the block's input; the attention's parameter gradients are accumulated.
template <class T>
void attention_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                              T* dx) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, hd = z.hd, nh = z.nh, nkv = z.nkv, dq = z.dq, dkv = z.dkv;
  std::vector<T>&dxn = C.dxn, &datt = C.datt, &dqv = C.dqv, &dk = C.dk, &dv = C.dv;
  dxn.resize(std::size_t(N) * d);
  datt.resize(std::size_t(N) * dq);
  dqv.resize(datt.size());
  dk.resize(std::size_t(N) * dkv);
  dv.resize(dk.size());
  // x_mid = x_in + Wo·attn(rope(Wq·xn1), rope(Wk·xn1), Wv·xn1),  xn1 = norm(x_in)
  mat_backward(P, l, LP::wo, dx, A.att.data(), N, dq, d, datt.data(), false, A, C);
  attention_backward(datt.data(), A.q.data(), A.k.data(), A.v.data(), A.att.data(), A.amx.data(), A.ainv.data(),
                     z.attn, dqv.data(), dk.data(), dv.data());
  rope_backward(dqv.data(), N, nh, hd, c.rope_style, C.cs.data(), C.sn.data());
  rope_backward(dk.data(), N, nkv, hd, c.rope_style, C.cs.data(), C.sn.data());
  qkv_train_backward(P, l, B, S, C, A, dx, [](std::vector<T>&) {});
}

/// The MLP sublayer's backward: dx [N, d], the gradient at x_mid + MLP, becomes the gradient at
/// x_mid (the residual passes; the norm's part is added); the MLP's parameter gradients are accumulated.
template <class T>
void mlp_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A, T* dx) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  const int N = z.N, d = z.d, ff = z.ff;
  std::vector<T>&dxn = C.dxn, &dh = C.dh, &dg = C.dg, &du = C.du;
  dxn.resize(std::size_t(N) * d);
  dh.resize(std::size_t(N) * ff);
  dg.resize(dh.size());
  du.resize(dh.size());
  // FFN: x_out = x_mid + Wdown·h,  h = swiglu(Wgate·xn2, Wup·xn2),  xn2 = norm(x_mid)
  mat_backward(P, l, LP::w_down, dx, A.h.data(), N, ff, d, dh.data(), false, A, C);
  swiglu_backward(dh.data(), A.gate.data(), A.up.data(), std::int64_t(N) * ff, dg.data(), du.data());
  mat_backward(P, l, LP::w_gate, dg.data(), A.xn2.data(), N, d, ff, dxn.data(), false, A, C);
  mat_backward(P, l, LP::w_up, du.data(), A.xn2.data(), N, d, ff, dxn.data(), true, A, C);
  rmsnorm_backward(dxn.data(), A.x_mid.data(), N, d, P.layer(l, LP::ffn_norm).value.data(), A.rstd2.data(), dx,
                   norm_grad(P.layer(l, LP::ffn_norm), C));
}

/// The llama block's backward: dx [N, d] (the gradient at the block's output) becomes the
/// gradient at its input; the block's parameter gradients are accumulated.
template <class T>
void llama_block_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                                typename TrainCache<T>::LayerActs& A, T* dx) {
  mlp_train_backward(P, l, B, S, C, A, dx);
  if (P.config.block_type(l) == lm::BlockType::mlstm_hybrid) mlstm_mixer_train_backward(P, l, B, S, C, A, dx);
  else attention_train_backward(P, l, B, S, C, A, dx);
}

/// The sandwich block's backward: dx [N, d] (the gradient at its output) becomes the gradient at
/// its input; the block's parameter gradients (norms, biases included) are accumulated.
template <class T>
void sandwich_block_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C,
                                   typename TrainCache<T>::LayerActs& A, T* dx) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const Dims z(c, B, S);
  post_norm_backward(P.layer(l, LP::post_ffn_norm), c.rms_eps, z.N, z.d, A.sw_y2, A.sw_r2, dx, C);
  mlp_train_backward(P, l, B, S, C, A, dx);
  post_norm_backward(P.layer(l, LP::post_attn_norm), c.rms_eps, z.N, z.d, A.sw_y1, A.sw_r1, dx, C);
  attention_train_backward(P, l, B, S, C, A, dx);
}

/// An expert's (or the shared expert's) hidden state h [n, m] from its pre-activations: swiglu
/// h = silu(gate) up, or relu2 h = relu(up)^2 (gate unused); lm::moe_ffn's arithmetic.
template <class T>
void expert_act_forward(lm::ExpertAct act, const T* gate, const T* up, std::int64_t n, T* h) {
  if (act == lm::ExpertAct::swiglu) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T g = gate[i];
      h[i] = g / (T(1) + std::exp(-g)) * up[i];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) h[i] = up[i] > T(0) ? up[i] * up[i] : T(0);
  }
}

/// Its backward: dgate, dup from dh.
template <class T>
void expert_act_backward(lm::ExpertAct act, const T* dh, const T* gate, const T* up, std::int64_t n, T* dgate, T* dup) {
  if (act == lm::ExpertAct::swiglu) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T g = gate[i], sg = T(1) / (T(1) + std::exp(-g));
      dup[i] = dh[i] * g * sg;
      dgate[i] = dh[i] * up[i] * sg * (T(1) + g * (T(1) - sg));
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) dup[i] = up[i] > T(0) ? dh[i] * T(2) * up[i] : T(0);
  }
}

/// One expert MLP's forward on n rows u [n, w]: pre-activations gate/up [n, m] (gate only for
/// swiglu), h [n, m], y [n, w]; G, U at row offset e m, D at row offset e w of the stacked tensors.
template <class T>
void expert_forward(lm::ExpertAct act, const T* G, const T* U, const T* D, const T* u, int n, int w, int m, T* gate, T* up, T* h,
                    T* y) {
  linear_forward(u, n, w, U, m, up);
  if (act == lm::ExpertAct::swiglu) linear_forward(u, n, w, G, m, gate);
  expert_act_forward(act, gate, up, std::int64_t(n) * m, h);
  linear_forward(h, n, m, D, w, y);
}

/// Its backward: du [n, w] (= or += by `accumulate`) from dy [n, w]; dG, dU, dD accumulated.
template <class T>
void expert_backward(lm::ExpertAct act, const T* G, const T* U, const T* D, T* dG, T* dU, T* dD, const T* u, const T* gate,
                     const T* up, const T* h, const T* dy, int n, int w, int m, T* du, bool accumulate, std::vector<T>& work) {
  work.resize(std::size_t(3) * n * m);
  T *dh = work.data(), *dgate = dh + std::size_t(n) * m, *dup = dgate + std::size_t(n) * m;
  linear_backward(dy, h, n, m, D, w, dh, dD, false);
  expert_act_backward(act, dh, gate, up, std::int64_t(n) * m, dgate, dup);
  linear_backward(dup, u, n, w, U, m, du, dU, accumulate);
  if (act == lm::ExpertAct::swiglu) linear_backward(dgate, u, n, w, G, m, du, dG, true);
}

/// A moe / latent-moe block's training forward: x [N, d] += attention, then += the routed FFN of
/// lm::moe_ffn (the same arithmetic in float with the reference kernels: bitwise the engine),
/// activations kept in A.
template <class T>
void moe_block_train_forward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                             T* x) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const lm::MoeConfig& e = c.moe;
  const bool latent = c.block_type(l) == lm::BlockType::latent_moe;
  const int N = B * S, d = c.d_model, E = e.n_experts, K = e.top_k, m = e.d_expert, w = latent ? e.d_latent : d;
  const std::size_t nx = std::size_t(N) * d;
  attention_train_forward(P, l, B, S, C, A, x);
  A.xn2.resize(nx);
  A.rstd2.resize(N);
  rmsnorm_forward(x, N, d, P.layer(l, LP::ffn_norm).value.data(), c.rms_eps, A.xn2.data(), A.rstd2.data());
  // router
  A.m_logits.resize(std::size_t(N) * E);
  A.m_scores.resize(A.m_logits.size());
  A.m_expert.resize(std::size_t(N) * K);
  A.m_weight.resize(A.m_expert.size());
  A.m_selsum.resize(N);
  linear_forward(A.xn2.data(), N, d, P.layer(l, LP::router).value.data(), E, A.m_logits.data());
  const T* bias = P.has(l, LP::router_bias) ? P.layer(l, LP::router_bias).value.data() : nullptr;
  lm::route_rows<T>(e, A.m_logits.data(), bias, N, A.m_expert.data(), A.m_weight.data(), A.m_scores.data(), A.m_selsum.data());
  const T* u = A.xn2.data();
  if (latent) {
    A.m_z.resize(std::size_t(N) * w);
    linear_forward(A.xn2.data(), N, d, P.layer(l, LP::latent_down).value.data(), w, A.m_z.data());
    u = A.m_z.data();
  }
  // the routed entries i = r K + k, bucketed by expert (i ascending within an expert)
  const int NK = N * K;
  lm::bucket_by_expert(A.m_expert.data(), NK, E, A.m_offset, A.m_rows);
  // router statistics and the load-balancing loss L_aux = E sum_e f_e P_e (P_e: the mean over rows
  // of the normalised score, softmax p or sigmoid s / sum_j s)
  if (P.moe_load.size() != std::size_t(c.n_layers)) P.moe_load.assign(std::size_t(c.n_layers), {});
  if (P.moe_dropped.size() != std::size_t(c.n_layers)) P.moe_dropped.assign(std::size_t(c.n_layers), 0.0);
  P.moe_load[std::size_t(l)].resize(std::size_t(E), 0.0);
  A.m_frac.assign(std::size_t(E), 0.0);
  for (int ex = 0; ex < E; ++ex) {
    const int n = A.m_offset[std::size_t(ex) + 1] - A.m_offset[std::size_t(ex)];
    P.moe_load[std::size_t(l)][std::size_t(ex)] += n;
    A.m_frac[std::size_t(ex)] = double(n) / double(NK);
  }
  if (P.moe_capacity > 0) {  // token dropping: each expert keeps the first `cap` entries of its bucket
    // in double and clamped (a factor of E or more is no limit; 1e9 must not overflow an int);
    // the 1e-9 keeps a product that lands a rounding above a whole number on it
    const double want = std::ceil(P.moe_capacity * double(NK) / double(E) - 1e-9);
    const int cap = want >= double(NK) ? NK : static_cast<int>(want);
    int kept = 0;
    for (int ex = 0; ex < E; ++ex) {
      const int first = A.m_offset[std::size_t(ex)], n = A.m_offset[std::size_t(ex) + 1] - first, keep = std::min(n, cap);
      for (int j = 0; j < keep; ++j) A.m_rows[std::size_t(kept + j)] = A.m_rows[std::size_t(first + j)];
      A.m_offset[std::size_t(ex)] = kept;
      kept += keep;
    }
    A.m_offset[std::size_t(E)] = kept;
    P.moe_dropped[std::size_t(l)] += NK - kept;
    A.m_rows.resize(std::size_t(kept));
  }
  const int n_kept = static_cast<int>(A.m_rows.size());  // the entries the experts compute (NK without a capacity)
  {
    double aux = 0;
    for (int r = 0; r < N; ++r) {
      const T* sc = A.m_scores.data() + std::size_t(r) * E;
      double norm = 1.0;
      if (e.router == lm::RouterKind::sigmoid) {
        norm = 0;
        for (int j = 0; j < E; ++j) norm += double(sc[j]);
      }
      for (int j = 0; j < E; ++j) aux += A.m_frac[std::size_t(j)] * double(sc[j]) / norm;
    }
    aux *= double(E) / double(N);
    C.aux_loss += aux;
    C.aux_objective += P.moe_aux * double(N) * aux;
  }
  A.m_in.resize(std::size_t(NK) * w);
  A.m_up.resize(std::size_t(NK) * m);
  A.m_gate.resize(e.act == lm::ExpertAct::swiglu ? A.m_up.size() : 0);
  A.m_h.resize(A.m_up.size());
  A.m_y.assign(std::size_t(NK) * w, T(0));  // a dropped entry's output stays 0
  std::vector<T>& yb = C.tmp;  // an expert's outputs in bucket order
  yb.resize(std::size_t(NK) * w);
  for (int j = 0; j < n_kept; ++j) std::copy_n(u + std::size_t(A.m_rows[std::size_t(j)] / K) * w, w, A.m_in.data() + std::size_t(j) * w);
  const T *G = e.act == lm::ExpertAct::swiglu ? P.layer(l, LP::gate_exps).value.data() : nullptr, *U = P.layer(l, LP::up_exps).value.data(),
          *D = P.layer(l, LP::down_exps).value.data();
  for (int ex = 0; ex < E; ++ex) {
    const int first = A.m_offset[std::size_t(ex)], n = A.m_offset[std::size_t(ex) + 1] - first;
    if (n == 0) continue;
    expert_forward(e.act, G ? G + std::size_t(ex) * m * w : nullptr, U + std::size_t(ex) * m * w, D + std::size_t(ex) * w * m,
                   A.m_in.data() + std::size_t(first) * w, n, w, m, G ? A.m_gate.data() + std::size_t(first) * m : nullptr,
                   A.m_up.data() + std::size_t(first) * m, A.m_h.data() + std::size_t(first) * m, yb.data() + std::size_t(first) * w);
  }
  for (int j = 0; j < n_kept; ++j) std::copy_n(yb.data() + std::size_t(j) * w, w, A.m_y.data() + std::size_t(A.m_rows[std::size_t(j)]) * w);
  // the gate-weighted sum, each row in its own selection order
  A.m_acc.assign(std::size_t(N) * w, T(0));
  for (int r = 0; r < N; ++r) {
    T* a = A.m_acc.data() + std::size_t(r) * w;
    for (int k = 0; k < K; ++k) {
      const T g = A.m_weight[std::size_t(r) * K + k];
      const T* y = A.m_y.data() + (std::size_t(r) * K + k) * w;
      for (int i = 0; i < w; ++i) a[i] += g * y[i];
    }
  }
  std::vector<T> out(nx);  // the FFN's output [N, d]
  if (latent) linear_forward(A.m_acc.data(), N, w, P.layer(l, LP::latent_up).value.data(), d, out.data());
  else std::copy(A.m_acc.begin(), A.m_acc.end(), out.begin());
  if (e.d_shared > 0) {
    const int ms = e.d_shared;
    A.s_up.resize(std::size_t(N) * ms);
    A.s_gate.resize(e.act == lm::ExpertAct::swiglu ? A.s_up.size() : 0);
    A.s_h.resize(A.s_up.size());
    std::vector<T> sh(nx);
    expert_forward(e.act, e.act == lm::ExpertAct::swiglu ? P.layer(l, LP::gate_shexp).value.data() : nullptr,
                   P.layer(l, LP::up_shexp).value.data(), P.layer(l, LP::down_shexp).value.data(), A.xn2.data(), N, d, ms,
                   A.s_gate.empty() ? nullptr : A.s_gate.data(), A.s_up.data(), A.s_h.data(), sh.data());
    for (std::size_t i = 0; i < nx; ++i) out[i] += sh[i];
  }
  for (std::size_t i = 0; i < nx; ++i) x[i] += out[i];
}

/// Its backward: dx [N, d] becomes the gradient at the block's input; gradients accumulated for
/// the router (through the selected weights: softmax or sigmoid scores, the norm_topk division),
/// the experts, the shared expert, the latent projections, the norms and the attention.  The
/// selection itself (and the sigmoid router's bias) has no gradient.
template <class T>
void moe_block_train_backward(LlamaParams<T>& P, int l, int B, int S, TrainCache<T>& C, typename TrainCache<T>::LayerActs& A,
                              T* dx) {
  using LP = LlamaParams<T>;
  const lm::ModelConfig& c = P.config;
  const lm::MoeConfig& e = c.moe;
  const bool latent = c.block_type(l) == lm::BlockType::latent_moe, swiglu = e.act == lm::ExpertAct::swiglu;
  const int N = B * S, d = c.d_model, E = e.n_experts, K = e.top_k, m = e.d_expert, w = latent ? e.d_latent : d, NK = N * K;
  const std::size_t nx = std::size_t(N) * d;
  std::vector<T>& dxn = C.dxn;
  dxn.assign(nx, T(0));
  std::vector<T> work;
  if (e.d_shared > 0)  // the shared expert on xn2
    expert_backward(e.act, swiglu ? P.layer(l, LP::gate_shexp).value.data() : nullptr, P.layer(l, LP::up_shexp).value.data(),
                    P.layer(l, LP::down_shexp).value.data(), swiglu ? P.layer(l, LP::gate_shexp).grad.data() : nullptr,
                    P.layer(l, LP::up_shexp).grad.data(), P.layer(l, LP::down_shexp).grad.data(), A.xn2.data(),
                    A.s_gate.empty() ? nullptr : A.s_gate.data(), A.s_up.data(), A.s_h.data(), dx, N, d, e.d_shared, dxn.data(),
                    true, work);
  // the weighted sum: dacc [N, w]
  std::vector<T> dacc(std::size_t(N) * w);
  if (latent)
    linear_backward(dx, A.m_acc.data(), N, w, P.layer(l, LP::latent_up).value.data(), d, dacc.data(),
                    P.layer(l, LP::latent_up).grad.data(), false);
  else
    std::copy(dx, dx + nx, dacc.begin());
  // per entry: dy = g dacc (bucket order) and dg = dacc . y (0 for an entry the capacity dropped)
  const int n_kept = static_cast<int>(A.m_rows.size());
  std::vector<T> dyb(std::size_t(n_kept) * w), dweight(static_cast<std::size_t>(NK), T(0));
  for (int j = 0; j < n_kept; ++j) {
    const int i = A.m_rows[std::size_t(j)], r = i / K;
    const T g = A.m_weight[std::size_t(i)];
    const T* da = dacc.data() + std::size_t(r) * w;
    const T* y = A.m_y.data() + std::size_t(i) * w;
    T* dy = dyb.data() + std::size_t(j) * w;
    T dot = T(0);
    for (int t = 0; t < w; ++t) {
      dy[t] = g * da[t];
      dot += da[t] * y[t];
    }
    dweight[std::size_t(i)] = dot;
  }
  // the experts: du in bucket order, then summed into each row's du [N, w]
  std::vector<T> dub(std::size_t(n_kept) * w);
  const T *G = swiglu ? P.layer(l, LP::gate_exps).value.data() : nullptr, *U = P.layer(l, LP::up_exps).value.data(),
          *D = P.layer(l, LP::down_exps).value.data();
  T *dG = swiglu ? P.layer(l, LP::gate_exps).grad.data() : nullptr, *dU = P.layer(l, LP::up_exps).grad.data(),
    *dD = P.layer(l, LP::down_exps).grad.data();
  for (int ex = 0; ex < E; ++ex) {
    const int first = A.m_offset[std::size_t(ex)], n = A.m_offset[std::size_t(ex) + 1] - first;
    if (n == 0) continue;
    const std::size_t gm = std::size_t(ex) * m * w;
    expert_backward(e.act, G ? G + gm : nullptr, U + gm, D + gm, dG ? dG + gm : nullptr, dU + gm, dD + gm,
                    A.m_in.data() + std::size_t(first) * w, swiglu ? A.m_gate.data() + std::size_t(first) * m : nullptr,
                    A.m_up.data() + std::size_t(first) * m, A.m_h.data() + std::size_t(first) * m, dyb.data() + std::size_t(first) * w,
                    n, w, m, dub.data() + std::size_t(first) * w, false, work);
  }
  std::vector<T> du(std::size_t(N) * w, T(0));
  for (int j = 0; j < n_kept; ++j) {
    T* dst = du.data() + std::size_t(A.m_rows[std::size_t(j)] / K) * w;
    const T* src = dub.data() + std::size_t(j) * w;
    for (int t = 0; t < w; ++t) dst[t] += src[t];
  }
  if (latent)
    linear_backward(du.data(), A.xn2.data(), N, d, P.layer(l, LP::latent_down).value.data(), w, dxn.data(),
                    P.layer(l, LP::latent_down).grad.data(), true);
  else
    for (std::size_t i = 0; i < nx; ++i) dxn[i] += du[i];
  // the router: weights -> selected scores -> logits
  std::vector<T> dlogits(std::size_t(N) * E, T(0)), ds(static_cast<std::size_t>(E));
  const T scale = static_cast<T>(e.routed_scaling);
  for (int r = 0; r < N; ++r) {
    std::fill(ds.begin(), ds.end(), T(0));
    const T sum = A.m_selsum[std::size_t(r)];
    T wdw = T(0);  // sum_k dw_k w_k
    for (int k = 0; k < K; ++k) wdw += dweight[std::size_t(r) * K + k] * A.m_weight[std::size_t(r) * K + k];
    for (int k = 0; k < K; ++k) {
      const T dw = dweight[std::size_t(r) * K + k];
      ds[std::size_t(A.m_expert[std::size_t(r) * K + k])] = e.norm_topk ? (scale * dw - wdw) / sum : scale * dw;
    }
    const T* s = A.m_scores.data() + std::size_t(r) * E;
    T* dl = dlogits.data() + std::size_t(r) * E;
    if (C.aux_grad != 0) {  // d(moe_aux N L_aux) / d(normalised score p~_j) = moe_aux E f_j, times grad_scale
      const double g0 = C.aux_grad * double(E);
      if (e.router == lm::RouterKind::softmax) {
        for (int j = 0; j < E; ++j) ds[std::size_t(j)] += static_cast<T>(g0 * A.m_frac[std::size_t(j)]);
      } else {  // p~ = s / sum s: ds_j += (g_j - sum_e g_e p~_e) / sum s
        double ssum = 0, gp = 0;
        for (int j = 0; j < E; ++j) ssum += double(s[j]);
        for (int j = 0; j < E; ++j) gp += g0 * A.m_frac[std::size_t(j)] * double(s[j]) / ssum;
        for (int j = 0; j < E; ++j) ds[std::size_t(j)] += static_cast<T>((g0 * A.m_frac[std::size_t(j)] - gp) / ssum);
      }
    }
    if (e.router == lm::RouterKind::softmax) {
      T sds = T(0);
      for (int j = 0; j < E; ++j) sds += s[j] * ds[std::size_t(j)];
      for (int j = 0; j < E; ++j) dl[j] = s[j] * (ds[std::size_t(j)] - sds);
    } else {
      for (int j = 0; j < E; ++j) dl[j] = ds[std::size_t(j)] * s[j] * (T(1) - s[j]);
    }
  }
  linear_backward(dlogits.data(), A.xn2.data(), N, d, P.layer(l, LP::router).value.data(), E, dxn.data(),
                  P.layer(l, LP::router).grad.data(), true);
  rmsnorm_backward(dxn.data(), A.x_mid.data(), N, d, P.layer(l, LP::ffn_norm).value.data(), A.rstd2.data(), dx,
                   norm_grad(P.layer(l, LP::ffn_norm), C));
  attention_train_backward(P, l, B, S, C, A, dx);
}

}  // namespace

template <class T>
void block_train_forward(LlamaParams<T>& P, int block, int B, int S, TrainCache<T>& C,
                         typename TrainCache<T>::LayerActs& acts, T* x) {
  switch (P.config.block_type(block)) {
    case lm::BlockType::llama:
    case lm::BlockType::mlstm_hybrid: return llama_block_train_forward(P, block, B, S, C, acts, x);
    case lm::BlockType::recdepth_prelude:
    case lm::BlockType::recdepth_core:
    case lm::BlockType::recdepth_coda: return sandwich_block_train_forward(P, block, B, S, C, acts, x);
    case lm::BlockType::moe:
    case lm::BlockType::latent_moe: return moe_block_train_forward(P, block, B, S, C, acts, x);
  }
}

template <class T>
void block_train_backward(LlamaParams<T>& P, int block, int B, int S, TrainCache<T>& C,
                          typename TrainCache<T>::LayerActs& acts, T* dx) {
  switch (P.config.block_type(block)) {
    case lm::BlockType::llama:
    case lm::BlockType::mlstm_hybrid: return llama_block_train_backward(P, block, B, S, C, acts, dx);
    case lm::BlockType::recdepth_prelude:
    case lm::BlockType::recdepth_core:
    case lm::BlockType::recdepth_coda: return sandwich_block_train_backward(P, block, B, S, C, acts, dx);
    case lm::BlockType::moe:
    case lm::BlockType::latent_moe: return moe_block_train_backward(P, block, B, S, C, acts, dx);
  }
}

namespace {

/// The final norm and head on x [N, d]: C.xnf = n_f(x), C.rstdf, and the logits C.logits [N, vocab].
template <class T>
void head_forward(LlamaParams<T>& P, TrainCache<T>& C, const T* x, int N) {
  const lm::ModelConfig& c = P.config;
  const int d = c.d_model, V = c.vocab_size;
  C.xnf.resize(std::size_t(N) * d);
  C.rstdf.resize(std::size_t(N));
  C.logits.resize(std::size_t(N) * V);
  rmsnorm_forward(x, N, d, P.out_norm().value.data(), c.rms_eps, C.xnf.data(), C.rstdf.data());
  linear_forward(C.xnf.data(), N, d, P.head().value.data(), V, C.logits.data());
}

/// Its backward from C.dlogits for the head's input x [N, d] (the last head_forward's): dx [N, d]
/// += the gradient at x; the head's and the norm's gradients are accumulated.
template <class T>
void head_backward(LlamaParams<T>& P, TrainCache<T>& C, const T* x, int N, T* dx) {
  const lm::ModelConfig& c = P.config;
  const int d = c.d_model, V = c.vocab_size;
  C.dxn.resize(std::size_t(N) * d);
  linear_backward(C.dlogits.data(), C.xnf.data(), N, d, P.head().value.data(), V, C.dxn.data(),
                  P.head().grad.empty() ? nullptr : P.head().grad.data());
  rmsnorm_backward(C.dxn.data(), x, N, d, P.out_norm().value.data(), C.rstdf.data(), dx, norm_grad(P.out_norm(), C));
}

/// llama_loss for a recurrent-depth model (Huginn's forward with truncated backpropagation,
/// raven_modeling_minimal.py iterate_forward): e = prelude(embed_scale E[tokens]); s_0 drawn per
/// row from (C.rd_seed, row); n iterations s = core(A [s; e]) without gradient, then k with;
/// coda on n_f(s); n_f and the head; cross-entropy.  The backward runs through the coda, n_f, the
/// k gradient iterations (the adapter's gradient reaching both s and e) and the prelude; the
/// state entering the first gradient iteration gets none (truncation).
template <class T>
double recdepth_loss(LlamaParams<T>& P, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int S,
                     double grad_scale, TrainCache<T>& C, std::vector<T>* logits_out) {
  const lm::ModelConfig& c = P.config;
  const int N = B * S, d = c.d_model, hd = c.head_dim(), V = c.vocab_size;
  const int Pn = c.recdepth_prelude(), Cn = c.recdepth_core(), Dn = c.recdepth_coda();
  const bool grad = grad_scale > 0;
  const int rbar = c.recdepth.mean_recurrence, kbar = c.recdepth.backprop_depth;
  int n_free = C.rd_no_grad, n_grad = C.rd_grad;
  if (n_free < 0 || n_grad < 0) {
    n_free = grad ? std::max(rbar - kbar, 0) : rbar;
    n_grad = grad ? std::min(kbar, rbar) : 0;
    if (grad && n_grad == 0) n_grad = 1, n_free = std::max(rbar - 1, 0);
  }
  if (n_free + n_grad < 1) throw InputError("a recurrent-depth forward needs at least one core iteration");
  if (grad && n_grad < 1) throw InputError("training a recurrent-depth model needs at least one iteration with gradient");
  for (auto& pl : P.poet) pl.prepare(P.store, C.poet);
  C.aux_objective = C.aux_loss = 0;
  C.aux_grad = 0;
  C.pos.resize(N);
  for (int n = 0; n < N; ++n) C.pos[n] = n % S;
  rope_tables(C.pos.data(), N, hd, c.rope_theta, C.cs, C.sn);
  const std::size_t nx = std::size_t(N) * d;
  std::vector<T>& x = C.x;
  x.resize(nx);
  embedding_forward(P.embd().value.data(), d, tokens.data(), N, x.data());
  const T scale = T(c.recdepth.embed_scale);
  if (scale != T(1))
    for (T& v : x) v *= scale;
  const int n_steps = Pn + Cn * n_grad + Dn;  // steps with kept activations
  C.layers.resize(std::size_t(n_steps));
  C.rd_scratch.resize(std::size_t(Cn));
  for (int l = 0; l < Pn; ++l) block_train_forward(P, l, B, S, C, C.layers[std::size_t(l)], x.data());
  C.rd_e = x;
  std::vector<T>& s = C.rd_s;
  s.resize(nx);
  {
    std::vector<float> row(static_cast<std::size_t>(d));
    for (int n = 0; n < N; ++n) {
      lm::draw_state(C.rd_seed, n, d, c.recdepth.state_std, row.data());
      std::copy(row.begin(), row.end(), s.begin() + std::ptrdiff_t(n) * d);
    }
  }
  C.rd_cat.resize(std::size_t(n_grad));
  std::vector<T> cat(std::size_t(N) * 2 * d);
  for (int it = 0; it < n_free + n_grad; ++it) {
    const bool keep = it >= n_free;
    std::vector<T>& in = keep ? C.rd_cat[std::size_t(it - n_free)] : cat;
    in.resize(std::size_t(N) * 2 * d);
    for (int n = 0; n < N; ++n) {
      std::copy_n(s.data() + std::size_t(n) * d, d, in.data() + std::size_t(n) * 2 * d);
      std::copy_n(C.rd_e.data() + std::size_t(n) * d, d, in.data() + std::size_t(n) * 2 * d + d);
    }
    linear_forward(in.data(), N, 2 * d, P.adapter().value.data(), d, x.data());
    for (int j = 0; j < Cn; ++j) {
      auto& acts = keep ? C.layers[std::size_t(Pn + (it - n_free) * Cn + j)] : C.rd_scratch[std::size_t(j)];
      block_train_forward(P, Pn + j, B, S, C, acts, x.data());
    }
    s = x;
  }
  C.rd_rstd.resize(std::size_t(N));
  rmsnorm_forward(s.data(), N, d, P.out_norm().value.data(), c.rms_eps, x.data(), C.rd_rstd.data());  // Huginn's ln_f, first use
  for (int k = 0; k < Dn; ++k) block_train_forward(P, Pn + Cn + k, B, S, C, C.layers[std::size_t(Pn + Cn * n_grad + k)], x.data());
  C.x_out.assign(x.begin(), x.end());
  head_forward(P, C, x.data(), N);
  if (logits_out) *logits_out = C.logits;
  std::vector<T>& dlogits = C.dlogits;
  dlogits.resize(grad ? C.logits.size() : 0);
  const double loss = cross_entropy(C.logits.data(), N, V, targets.data(), grad ? dlogits.data() : nullptr, grad_scale);
  C.hook_sum = C.logits_hook ? C.logits_hook(tokens, C.logits.data(), N, V, grad ? dlogits.data() : nullptr, grad_scale) : 0.0;
  if (!grad) return loss;
  std::vector<T>& dx = C.dx;
  dx.assign(nx, T(0));
  head_backward(P, C, C.x_out.data(), N, dx.data());
  for (int k = Dn - 1; k >= 0; --k) block_train_backward(P, Pn + Cn + k, B, S, C, C.layers[std::size_t(Pn + Cn * n_grad + k)], dx.data());
  {  // through the first n_f: the gradient at s
    std::vector<T> ds(nx, T(0));
    rmsnorm_backward(dx.data(), s.data(), N, d, P.out_norm().value.data(), C.rd_rstd.data(), ds.data(), norm_grad(P.out_norm(), C));
    dx.swap(ds);
  }
  std::vector<T>& de = C.rd_de;
  de.assign(nx, T(0));
  std::vector<T> dcat(std::size_t(N) * 2 * d);
  for (int it = n_grad - 1; it >= 0; --it) {
    for (int j = Cn - 1; j >= 0; --j) block_train_backward(P, Pn + j, B, S, C, C.layers[std::size_t(Pn + it * Cn + j)], dx.data());
    linear_backward(dx.data(), C.rd_cat[std::size_t(it)].data(), N, 2 * d, P.adapter().value.data(), d, dcat.data(),
                    P.adapter().grad.empty() ? nullptr : P.adapter().grad.data());
    for (int n = 0; n < N; ++n) {
      std::copy_n(dcat.data() + std::size_t(n) * 2 * d, d, dx.data() + std::size_t(n) * d);  // to the previous state
      const T* g = dcat.data() + std::size_t(n) * 2 * d + d;
      T* o = de.data() + std::size_t(n) * d;
      for (int i = 0; i < d; ++i) o[i] += g[i];
    }
  }
  dx.swap(de);  // the state before the gradient iterations gets none (truncated); e's gradient goes on
  for (int l = Pn - 1; l >= 0; --l) block_train_backward(P, l, B, S, C, C.layers[std::size_t(l)], dx.data());
  if (scale != T(1))
    for (T& v : dx) v *= scale;
  if (!P.embd().grad.empty()) embedding_backward(dx.data(), d, tokens.data(), N, P.embd().grad.data());
  for (const auto& pl : P.poet) pl.finish(P.store, C.poet);
  return loss;
}

}  // namespace

template <class T>
double llama_loss(LlamaParams<T>& P, const std::vector<int>& tokens, const std::vector<int>& targets, int B,
                  int S, double grad_scale, TrainCache<T>& C, std::vector<T>* logits_out,
                  const std::vector<int>& schedule, ExitPlan* exits) {
  const lm::ModelConfig& c = P.config;
  const int N = B * S, d = c.d_model, hd = c.head_dim(), V = c.vocab_size;
  if (S > c.n_ctx)
    throw InputError(fmt::format("sequence length {} exceeds the model's context n_ctx = {}", S, c.n_ctx));
  if (tokens.size() != std::size_t(N) || targets.size() != std::size_t(N))
    throw InputError("token and target arrays must hold B * S entries");
  for (int n = 0; n < N; ++n) {
    if (tokens[n] < 0 || tokens[n] >= V) throw InputError(fmt::format("token id {} outside the vocabulary", tokens[n]));
    if (targets[n] >= V) throw InputError(fmt::format("target id {} outside the vocabulary", targets[n]));
  }
  for (int l : schedule)
    if (l < 0 || l >= c.n_layers) throw InputError(fmt::format("block schedule names block {} of {}", l, c.n_layers));
  lm::require_blocks(lm::Runner::trainer, c);
  if (c.is_recdepth()) {
    if (!schedule.empty() || exits) throw UsageError("a recurrent-depth model trains without a block schedule or early exits");
    if (!C.row_scale.empty() || !C.dlogits_in.empty())
      throw UsageError("a recurrent-depth model trains without per-row scales or a given logits gradient");
    return recdepth_loss(P, tokens, targets, B, S, grad_scale, C, logits_out);
  }
  const int n_steps = schedule.empty() ? c.n_layers : static_cast<int>(schedule.size());
  auto block_of = [&](int step) { return schedule.empty() ? step : schedule[step]; };
  const bool grad = grad_scale > 0;
  const int n_exits = exits ? static_cast<int>(exits->steps.size()) : 0;
  if (exits) {
    if (exits->weights.size() != exits->steps.size())
      throw InputError("early-exit plan: one weight per exit step");
    for (int i = 0; i < n_exits; ++i)
      if (exits->steps[i] < 0 || exits->steps[i] >= n_steps - 1 || (i > 0 && exits->steps[i] <= exits->steps[i - 1]))
        throw InputError(fmt::format("early-exit step {} outside [0, {}) or out of order", exits->steps[i], n_steps - 1));
    exits->losses.assign(std::size_t(n_exits), 0.0);
  }
  const double final_scale = grad_scale * (exits ? exits->final_weight : 1.0);

  for (auto& pl : P.poet) pl.prepare(P.store, C.poet);  // POET-X: R from Q, once per call

  // ---- forward: the block list (or schedule), one step each, activations per step ----
  C.aux_objective = C.aux_loss = 0;
  C.aux_grad = grad ? grad_scale * P.moe_aux : 0.0;
  C.pos.resize(N);
  for (int n = 0; n < N; ++n) C.pos[n] = n % S;
  rope_tables(C.pos.data(), N, hd, c.rope_theta, C.cs, C.sn);
  C.layers.resize(n_steps);
  std::vector<T>& x = C.x;
  x.resize(std::size_t(N) * d);
  embedding_forward(P.embd().value.data(), d, tokens.data(), N, x.data());
  C.xnf.resize(x.size());
  C.rstdf.resize(N);
  C.logits.resize(std::size_t(N) * V);
  std::vector<T>& dlogits = C.dlogits;
  dlogits.resize(grad ? C.logits.size() : 0);
  C.dexit.resize(std::size_t(n_exits));
  // An early exit's loss and, with gradients, its whole backward through the shared head and
  // final norm right away (so its [N, V] logits need no storage): the gradient at the block's
  // output waits in C.dexit until the block backward reaches it.
  auto exit_loss = [&](int i) {
    head_forward(P, C, x.data(), N);
    exits->losses[i] = cross_entropy(C.logits.data(), N, V, targets.data(), grad ? dlogits.data() : nullptr,
                                     grad_scale * exits->weights[i]);
    if (!grad) return;
    C.dexit[i].assign(x.size(), T(0));
    head_backward(P, C, x.data(), N, C.dexit[i].data());
  };
  for (int step = 0, e = 0; step < n_steps; ++step) {
    block_train_forward(P, block_of(step), B, S, C, C.layers[step], x.data());
    if (e < n_exits && exits->steps[e] == step) exit_loss(e++);
  }
  C.x_out.assign(x.begin(), x.end());
  head_forward(P, C, x.data(), N);
  if (logits_out) *logits_out = C.logits;
  const bool rows = !C.row_scale.empty();
  if (rows && C.row_scale.size() != std::size_t(N)) throw InputError("per-row gradient scales must hold B * S entries");
  if (rows) C.row_loss.assign(std::size_t(N), 0.0);
  const double loss = cross_entropy(C.logits.data(), N, V, targets.data(), grad ? dlogits.data() : nullptr, final_scale,
                                    rows ? C.row_scale.data() : nullptr, rows ? C.row_loss.data() : nullptr);
  C.hook_sum = C.logits_hook ? C.logits_hook(tokens, C.logits.data(), N, V, grad ? dlogits.data() : nullptr, final_scale) : 0.0;
  if (!grad) return loss;
  if (!C.dlogits_in.empty()) {
    if (C.dlogits_in.size() != dlogits.size()) throw InputError("the logits gradient must hold B * S * vocab entries");
    std::copy(C.dlogits_in.begin(), C.dlogits_in.end(), dlogits.begin());
  }

  // ---- backward: steps in reverse; a repeated block accumulates every step's gradient ----
  std::vector<T>& dx = C.dx;
  dx.assign(x.size(), T(0));
  head_backward(P, C, C.x_out.data(), N, dx.data());
  for (int step = n_steps - 1, e = n_exits - 1; step >= 0; --step) {
    if (e >= 0 && exits->steps[e] == step) {  // the early exit's gradient joins at its block's output
      const std::vector<T>& g = C.dexit[e--];
      for (std::size_t i = 0; i < g.size(); ++i) dx[i] += g[i];
    }
    block_train_backward(P, block_of(step), B, S, C, C.layers[step], dx.data());
  }
  if (!P.embd().grad.empty()) embedding_backward(dx.data(), d, tokens.data(), N, P.embd().grad.data());
  for (const auto& pl : P.poet) pl.finish(P.store, C.poet);  // dL/dR -> dL/dQ
  return loss;
}

#define ICMLKIT_NN_LLAMA(T)                                                                           \
  template struct LlamaParams<T>;                                                                     \
  template LlamaParams<T> params_from_model<T>(const lm::Model&, bool);                                     \
  template void params_to_model<T>(LlamaParams<T>&, lm::Model&);                                      \
  template void enable_poet<T>(LlamaParams<T>&, const PoetOptions&, std::uint64_t);                     \
  template void poet_merge<T>(LlamaParams<T>&, std::uint64_t, std::int64_t);                            \
  template double llama_loss<T>(LlamaParams<T>&, const std::vector<int>&, const std::vector<int>&, int, int, \
                                double, TrainCache<T>&, std::vector<T>*, const std::vector<int>&, ExitPlan*); \
  template void block_train_forward<T>(LlamaParams<T>&, int, int, int, TrainCache<T>&,                 \
                                       typename TrainCache<T>::LayerActs&, T*);                        \
  template void block_train_backward<T>(LlamaParams<T>&, int, int, int, TrainCache<T>&,                \
                                        typename TrainCache<T>::LayerActs&, T*);

ICMLKIT_NN_LLAMA(float)
ICMLKIT_NN_LLAMA(double)

}  // namespace icmlkit::nn
