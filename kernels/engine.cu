// The CUDA engine (kernels/engine.hpp).  Device code uses lm/device_math.hpp for every
// per-element formula; the CPU unit tests prove those formulas against the CPU engine.
#include "kernels/engine.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/h5array.hpp"
#include "kernels/device.hpp"
#include "kernels/launch.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"

#if defined(ICMLKIT_CUDA_EMU)
namespace icmlkit::lm::dm {
/// For the CUDA emulator's launch checks (test/cuda_emu): the device pointer inside a layout.
inline void icmlkit_emu_pointers(const GemmLayout& L, std::vector<const void*>& out) { out.push_back(L.scale); }
}  // namespace icmlkit::lm::dm
#endif

namespace icmlkit::kernels {

using lm::dm::WType;

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw RuntimeError(std::string("cuBLAS ") + what + ": status " + std::to_string(int(s)));
}
void launch_check(const char* what) { cuda_check(cudaGetLastError(), what); }

/// Raw bytes that grow on demand: device memory (cudaMalloc), or with Pinned page-locked host
/// memory (cudaMallocHost: staging for the per-forward copies, since a copy from pageable memory
/// is staged by the driver and holds the host; reused only after the stream has synchronised,
/// as every forward ends).
template <bool Pinned>
struct Buf {
  void* p = nullptr;
  std::size_t bytes = 0;
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; o.bytes = 0; }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~Buf() { release(); }
  /// At least n bytes (contents lost when it grows; zeroed with `zero`).
  void reserve(std::size_t n, bool zero = false) {
    if (n <= bytes) return;
    release();
    if constexpr (Pinned) cuda_check(cudaMallocHost(&p, n), "cudaMallocHost");
    else cuda_check(cudaMalloc(&p, n), "cudaMalloc");
    bytes = n;
    if (!zero) return;
    if constexpr (Pinned) std::memset(p, 0, n);
    else cuda_check(cudaMemset(p, 0, n), "cudaMemset");
  }
  template <class T> T* as() const { return static_cast<T*>(p); }

 private:
  void release() {
    if (p == nullptr) return;
    if constexpr (Pinned) cudaFreeHost(p);
    else cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
};
using DevBuf = Buf<false>;
using PinnedBuf = Buf<true>;

std::size_t wsize(WType t) { return t == WType::f32 ? 4 : 2; }
cudaDataType_t cuda_type(WType t) {
  return t == WType::f32 ? CUDA_R_32F : t == WType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

/// A weight matrix [rows, cols] row-major on the device.
struct DevMat {
  DevBuf buf;
  int rows = 0, cols = 0;
};

using Layout = lm::dm::GemmLayout;

/// Writes activation value v at (r, k) of a GEMM input with K columns.
__device__ __forceinline__ void store_act(void* act, const Layout& L, int K, int r, int k, float v) { L.store(act, K, r, k, v); }
/// Reads GEMM output (r, o) of a product with O columns: the sum of its terms, divided by the
/// row's scale when L has scales (GemmLayout::load).
__device__ __forceinline__ float load_out(const float* Y, const Layout& L, int O, int r, int o) { return L.load(Y, O, r, o); }

__device__ __forceinline__ float load_w(const void* w, WType t, std::size_t i) {
  if (t == WType::f32) return static_cast<const float*>(w)[i];
  return lm::dm::widen(static_cast<const std::uint16_t*>(w)[i], t);
}

// ---- kernels --------------------------------------------------------------------------------

__global__ void embed_kernel(const void* emb, WType t, const int* tokens, int d, float* x) {
  const int r = blockIdx.x;
  const std::size_t base = std::size_t(tokens[r]) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) x[std::size_t(r) * d + i] = load_w(emb, t, base + i);
}

