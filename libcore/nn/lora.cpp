#include "nn/lora.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::nn {

namespace {
using LP = LlamaParams<float>;
constexpr int kSlotOf[] = {LP::wq, LP::wk, LP::wv, LP::wo, LP::w_gate, LP::w_up, LP::w_down};  // lora_target_names() order

/// The store name stem of a slot ("attn_q", ...).
const char* slot_stem(int slot) {
  switch (slot) {
    case LP::wq: return "attn_q";
    case LP::wk: return "attn_k";
    case LP::wv: return "attn_v";
    case LP::wo: return "attn_output";
    case LP::w_gate: return "ffn_gate";
    case LP::w_up: return "ffn_up";
    default: return "ffn_down";
  }
}

}  // namespace

int lora_slot(const std::string& target) noexcept {
  const auto& names = lm::lora_target_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == target) return kSlotOf[i];
  return -1;
}

template <class T>
LoraParams<T> lora_init(const lm::ModelConfig& model, const lm::LoraConfig& config, std::uint64_t seed, bool decay) {
  lm::check_lora_config(config, model);
  LoraParams<T> P;
  P.config = config;
  P.scaling = static_cast<T>(config.scaling());
  P.a.resize(std::size_t(model.n_layers));
  P.b.resize(std::size_t(model.n_layers));
  const int r = config.rank;
  for (int l = 0; l < model.n_layers; ++l) {
    P.a[std::size_t(l)].fill(-1);
    P.b[std::size_t(l)].fill(-1);
    for (const std::string& name : lm::lora_target_names()) {
      if (std::find(config.targets.begin(), config.targets.end(), name) == config.targets.end()) continue;
      const int slot = lora_slot(name);
      const auto [out, in] = lm::lora_target_shape(model, l, name);
      const std::string stem = fmt::format("blk.{}.{}", l, slot_stem(slot));
      const int ia = P.store.add(stem + ".lora_a", {r, in}, decay);
      const int ib = P.store.add(stem + ".lora_b", {out, r}, decay);
      P.a[std::size_t(l)][std::size_t(slot)] = ia;
      P.b[std::size_t(l)][std::size_t(slot)] = ib;
      // A ~ kaiming_uniform_(a = sqrt 5): gain sqrt(2 / (1 + 5)), bound gain sqrt(3 / fan_in) = 1 / sqrt(in)
      Rng rng(derive_seed(seed, std::uint64_t(ia)));
      const double bound = 1.0 / std::sqrt(double(in));
      for (T& v : P.store.params[std::size_t(ia)].value) v = static_cast<T>(rng.uniform(-bound, bound));
    }
  }
  return P;
}

template <class T>
LoraParams<T> lora_from_adapter(const lm::ModelConfig& model, const lm::LoraAdapter& adapter) {
  LoraParams<T> P = lora_init<T>(model, adapter.config, 0, false);
  for (Param<T>& p : P.store.params) std::fill(p.value.begin(), p.value.end(), T(0));
  for (const lm::LoraTensor& t : adapter.tensors) {
    const int slot = lora_slot(t.target);
    if (slot < 0 || t.layer < 0 || t.layer >= model.n_layers || !P.has(t.layer, slot))
      throw InputError(fmt::format("adapter tensor for layer {} {} is outside its target modules", t.layer, t.target));
    Param<T>& a = P.store.params[std::size_t(P.a[std::size_t(t.layer)][std::size_t(slot)])];
    Param<T>& b = P.store.params[std::size_t(P.b[std::size_t(t.layer)][std::size_t(slot)])];
    if (t.a.size() != a.numel() || t.b.size() != b.numel())
      throw InputError(fmt::format("adapter tensor for layer {} {} has the wrong shape", t.layer, t.target));
    std::copy(t.a.begin(), t.a.end(), a.value.begin());
    std::copy(t.b.begin(), t.b.end(), b.value.begin());
  }
  return P;
}

template <class T>
lm::LoraAdapter lora_to_adapter(const LoraParams<T>& P, const lm::ModelConfig& model) {
  lm::LoraAdapter out;
  out.config = P.config;
  for (int l = 0; l < model.n_layers; ++l)
    for (const std::string& name : lm::lora_target_names()) {
      const int slot = lora_slot(name);
      if (!P.has(l, slot)) continue;
      const Param<T>& a = P.store.params[std::size_t(P.a[std::size_t(l)][std::size_t(slot)])];
      const Param<T>& b = P.store.params[std::size_t(P.b[std::size_t(l)][std::size_t(slot)])];
      lm::LoraTensor t;
      t.layer = l;
      t.target = name;
      t.in = a.shape[1];
      t.out = b.shape[0];
      t.a.assign(a.value.begin(), a.value.end());
      t.b.assign(b.value.begin(), b.value.end());
      out.tensors.push_back(std::move(t));
    }
  return out;
}

bool lora_dropout_keep(std::uint64_t key, int layer, int slot, std::int64_t row, int col, double p) noexcept {
  const std::uint64_t h = derive_seed(derive_seed(derive_seed(key, std::uint64_t(layer) * 64 + std::uint64_t(slot)), std::uint64_t(row)),
                                      std::uint64_t(col));
  return double(h >> 11) * 0x1.0p-53 >= p;
}

namespace {
/// Writes the job's dropped input xd [n, K] = x ⊙ keep / (1 − p).
template <class T>
void dropout_rows(const T* x, int n, int K, std::uint64_t key, int layer, int slot, double p, T* xd) {
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < K; ++c) {
      const std::size_t e = std::size_t(i) * K + c;
      xd[e] = lora_dropout_keep(key, layer, slot, i, c, p) ? x[e] * keep_scale : T(0);
    }
}
}  // namespace

