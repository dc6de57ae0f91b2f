// Forward/backward pairs of every layer of the Llama-style decoder (lm/README.md, contract v1).
//
// Each layer is a `*_forward` / `*_backward` pair in the manner of llm.c: plain row-major
// arrays, shapes in the comments, backward functions that ACCUMULATE parameter gradients (+=)
// and write (or accumulate, where said) input gradients.  T is float (training) or double
// (finite-difference checks in the tests: plain loops, the naive reference).
//
// The float path has two kernel sets (set_train_kernels):
// - fast (default, issue 24): products on the packed GEMM (nn/gemm.hpp: a row's bits do not
//   depend on the rows beside it or on the thread count), blocked flash-style causal attention
//   (tiles of 64 queries x 64 keys, online softmax, no S x S matrix), and vectorised
//   elementwise work (nn/vecmath.hpp).  Its logits agree with lm::forward within 1e-4 for
//   logits of order 1 (lm/README.md, "Training arithmetic"), not bitwise.
// - reference: the v1 trainer, exactly lm::forward's arithmetic (8-lane matmul_xwt / dot8, the
//   same RMSNorm, softmax and SiLU), bitwise equal to the inference engine's logits; its
//   backward products run on the engine's kernel on transposed copies.  Kept as the naive
//   reference beside the fast path and for bench/lm_train.sh's old-vs-new comparison.
#pragma once

#include <cstdint>
#include <vector>

#include "lm/config.hpp"

namespace icmlkit::nn {

/// The float kernel set (see above).  Process-wide, like icmlkit::threads(); not for changing
/// while a forward or backward runs.
enum class TrainKernels { fast, reference };
void set_train_kernels(TrainKernels k) noexcept;
TrainKernels train_kernels() noexcept;

// ---- linear (no bias) ----------------------------------------------------------------------

/// y [N, O] = x [N, K] · W^T, W [O, K] row-major.
template <class T>
void linear_forward(const T* x, int N, int K, const T* W, int O, T* y);

/// dx [N, K] (= or += dy·W, by `accumulate_dx`; skipped when dx is null) and dW [O, K] += dy^T·x,
/// for dy [N, O], x [N, K], W [O, K].
template <class T>
void linear_backward(const T* dy, const T* x, int N, int K, const T* W, int O, T* dx, T* dW,
                     bool accumulate_dx = false);

// ---- token embedding -----------------------------------------------------------------------

/// out [N, d] = E[tokens[n], :] for E [V, d].
template <class T>
void embedding_forward(const T* E, int d, const int* tokens, int N, T* out);

/// dE [V, d] += scatter of dout [N, d] to rows tokens[n].
template <class T>
void embedding_backward(const T* dout, int d, const int* tokens, int N, T* dE);

// ---- RMSNorm: y = w ⊙ x / sqrt(mean(x²) + eps) -------------------------------------------------

/// y [N, d], rstd [N] = 1/sqrt(mean(x²)+eps) saved for the backward; x [N, d], w [d].
template <class T>
void rmsnorm_forward(const T* x, int N, int d, const T* w, double eps, T* y, T* rstd);

/// dx [N, d] += r·(w⊙dy) − r³/d · x · Σ_j w_j dy_j x_j  (r = rstd);  dw [d] += Σ_n dy ⊙ x · r.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, int N, int d, const T* w, const T* rstd, T* dx, T* dw);

// ---- rotary position embedding ---------------------------------------------------------------

/// cos/sin tables [N, head_dim/2] for positions pos[N]: angle = pos · theta^(−2i/head_dim)
/// (same float rounding as lm::forward).
template <class T>
void rope_tables(const int* pos, int N, int head_dim, double theta, std::vector<T>& cs, std::vector<T>& sn);

/// Rotates x [N, H, head_dim] in place (pairs by `style`, lm/README.md "RoPE pairing").
template <class T>
void rope_forward(T* x, int N, int H, int head_dim, lm::RopeStyle style, const T* cs, const T* sn);

/// The transpose rotation (by −angle) applied in place to dx [N, H, head_dim]: the gradient of
/// rope_forward, which is an orthogonal map per pair.
template <class T>
void rope_backward(T* dx, int N, int H, int head_dim, lm::RopeStyle style, const T* cs, const T* sn);

// ---- grouped-query causal self-attention ----------------------------------------------------

/// Shapes of one attention call: B sequences of S rows each (row b·S + t), n_heads query heads
/// sharing n_kv_heads KV heads (query head h uses KV head h / (n_heads / n_kv_heads)).
struct AttnShape {
  int B = 1, S = 1, n_heads = 1, n_kv_heads = 1, head_dim = 1;
};

/// out [B·S, n_heads·hd] = softmax(q·k^T / sqrt(hd), causal) · v for q [B·S, n_heads·hd],
/// k, v [B·S, n_kv·hd] (after RoPE).  Saves the row max mx and 1/Σexp `inv` per (row, head)
/// [B·S, n_heads] so the backward recomputes the probabilities (no [S, S] storage).  The fast
/// float path is FlashAttention's forward (Dao et al. 2022, Alg. 1, with FlashAttention-2's
/// deferred normalisation): query tiles against key tiles up to the diagonal, running max and
/// sum per row, mx the final max.  Parallel over (sequence, head); each output is computed by
/// one thread in a fixed order.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttnShape& s, T* out, T* mx, T* inv);

/// dq [B·S, n_heads·hd], dk, dv [B·S, n_kv·hd] (overwritten) from dout [B·S, n_heads·hd] and
/// the forward's out, mx, inv: dP = dout·v^T, dS = P ⊙ (dP − D) with D = rowsum(P ⊙ dP) =
/// rowsum(dout ⊙ out), dq = dS·k/sqrt(hd), dk = dS^T·q/sqrt(hd), dv = P^T·dout.  The fast float
/// path is FlashAttention-2's backward (Dao 2023, Alg. 2: key blocks outer, query blocks inner,
/// P recomputed per tile).  Parallel over (sequence, KV head): thread-count invariant.
template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* mx,
                        const T* inv, const AttnShape& s, T* dq, T* dk, T* dv);

// ---- SwiGLU: h = silu(g) ⊙ u ---------------------------------------------------------------------

/// h [n] = g / (1 + exp(−g)) ⊙ u for g, u [n] (n = N·d_ff).
template <class T>
void swiglu_forward(const T* g, const T* u, std::int64_t n, T* h);

/// dg = dh ⊙ u ⊙ σ(g)(1 + g(1 − σ(g))), du = dh ⊙ silu(g) (overwritten).
template <class T>
void swiglu_backward(const T* dh, const T* g, const T* u, std::int64_t n, T* dg, T* du);

// ---- cross-entropy ------------------------------------------------------------------------------

/// Σ_n −log softmax(logits[n])[targets[n]] over rows with targets[n] >= 0, for logits [N, V]
/// (log-sum-exp in double).  With `dlogits` non-null writes dlogits [N, V] =
/// scale · (softmax − onehot) (zero rows for ignored targets).  Returns the summed loss.
/// With `row_scale` non-null, row n's gradient takes row_scale[n] instead of `scale` (packed LoRA
/// jobs: each job's rows their own 1 / targets); with `row_loss` non-null, row n's loss is written
/// there ([N], 0 for ignored rows).  A row's values do not depend on the other rows.
template <class T>
double cross_entropy(const T* logits, int N, int V, const int* targets, T* dlogits, double scale,
                     const double* row_scale = nullptr, double* row_loss = nullptr);

}  // namespace icmlkit::nn