/// Largest |v| over the block's threads (a fixed tree; blockDim a power of two <= 256; every
/// thread of the block calls it).  NaN values are ignored (fmaxf).
__device__ __forceinline__ float block_max_abs(float v) {
  __shared__ float red[256];
  red[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float m = red[0];
  __syncthreads();  // red is free for the next call
  return m;
}

/// With scale_out (f16 weights): the factor that brings the block's values (largest |v|
/// over all threads is the max of each thread's `m`) into f16's range, stored at scale_out[r];
/// else 1.  Every thread of the block calls it.
__device__ __forceinline__ float row_scale(float m, float* scale_out, int r) {
  if (scale_out == nullptr) return 1.0f;
  const float s = lm::dm::f16_row_scale(block_max_abs(m));
  if (threadIdx.x == 0) scale_out[r] = s;
  return s;
}

/// The residual add of the previous sublayer fused with the next RMSNorm.  Row xr = rows[r]
/// (or r) of the residual stream x; with Y, that row of the GEMM output Y (layout LY) is added
/// first (x += Y in float, as the CPU engine), and written back to x when store_x (else the
/// sum is only normalised: the last norm before the LM head, whose rows may repeat).  The
/// RMS-normalised row goes to row r of a GEMM input (times row_scale with scale_out).  Block
/// per row; double sums reduced in a fixed tree (blockDim = 256).  Each thread touches only
/// its own elements of x, so no barrier separates the add from the sums.
__global__ void residual_norm_kernel(float* x, const float* Y, Layout LY, bool store_x, const int* rows, int d, const float* w,
                                     double eps, void* act, Layout L, float* scale_out) {
  __shared__ double red[256];
  const int r = blockIdx.x, xi = rows ? rows[r] : r;
  float* xr = x + std::size_t(xi) * d;
  const bool add = Y != nullptr && !store_x;  // the sum is recomputed on every read
  auto value = [&](int i) { return add ? xr[i] + load_out(Y, LY, d, xi, i) : xr[i]; };
  double ss = 0.0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    if (Y != nullptr && store_x) xr[i] += load_out(Y, LY, d, xi, i);
    const float v = value(i);
    ss += double(v) * v;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = lm::dm::rms_inv(red[0], d, eps);
  float m = 0.0f;
  if (scale_out != nullptr)
    for (int i = threadIdx.x; i < d; i += blockDim.x) m = fmaxf(m, fabsf(lm::dm::rms_apply(w[i], value(i), inv)));
  const float s = row_scale(m, scale_out, r);
  for (int i = threadIdx.x; i < d; i += blockDim.x) store_act(act, L, d, r, i, lm::dm::rms_apply(w[i], value(i), inv) * s);
}

/// QKV output -> RoPE'd q [R, dq] and the layer's pending K/V [R, nkv, hd].  grid (R, nh + 2 nkv),
/// block hd/2: thread i handles pair i of its head.
__global__ void qkv_post_kernel(const float* Y, Layout L, int O, int nh, int nkv, int hd, const float* cs, const float* sn,
                                bool interleaved, float* q, float* pk, float* pv) {
  const int r = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, half = hd / 2;
  if (i >= half) return;
  const int dq = nh * hd;
  if (hh < nh + nkv) {
    int a, b;
    lm::dm::rope_pair(interleaved, i, hd, a, b);
    const int col = hh * hd;  // q heads then k heads are contiguous in the QKV output
    float x1 = load_out(Y, L, O, r, col + a), x2 = load_out(Y, L, O, r, col + b);
    lm::dm::rope_rotate(x1, x2, cs[std::size_t(r) * half + i], sn[std::size_t(r) * half + i]);
    float* dst = hh < nh ? q + std::size_t(r) * dq + hh * hd : pk + (std::size_t(r) * nkv + (hh - nh)) * hd;
    dst[a] = x1;
    dst[b] = x2;
  } else {
    const int g = hh - nh - nkv, col = dq + nkv * hd + g * hd;
    float* dst = pv + (std::size_t(r) * nkv + g) * hd;
    dst[i] = load_out(Y, L, O, r, col + i);
    dst[i + half] = load_out(Y, L, O, r, col + i + half);
  }
}

/// Per-forward metadata on the device (offsets into one int buffer).
struct Meta {
  const int* tokens;       // [R]
  const int* row_view;     // [R]
  const int* view_count;   // [V, n_layers * nkv]
  const int* view_off;     // [V, n_layers * nkv]; -1 = slot j is j
  const int* view_slots;   // concatenated explicit lists
  const int* nb_off;       // [R + 1]
  const int* nb_idx;       // sorted in-batch keys per row, self included
};

#if defined(ICMLKIT_CUDA_EMU)
/// For the CUDA emulator's launch checks (test/cuda_emu): the device pointers inside a Meta.
inline void icmlkit_emu_pointers(const Meta& m, std::vector<const void*>& out) {
  out.insert(out.end(), {m.tokens, m.row_view, m.view_count, m.view_off, m.view_slots, m.nb_off, m.nb_idx});
}
#endif

constexpr int kAttnWarps = lm::dm::kAttnBlockKeys / lm::dm::kAttnWarpKeys;  // 4
constexpr int kMaxHd = 256;

/// Attention of one (row, query head) over keys [split * 128, +128) of its key sequence (view
/// slots, then in-batch rows): lane i of warp w scores key split * 128 + w * 32 + i (q.k in
/// increasing dimension order), the warp forms its chunk's softmax state (max, exp, xor-tree sum)
/// and p-weighted sum of values (each lane owning dimensions lane, lane + 32, ...); the 4 warps
/// merge in warp order.  The block's partial state goes to `part` [R * nh, nsplit, 2 + hd]
/// (m, l, acc); attn_merge_kernel combines the splits in order.  A split beyond the row's keys
/// writes the empty state, which the merge leaves bitwise neutral.
__global__ void attention_kernel(const float* q, int nh, int nkv, int hd, int n_ctx, int layer, int nlh, const float* Kc,
                                 const float* Vc, const float* pk, const float* pv, Meta m, float scale, float* part) {
  __shared__ float s_q[kMaxHd];
  __shared__ float s_acc[kAttnWarps][kMaxHd];
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps];
  const int rh = blockIdx.x, split = blockIdx.y, nsplit = gridDim.y;
  const int r = rh / nh, h = rh % nh, g = h / (nh / nkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lh = layer * nkv + g;
  const int v = m.row_view[r];
  const int nslots = m.view_count[v * nlh + lh];
  const int off = m.view_off[v * nlh + lh];
  const std::int32_t* slots = off < 0 ? nullptr : m.view_slots + off;
  const std::int32_t* nb = m.nb_idx + m.nb_off[r];
  const int nkeys = nslots + (m.nb_off[r + 1] - m.nb_off[r]);
  const float* kc = Kc + std::size_t(lh) * n_ctx * hd;
  const float* vc = Vc + std::size_t(lh) * n_ctx * hd;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) s_q[e] = q[std::size_t(r) * nh * hd + h * hd + e];
  __syncthreads();

  const int j = split * lm::dm::kAttnBlockKeys + warp * lm::dm::kAttnWarpKeys + lane;
  const bool valid = j < nkeys;
  const std::int32_t key = valid ? lm::dm::key_of(j, nslots, slots, nb) : 0;
  const float* kv = key >= 0 ? kc + std::size_t(key) * hd : pk + (std::size_t(-key - 1) * nkv + g) * hd;
  const float* vv = key >= 0 ? vc + std::size_t(key) * hd : pv + (std::size_t(-key - 1) * nkv + g) * hd;
  float score = -INFINITY;
  if (valid) {
    float dot = 0.0f;
    for (int e = 0; e < hd; ++e) dot += s_q[e] * kv[e];
    score = dot * scale;
  }
  float mx = score;
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float p = valid ? expf(score - mx) : 0.0f;
  float l = p;
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  const int per = (hd + 31) / 32;
  float acc[kMaxHd / 32];
  for (int t = 0; t < per; ++t) acc[t] = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float pi = __shfl_sync(0xffffffffu, p, i);
    const float* vi = reinterpret_cast<const float*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(vv), i));
    if (!__shfl_sync(0xffffffffu, valid ? 1 : 0, i)) continue;  // warp-uniform
    for (int t = 0; t < per; ++t) {
      const int e = lane + 32 * t;
      if (e < hd) acc[t] += pi * vi[e];
    }
  }
  for (int t = 0; t < per; ++t) {
    const int e = lane + 32 * t;
    if (e < hd) s_acc[warp][e] = acc[t];
  }
  if (lane == 0) {
    s_m[warp] = mx;  // -inf for a warp without keys
    s_l[warp] = l;
  }
  __syncthreads();
  float* out = part + (std::size_t(rh) * nsplit + split) * (2 + hd);
  lm::dm::OnlineSoftmax tot;
  tot.m = s_m[0];
  tot.l = s_l[0];
  float cw[kAttnWarps];
  cw[0] = 1.0f;
  for (int w = 1; w < kAttnWarps; ++w) {
    lm::dm::OnlineSoftmax o;
    o.m = s_m[w];
    o.l = s_l[w];
    float cs, co;
    tot.merge(o, cs, co);
    for (int u = 0; u < w; ++u) cw[u] *= cs;
    cw[w] = co;
  }
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) a += s_acc[w][e] * cw[w];
    out[2 + e] = a;
  }
  if (threadIdx.x == 0) {
    out[0] = tot.m;
    out[1] = tot.l;
  }
}

/// Attention output dimension e of head state `base` [nsplit, 2 + hd]: the split partial
/// states merged in split order, normalised.
__device__ __forceinline__ float merged_output(const float* base, int nsplit, int hd, int e) {
  lm::dm::OnlineSoftmax tot;
  tot.m = base[0];
  tot.l = base[1];
  float a = base[2 + e];
  for (int s = 1; s < nsplit; ++s) {
    const float* ps = base + std::size_t(s) * (2 + hd);
    lm::dm::OnlineSoftmax o;
    o.m = ps[0];
    o.l = ps[1];
    float cs, co;
    tot.merge(o, cs, co);
    a = a * cs + ps[2 + e] * co;
  }
  return a / tot.l;
}

/// Merges the split partial states of each (row, head) in split order and writes the
/// normalised output as the input of the Wo GEMM, or, with `out` (f16 weights: the row must be
/// scaled first, pack_act_kernel), as f32 [R, nh * hd] into `out`.  grid R * nh, block 128.
__global__ void attn_merge_kernel(const float* part, int nsplit, int nh, int hd, void* act, Layout L, float* out) {
  const int rh = blockIdx.x, r = rh / nh, h = rh % nh;
  const float* base = part + std::size_t(rh) * nsplit * (2 + hd);
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    const float v = merged_output(base, nsplit, hd, e);
    if (out != nullptr) out[std::size_t(r) * nh * hd + h * hd + e] = v;
    else store_act(act, L, nh * hd, r, h * hd + e, v);
  }
}

/// Rows of src [R, K] (f32) as a GEMM input, times row_scale (scale_out: f16 weights).
/// grid R, block 256.
__global__ void pack_act_kernel(const float* src, int K, void* act, Layout L, float* scale_out) {
  const int r = blockIdx.x;
  const float* row = src + std::size_t(r) * K;
  float m = 0.0f;
  for (int i = threadIdx.x; i < K; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
  const float s = row_scale(m, scale_out, r);
  for (int i = threadIdx.x; i < K; i += blockDim.x) store_act(act, L, K, r, i, row[i] * s);
}

/// x[r, :] += GEMM output row r.
__global__ void residual_kernel(const float* Y, Layout L, int d, float* x) {
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += blockDim.x) x[std::size_t(r) * d + i] += load_out(Y, L, d, r, i);
}

