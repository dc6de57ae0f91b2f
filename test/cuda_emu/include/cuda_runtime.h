// The CUDA runtime, emulated on the CPU, for testing the CUDA engine on machines without a GPU.
//
// test/cuda_emu builds kernels/*.cu as plain C++ against this header (in place of CUDA's own)
// and runs the GPU unit tests (test/unit/gpu) on it.  It implements the part of CUDA the
// engine uses, with the checks a GPU or compute-sanitizer would make:
//
// * Kernels (`ICMLKIT_LAUNCH(kernel, grid, block, stream)(args...)`, kernels/launch.hpp) run
//   block by block on the calling thread; each CUDA thread of a block is a fiber (Boost.Context)
//   that runs until it reaches __syncthreads() or a warp shuffle.  A barrier opens when every
//   thread of the block waits at it, all having passed the same number of barriers (the CUDA
//   programming guide leaves a barrier that some threads skip undefined: threads that exited
//   before it count as skipping it); a shuffle exchanges values when all lanes of its warp have
//   posted.  Anything else — a barrier some threads skip, threads at different barriers, a
//   shuffle that not every lane of its warp reaches, a partial mask — fails the launch.  Threads run in index order, or in reverse order with
//   ICMLKIT_CUDA_EMU_ORDER=reverse (or set_reverse_order): a kernel that reads another thread's
//   write without a barrier between them gives other results in the two orders.
// * Launch configurations are checked against CUDA's limits (block <= 1024 threads, grid.y and
//   grid.z <= 65535, no zero extent); every pointer argument of a kernel, and every pointer that
//   an icmlkit_emu_pointers overload lists for a struct argument, must be null or point into
//   live device memory.  Accesses inside kernels are bounds-checked only in an ASan build
//   (device memory is malloc'd memory).  Failures are reported as CUDA does, through cudaGetLastError
//   (cudaErrorInvalidConfiguration, cudaErrorIllegalAddress, cudaErrorLaunchFailure), with
//   one line on stderr saying why.
// * Device memory (cudaMalloc) is host memory, 256-byte aligned, filled with 0xff bytes (NaN
//   as float) so that reads of never-written memory show up.  Copies check their direction and
//   that the device side lies inside one live allocation.
// * Streams run their work at once (synchronously).  Stream capture records kernel launches,
//   async copies and cuBLAS calls, and a graph launch replays them with the captured arguments.
//
// Not emulated: concurrency between blocks, timing, the memory model beyond barriers, shared
// memory capacity; shared memory keeps the previous block's values instead of garbage; nvcc's
// fused multiply-adds (the host compiler does not contract).  Agreement here tests the
// engine's indexing, masking and bookkeeping; it says nothing of cuBLAS's algorithm choice,
// of bitwise results on a device, or of speed.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---- function and variable qualifiers -------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
/// Shared memory: one instance per OS thread, used by one block at a time.
#define __shared__ static thread_local

// ---- launch geometry --------------------------------------------------------------------------
/// A launch extent (CUDA's dim3).
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
/// A thread or block index, or an extent seen from inside a kernel (CUDA's uint3).  Trivial,
/// so that the per-thread copies below are plain TLS (no initialisation wrapper).
struct uint3 {
  unsigned x, y, z;
};

/// The running thread's index in its block, the block's index, and the extents (set by the
/// emulator before it resumes each thread).
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread uint3 blockDim;
extern __thread uint3 gridDim;
/// Lanes per warp.
constexpr int warpSize = 32;

// ---- errors, devices, memory, streams, events, graphs ---------------------------------------
/// CUDA's error codes (the ones the emulator returns, with CUDA's values).
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorIllegalState = 401,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

namespace icmlkit::cuda_emu {
struct Stream;
struct Event;
struct Graph;
}  // namespace icmlkit::cuda_emu
using cudaStream_t = icmlkit::cuda_emu::Stream*;
using cudaEvent_t = icmlkit::cuda_emu::Event*;
using cudaGraph_t = icmlkit::cuda_emu::Graph*;
using cudaGraphExec_t = icmlkit::cuda_emu::Graph*;
struct CUgraphNode_st;
using cudaGraphNode_t = CUgraphNode_st*;  ///< never dereferenced: the emulator only counts nodes

/// The fields of cudaDeviceProp that the toolkit reads.
struct cudaDeviceProp {
  char name[256];
  int major, minor;
  std::size_t totalGlobalMem;
  int multiProcessorCount;
  int warpSize;
  int maxThreadsPerBlock;
};

