#include "nn/adam_mini.hpp"

#include <fmt/format.h>

#include <cmath>

#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

namespace {
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
}  // namespace

MiniBlocks adam_mini_blocks(const std::string& name, const std::vector<int>& shape) {
  if (shape.size() != 2) return MiniBlocks::per_tensor;
  if (has(name, ".attn_q.") || has(name, ".attn_k.")) return MiniBlocks::per_head;
  return MiniBlocks::per_row;  // token_embd, output, attn_v, attn_output, ffn_gate/up/down
}

template <class T>
void adam_mini_update(T* w, const T* g, T* m, T* vm, std::size_t n, std::size_t block, std::int64_t t, double lr,
                      const AdamWOptions& opt, bool decay) {
  const T b1 = static_cast<T>(opt.beta1), b2 = static_cast<T>(opt.beta2), eps = static_cast<T>(opt.eps);
  const T inv_bc1 = static_cast<T>(1.0 / (1.0 - std::pow(opt.beta1, double(t))));
  const T sqrt_bc2 = static_cast<T>(std::sqrt(1.0 - std::pow(opt.beta2, double(t))));
  const T keep = decay ? static_cast<T>(1.0 - lr * opt.weight_decay) : T(1), lrT = static_cast<T>(lr);
  const std::int64_t nb = static_cast<std::int64_t>(n / block);
#pragma omp parallel for schedule(static) num_threads(threads()) if (n >= (std::size_t(1) << 18))
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::size_t lo = std::size_t(b) * block, hi = lo + block;
    T sq = 0;
    for (std::size_t j = lo; j < hi; ++j) sq += g[j] * g[j];
    vm[b] = b2 * vm[b] + (T(1) - b2) * (sq / static_cast<T>(block));
    const T step = inv_bc1 / (std::sqrt(vm[b]) / sqrt_bc2 + eps);
    for (std::size_t j = lo; j < hi; ++j) {
      m[j] += (T(1) - b1) * (g[j] - m[j]);
      w[j] *= keep;
      w[j] -= (m[j] * step) * lrT;
    }
  }
}

template void adam_mini_update<float>(float*, const float*, float*, float*, std::size_t, std::size_t, std::int64_t, double,
                                      const AdamWOptions&, bool);
template void adam_mini_update<double>(double*, const double*, double*, double*, std::size_t, std::size_t, std::int64_t,
                                       double, const AdamWOptions&, bool);

AdamMini::AdamMini(const ParamStore<float>& store, AdamWOptions opt, int head_rows) : opt_(opt) {
  for (const auto& p : store.params) {
    std::size_t block = p.numel();
    switch (adam_mini_blocks(p.name, p.shape)) {
      case MiniBlocks::per_head:
        if (head_rows < 1 || p.shape[0] % head_rows != 0)
          throw UsageError(fmt::format("adam-mini: {} has {} rows, not a multiple of the head size {}", p.name, p.shape[0], head_rows));
        block = std::size_t(head_rows) * p.shape[1];
        break;
      case MiniBlocks::per_row: block = std::size_t(p.shape[1]); break;
      case MiniBlocks::per_tensor: break;
    }
    names_.push_back(p.name);
    block_.push_back(block);
    m_.emplace_back(p.numel(), 0.0f);
    v_.emplace_back(p.numel() / block, 0.0f);
  }
}

void AdamMini::step(ParamStore<float>& store, double lr) {
  ++t_;
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    adam_mini_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(), block_[i], t_, lr, opt_, p.decay);
  }
}

std::vector<StateBuffer> AdamMini::state() { return moment_buffers(names_, m_, v_); }

}  // namespace icmlkit::nn