/// Gate/up output [R, 2 dff] -> silu(gate) * up as the input of the down GEMM (times row_scale
/// with scale_out, which must not be L.scale).  Block per row, blockDim = 256.
__global__ void swiglu_kernel(const float* Y, Layout L, int dff, void* act, float* scale_out) {
  const int r = blockIdx.x;
  auto value = [&](int i) { return lm::dm::silu_mul(load_out(Y, L, 2 * dff, r, i), load_out(Y, L, 2 * dff, r, dff + i)); };
  float m = 0.0f;
  if (scale_out != nullptr)
    for (int i = threadIdx.x; i < dff; i += blockDim.x) m = fmaxf(m, fabsf(value(i)));
  const float s = row_scale(m, scale_out, r);
  for (int i = threadIdx.x; i < dff; i += blockDim.x) store_act(act, L, dff, r, i, value(i) * s);
}

/// Logits rows: GEMM output -> dense [n, vocab].
__global__ void logits_kernel(const float* Y, Layout L, int vocab, float* out) {
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) out[std::size_t(r) * vocab + i] = load_out(Y, L, vocab, r, i);
}

/// One logits row's greedy token and its softmax probability (ForwardResult::greedy_prob).
struct GreedyOut {
  int id;
  float prob;
};

/// Greedy token of each logits row, read from the LM head's GEMM output Y (the values
/// logits_kernel would write), and its probability 1 / sum_i exp(l_i - l_max): thread t scans
/// ids t, t + 256, ... keeping its best (dm::greedy_better: higher logit, then lower id) and an
/// online sum of exp(l_i - best) rescaled whenever the best grows; then a fixed shared-memory
/// tree of the 256 (best, sum) pairs (sums rescaled to the larger best).  block 256.
__global__ void argmax_kernel(const float* Y, Layout L, int vocab, GreedyOut* out) {
  __shared__ float s_v[256], s_s[256];
  __shared__ int s_i[256];
  const int r = blockIdx.x;
  float bv = -INFINITY, sum = 0.0f;
  int bi = -1;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = load_out(Y, L, vocab, r, i);
    if (bi < 0 || lm::dm::greedy_better(v, i, bv, bi)) {
      sum = bi < 0 ? 1.0f : sum * expf(bv - v) + 1.0f;
      bv = v;
      bi = i;
    } else {
      sum += expf(v - bv);
    }
  }
  s_v[threadIdx.x] = bv;
  s_i[threadIdx.x] = bi;
  s_s[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const int oi = s_i[threadIdx.x + s];
      if (oi >= 0) {
        const float ov = s_v[threadIdx.x + s], os = s_s[threadIdx.x + s];
        if (s_i[threadIdx.x] < 0) {
          s_v[threadIdx.x] = ov;
          s_i[threadIdx.x] = oi;
          s_s[threadIdx.x] = os;
        } else if (lm::dm::greedy_better(ov, oi, s_v[threadIdx.x], s_i[threadIdx.x])) {
          s_s[threadIdx.x] = s_s[threadIdx.x] * expf(s_v[threadIdx.x] - ov) + os;
          s_v[threadIdx.x] = ov;
          s_i[threadIdx.x] = oi;
        } else {
          s_s[threadIdx.x] += os * expf(ov - s_v[threadIdx.x]);
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = GreedyOut{s_i[0], 1.0f / s_s[0]};
}

/// The pending rows a commit appends, without a host-to-device copy when it can: rows 0..n-1
/// (commit_all: the prefill, AR decoding) need no list, up to kCommitInline rows (FAFO's
/// accepted rows) travel by value in the launch's parameters, longer lists in device memory.
constexpr int kCommitInline = 64;
struct CommitRows {
  const int* list;          // device list (more than kCommitInline rows), else null
  int inline_rows[kCommitInline];
  int identity;             // 1: row i is i
  __host__ __device__ int operator[](int i) const { return identity ? i : list ? list[i] : inline_rows[i]; }
};

#if defined(ICMLKIT_CUDA_EMU)
inline void icmlkit_emu_pointers(const CommitRows& r, std::vector<const void*>& out) { out.push_back(r.list); }
#endif

/// Appends pending rows rows[0..n) at slots base.. of every (layer, KV head).
/// grid (n, n_layers * nkv), block hd (rows on x: gridDim.y is limited to 65535).
__global__ void commit_kernel(const float* pk, const float* pv, std::size_t pend_layer_stride, CommitRows rows, int base, int nkv,
                              int hd, int n_ctx, float* Kc, float* Vc) {
  const int i = blockIdx.x, lh = blockIdx.y, e = threadIdx.x;
  const int layer = lh / nkv, g = lh % nkv;
  const std::size_t src = layer * pend_layer_stride + (std::size_t(rows[i]) * nkv + g) * hd + e;
  const std::size_t dst = (std::size_t(lh) * n_ctx + base + i) * hd + e;
  Kc[dst] = pk[src];
  Vc[dst] = pv[src];
}

/// N(0, std^2) weights from a counter-based generator (splitmix64 + Box-Muller), narrowed to t.
__device__ __forceinline__ std::uint64_t splitmix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__global__ void random_kernel(void* w, WType t, std::size_t n, std::uint64_t seed, float sd) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const std::uint64_t z = splitmix(seed ^ splitmix(i));
    const double u1 = ((z >> 11) + 1.0) * (1.0 / 9007199254740993.0), u2 = (splitmix(z) >> 11) * (1.0 / 9007199254740992.0);
    const float v = static_cast<float>(sd * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2));
    if (t == WType::f32) static_cast<float*>(w)[i] = v;
    else static_cast<std::uint16_t*>(w)[i] = lm::dm::narrow(v, t);
  }
}

__global__ void fill_kernel(float* p, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) p[i] = v;
}

/// Batches of at most this many rows are padded for graph reuse (Impl::forward).
constexpr int kPadRowsMax = 64;
/// Rows a batch of n <= kPadRowsMax rows is padded to: n up to 4, then the next power of two
/// up to 8, then the next multiple of 8 (at most 7 padding rows; 0 stays 0).
int padded_rows(int n) {
  if (n <= 4) return n;
  if (n <= 8) return 8;
  return (n + 7) / 8 * 8;
}

int grid_for(std::size_t n, int block = 256) { return static_cast<int>(std::min<std::size_t>((n + block - 1) / block, 65535)); }

}  // namespace

// ---- the engine ---------------------------------------------------------------------------------

struct CudaEngine::Impl {
  lm::ModelConfig c;
  WType wt = WType::f32;
  bool invariant = true;
  int chunk_rows = kInvariantRows;  // rows per GEMM chunk in invariant mode
  int dev = 0;
  std::string dev_name;
  cublasHandle_t blas = nullptr;
  cudaStream_t st = nullptr;
  DevBuf workspace;

  struct DevLayer {
    DevBuf attn_norm, ffn_norm;
    DevMat qkv, wo, gu, down;
  };
  DevMat emb, head;  // head unused (rows = 0) when tied
  DevBuf out_norm;
  std::vector<DevLayer> layers;

  DevBuf Kc, Vc;        // [n_layers, nkv, n_ctx, hd]
  DevBuf pk, pv;        // [n_layers, Rcap, nkv, hd]
  int pend_cap = 0, pend_rows = 0, len = 0;
  DevBuf x, q, act, Y, meta, logits, rowsbuf, part, ids;
  DevBuf scale_a, scale_b;  // f16 weights: per-row GEMM input scales (two: swiglu reads one, writes the other)
  PinnedBuf upload_stage, ids_host;  // metadata + RoPE tables going up; greedy ids coming back
  std::unique_ptr<lm::RopeCache> rope_cache;  // made by check_config, once the config is known
  std::vector<float> rope_scratch;
  std::vector<int> meta_scratch;