template <class T>
void lora_forward(const LoraPack<T>& pack, int layer, int slot, const T* x, int N, int K, int O, T* y, std::vector<T>& u,
                  std::vector<T>& xd, std::vector<T>& tmp) {
  std::size_t nu = 0, nxd = 0;
  for (const auto& j : pack.jobs) {
    if (!j.params->has(layer, slot)) continue;
    const std::size_t n = std::size_t((j.row_end < 0 ? N : j.row_end) - j.row_begin);
    nu += n * std::size_t(j.params->config.rank);
    if (pack.train && j.params->config.dropout > 0) nxd += n * std::size_t(K);
  }
  u.resize(nu);
  xd.resize(nxd);
  std::size_t ou = 0, oxd = 0;
  for (const auto& j : pack.jobs) {
    const LoraParams<T>& P = *j.params;
    if (!P.has(layer, slot)) continue;
    const int n = (j.row_end < 0 ? N : j.row_end) - j.row_begin, r = P.config.rank;
    if (n == 0) continue;
    const T* xin = x + std::size_t(j.row_begin) * K;
    if (pack.train && P.config.dropout > 0) {
      dropout_rows(xin, n, K, j.dropout_key, layer, slot, P.config.dropout, xd.data() + oxd);
      xin = xd.data() + oxd;
      oxd += std::size_t(n) * K;
    }
    const T* A = P.store.params[std::size_t(P.a[std::size_t(layer)][std::size_t(slot)])].value.data();
    const T* Bm = P.store.params[std::size_t(P.b[std::size_t(layer)][std::size_t(slot)])].value.data();
    T* uj = u.data() + ou;
    ou += std::size_t(n) * r;
    linear_forward(xin, n, K, A, r, uj);  // u [n, r] = xd A^T
    tmp.resize(std::size_t(n) * O);
    linear_forward(uj, n, r, Bm, O, tmp.data());  // v [n, O] = u B^T
    T* yj = y + std::size_t(j.row_begin) * O;
    const T s = P.scaling;
    for (std::size_t e = 0; e < tmp.size(); ++e) yj[e] += tmp[e] * s;  // result + lora_B(lora_A(x)) * scaling
  }
}

template <class T>
void lora_backward(const LoraPack<T>& pack, int layer, int slot, const T* dy, const T* x, int N, int K, int O, T* dx,
                   const std::vector<T>& u, const std::vector<T>& xd, std::vector<T>& tmp) {
  std::size_t ou = 0, oxd = 0;
  for (const auto& j : pack.jobs) {
    LoraParams<T>& P = *j.params;
    if (!P.has(layer, slot)) continue;
    const int n = (j.row_end < 0 ? N : j.row_end) - j.row_begin, r = P.config.rank;
    if (n == 0) continue;
    const bool drop = pack.train && P.config.dropout > 0;
    const T* xin = drop ? xd.data() + oxd : x + std::size_t(j.row_begin) * K;
    if (drop) oxd += std::size_t(n) * K;
    const T* uj = u.data() + ou;
    ou += std::size_t(n) * r;
    Param<T>& A = P.store.params[std::size_t(P.a[std::size_t(layer)][std::size_t(slot)])];
    Param<T>& Bm = P.store.params[std::size_t(P.b[std::size_t(layer)][std::size_t(slot)])];
    // g = scaling · dy [n, O];  gv [n, r] = g B;  dB += g^T u;  dA += gv^T xd;  dxd [n, K] = gv A
    tmp.resize(std::size_t(n) * O + std::size_t(n) * r + (drop ? std::size_t(n) * K : 0));
    T *g = tmp.data(), *gv = g + std::size_t(n) * O, *dxd = gv + std::size_t(n) * r;
    const T* dyj = dy + std::size_t(j.row_begin) * O;
    const T s = P.scaling;
    for (std::size_t e = 0; e < std::size_t(n) * O; ++e) g[e] = dyj[e] * s;
    linear_backward(g, uj, n, r, Bm.value.data(), O, gv, Bm.grad.empty() ? nullptr : Bm.grad.data(), false);
    T* dxj = dx + std::size_t(j.row_begin) * K;
    if (!drop) {
      linear_backward(gv, xin, n, K, A.value.data(), r, dxj, A.grad.empty() ? nullptr : A.grad.data(), true);
      continue;
    }
    linear_backward(gv, xin, n, K, A.value.data(), r, dxd, A.grad.empty() ? nullptr : A.grad.data(), false);
    const T keep_scale = static_cast<T>(1.0 / (1.0 - P.config.dropout));
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < K; ++c) {
        const std::size_t e = std::size_t(i) * K + c;
        if (lora_dropout_keep(j.dropout_key, layer, slot, i, c, P.config.dropout)) dxj[e] += dxd[e] * keep_scale;
      }
  }
}

#define ICMLKIT_NN_LORA(T)                                                                                         \
  template struct LoraParams<T>;                                                                                   \
  template LoraParams<T> lora_init<T>(const lm::ModelConfig&, const lm::LoraConfig&, std::uint64_t, bool);         \
  template LoraParams<T> lora_from_adapter<T>(const lm::ModelConfig&, const lm::LoraAdapter&);                     \
  template lm::LoraAdapter lora_to_adapter<T>(const LoraParams<T>&, const lm::ModelConfig&);                       \
  template void lora_forward<T>(const LoraPack<T>&, int, int, const T*, int, int, int, T*, std::vector<T>&,              \
                                std::vector<T>&, std::vector<T>&);                                                  \
  template void lora_backward<T>(const LoraPack<T>&, int, int, const T*, const T*, int, int, int, T*,                    \
                                 const std::vector<T>&, const std::vector<T>&, std::vector<T>&);

ICMLKIT_NN_LORA(float)
ICMLKIT_NN_LORA(double)

}  // namespace icmlkit::nn
