#include "nn/galore.hpp"

#include <Eigen/Dense>
#include <Eigen/SVD>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "nn/gemm.hpp"
#include "util/error.hpp"

namespace icmlkit::nn {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
}  // namespace

bool galore_projects(const std::string& name, const std::vector<int>& shape) {
  return shape.size() == 2 && (has(name, ".attn_") || has(name, ".ffn_"));
}

Galore::Galore(const ParamStore<float>& store, AdamWOptions adam, GaloreOptions opt) : adam_(adam), opt_(opt) {
  if (opt.rank < 1) throw UsageError("the GaLore rank must be >= 1", "--galore-rank");
  if (opt.update_gap < 1) throw UsageError("the GaLore update gap must be >= 1 step", "--galore-gap");
  for (const auto& p : store.params) {
    names_.push_back(p.name);
    if (!galore_projects(p.name, p.shape)) {
      rank_.push_back(0);
      m_.emplace_back(p.numel(), 0.0f);
      v_.emplace_back(p.numel(), 0.0f);
      p_.emplace_back();
      continue;
    }
    const int rows = p.shape[0], cols = p.shape[1], r = std::min({opt.rank, rows, cols});
    rank_.push_back(r);
    m_.emplace_back(std::size_t(rows >= cols ? rows : cols) * r, 0.0f);
    v_.emplace_back(m_.back().size(), 0.0f);
    p_.emplace_back(std::size_t(rows >= cols ? cols : rows) * r, 0.0f);
  }
}

void Galore::step(ParamStore<float>& store, double lr) {
  const std::int64_t t0 = t_;  // the package's iteration count before the increment: SVD at 0, T, 2T, ...
  ++t_;
  FoamOptions a;  // the package's Adam is FOAM's unfolded one (same formula)
  a.beta1 = adam_.beta1;
  a.beta2 = adam_.beta2;
  a.eps = adam_.eps;
  a.weight_decay = adam_.weight_decay;
  const float b1 = static_cast<float>(adam_.beta1), b2 = static_cast<float>(adam_.beta2), eps = static_cast<float>(adam_.eps);
  const float step_size =
      static_cast<float>(lr * std::sqrt(1.0 - std::pow(adam_.beta2, double(t_))) / (1.0 - std::pow(adam_.beta1, double(t_))));
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    const int r = rank_[i];
    if (r == 0) {
      foam_adam_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(), t_, lr, a, p.decay);
      continue;
    }
    const int rows = p.shape[0], cols = p.shape[1];
    const bool right = rows >= cols;  // project the columns: G P^T with P [r, cols]
    const CMap G(p.grad.data(), rows, cols);
    if (t0 % opt_.update_gap == 0) {
      Eigen::BDCSVD<Eigen::MatrixXf> svd(G, Eigen::ComputeThinU | Eigen::ComputeThinV);
      if (right) Map(p_[i].data(), r, cols) = svd.matrixV().leftCols(r).transpose();
      else Map(p_[i].data(), rows, r) = svd.matrixU().leftCols(r);
    }
    const int lr_rows = right ? rows : r, lr_cols = right ? r : cols;
    low_.resize(std::size_t(lr_rows) * lr_cols);
    // The projections on the trainer's GEMM (nn/gemm.hpp; thread-invariant like the rest of a step).
    const float* Pm = p_[i].data();
    if (right) gemm(false, true, rows, r, cols, p.grad.data(), cols, Pm, cols, low_.data(), r, false);   // G P^T
    else gemm(true, false, r, cols, rows, Pm, r, p.grad.data(), cols, low_.data(), cols, false);          // P^T G
    float* m = m_[i].data();
    float* v = v_[i].data();
    for (std::size_t j = 0; j < low_.size(); ++j) {
      const float g = low_[j];
      m[j] = b1 * m[j] + (1.0f - b1) * g;
      v[j] = b2 * v[j] + (1.0f - b2) * (g * g);
      low_[j] = m[j] / (std::sqrt(v[j]) + eps);
    }
    upd_.resize(p.numel());
    if (right) gemm(false, false, rows, cols, r, low_.data(), r, Pm, cols, upd_.data(), cols, false);    // N P
    else gemm(false, false, rows, cols, r, Pm, r, low_.data(), cols, upd_.data(), cols, false);          // P N
    const float scale = static_cast<float>(opt_.scale), decay = p.decay ? static_cast<float>(lr * adam_.weight_decay) : 0.0f;
    for (std::size_t j = 0; j < p.numel(); ++j) {
      p.value[j] -= step_size * (upd_[j] * scale);
      p.value[j] -= decay * p.value[j];
    }
  }
}

std::vector<StateBuffer> Galore::state() {
  std::vector<StateBuffer> s = moment_buffers(names_, m_, v_);
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (rank_[i] > 0) s.push_back({"p/" + names_[i], &p_[i]});
  return s;
}

}  // namespace icmlkit::nn