  ~Impl() {
    drop_graphs();
    if (blas) cublasDestroy(blas);
    if (st) cudaStreamDestroy(st);
  }

  void init_device() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      cudaGetLastError();
      // Without a GPU and its driver the runtime reports "driver version is insufficient";
      // say plainly that no usable GPU was found and keep the runtime's words as the detail.
      throw InputError("--device cuda: no usable CUDA GPU or driver found",
                       e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) : "cudaGetDeviceCount = 0");
    }
    cuda_check(cudaSetDevice(dev), "cudaSetDevice");
    dev_name = "cuda:0 " + device_name(dev);
    cublas_check(cublasCreate(&blas), "cublasCreate");
    cublas_check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    cuda_check(cudaStreamCreate(&st), "cudaStreamCreate");
    cublas_check(cublasSetStream(blas, st), "cublasSetStream");
    workspace.reserve(std::size_t(32) << 20);  // a fixed workspace: no allocation inside graph capture
    cublas_check(cublasSetWorkspace(blas, workspace.p, workspace.bytes), "cublasSetWorkspace");
    const char* env = std::getenv("ICMLKIT_CUDA_GRAPHS");
    if (env != nullptr && std::string(env) != "0" && std::string(env) != "1")
      throw UsageError(std::string("ICMLKIT_CUDA_GRAPHS must be 0 or 1, not '") + env + "'");
    graphs_on = !(env && std::string(env) == "0");
    if (const char* rows = std::getenv("ICMLKIT_CUDA_INVARIANT_ROWS"); rows != nullptr) {
      int v = 0;
      const char* end = rows + std::strlen(rows);
      const auto [ptr, ec] = std::from_chars(rows, end, v);
      if (ec != std::errc() || ptr != end || *rows == '\0')
        throw UsageError(std::string("ICMLKIT_CUDA_INVARIANT_ROWS must be an integer in [1, 1024], not '") + rows + "'");
      set_chunk_rows(v, "ICMLKIT_CUDA_INVARIANT_ROWS");
    }
  }

  void set_chunk_rows(int rows, const char* what) {
    if (rows < 1 || rows > 1024) throw UsageError(std::string(what) + " must be in [1, 1024], not " + std::to_string(rows));
    if (rows != chunk_rows) drop_graphs();
    chunk_rows = rows;
  }

  void check_config() {
    c.validate("CUDA engine");
    lm::require_blocks(lm::Runner::cuda_engine, c);
    if (c.head_dim() > kMaxHd) throw InputError("head_dim " + std::to_string(c.head_dim()) + " above the CUDA engine's 256");
    rope_cache = std::make_unique<lm::RopeCache>(c);
  }

  void alloc_cache() {
    const std::size_t n = std::size_t(c.n_layers) * c.n_kv_heads * c.n_ctx * c.head_dim() * sizeof(float);
    Kc.reserve(n, true);
    Vc.reserve(n, true);
  }

  void upload(DevMat& m, const std::vector<const lm::Matrix*>& parts) {
    m.rows = 0;
    m.cols = parts[0]->cols;
    for (auto* p : parts) m.rows += p->rows;
    const std::size_t n = std::size_t(m.rows) * m.cols;
    m.buf.reserve(n * wsize(wt));
    std::size_t at = 0;
    std::vector<float> rowf(m.cols);
    if (wt == WType::f32) {
      std::vector<float> h(n);
      for (auto* p : parts)
        for (int r = 0; r < p->rows; ++r, at += m.cols) p->row_f32(r, h.data() + at);
      cuda_check(cudaMemcpy(m.buf.p, h.data(), n * 4, cudaMemcpyHostToDevice), "upload weights");
    } else {
      std::vector<std::uint16_t> h(n);
      for (auto* p : parts)
        for (int r = 0; r < p->rows; ++r, at += m.cols) {
          if (p->is_half() && wt == WType::f16) {
            std::memcpy(h.data() + at, p->half.data() + std::size_t(r) * m.cols, m.cols * 2);
            continue;
          }
          p->row_f32(r, rowf.data());
          for (int i = 0; i < m.cols; ++i) h[at + i] = lm::dm::narrow(rowf[i], wt);
        }
      cuda_check(cudaMemcpy(m.buf.p, h.data(), n * 2, cudaMemcpyHostToDevice), "upload weights");
    }
  }

  void upload_vec(DevBuf& b, const std::vector<float>& v) {
    b.reserve(v.size() * 4);
    cuda_check(cudaMemcpy(b.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload norm");
  }

  /// Whether every matrix of `model` is exactly representable in t.
  static bool exact_in(const lm::Model& model, WType t) {
    auto ok = [t](const lm::Matrix& m) {
      if (m.is_half()) return t == WType::f16;
      for (float v : m.data)
        if (lm::dm::widen(lm::dm::narrow(v, t), t) != v) return false;
      return true;
    };
    if (!ok(model.token_embd) || (!model.config.tied && !ok(model.output))) return false;
    for (const auto& L : model.layers)
      for (const lm::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
        if (!ok(*m)) return false;
    return true;
  }

  void random_mat(DevMat& m, int rows, int cols, std::uint64_t seed, double sd) {
    m.rows = rows;
    m.cols = cols;
    const std::size_t n = std::size_t(rows) * cols;
    m.buf.reserve(n * wsize(wt));
    ICMLKIT_LAUNCH(random_kernel, grid_for(n), 256, 0)(m.buf.p, wt, n, seed, static_cast<float>(sd));
    launch_check("random weights");
  }
  void ones(DevBuf& b, int n) {
    b.reserve(std::size_t(n) * 4);
    ICMLKIT_LAUNCH(fill_kernel, grid_for(n), 256, 0)(b.as<float>(), n, 1.0f);
    launch_check("fill");
  }

  Layout layout(int R) const {
    Layout L;
    L.t = wt;
    L.nparts = wt == WType::f32 ? 1 : 2;
    L.P = invariant ? chunk_rows : std::max(1, R);
    return L;
  }
  /// Rows of a GEMM buffer for R activation rows.
  static std::size_t buf_rows(const Layout& L, int R) { return L.rows(R); }

  /// Y [R, O] (chunked layout) = act [R, K] W^T.
  void gemm(const DevMat& W, const Layout& L, int R) {
    const float one = 1.0f, zero = 0.0f;
    const int chunks = (R + L.P - 1) / L.P, n = L.P * L.nparts;
    for (int ch = 0; ch < chunks; ++ch) {
      const char* b = static_cast<const char*>(act.p) + std::size_t(ch) * n * W.cols * wsize(wt);
      float* y = Y.as<float>() + std::size_t(ch) * n * W.rows;
      cublas_check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, W.rows, n, W.cols, &one, W.buf.p, cuda_type(wt), W.cols, b,
                                cuda_type(wt), W.cols, &zero, y, CUDA_R_32F, W.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    }
  }

  /// Grows every per-forward buffer for a forward of R rows, nl logits rows, nsplit attention
  /// splits, meta_ints metadata and rope_floats RoPE table entries (drops the graphs when one
  /// moves).  The constructors call it for kPadRowsMax rows, so graphed batches never move one.
  void reserve_buffers(int R, int nl, int nsplit, std::size_t meta_ints, std::size_t rope_floats) {
    const int d = c.d_model, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads, dff = c.d_ff;
    const int dq = nh * hd, dkv = nkv * hd;
    const Layout L = layout(R), LH = layout(std::max(1, nl));
    grow(ids, std::size_t(std::max(1, nl)) * sizeof(GreedyOut));
    grow(part, std::size_t(R) * nh * nsplit * (2 + hd) * 4, false, true);  // doubling: splits grow with the context
    grow(meta, std::max<std::size_t>((rope_floats + meta_ints) * 4, 1 << 16), false, true);  // RoPE tables, then metadata
    const int Kmax = std::max({d, dq, dff}), Omax = std::max({dq + 2 * dkv, d, 2 * dff});
    grow(x, std::size_t(R) * d * 4);
    grow(q, std::size_t(R) * dq * 4);
    grow(act, std::max(buf_rows(L, R) * Kmax, buf_rows(LH, std::max(1, nl)) * d) * wsize(wt), true);
    grow(Y, std::max(buf_rows(L, R) * Omax, buf_rows(LH, std::max(1, nl)) * std::size_t(c.vocab_size)) * 4);
    grow(logits, std::size_t(std::max(1, nl)) * c.vocab_size * 4);
    if (wt == WType::f16) {  // f16's range ends at 65504: each GEMM input row is scaled into it
      grow(scale_a, std::size_t(std::max({R, nl, 1})) * 4);
      grow(scale_b, std::size_t(std::max({R, nl, 1})) * 4);
    }
    if (R > pend_cap) {
      const int cap = std::max(R, 2 * pend_cap);
      const std::size_t n = std::size_t(c.n_layers) * cap * nkv * hd * 4;
      // Zeroed: a layer skipped by skip_attn leaves its pending rows unwritten and commit still
      // copies them (self-speculative drafts; never attended, but an uninitialised read).
      DevBuf nk, nv;
      nk.reserve(n, true);
      nv.reserve(n, true);
      std::swap(pk, nk);
      std::swap(pv, nv);
      pend_cap = cap;  // only once the buffers exist: a failed cudaMalloc leaves the old pair consistent
      drop_graphs();
    }
  }

  /// reserve_buffers for the batches graphs are made for: kPadRowsMax rows and logits rows,
  /// attention splits for up to 4096 keys, two views with explicit lists of 1024 slots per head.
  void reserve_for_graphs() {
    const int nlh = c.n_layers * c.n_kv_heads, keys = std::min(c.n_ctx, 4096) + kPadRowsMax;
    const std::size_t meta_ints = 4 * std::size_t(kPadRowsMax) + 1 + 4 * std::size_t(nlh) + std::size_t(kPadRowsMax) * kPadRowsMax +
                                  std::size_t(nlh) * std::min(c.n_ctx, 1024);
    reserve_buffers(kPadRowsMax, kPadRowsMax, (keys + lm::dm::kAttnBlockKeys - 1) / lm::dm::kAttnBlockKeys, meta_ints,
                    std::size_t(kPadRowsMax) * c.head_dim());
  }

  /// Device pointers of one forward call (fixed for a graph key while no buffer moves).
  struct Plan {
    int R = 0, nl = 0, nsplit = 1;
    bool greedy = false;
    Layout L, LH;
    Meta m{};
    const int* lrows = nullptr;
    const float *cs = nullptr, *sn = nullptr;
    std::size_t pstride = 0;
    float *sa = nullptr, *sb = nullptr;  // f16 weights only: row scales (GemmLayout::scale)
  };

  /// Grows `b` to n bytes (with `doubling`, to at least twice its size, so a slowly growing
  /// need moves it O(log) times); records that cached graphs are stale when it moved.
  void grow(DevBuf& b, std::size_t n, bool zero = false, bool doubling = false) {
    if (n <= b.bytes) return;
    b.reserve(doubling ? std::max(n, 2 * b.bytes) : n, zero);
    drop_graphs();
  }

  /// Launches the whole forward (layers, head, logits) on the stream.
  void enqueue(const Plan& P, const lm::ForwardOptions& opt) {
    const int R = P.R, d = c.d_model, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads, dff = c.d_ff;
    const int dq = nh * hd, dkv = nkv * hd, nlh = c.n_layers * nkv;
    const Layout& L = P.L;
    Layout La = L, Lb = L, LHa = P.LH;  // GEMM outputs of inputs scaled into scale_a / scale_b
    La.scale = P.sa;
    Lb.scale = P.sb;
    LHa.scale = P.sa;
    ICMLKIT_LAUNCH(embed_kernel, R, 256, st)(emb.buf.p, wt, P.m.tokens, d, x.as<float>());
    launch_check("embedding");
    const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
    const int rope_threads = std::max(32, ((hd / 2 + 31) / 32) * 32);
    // A sublayer's residual add (x += Y, Y in layout Lb) waits in Y for the next RMSNorm, which
    // applies it in the same kernel (residual_norm_kernel): one launch fewer per sublayer.
    bool pending = false;
    auto norm = [&](const DevBuf& w, const char* what) {
      ICMLKIT_LAUNCH(residual_norm_kernel, R, 256, st)(x.as<float>(), pending ? Y.as<float>() : nullptr, Lb, true, nullptr, d,
                                                       w.as<float>(), c.rms_eps, act.p, L, P.sa);
      launch_check(what);
      pending = false;
    };
    for (int l = 0; l < c.n_layers; ++l) {
      DevLayer& D = layers[l];
      float* lpk = pk.as<float>() + l * P.pstride;
      float* lpv = pv.as<float>() + l * P.pstride;
      if (opt.skip_attn.empty() || !opt.skip_attn[l]) {
        norm(D.attn_norm, "attention norm");
        gemm(D.qkv, L, R);
        ICMLKIT_LAUNCH(qkv_post_kernel, dim3(R, nh + 2 * nkv), rope_threads, st)(Y.as<float>(), La, dq + 2 * dkv, nh, nkv, hd, P.cs, P.sn,
                                                                        c.rope_style == lm::RopeStyle::interleaved, q.as<float>(), lpk, lpv);
        launch_check("rope");
        ICMLKIT_LAUNCH(attention_kernel, dim3(R * nh, P.nsplit), 32 * kAttnWarps, st)(q.as<float>(), nh, nkv, hd, c.n_ctx, l, nlh,
                                                                             Kc.as<float>(), Vc.as<float>(), lpk, lpv, P.m, scale,
                                                                             part.as<float>());
        launch_check("attention");
        if (P.sb == nullptr) {
          ICMLKIT_LAUNCH(attn_merge_kernel, R * nh, 128, st)(part.as<float>(), P.nsplit, nh, hd, act.p, L, nullptr);
          launch_check("attention merge");
        } else {  // f16: merged rows into q (free once attention has run), then scaled into act
          ICMLKIT_LAUNCH(attn_merge_kernel, R * nh, 128, st)(part.as<float>(), P.nsplit, nh, hd, act.p, L, q.as<float>());
          launch_check("attention merge");
          ICMLKIT_LAUNCH(pack_act_kernel, R, 256, st)(q.as<float>(), dq, act.p, L, P.sb);
          launch_check("attention pack");
        }
        gemm(D.wo, L, R);
        pending = true;
      }
      if (opt.skip_mlp.empty() || !opt.skip_mlp[l]) {
        norm(D.ffn_norm, "MLP norm");
        gemm(D.gu, L, R);
        ICMLKIT_LAUNCH(swiglu_kernel, R, 256, st)(Y.as<float>(), La, dff, act.p, P.sb);
        launch_check("swiglu");
        gemm(D.down, L, R);
        pending = true;
      }
      if (opt.hidden) {  // eager only (graphs are not used with hidden states): x complete per layer
        if (pending) {
          ICMLKIT_LAUNCH(residual_kernel, R, 256, st)(Y.as<float>(), Lb, d, x.as<float>());
          launch_check("residual");
          pending = false;
        }
        cuda_check(cudaMemcpyAsync(hidden_host[l + 1], x.p, std::size_t(R) * d * 4, cudaMemcpyDeviceToHost, st), "hidden");
      }
    }
    // x is not read after this forward (the next one starts from the embedding), so the last
    // residual is only added where the LM head needs it: its logits rows.
    if (P.nl > 0) {
      const DevMat& H = c.tied ? emb : head;
      ICMLKIT_LAUNCH(residual_norm_kernel, P.nl, 256, st)(x.as<float>(), pending ? Y.as<float>() : nullptr, Lb, false, P.lrows, d,
                                                          out_norm.as<float>(), c.rms_eps, act.p, P.LH, P.sa);
      launch_check("output norm");
      gemm(H, P.LH, P.nl);
      if (P.greedy) {  // the argmax reads the head's output: the logits are never formed
        ICMLKIT_LAUNCH(argmax_kernel, P.nl, 256, st)(Y.as<float>(), LHa, c.vocab_size, ids.as<GreedyOut>());
        launch_check("argmax");
      } else {
        ICMLKIT_LAUNCH(logits_kernel, P.nl, 256, st)(Y.as<float>(), LHa, c.vocab_size, logits.as<float>());
        launch_check("logits");
      }
    }
  }

  // ---- CUDA graphs: a forward whose shape repeats (AR decoding: one row, one logits row) is
  // captured once and replayed with one launch.  Graph inputs live in device buffers at fixed
  // addresses, so replaying with new metadata computes the new batch; any buffer growth drops
  // every graph.  Disabled with ICMLKIT_CUDA_GRAPHS=0 or after a failed capture.
  using GraphKey = std::array<long long, 6>;
  struct GraphEntry {
    int seen = 0;
    cudaGraphExec_t exec = nullptr;
  };
  std::map<GraphKey, GraphEntry> graphs;
  CudaEngine::Stats stats;
  int captured = 0;     // instantiated graphs held (at most 64)
  int graph_nodes = 0;  // nodes of the last captured graph (kernels, cuBLAS's kernels, copies)
  bool graphs_on = true;
  std::vector<float*> hidden_host;

  void drop_graphs() {
    stats.graph_drops += graphs.empty() ? 0 : 1;
    for (auto& g : graphs)
      if (g.second.exec) cudaGraphExecDestroy(g.second.exec);
    graphs.clear();
    captured = 0;
  }

  /// Captures and instantiates the forward of plan P; null (graphs then off) on failure.
  cudaGraphExec_t capture(const Plan& P, const lm::ForwardOptions& opt) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool ok = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (ok) {
      try {
        enqueue(P, opt);
      } catch (const std::exception&) {
        ok = false;
      }
      ok = cudaStreamEndCapture(st, &g) == cudaSuccess && ok;
    }
    std::size_t nodes = 0;
    if (ok && cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess) graph_nodes = static_cast<int>(nodes);
    if (ok) ok = cudaGraphInstantiate(&exec, g, 0) == cudaSuccess;
    if (g) cudaGraphDestroy(g);
    if (!ok) {
      cudaGetLastError();
      if (exec) cudaGraphExecDestroy(exec);
      graphs_on = false;
      std::fprintf(stderr, "cuda engine: warning: CUDA graph capture failed; running without graphs\n");
      return nullptr;
    }
    return exec;
  }

  /// The forward pass; with opt.greedy_only, the logits stay on the device and only each
  /// logits row's greedy token comes back (ForwardResult::greedy).
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& opt) {
    const auto t_entry = std::chrono::steady_clock::now();
    lm::check_batch(c, [this](int, int) { return len; }, b, opt);
    using lm::Feature;
    const lm::Runner me = lm::Runner::cuda_engine;
    if (!opt.attn_rows.empty()) lm::require(me, Feature::attention_records, "use --device cpu, or --kv-policy streaming");
    if (opt.stop_after >= 0) lm::require(me, Feature::stop_after, "use --device cpu");
    if (opt.adapters && !opt.adapters->empty()) lm::require(me, Feature::adapters, "merge them, or use --device cpu");
    if (!opt.schedule.empty()) lm::require(me, Feature::block_schedule, "use --device cpu");
    const int R0 = b.size(), d = c.d_model, hd = c.head_dim(), nlh = c.n_layers * c.n_kv_heads, V = static_cast<int>(b.views.size());
    lm::ForwardResult res;
    res.logits_rows = lm::logits_rows_of(opt, R0);
    const int nl0 = static_cast<int>(res.logits_rows.size());
    ++stats.forwards;

    // Graph reuse: a small batch that may be graphed is padded to a bucket of rows (padding rows:
    // token 0 at position 0, full view, attending only themselves; padding logits rows repeat
    // row 0) and its metadata gets a fixed layout, so the launches depend only on (rows, views,
    // logits rows, splits): FAFO's batches of varying size and masks then share a few graphs.
    // Rows never depend on other rows, so the padding changes no real row's result (in the
    // batch-invariant mode not a bit: GEMM chunks are padded anyway).
    const bool graphable = graphs_on && !opt.hidden && opt.skip_attn.empty() && opt.skip_mlp.empty();
    const bool fixed = graphable && R0 <= kPadRowsMax;
    const int R = fixed ? padded_rows(R0) : R0, nl = fixed ? padded_rows(nl0) : nl0;

    // Metadata, one upload: tokens, row views, view counts and list offsets, in-batch key
    // offsets, logits rows, in-batch keys (R * R capacity in the fixed layout), explicit view slots.
    std::vector<int>& hm = meta_scratch;  // kept between forwards: no allocation once warm
    hm.clear();
    auto block = [&hm](std::size_t n) { const std::size_t at = hm.size(); hm.resize(at + n, 0); return at; };
    const std::size_t o_tok = block(R), o_rv = block(R), o_vc = block(std::size_t(V) * nlh), o_vo = block(std::size_t(V) * nlh),
                      o_nbo = block(R + 1), o_lr = block(nl);
    for (int r = 0; r < R0; ++r) { hm[o_tok + r] = b.rows[r].token; hm[o_rv + r] = b.rows[r].view; }
    for (int i = 0; i < nl0; ++i) hm[o_lr + i] = res.logits_rows[i];
    const std::size_t o_nb = hm.size();
    for (int r = 0; r < R; ++r) {  // each row's in-batch keys, sorted and unique, itself included
      const std::size_t at = hm.size();
      hm[o_nbo + r] = static_cast<int>(at - o_nb);
      if (r < R0) hm.insert(hm.end(), b.rows[r].attend.begin(), b.rows[r].attend.end());
      hm.push_back(r);
      std::sort(hm.begin() + at, hm.end());
      hm.erase(std::unique(hm.begin() + at, hm.end()), hm.end());
    }
    hm[o_nbo + R] = static_cast<int>(hm.size() - o_nb);
    const std::size_t n_nb = hm.size() - o_nb;
    if (fixed) hm.resize(o_nb + std::size_t(R) * R, 0);
    const std::size_t o_sl = hm.size();
    std::vector<int> view_max(V, 0);
    for (int v = 0; v < V; ++v)
      for (int lh = 0; lh < nlh; ++lh) {
        hm[o_vc + std::size_t(v) * nlh + lh] = b.views[v].count(lh, len);
        view_max[v] = std::max(view_max[v], b.views[v].count(lh, len));
        const auto* lists = b.views[v].lists();
        if (!lists) {
          hm[o_vo + std::size_t(v) * nlh + lh] = -1;
        } else {
          hm[o_vo + std::size_t(v) * nlh + lh] = static_cast<int>(hm.size() - o_sl);
          hm.insert(hm.end(), (*lists)[lh].begin(), (*lists)[lh].end());
        }
      }
    const std::size_t n_sl = hm.size() - o_sl;
    int max_keys = 1;
    for (int r = 0; r < R; ++r)
      max_keys = std::max(max_keys, view_max[r < R0 ? b.rows[r].view : 0] + hm[o_nbo + r + 1] - hm[o_nbo + r]);

    // RoPE tables: cos [R, hd/2], then sin [R, hd/2]; padding rows are position 0 (cos 1, sin 0).
    std::vector<float>& rope = rope_scratch;
    const std::size_t half = hd / 2;
    rope.resize(2 * std::size_t(R) * half);
    rope_cache->tables(b, rope.data(), rope.data() + std::size_t(R) * half);
    std::fill(rope.begin() + std::size_t(R0) * half, rope.begin() + std::size_t(R) * half, 1.0f);
    std::fill(rope.begin() + std::size_t(R + R0) * half, rope.end(), 0.0f);

    // Buffers (every growth happens here, before any capture).
    Plan P;
    P.R = R;
    P.nl = nl;
    P.L = layout(R);
    P.LH = layout(std::max(1, nl));
    P.greedy = opt.greedy_only;
    P.nsplit = (max_keys + lm::dm::kAttnBlockKeys - 1) / lm::dm::kAttnBlockKeys;
    reserve_buffers(R, nl, P.nsplit, hm.size(), rope.size());
    if (wt == WType::f16) {
      P.sa = scale_a.as<float>();
      P.sb = scale_b.as<float>();
    }
    pend_rows = R0;
    P.pstride = std::size_t(pend_cap) * c.n_kv_heads * hd;
    // One upload: the RoPE tables (R * hd floats, so the metadata's address depends only on R and
    // a graph's pointers stay valid), then the metadata.
    const std::size_t rope_bytes = rope.size() * 4, meta_bytes = hm.size() * 4;
    upload_stage.reserve(rope_bytes + meta_bytes);
    std::memcpy(upload_stage.p, rope.data(), rope_bytes);
    std::memcpy(upload_stage.as<char>() + rope_bytes, hm.data(), meta_bytes);
    cuda_check(cudaMemcpyAsync(meta.p, upload_stage.p, rope_bytes + meta_bytes, cudaMemcpyHostToDevice, st), "upload batch");
    const int* dm_ = reinterpret_cast<const int*>(meta.as<char>() + rope_bytes);
    P.m = Meta{dm_ + o_tok, dm_ + o_rv, dm_ + o_vc, dm_ + o_vo, dm_ + o_sl, dm_ + o_nbo, dm_ + o_nb};
    P.lrows = dm_ + o_lr;
    P.cs = meta.as<float>();
    P.sn = P.cs + std::size_t(R) * hd / 2;

    if (opt.hidden) {
      res.hidden.assign(c.n_layers + 1, lm::Matrix(R, d));
      hidden_host.assign(c.n_layers + 1, nullptr);
      for (int i = 0; i <= c.n_layers; ++i) hidden_host[i] = res.hidden[i].data.data();
    }
    cudaGraphExec_t exec = nullptr;
    std::chrono::steady_clock::time_point t_prep_end{};  // set when a capture follows the preparation
    if (graphable) {
      // In the fixed layout the in-batch key and slot list lengths are data, not shape.
      const GraphKey key{R, V, fixed ? -1LL : static_cast<long long>(n_nb), fixed ? -1LL : static_cast<long long>(n_sl), nl,
                         (invariant ? 1 : 0) + 2LL * (P.greedy ? 1 : 0) + 4LL * P.nsplit};
      if (graphs.size() > 1024) {  // forget shapes seen once or twice (FAFO's varying batches)
        for (auto it = graphs.begin(); it != graphs.end();) it = it->second.exec ? std::next(it) : graphs.erase(it);
      }
      GraphEntry& ge = graphs[key];
      if (!ge.exec && ++ge.seen >= 3 && captured < 64) {
        t_prep_end = std::chrono::steady_clock::now();
        ge.exec = capture(P, opt);
        captured += ge.exec ? 1 : 0;
        stats.graph_captures += ge.exec ? 1 : 0;
      }
      exec = ge.exec;
    }
    if (t_prep_end == std::chrono::steady_clock::time_point{}) t_prep_end = std::chrono::steady_clock::now();
    stats.host_prep_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t_prep_end - t_entry).count();
    if (exec) {
      ++stats.graph_replays;
      cuda_check(cudaGraphLaunch(exec, st), "cudaGraphLaunch");
    } else {
      if (opt.hidden) {  // the embedding output, then enqueue copies each layer's
        ICMLKIT_LAUNCH(embed_kernel, R, 256, st)(emb.buf.p, wt, P.m.tokens, d, x.as<float>());
        launch_check("embedding");
        cuda_check(cudaMemcpyAsync(hidden_host[0], x.p, std::size_t(R) * d * 4, cudaMemcpyDeviceToHost, st), "hidden");
      }
      enqueue(P, opt);
    }
    if (nl0 > 0 && P.greedy) {  // the real rows' results only: padding rows come last
      ids_host.reserve(std::size_t(nl0) * sizeof(GreedyOut));
      cuda_check(cudaMemcpyAsync(ids_host.p, ids.p, std::size_t(nl0) * sizeof(GreedyOut), cudaMemcpyDeviceToHost, st), "greedy ids");
    } else if (nl0 > 0) {
      res.logits = lm::Matrix(nl0, c.vocab_size);
      cuda_check(cudaMemcpyAsync(res.logits.data.data(), logits.p, std::size_t(nl0) * c.vocab_size * 4, cudaMemcpyDeviceToHost, st),
                 "logits");
    }
    cuda_check(cudaStreamSynchronize(st), "forward");
    if (nl0 > 0 && P.greedy) {
      const GreedyOut* g = ids_host.as<GreedyOut>();
      res.greedy.resize(nl0);
      res.greedy_prob.resize(nl0);
      for (int i = 0; i < nl0; ++i) {
        res.greedy[i] = g[i].id;
        res.greedy_prob[i] = g[i].prob;
      }
    }
    return res;
  }

  /// Appends pending rows `rows` (n of them; null: rows 0..n-1) to the cache.
  void commit(const int* rows, int n) {
    for (int i = 0; rows && i < n; ++i)
      if (rows[i] < 0 || rows[i] >= pend_rows) throw InputError("commit of row " + std::to_string(rows[i]) + " outside the last batch");
    if (len + std::size_t(n) > std::size_t(c.n_ctx))
      throw InputError("KV cache full: n_ctx = " + std::to_string(c.n_ctx) + " positions");
    if (n == 0) return;
    CommitRows cr{};
    cr.identity = rows ? 0 : 1;
    if (rows && n <= kCommitInline) {
      std::copy(rows, rows + n, cr.inline_rows);
    } else if (rows) {
      rowsbuf.reserve(std::size_t(n) * 4);
      cuda_check(cudaMemcpyAsync(rowsbuf.p, rows, std::size_t(n) * 4, cudaMemcpyHostToDevice, st), "upload rows");
      cr.list = rowsbuf.as<int>();
    }
    const int hd = c.head_dim(), nkv = c.n_kv_heads;
    ICMLKIT_LAUNCH(commit_kernel, dim3(static_cast<unsigned>(n), c.n_layers * nkv), hd, st)(
        pk.as<float>(), pv.as<float>(), std::size_t(pend_cap) * nkv * hd, cr, len, nkv, hd, c.n_ctx, Kc.as<float>(), Vc.as<float>());
    launch_check("commit");
    len += n;
  }
};

