// GaLore (Zhao et al., ICML 2024, arXiv 2403.03507; the galore-torch package, also shipped in
// FOAM's repository as foam_torch/galore_projector.py): each attention and MLP matrix's gradient
// is projected onto a rank-r subspace from its SVD (recomputed every T steps), Adam runs in that
// subspace, and the update is projected back and scaled.  A FOAM and POET-X baseline (issue 29).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/foam.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// GaLore's settings (defaults: the package's pretraining scripts: rank 128, gap 200, scale 0.25).
struct GaloreOptions {
  int rank = 128;           ///< r: subspace dimension (at most the matrix's smaller side)
  int update_gap = 200;     ///< T: steps between SVDs of the gradient
  double scale = 0.25;      ///< alpha: scale of the projected-back update
};

/// Whether GaLore projects the trainer's tensor `name`: the attention and MLP matrices
/// (blk.N.attn_q/k/v/output, blk.N.ffn_gate/up/down), as the package's target modules "attn"
/// and "mlp"; the embedding, the head and the norms get its plain Adam.
bool galore_projects(const std::string& name, const std::vector<int>& shape);

/// GaLore over the LM trainer's parameter store, the package's "std" projection: a matrix
/// [m, n] with m >= n keeps P = V_r^T [r, n] (right singular vectors of the gradient) and runs
/// Adam on G P^T [m, r]; with m < n, P = U_r [m, r] and Adam on P^T G [r, n].  At step t (from 0)
/// with t % T == 0 the SVD of the current gradient renews P; the moments are kept across renewals
/// (as the package).  The Adam is the package's (transformers' AdamW: the bias correction in the
/// step size, eps outside it; decay after the update): w -= lr sqrt(1 - b2^t)/(1 - b1^t) * scale *
/// back(m / (sqrt(v) + eps)), w -= lr wd w.  Unprojected tensors: the same Adam (foam_adam_update).
/// After a renewal the kept moments meet the new basis as they are, so the run depends on the
/// signs the SVD routine gives the singular vectors (Eigen's BDCSVD here; the package: LAPACK via
/// torch.linalg.svd): the two agree step for step until the first renewal (test/peer/optim_peer.py).
/// State: "m/<name>", "v/<name>" (projected shapes) and "p/<name>" (P).  Throws UsageError for
/// rank < 1 or gap < 1; a rank above a matrix's smaller side is cut to it.
class Galore final : public CountedOptimizer {
 public:
  Galore(const ParamStore<float>& store, AdamWOptions adam, GaloreOptions opt);
  std::string name() const override { return "galore"; }
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override;

 private:
  AdamWOptions adam_;
  GaloreOptions opt_;
  std::vector<std::string> names_;
  std::vector<int> rank_;  // 0: not projected
  std::vector<std::vector<float>> m_, v_, p_;
  std::vector<float> low_, upd_;  // work buffers
};

}  // namespace icmlkit::nn