const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
/// The last launch error, cleared by the call.
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
/// One emulated device.
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);

cudaError_t cudaMalloc(void** p, std::size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
/// Page-locked host memory: plain host memory here (a host pointer to every check), tracked so
/// that cudaFreeHost refuses what cudaMallocHost did not return.
cudaError_t cudaMallocHost(void** p, std::size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemset(void* p, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
/// With nodes == nullptr: the graph's node count (one per captured launch, copy or GEMM).
/// A node list is not provided (cudaErrorNotSupported).
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, std::size_t* num_nodes);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- device-side functions ----------------------------------------------------------------------
/// Waits until every thread of the block that has not exited reaches this barrier.
void __syncthreads();

namespace icmlkit::cuda_emu {
/// How a shuffle picks its source lane.
enum class Shfl { idx, xor_, up, down };
/// Posts `bits` for the running lane's warp and returns the source lane's bits once all lanes
/// of the warp have posted.  `mask` must name every lane of the warp.
std::uint64_t shuffle(unsigned mask, std::uint64_t bits, Shfl kind, int arg, int width);
template <class T>
T shuffle_as(unsigned mask, T v, Shfl kind, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  b = shuffle(mask, b, kind, arg, width);
  T out;
  std::memcpy(&out, &b, sizeof(T));
  return out;
}
}  // namespace icmlkit::cuda_emu

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  return icmlkit::cuda_emu::shuffle_as(mask, v, icmlkit::cuda_emu::Shfl::idx, src, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return icmlkit::cuda_emu::shuffle_as(mask, v, icmlkit::cuda_emu::Shfl::xor_, lane_mask, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return icmlkit::cuda_emu::shuffle_as(mask, v, icmlkit::cuda_emu::Shfl::up, static_cast<int>(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return icmlkit::cuda_emu::shuffle_as(mask, v, icmlkit::cuda_emu::Shfl::down, static_cast<int>(delta), width);
}

inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline double cospi(double x) { return std::cos(3.14159265358979323846 * x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
/// Threads of one launch never run at the same time, so plain read-modify-write is atomic.
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

// ---- launches --------------------------------------------------------------------------------------
namespace icmlkit::cuda_emu {

/// One kernel launch: `body` runs CUDA thread `threadIdx` of block `blockIdx`.  `pointers`
/// lists the kernel's pointer arguments (checked against live device memory before it runs).
struct LaunchSpec {
  const char* name;
  dim3 grid, block;
  cudaStream_t stream;
  std::function<void()> body;
  std::vector<const void*> pointers;
};
/// Runs (or, while `stream` is being captured, records) one launch; errors go to
/// cudaGetLastError.
void enqueue_launch(LaunchSpec spec);
/// Runs the threads of each block (and the blocks) in reverse index order from now on when
/// `on` (ICMLKIT_CUDA_EMU_ORDER=reverse sets it at start-up).
void set_reverse_order(bool on);

/// Adds a launch argument's device pointers to `out`: the argument itself when it is a pointer;
/// for a struct, those that an `icmlkit_emu_pointers(const T&, std::vector<const void*>&)` found
/// by argument-dependent lookup lists (the code under test provides it for its structs).
template <class T>
void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(v));
  else if constexpr (requires { icmlkit_emu_pointers(v, out); }) icmlkit_emu_pointers(v, out);
}

/// `kernel<<<grid, block, 0, stream>>>` as an object: calling it with the arguments launches.
template <class... P>
struct Launcher {
  void (*kernel)(P...);
  const char* name;
  dim3 grid, block;
  cudaStream_t stream;
  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    LaunchSpec s{name, grid, block, stream, {}, {}};
    std::tuple<std::decay_t<P>...> a(static_cast<P>(std::forward<A>(args))...);  // by value, as CUDA copies them
    std::apply([&s](const auto&... v) { (collect_pointer(s.pointers, v), ...); }, a);
    s.body = [k = kernel, a]() { std::apply(k, a); };
    enqueue_launch(std::move(s));
  }
};
template <class... P>
Launcher<P...> launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, cudaStream_t stream) {
  return Launcher<P...>{kernel, name, grid, block, stream};
}

}  // namespace icmlkit::cuda_emu

/// kernels/launch.hpp's launch spelling, emulated.
#define ICMLKIT_LAUNCH(kernel, grid, block, stream) \
  ::icmlkit::cuda_emu::launcher(kernel, #kernel, dim3(grid), dim3(block), (stream))