CudaEngine::CudaEngine(const lm::Model& model, bool batch_invariant, WeightPrecision weights) : p_(std::make_unique<Impl>()) {
  Impl& I = *p_;
  I.c = model.config;
  I.invariant = batch_invariant;
  I.check_config();
  I.init_device();
  switch (weights) {
    case WeightPrecision::f32: I.wt = WType::f32; break;
    case WeightPrecision::f16: I.wt = WType::f16; break;
    case WeightPrecision::bf16: I.wt = WType::bf16; break;
    case WeightPrecision::automatic: {
      WType want = WType::f32;
      if (model.token_embd.is_half() || model.stored == io::h5::FloatStorage::f16) want = WType::f16;
      else if (model.stored == io::h5::FloatStorage::bf16) want = WType::bf16;
      I.wt = want != WType::f32 && Impl::exact_in(model, want) ? want : WType::f32;
      break;
    }
  }
  I.upload(I.emb, {&model.token_embd});
  if (!I.c.tied) I.upload(I.head, {&model.output});
  I.upload_vec(I.out_norm, model.output_norm);
  I.layers.resize(I.c.n_layers);
  for (int l = 0; l < I.c.n_layers; ++l) {
    const lm::Layer& L = model.layers[l];
    auto& D = I.layers[l];
    I.upload_vec(D.attn_norm, L.attn_norm);
    I.upload_vec(D.ffn_norm, L.ffn_norm);
    I.upload(D.qkv, {&L.wq, &L.wk, &L.wv});
    I.upload(D.wo, {&L.wo});
    I.upload(D.gu, {&L.w_gate, &L.w_up});
    I.upload(D.down, {&L.w_down});
  }
  I.alloc_cache();
  I.reserve_for_graphs();
}

