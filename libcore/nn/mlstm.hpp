// The stabilised mLSTM of xLSTM (Beck et al. 2024, eq. 19-27) in its three equivalent forms, the
// Hedgehog feature map, and sliding-window attention with sink tokens: the two branches of the
// hybrid student block of "Effective Distillation to Hybrid xLSTM Architectures" (arXiv
// 2603.15590, eq. 8-11).  One head per call, row-major rows with explicit strides (a head's
// columns inside a [rows, heads·dim] array), T float (the engine and the trainer) or double
// (finite-difference checks).
//
// Convention (NX-AI/xlstm, xlstm/blocks/mlstm/backends.py, the "simple" stabilised kernels):
//   log f_t = logsigmoid(f~_t),  i~_t the input gate's pre-activation (i_t = exp(i~_t)),
//   m_t = max(log f_t + m_{t-1}, i~_t)               (m_0 = -inf: an empty state),
//   C_t = e^{log f_t + m_{t-1} - m_t} C_{t-1} + e^{i~_t - m_t} (k_t / sqrt(d_k)) v_t^T,
//   n_t = e^{log f_t + m_{t-1} - m_t} n_{t-1} + e^{i~_t - m_t} (k_t / sqrt(d_k)),
//   h_t = C_t^T q_t / (max(|q_t . n_t|, e^{-m_t}) + kMlstmEps).
// The denominator max(|q.n|, e^{-m}) is the stabilised form of the paper's max(|n^T q|, 1) (the
// mlstm_kernels fork's |q.n| + eps without the max is NOT what this computes).  The parallel
// form's m_t = max_{j<=t} (sum_{j<s<=t} log f_s + i~_j) is the recurrent m_t exactly, so the
// three forms agree up to rounding (test_mlstm.cpp: 1e-5).
#pragma once

#include <cstdint>
#include <vector>

namespace icmlkit::nn {

/// The denominator's additive epsilon (backends.py's 1e-6).
inline constexpr double kMlstmEps = 1e-6;

/// Floats of one head's recurrent state for key width dk and value width dv: C [dk, dv], n [dk],
/// m, and a flag that is 0 while the state is empty (m = -inf); all zeros = the empty state.
inline int mlstm_state_floats(int dk, int dv) noexcept { return dk * dv + dk + 2; }

/// logsigmoid(x) = -log(1 + e^{-x}), stable for any x (+inf gives 0).
template <class T>
T log_sigmoid(T x) noexcept;

/// One recurrent step of one head: state [mlstm_state_floats(dk, dv)] is updated in place with
/// (q [dk], k [dk], v [dv], the gate pre-activations ig, fg) and h [dv] written.
template <class T>
void mlstm_step(T* state, int dk, int dv, const T* q, const T* k, const T* v, T ig, T fg, T* h) noexcept;

/// The strided rows of one head over S time steps: row t of x is x + t·ld.
template <class T>
struct HeadRows {
  const T* p = nullptr;
  int ld = 0;
  const T* operator[](int t) const noexcept { return p + std::int64_t(t) * ld; }
};

/// The inputs of one head: q [S, dk], k [S, dk], v [S, dv], gate pre-activations ig, fg [S]
/// (rows of stride ld each; a gate's row is one value).
template <class T>
struct MlstmHead {
  int S = 0, dk = 0, dv = 0;
  HeadRows<T> q, k, v, ig, fg;
};

/// The recurrent form over S steps from `state` (null: the empty state; else updated in place):
/// h [S, dv] at stride ldh.
template <class T>
void mlstm_recurrent(const MlstmHead<T>& x, T* h, int ldh, T* state = nullptr);

/// The parallel (quadratic) form from the empty state: h [S, dv] at stride ldh; O(S^2 (dk+dv)).
template <class T>
void mlstm_parallel(const MlstmHead<T>& x, T* h, int ldh);

/// Its backward: from dh [S, dv] (stride ldh), ADDS the gradients to dq, dk (stride as q, k),
/// dv (as v), dig, dfg (as the gates).  Recomputes the forward; m's max is differentiated at
/// its argmax (the subgradient autograd takes), the denominator's max by its active branch.
template <class T>
void mlstm_parallel_backward(const MlstmHead<T>& x, const T* dh, int ldh, T* dq, T* dk, T* dv, T* dig, T* dfg);

/// The chunkwise form (chunks of `chunk` steps: the parallel form inside a chunk, the state
/// (C, n, m) carried between chunks) from `state` (null: empty; else read and updated to the
/// state after step S - 1): h [S, dv] at stride ldh; O(S·chunk·(dk+dv) + S·dk·dv).
template <class T>
void mlstm_chunkwise(const MlstmHead<T>& x, T* h, int ldh, T* state = nullptr, int chunk = 64);

/// Hedgehog's feature map (Zhang et al. 2024) per head: phi(x) = softmax(F x) over the d
/// features, F [d, d].  x, out: N rows of stride ld (one head's columns).
template <class T>
void feature_map_forward(const T* x, int ldx, int N, int d, const T* F, T* out, int ldo);

/// Its backward from dout (stride ldo) and the forward's out: dx (stride ldx) += F^T dz, dF [d, d]
/// += dz x^T (dF may be null), with dz = out ⊙ (dout - <out, dout>).
template <class T>
void feature_map_backward(const T* x, int ldx, int N, int d, const T* F, const T* out, int ldo, const T* dout, T* dx,
                          T* dF);

/// Which keys a query attends in sliding-window attention with sinks: key position j for query
/// position i iff j <= i and (i - j < window or j < sinks).
inline bool window_attends(std::int64_t i, std::int64_t j, int window, int sinks) noexcept {
  return j <= i && (i - j < window || j < sinks);
}

/// Sliding-window softmax attention with sink tokens for one head of one sequence of S rows
/// (positions 0..S-1): out_i = sum_j softmax_j(q_i.k_j / sqrt(hd)) v_j over the keys
/// window_attends(i, j).  Saves each row's max score mx [S] and 1 / sum exp inv [S] for the
/// backward.  q, k, v, out: rows of stride ldq, ldk, ldv, ldo.
template <class T>
void window_attention_forward(int S, int hd, int window, int sinks, HeadRows<T> q, HeadRows<T> k, HeadRows<T> v,
                              T* out, int ldo, T* mx, T* inv);

/// Its backward: ADDS dq, dk, dv (strides of q, k, v) from dout (stride ldo) and the forward's
/// out, mx, inv.
template <class T>
void window_attention_backward(int S, int hd, int window, int sinks, HeadRows<T> q, HeadRows<T> k, HeadRows<T> v,
                               const T* out, int ldo, const T* mx, const T* inv, const T* dout, T* dq, T* dk, T* dv);

}  // namespace icmlkit::nn
