// The CUDA emulator itself: that it computes what CUDA would, and that it reports what a GPU or
// compute-sanitizer would report.  Truth: serial host arithmetic, and CUDA's documented rules.
#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/launch.hpp"
#include "num/half.hpp"
#include "util/rng.hpp"

namespace {

/// Block sum of x[0..n) in a fixed shared-memory tree (blockDim = 256), then a warp shuffle
/// finish: both sync mechanisms.
__global__ void block_sum_kernel(const float* x, int n, float* out) {
  __shared__ float s[256];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k >= 32; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float w = s[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    if (threadIdx.x == 0) out[blockIdx.x] = w;
  }
}

/// Reads a neighbour's shared-memory write with no barrier in between: a race.
__global__ void racy_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = float(threadIdx.x + 100 * blockIdx.x);
  out[blockIdx.x * 64 + threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

/// Half the block skips the barrier and exits.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

/// Odd threads wait at one barrier more than even ones before the common one.
__global__ void uneven_barrier_kernel(float* out) {
  for (int i = 0; i < int(threadIdx.x % 2); ++i) __syncthreads();
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

/// A shuffle that only half the warp reaches.
__global__ void divergent_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

/// A shuffle among the first 16 lanes only (a partial mask: not emulated).
__global__ void partial_mask_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
  out[threadIdx.x] = v;
}

/// A struct argument holding a device pointer, listed for the launch checks by the overload below.
struct Slice {
  float* data;
  int n;
};
void icmlkit_emu_pointers(const Slice& s, std::vector<const void*>& out) { out.push_back(s.data); }
__global__ void slice_kernel(Slice s) {
  if (int(threadIdx.x) < s.n) s.data[threadIdx.x] += 1.0f;
}

__global__ void scale_kernel(float* x, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

__global__ void index_kernel(int* out) {
  const int flat_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int flat_thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[flat_block * blockDim.x * blockDim.y * blockDim.z + flat_thread] = flat_block * 1000 + flat_thread;
}

template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  REQUIRE(cudaMalloc(&d, h.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}
template <class T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

}  // namespace

TEST_CASE("emulator: barriers and shuffles reduce a block exactly as the serial tree does") {
  std::vector<float> x(1000);
  for (int i = 0; i < 1000; ++i) x[i] = float(i % 7) - 3.0f + 0.25f * float(i % 3);
  float* dx = device_copy(x);
  float* dout = nullptr;
  REQUIRE(cudaMalloc(&dout, 3 * sizeof(float)) == cudaSuccess);
  ICMLKIT_LAUNCH(block_sum_kernel, 3, 256, nullptr)(dx, 1000, dout);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  // Truth: the values are multiples of 1/4 and small, so every order of float sums is exact.
  const double want = std::accumulate(x.begin(), x.end(), 0.0);
  for (float v : host_copy(dout, 3)) CHECK(v == want);
  cudaFree(dx);
  cudaFree(dout);
}

TEST_CASE("emulator: thread and block indices cover a 3-d launch once each") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int n = 12 * 24;
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, n * sizeof(int)) == cudaSuccess);
  ICMLKIT_LAUNCH(index_kernel, grid, block, nullptr)(d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<int> h = host_copy(d, n);
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) CHECK(h[b * 24 + t] == b * 1000 + t);
  cudaFree(d);
}

TEST_CASE("emulator: a read of another thread's write without a barrier differs between thread orders") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 3 * 64 * sizeof(float)) == cudaSuccess);
  std::vector<std::vector<float>> got;
  for (bool rev : {false, true}) {
    icmlkit::cuda_emu::set_reverse_order(rev);
    ICMLKIT_LAUNCH(racy_kernel, 3, 64, nullptr)(d);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    got.push_back(host_copy(d, 3 * 64));
  }
  icmlkit::cuda_emu::set_reverse_order(false);
  CHECK(got[0] != got[1]);
  cudaFree(d);
}