CudaEngine::CudaEngine(const lm::ModelConfig& config, std::uint64_t seed, WeightPrecision weights, double sd, bool batch_invariant)
    : p_(std::make_unique<Impl>()) {
  Impl& I = *p_;
  I.c = config;
  I.invariant = batch_invariant;
  I.check_config();
  I.init_device();
  I.wt = weights == WeightPrecision::f16 ? WType::f16 : weights == WeightPrecision::bf16 ? WType::bf16 : WType::f32;
  const auto& c = I.c;
  const int hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  std::uint64_t s = seed;
  I.random_mat(I.emb, c.vocab_size, c.d_model, ++s, sd);
  if (!c.tied) I.random_mat(I.head, c.vocab_size, c.d_model, ++s, sd);
  I.ones(I.out_norm, c.d_model);
  I.layers.resize(c.n_layers);
  for (auto& D : I.layers) {
    I.ones(D.attn_norm, c.d_model);
    I.ones(D.ffn_norm, c.d_model);
    I.random_mat(D.qkv, dq + 2 * dkv, c.d_model, ++s, sd);
    I.random_mat(D.wo, c.d_model, dq, ++s, sd);
    I.random_mat(D.gu, 2 * c.d_ff, c.d_model, ++s, sd);
    I.random_mat(D.down, c.d_model, c.d_ff, ++s, sd);
  }
  I.alloc_cache();
  I.reserve_for_graphs();
  cuda_check(cudaDeviceSynchronize(), "random model");
}

