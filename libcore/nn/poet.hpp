// POET-X: reparameterised training by orthogonal equivalence transformation (POET, Qiu et al.,
// NeurIPS 2025, arXiv 2506.08001; POET-X, ICML 2026, arXiv 2603.05500; reference code
// Sphere-AI-Lab/poet @3a34bb6, poet_torch/).  Every attention and MLP matrix is
//   W = Pi_out^T · BlockDiag(R_out)^T · W0 · BlockDiag(R_in)^T · Pi_in   (W0 fixed, rows unit-norm),
// where R_out and R_in are b x b orthogonal blocks from the Cayley-Neumann parameterisation of
// skew-symmetric Q (the only trained entries: b(b-1)/2 per block) and Pi are random permutations,
// redrawn at every merge-then-reinitialise.  The forward is input-centric (x is permuted, rotated
// block by block, multiplied by W0, rotated, permuted; W is never formed), as poet_linear.py.
//
// Conventions (poet_torch/core/ops.py, in row-vector form): with perm_in_inv the inverse of
// perm_in, xp[j] = x[perm_in_inv[j]], u = xp · BlockDiag(R_in), y0 = u · W0^T,
// z = y0 · BlockDiag(R_out), y[i] = z[perm_out[i]].  The effective weight is
// W[i][c] = M[perm_out[i]][perm_in[c]] with M = BlockDiag(R_out)^T W0 BlockDiag(R_in)^T.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/foam.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// Which truncation of the Cayley transform R = (I + Q)(I - Q)^{-1} the blocks use.  The two
/// polynomials of the reference: `neumann`, (I + Q)(I + Q + ... + Q^k) = I + 2Q + ... + 2Q^k +
/// Q^{k+1} (its Triton kernel, k = 3: I + 2Q + 2Q^2 + 2Q^3 + Q^4), and `series`,
/// I + 2(Q + ... + Q^k) (its PyTorch fallback, k = 4).  Both agree with the exact transform to
/// O(|Q|^{k+1}).
enum class CayleyPolynomial { neumann, series };

/// POET-X's settings (defaults: the reference's POETConfig, POETAdamW and torchrun_main.py).
struct PoetOptions {
  int block = 128;                 ///< b: the size of each orthogonal block
  int merge_every = 200;           ///< T: merge-then-reinitialise every T optimizer steps (0 = never)
  int terms = 3;                   ///< k of the Cayley-Neumann polynomial
  CayleyPolynomial polynomial = CayleyPolynomial::neumann;
  /// POET's fully stochastic variant (POET-FS): one b x b block per side on a random index subset
  /// of size b (redrawn at each merge), the other indices untouched; b need not divide the
  /// matrix, only be <= both its dimensions.  Off: block-stochastic (POET-BS, all m/b and n/b blocks).
  bool fully_stochastic = false;
  double lr = 5e-4;                ///< poet_lr: peak learning rate of the Q entries (same schedule shape)
  double scale = 0.5;              ///< poet_scale: multiplies the Q learning rate
  bool normalize = true;           ///< W0 = W / |row| at the start (the reference's normalize_weights)
  /// The gradient-clip ramp after each merge (calc_poet_grad_clipping_value: 0.1 c to c over 10
  /// steps) applies while the steps done are in [T, clip_ramp_until] (gd_warmup_steps).
  std::int64_t clip_ramp_until = 2000;
};

/// Coefficients c_0..c_D of R = sum_i c_i Q^i for the polynomial and k (k >= 1).
std::vector<double> cayley_coefficients(CayleyPolynomial p, int terms);

/// R [b, b] = sum_i c[i] Q^i for Q [b, b] (row-major; Horner's scheme).  `work` is scratch.
template <class T>
void cayley_forward(const T* Q, int b, const std::vector<double>& c, T* R, std::vector<T>& work);

/// dQ [b, b] = dL/dQ given dR = dL/dR for R = sum_i c[i] Q^i (any Q; uses nothing of the forward):
/// sum_i c_i sum_{j<i} (Q^T)^j dR (Q^T)^{i-1-j}.  Written, not accumulated.
template <class T>
void cayley_backward(const T* Q, int b, const std::vector<double>& c, const T* dR, T* dQ, std::vector<T>& work);

/// The skew-symmetric Q [b, b] from its strictly upper triangle v [b(b-1)/2] in row-major order
/// ((0,1), (0,2), ..., (1,2), ...; torch.triu_indices(b, b, 1)): Q[r][c] = v, Q[c][r] = -v.
template <class T>
void skew_from_upper(const T* v, int b, T* Q);