TEST_CASE("emulator: divergent barriers and shuffles fail the launch as a GPU would hang or fault") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * sizeof(float)) == cudaSuccess);
  ICMLKIT_LAUNCH(divergent_barrier_kernel, 1, 64, nullptr)(d);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);  // reported again at the next sync, once
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  ICMLKIT_LAUNCH(uneven_barrier_kernel, 1, 64, nullptr)(d);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  cudaDeviceSynchronize();
  ICMLKIT_LAUNCH(divergent_shuffle_kernel, 1, 32, nullptr)(d);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  cudaDeviceSynchronize();
  ICMLKIT_LAUNCH(partial_mask_kernel, 1, 32, nullptr)(d);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  cudaDeviceSynchronize();
  // The emulator recovers: a correct launch afterwards runs.
  ICMLKIT_LAUNCH(scale_kernel, 1, 64, nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaSuccess);
  cudaFree(d);
}

TEST_CASE("emulator: launch limits and pointer arguments are checked") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * sizeof(float)) == cudaSuccess);
  ICMLKIT_LAUNCH(scale_kernel, dim3(1, 70000), 32, nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ICMLKIT_LAUNCH(scale_kernel, 1, 1025, nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ICMLKIT_LAUNCH(scale_kernel, 0, 32, nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ICMLKIT_LAUNCH(scale_kernel, dim3(1, 1, 65536), 32, nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ICMLKIT_LAUNCH(scale_kernel, 1, dim3(1, 1, 65), nullptr)(d, 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  // Pointers inside struct arguments are checked through icmlkit_emu_pointers.
  ICMLKIT_LAUNCH(slice_kernel, 1, 32, nullptr)(Slice{d, 8});
  CHECK(cudaGetLastError() == cudaSuccess);
  std::vector<float> host_slice(8, 0.0f);
  ICMLKIT_LAUNCH(slice_kernel, 1, 32, nullptr)(Slice{host_slice.data(), 8});
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  cudaDeviceSynchronize();
  CHECK(host_slice[0] == 0.0f);
  std::vector<float> host(64, 1.0f);
  ICMLKIT_LAUNCH(scale_kernel, 1, 64, nullptr)(host.data(), 64, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  cudaDeviceSynchronize();
  CHECK(host[0] == 1.0f);  // the kernel did not run
  cudaFree(d);
  ICMLKIT_LAUNCH(scale_kernel, 1, 64, nullptr)(d, 64, 2.0f);  // freed memory
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  cudaDeviceSynchronize();
}

TEST_CASE("emulator: copies are checked against their direction and the allocation's size, pinned host memory is host memory") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 16 * sizeof(float)) == cudaSuccess);
  std::vector<float> h(32, 3.0f);
  CHECK(cudaMemcpy(d, h.data(), 16 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(d, h.data(), 17 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(h.data(), d, 16 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d + 4, d, 8 * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
  float* fresh = nullptr;
  REQUIRE(cudaMalloc(&fresh, 4 * sizeof(float)) == cudaSuccess);
  CHECK(std::isnan(host_copy(fresh, 4)[2]));  // never-written device memory reads as NaN
  CHECK(cudaFree(fresh) == cudaSuccess);
  CHECK(cudaFree(fresh) == cudaErrorInvalidDevicePointer);
  float* pinned = nullptr;  // page-locked host memory is host memory to every check
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemcpy(pinned, d, 16 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(pinned[15] == 3.0f);
  CHECK(cudaMemcpy(d, pinned, 16 * sizeof(float), cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue);
  CHECK(cudaFreeHost(h.data()) == cudaErrorInvalidValue);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(cudaFreeHost(pinned) == cudaErrorInvalidValue);
  cudaFree(d);
}

TEST_CASE("emulator: stream capture records launches, copies and GEMMs, and replay uses the buffers' new contents") {
  cudaStream_t st = nullptr;
  REQUIRE(cudaStreamCreate(&st) == cudaSuccess);
  std::vector<float> h{1, 2, 3, 4};
  float* d = device_copy(h);
  float* staged = nullptr;
  REQUIRE(cudaMalloc(&staged, 4 * sizeof(float)) == cudaSuccess);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(staged, d, 4 * sizeof(float), cudaMemcpyDeviceToDevice, st) == cudaSuccess);
  ICMLKIT_LAUNCH(scale_kernel, 1, 32, st)(staged, 4, 10.0f);
  CHECK(cudaStreamSynchronize(st) == cudaErrorStreamCaptureUnsupported);  // invalidates the capture
  CHECK(cudaStreamEndCapture(st, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(g == nullptr);

  REQUIRE(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(staged, d, 4 * sizeof(float), cudaMemcpyDeviceToDevice, st) == cudaSuccess);
  ICMLKIT_LAUNCH(scale_kernel, 1, 32, st)(staged, 4, 10.0f);
  REQUIRE(cudaStreamEndCapture(st, &g) == cudaSuccess);
  CHECK(host_copy(staged, 4) != std::vector<float>({10, 20, 30, 40}));  // nothing ran while capturing
  REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, st) == cudaSuccess);
  CHECK(host_copy(staged, 4) == std::vector<float>({10, 20, 30, 40}));
  h = {5, 6, 7, 8};
  REQUIRE(cudaMemcpy(d, h.data(), 4 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, st) == cudaSuccess);
  CHECK(host_copy(staged, 4) == std::vector<float>({50, 60, 70, 80}));
  // A graph that outlives its buffer faults on replay instead of reading freed memory.
  cudaFree(staged);
  REQUIRE(cudaGraphLaunch(exec, st) == cudaSuccess);
  CHECK(cudaStreamSynchronize(st) == cudaErrorIllegalAddress);
  cudaGetLastError();
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaErrorInvalidResourceHandle);
  cudaFree(d);
  cudaStreamDestroy(st);
}

TEST_CASE("emulator: cublasGemmEx with f16 and bf16 operands matches a double product of the widened values") {
  // Row-major Y [n, m] = X [n, k] W^T with W [m, k], as the engine calls it (op T on W).
  const int m = 7, n = 5, k = 33;
  icmlkit::Rng rng(3);
  for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
    std::vector<float> w(m * k), x(n * k);
    for (float& v : w) v = static_cast<float>(rng.uniform(-1, 1));
    for (float& v : x) v = static_cast<float>(rng.uniform(-1, 1));
    std::vector<std::uint16_t> w16(m * k), x16(n * k);
    for (int i = 0; i < m * k; ++i) {
      w16[i] = t == CUDA_R_16F ? icmlkit::num::f32_to_f16(w[i]) : icmlkit::num::f32_to_bf16(w[i]);
      if (t != CUDA_R_32F) w[i] = t == CUDA_R_16F ? icmlkit::num::f16_to_f32(w16[i]) : icmlkit::num::bf16_to_f32(w16[i]);
    }
    for (int i = 0; i < n * k; ++i) {
      x16[i] = t == CUDA_R_16F ? icmlkit::num::f32_to_f16(x[i]) : icmlkit::num::f32_to_bf16(x[i]);
      if (t != CUDA_R_32F) x[i] = t == CUDA_R_16F ? icmlkit::num::f16_to_f32(x16[i]) : icmlkit::num::bf16_to_f32(x16[i]);
    }
    void *dw = nullptr, *dx = nullptr;
    float* dy = nullptr;
    if (t == CUDA_R_32F) {
      dw = device_copy(w);
      dx = device_copy(x);
    } else {
      dw = device_copy(w16);
      dx = device_copy(x16);
    }
    REQUIRE(cudaMalloc(&dy, n * m * sizeof(float)) == cudaSuccess);
    cublasHandle_t h = nullptr;
    REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dw, t, k, dx, t, k, &zero, dy, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    const std::vector<float> y = host_copy(dy, n * m);  // NaN-filled memory: beta = 0 must not read it
    for (int r = 0; r < n; ++r)
      for (int o = 0; o < m; ++o) {
        double want = 0;
        for (int i = 0; i < k; ++i) want += double(x[r * k + i]) * w[o * k + i];
        CHECK(std::fabs(y[r * m + o] - want) <= k * 1.2e-7 * 2);
      }
    // An operand that runs past its allocation is an illegal address, not a silent read.
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n + 1, k, &one, dw, t, k, dx, t, k, &zero, dy, CUDA_R_32F, m,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
    cudaGetLastError();
    cublasDestroy(h);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
  }
}