CudaEngine::~CudaEngine() = default;

const lm::ModelConfig& CudaEngine::config() const noexcept { return p_->c; }
std::string CudaEngine::device() const { return p_->dev_name; }
lm::ForwardResult CudaEngine::forward(const lm::Batch& batch, const lm::ForwardOptions& options) { return p_->forward(batch, options); }
std::vector<int> CudaEngine::forward_greedy(const lm::Batch& batch, const lm::ForwardOptions& options) {
  lm::ForwardOptions o = options;
  o.greedy_only = true;
  return p_->forward(batch, o).greedy;
}
void CudaEngine::commit(const std::vector<int>& rows) { p_->commit(rows.data(), static_cast<int>(rows.size())); }
void CudaEngine::commit_all() {
  p_->commit(nullptr, p_->pend_rows);
}
void CudaEngine::truncate(int n) { p_->len = std::min(p_->len, std::max(0, n)); }
void CudaEngine::clear() {
  p_->len = 0;
  p_->pend_rows = 0;
}
int CudaEngine::size() const { return p_->len; }
bool CudaEngine::batch_invariant() const noexcept { return p_->invariant; }
void CudaEngine::set_batch_invariant(bool on) noexcept { p_->invariant = on; }
void CudaEngine::set_invariant_rows(int rows) { p_->set_chunk_rows(rows, "invariant rows"); }
int CudaEngine::invariant_rows() const noexcept { return p_->chunk_rows; }
WType CudaEngine::weight_type() const noexcept { return p_->wt; }
std::int64_t CudaEngine::bytes_per_forward() const noexcept {
  const Impl& I = *p_;
  auto bytes = [&I](const DevMat& m) { return std::int64_t(m.rows) * m.cols * std::int64_t(wsize(I.wt)); };
  std::int64_t n = I.c.tied ? bytes(I.emb) : bytes(I.head);
  for (const auto& D : I.layers) n += bytes(D.qkv) + bytes(D.wo) + bytes(D.gu) + bytes(D.down);
  return n;
}
void CudaEngine::synchronize() const { cuda_check(cudaDeviceSynchronize(), "synchronize"); }
void CudaEngine::set_graphs(bool on) noexcept {
  p_->drop_graphs();
  p_->graphs_on = on;
}
bool CudaEngine::graphs() const noexcept { return p_->graphs_on; }
int CudaEngine::graph_nodes() const noexcept { return p_->graph_nodes; }
CudaEngine::Stats CudaEngine::stats() const noexcept { return p_->stats; }
std::vector<std::pair<std::string, long long>> CudaEngine::counters() const {
  const Stats& t = p_->stats;
  return {{"forwards", t.forwards},         {"graph_replays", t.graph_replays}, {"graph_captures", t.graph_captures},
          {"graph_drops", t.graph_drops}, {"host_prep_ns", t.host_prep_ns}};
}