/// gv [b(b-1)/2] += the gradient of the upper-triangle entries given dQ: dQ[r][c] - dQ[c][r].
template <class T>
void skew_grad_to_upper(const T* dQ, int b, T* gv);

/// Scratch rows of one POET-X product (reused across calls).
template <class T>
struct PoetWork {
  std::vector<T> a, b, c, cayley;
};

/// One POET-X matrix [rows = out, cols = in] of the parameter store: its base weight W0 (a frozen
/// store tensor), its Q entries (a trained store tensor [out_blocks + in_blocks, b(b-1)/2], R_out
/// blocks first, as the reference's oft_R) and its permutations.
template <class T>
struct PoetLinear {
  int rows = 0, cols = 0, b = 0;
  int out_blocks = 0, in_blocks = 0;  ///< orthogonal blocks per side (1 and 1 when fully stochastic)
  int weight = -1, q = -1;            ///< store indices of W0 and of the Q entries
  std::vector<int> perm_in, perm_in_inv, perm_out, perm_out_inv;
  std::vector<double> coeffs;         ///< the Cayley polynomial
  std::vector<T> R, dR;               ///< the blocks [(out_blocks + in_blocks) b b] and dL/dR

  /// Number of Q entries: (out_blocks + in_blocks) b(b-1)/2.
  std::size_t q_size() const noexcept { return std::size_t(out_blocks + in_blocks) * b * (b - 1) / 2; }
  /// Draws both permutations from `seed` (uniform, as torch.randperm).
  void draw_permutations(std::uint64_t seed);
  /// Computes R from the store's Q entries and clears dR (before each forward).
  void prepare(const ParamStore<T>& store, PoetWork<T>& w);
  /// y [N, rows] = x [N, cols] · W^T through the input-centric chain; y0 [N, rows] keeps the
  /// product before the output rotation (the backward's).
  void forward(const T* x, int N, const T* W0, T* y, std::vector<T>& y0, PoetWork<T>& w) const;
  /// Given dy [N, rows], the forward's x and y0: dR += dL/dR, and dx [N, cols] = (or += when
  /// `accumulate_dx`) dL/dx.  W0 receives no gradient.
  void backward(const T* dy, const T* x, int N, const T* W0, T* dx, bool accumulate_dx, const std::vector<T>& y0,
                PoetWork<T>& w);
  /// Adds dL/dQ (from dR through the Cayley polynomial and the skew map) to the store's Q gradient.
  void finish(ParamStore<T>& store, PoetWork<T>& w) const;
  /// The effective weight W [rows, cols] (after prepare()).
  void effective_weight(const T* W0, T* W) const;
};

/// The seed of matrix `index`'s permutations after `merges` merges of a run seeded `seed`.
std::uint64_t poet_permutation_seed(std::uint64_t seed, std::int64_t merges, int index) noexcept;

/// Block sizes b that work for every matrix of `dims` ([rows, cols] pairs): the divisors of all
/// dimensions >= 2 (block-stochastic), as a readable list ("2, 4, 8, 16, 32, 64").
std::string poet_block_sizes(const std::vector<std::pair<int, int>>& dims);

/// POETAdamW (poet_torch/optim/adamw.py): the reference's Adam (bias correction in the step size,
/// eps outside it, decoupled decay after the update, as foam_adam_update) on every trained tensor;
/// the Q entries at lr * q_lr_ratio (poet_lr / lr * poet_scale) without decay, with their moments
/// and step count reset at each merge (the step count of a Q tensor is the steps since the last
/// merge), the rest at lr with decay on Param::decay tensors.  Frozen tensors (W0) are skipped.
class PoetAdamW final : public CountedOptimizer {
 public:
  /// `is_q[i]` marks store tensor i as Q entries; `adam` gives betas, eps and weight decay.
  PoetAdamW(const ParamStore<float>& store, std::vector<char> is_q, FoamOptions adam, double q_lr_ratio,
            int merge_every);
  std::string name() const override { return "poet-x"; }
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override;
  /// Zeroes the moments of the Q entries (at a merge).
  void reset_q() noexcept;

 private:
  std::vector<char> is_q_;
  FoamOptions adam_;
  double q_lr_ratio_;
  int merge_every_;
  std::vector<int> index_;  // trained store tensors, in order
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace icmlkit::nn