nlohmann::json CudaEngine::settings() const {
  const Impl& I = *p_;
  return {{"weights", I.wt == WType::f32 ? "f32" : I.wt == WType::f16 ? "f16" : "bf16"},
          {"batch_invariant", I.invariant},
          {"invariant_rows", I.chunk_rows},
          {"cuda_graphs", I.graphs_on}};
}

std::unique_ptr<lm::Engine> make_cuda_engine(const lm::Model& model, bool batch_invariant, const std::string& weights) {
  WeightPrecision w = WeightPrecision::automatic;
  if (weights != "auto") {
    switch (io::h5::parse_float_storage(weights, "--weights")) {  // UsageError for another name
      case io::h5::FloatStorage::f32: w = WeightPrecision::f32; break;
      case io::h5::FloatStorage::f16: w = WeightPrecision::f16; break;
      case io::h5::FloatStorage::bf16: w = WeightPrecision::bf16; break;
    }
  }
  return std::make_unique<CudaEngine>(model, batch_invariant, w);
}

double measure_copy_bandwidth(std::size_t bytes, int reps) {
  DevBuf a, b;
  a.reserve(bytes, true);
  b.reserve(bytes, true);
  cudaEvent_t e0, e1;
  cuda_check(cudaEventCreate(&e0), "event");
  cuda_check(cudaEventCreate(&e1), "event");
  float best = 1e30f;
  for (int i = 0; i < reps + 1; ++i) {
    cuda_check(cudaEventRecord(e0), "event");
    cuda_check(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "D2D copy");
    cuda_check(cudaEventRecord(e1), "event");
    cuda_check(cudaEventSynchronize(e1), "event");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, e0, e1), "event");
    if (i > 0) best = std::min(best, ms);  // the first copy warms up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * double(bytes) / (double(best) * 1e-3);
}

}  // namespace icmlkit::kernels
