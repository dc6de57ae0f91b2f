// The CUDA emulator (include/cuda_runtime.h, include/cublas_v2.h): fibers for CUDA threads,
// host memory for device memory, immediate streams, recorded graphs, an Eigen GEMM for cuBLAS.
#include "cuda_runtime.h"
#include "cublas_v2.h"

#include <Eigen/Core>
#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "num/half.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ICMLKIT_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ICMLKIT_EMU_ASAN 1
#endif
#if defined(ICMLKIT_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace icmlkit::cuda_emu {

struct Stream {
  bool capturing = false;
  bool invalidated = false;
  Graph* graph = nullptr;
};
struct Event {
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};
struct Graph {
  std::vector<std::function<void()>> ops;
};
struct BlasHandle {
  cudaStream_t stream = nullptr;
};

namespace {

namespace ctx = boost::context;

// ---- errors ---------------------------------------------------------------------------------------
thread_local cudaError_t last_error = cudaSuccess;  // cudaGetLastError
thread_local cudaError_t sync_error = cudaSuccess;  // reported by the next synchronising call

/// Records an execution fault: one line on stderr, the error for cudaGetLastError and for the
/// next synchronising call.
void fault(cudaError_t e, const std::string& what) {
  std::fprintf(stderr, "cuda-emu: %s\n", what.c_str());
  last_error = e;
  if (sync_error == cudaSuccess) sync_error = e;
}
cudaError_t take_sync_error() {
  const cudaError_t e = sync_error;
  sync_error = cudaSuccess;
  return e;
}

// ---- device memory ----------------------------------------------------------------------------
std::mutex mem_mu;
std::map<std::uintptr_t, std::size_t>& live() {
  static std::map<std::uintptr_t, std::size_t> m;
  return m;
}
/// Page-locked host allocations (cudaMallocHost), guarded by mem_mu.
std::set<const void*>& pinned() {
  static std::set<const void*> s;
  return s;
}
/// Graphs and graph execs that exist.
std::set<const Graph*>& live_graphs() {
  static std::set<const Graph*> s;
  return s;
}

/// The live allocation [base, base + size] (end included) that holds address a, if any.
bool holder(std::uintptr_t a, std::uintptr_t& base, std::size_t& size) {
  std::lock_guard<std::mutex> lock(mem_mu);
  auto it = live().upper_bound(a);
  if (it == live().begin()) return false;
  --it;
  base = it->first;
  size = it->second;
  return a - base <= size;
}
/// Whether [p, p + bytes) lies inside one live allocation.
bool in_device(const void* p, std::size_t bytes) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (!holder(a, base, size)) return false;
  const std::size_t off = a - base;
  return bytes <= size - off && (bytes == 0 || off < size);
}
/// Whether p points into, or one past the end of, a live allocation.
bool touches_device(const void* p) { return in_device(p, 0); }

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// ---- streams -------------------------------------------------------------------------------------
/// Runs `op` now, or records it when `s` is under capture.
void submit(cudaStream_t s, std::function<void()> op) {
  if (s != nullptr && s->capturing) {
    s->graph->ops.push_back(std::move(op));
    return;
  }
  op();
}
/// Streams and graphs that exist (handles are checked against them).  Like CUDA's, the calls
/// that use them are meant for one host thread at a time.
std::set<Stream*>& live_streams() {
  static std::set<Stream*> s;
  return s;
}
/// Whether any stream is being captured (device-wide synchronisation is then refused).
bool capturing_any() {
  for (Stream* s : live_streams())
    if (s->capturing) return true;
  return false;
}

// ---- fibers ----------------------------------------------------------------------------------------
#if defined(ICMLKIT_EMU_ASAN)
constexpr std::size_t kStackBytes = 1 << 20;
#else
constexpr std::size_t kStackBytes = 64 << 10;
#endif
/// Stack tops are staggered by up to 63 cache lines: tops at one offset modulo the stack size
/// fall into the same cache sets, and every switch between lanes then misses.
constexpr std::size_t kStagger = 64 * 64;  // one page: base_of relies on it
static_assert(kStackBytes % kStagger == 0);

/// Lane stacks, reused across blocks and launches: mmap'd, with an inaccessible guard page
/// below each, so a kernel that overflows its stack faults instead of corrupting memory.
struct StackPool {
  std::vector<void*> free;
  static std::size_t page() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
  static std::size_t bytes() { return page() + kStackBytes + kStagger; }
  ~StackPool() {
    for (void* p : free) munmap(p, bytes());
  }
};
thread_local StackPool stack_pool;
thread_local ctx::stack_context last_stack;

/// Boost.Context stack allocator over the pool.
struct PoolStack {
  ctx::stack_context allocate() {
    void* p = nullptr;
    if (!stack_pool.free.empty()) {
      p = stack_pool.free.back();
      stack_pool.free.pop_back();
    } else {
      p = mmap(nullptr, StackPool::bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, StackPool::page(), PROT_NONE);  // the guard page
    }
#if defined(ICMLKIT_EMU_ASAN)
    // A reused stack still carries the redzones of the frames last run on it.
    __asan_unpoison_memory_region(static_cast<char*>(p) + StackPool::page(), kStackBytes + kStagger);
#endif
    static thread_local std::size_t count = 0;
    const std::size_t skew = (count++ * 64 * 37) % kStagger;  // 37: coprime with the 64 slots
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(p) + StackPool::bytes() - skew;
    last_stack = sc;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { stack_pool.free.push_back(base_of(sc)); }
  /// The page-aligned mapping holding a stack: its guard page, then 1..kStagger bytes below the
  /// stack's bottom (kStagger is a page).
  static void* base_of(const ctx::stack_context& sc) {
    const auto top = reinterpret_cast<std::uintptr_t>(sc.sp);
    return reinterpret_cast<void*>(((top - sc.size - 1) & ~std::uintptr_t(kStagger - 1)) - StackPool::page());
  }
};

enum class At { run, barrier, shuffle, done };

/// Thrown inside a lane to unwind a kernel abandoned after a fault in its block.
struct Abandon {};

struct Block;

/// One CUDA thread slot of a launch: a fiber that runs the kernel body once per block.
struct Lane {
  ctx::fiber fib;   // the lane while suspended
  ctx::fiber back;  // the scheduler while the lane runs
  uint3 tid;
  At at = At::done;
  unsigned barriers = 0;  // barriers passed in this block
  unsigned mask = 0;
  std::uint64_t bits = 0, got = 0;
  Shfl kind = Shfl::idx;
  int arg = 0, width = 32;
  std::string error;
  void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
#if defined(ICMLKIT_EMU_ASAN)
  void* fake = nullptr;
  const void* sched_bottom = nullptr;
  std::size_t sched_size = 0;
#endif
};

struct Block {
  const std::function<void()>* body = nullptr;
  std::vector<std::unique_ptr<Lane>> lanes;
  bool over = false;  // the launch is over: lanes parked at a sync point unwind, the others return
};

thread_local Lane* cur_lane = nullptr;
thread_local Block* cur_block = nullptr;

/// Switches from the running lane back to the scheduler; on return the lane runs again.
void lane_yield(Lane& L) {
#if defined(ICMLKIT_EMU_ASAN)
  __sanitizer_start_switch_fiber(&L.fake, L.sched_bottom, L.sched_size);
#endif
  L.back = std::move(L.back).resume();
#if defined(ICMLKIT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(L.fake, &L.sched_bottom, &L.sched_size);
#endif
}

/// Resumes lane L from the scheduler until its next sync point or the end of its thread.
void lane_resume(Lane& L) {
  threadIdx = L.tid;
  cur_lane = &L;
#if defined(ICMLKIT_EMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, L.stack_bottom, L.stack_size);
#endif
  L.fib = std::move(L.fib).resume();
#if defined(ICMLKIT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  cur_lane = nullptr;
}

void make_lane(Block& B, Lane& L) {
  Block* blk = &B;
  Lane* lane = &L;
  L.fib = ctx::fiber(std::allocator_arg, PoolStack(), [blk, lane](ctx::fiber&& sched) {
    lane->back = std::move(sched);
#if defined(ICMLKIT_EMU_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &lane->sched_bottom, &lane->sched_size);
#endif
    while (!blk->over) {
      try {
        (*blk->body)();
      } catch (const Abandon&) {
      } catch (const ctx::detail::forced_unwind&) {
        throw;  // Boost.Context unwinding a fiber that is being destroyed
      } catch (const std::exception& e) {
        lane->error = e.what();
      } catch (...) {
        lane->error = "unknown exception";
      }
      lane->at = At::done;
      if (blk->over) break;
      lane_yield(*lane);
    }
#if defined(ICMLKIT_EMU_ASAN)
    __sanitizer_start_switch_fiber(nullptr, lane->sched_bottom, lane->sched_size);
#endif
    return std::move(lane->back);
  });
  L.stack_bottom = static_cast<char*>(last_stack.sp) - last_stack.size;
  L.stack_size = last_stack.size;
}

/// Whether lanes and blocks run in reverse index order (ICMLKIT_CUDA_EMU_ORDER=reverse).
bool& reverse_flag() {
  static bool r = [] {
    const char* e = std::getenv("ICMLKIT_CUDA_EMU_ORDER");
    const std::string v = e != nullptr ? e : "";
    if (!v.empty() && v != "forward" && v != "reverse")
      std::fprintf(stderr, "cuda-emu: ICMLKIT_CUDA_EMU_ORDER is forward or reverse (got '%s'): running forward\n", v.c_str());
    return v == "reverse";
  }();
  return r;
}

std::string where(const char* name) {
  return std::string("kernel ") + name + " block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + ")";
}

/// Runs the current block's n threads to completion; an error message on a fault.
std::string run_block(Block& B, int n, const char* name) {
  const bool rev = reverse_flag();
  for (int i = 0; i < n; ++i) {
    Lane& L = *B.lanes[i];
    L.tid = uint3{unsigned(i) % blockDim.x, unsigned(i) / blockDim.x % blockDim.y, unsigned(i) / (blockDim.x * blockDim.y)};
    L.at = At::run;
    L.barriers = 0;
    L.error.clear();
  }
  const int nwarps = (n + 31) / 32;
  for (;;) {
    for (int k = 0; k < n; ++k) {
      Lane& L = *B.lanes[rev ? n - 1 - k : k];
      if (L.at == At::run) lane_resume(L);
      if (!L.error.empty()) return where(name) + " thread " + std::to_string(rev ? n - 1 - k : k) + ": " + L.error;
    }
    bool moved = false;
    for (int w = 0; w < nwarps; ++w) {
      const int lo = w * 32, hi = std::min(n, lo + 32);
      const unsigned existing = hi - lo == 32 ? 0xffffffffu : (1u << (hi - lo)) - 1u;
      int at_shfl = 0;
      for (int i = lo; i < hi; ++i) at_shfl += B.lanes[i]->at == At::shuffle;
      if (at_shfl == 0) continue;
      if (at_shfl != hi - lo) continue;  // judged below, once nothing else can move
      const Lane& first = *B.lanes[lo];
      for (int i = lo; i < hi; ++i) {
        const Lane& L = *B.lanes[i];
        if (L.mask != existing)
          return where(name) + " warp " + std::to_string(w) + ": shuffle mask " + hex(reinterpret_cast<void*>(std::uintptr_t(L.mask))) +
                 " is not the warp's lanes (partial-mask shuffles are not emulated)";
        if (L.kind != first.kind || L.width != first.width)
          return where(name) + " warp " + std::to_string(w) + ": lanes in different shuffles";
      }
      for (int i = lo; i < hi; ++i) {
        Lane& L = *B.lanes[i];
        const int lane = i - lo, seg = lane / L.width * L.width;
        int src = lane;
        switch (L.kind) {
          case Shfl::idx: src = seg + ((L.arg % L.width) + L.width) % L.width; break;
          case Shfl::xor_: src = lane ^ L.arg; break;
          case Shfl::up: src = lane - L.arg; break;
          case Shfl::down: src = lane + L.arg; break;
        }
        if (src < seg || src >= seg + L.width || lo + src >= hi) src = lane;
        L.got = B.lanes[lo + src]->bits;
      }
      for (int i = lo; i < hi; ++i) B.lanes[i]->at = At::run;
      moved = true;
    }
    if (moved) continue;
    int done = 0, waiting = 0;
    for (int i = 0; i < n; ++i) {
      done += B.lanes[i]->at == At::done;
      waiting += B.lanes[i]->at == At::barrier;
    }
    if (done == n) return {};
    // CUDA: __syncthreads in code that not every thread of the block reaches is undefined (the
    // programming guide); the emulator opens a barrier only when all n threads wait at it.
    if (waiting == n) {
      for (int i = 1; i < n; ++i)
        if (B.lanes[i]->barriers != B.lanes[0]->barriers)
          return where(name) + ": threads 0 and " + std::to_string(i) + " wait at different __syncthreads (barriers passed " +
                 std::to_string(B.lanes[0]->barriers) + " and " + std::to_string(B.lanes[i]->barriers) + ")";
      for (int i = 0; i < n; ++i) {
        B.lanes[i]->at = At::run;
        ++B.lanes[i]->barriers;
      }
      continue;
    }
    for (int i = 0; i < n; ++i)
      if (B.lanes[i]->at == At::shuffle)
        return where(name) + " warp " + std::to_string(i / 32) + ": a shuffle that not every lane of the warp reaches (lane " +
               std::to_string(i % 32) + " waits; others have exited or wait at __syncthreads)";
    return where(name) + ": __syncthreads reached by " + std::to_string(waiting) + " of " + std::to_string(n) + " threads (" +
           std::to_string(done) + " exited without it)";
  }
}

thread_local bool in_launch = false;

/// Runs one launch now.
void run_launch(const LaunchSpec& s) {
  for (std::size_t i = 0; i < s.pointers.size(); ++i) {
    const void* p = s.pointers[i];
    if (p != nullptr && !touches_device(p)) {
      fault(cudaErrorIllegalAddress, std::string("kernel ") + s.name + ": device pointer " + std::to_string(i + 1) + " of its arguments (" +
                                         hex(p) + ") is not device memory");
      return;
    }
  }
  if (in_launch) {
    fault(cudaErrorLaunchFailure, std::string("kernel ") + s.name + " launched from inside a kernel (not emulated)");
    return;
  }
  in_launch = true;
  struct Done {
    ~Done() {
      in_launch = false;
      cur_block = nullptr;
    }
  } done;
  blockDim = uint3{s.block.x, s.block.y, s.block.z};
  gridDim = uint3{s.grid.x, s.grid.y, s.grid.z};
  const int n = static_cast<int>(s.block.x * s.block.y * s.block.z);
  Block B;
  B.body = &s.body;
  cur_block = &B;
  B.lanes.reserve(n);
  for (int i = 0; i < n; ++i) {
    B.lanes.push_back(std::make_unique<Lane>());
    make_lane(B, *B.lanes.back());
  }
  std::string err;
  const bool rev = reverse_flag();
  const std::uint64_t nblocks = std::uint64_t(s.grid.x) * s.grid.y * s.grid.z;
  for (std::uint64_t k = 0; k < nblocks && err.empty(); ++k) {
    const std::uint64_t b = rev ? nblocks - 1 - k : k;
    blockIdx = uint3{unsigned(b % s.grid.x), unsigned(b / s.grid.x % s.grid.y), unsigned(b / (std::uint64_t(s.grid.x) * s.grid.y))};
    err = run_block(B, n, s.name);
  }
  // Finish every lane: unwind those stopped at a sync point, let the others return.
  B.over = true;
  for (auto& L : B.lanes)
    while (L->fib) lane_resume(*L);
  if (!err.empty()) fault(cudaErrorLaunchFailure, err);
}

/// The running lane; aborts with a message when called outside a kernel (a device function
/// called from host code: a programming error, as on a GPU build it would not compile).
Lane& running_lane(const char* what) {
  if (cur_lane == nullptr) {
    std::fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
    std::abort();
  }
  return *cur_lane;
}

/// Parks the running lane at a sync point until the scheduler releases it.
void park(Lane& L, At at) {
  L.at = at;
  lane_yield(L);
  if (cur_block->over) throw Abandon{};
}

}  // namespace

std::uint64_t shuffle(unsigned mask, std::uint64_t bits, Shfl kind, int arg, int width) {
  Lane& L = running_lane("a warp shuffle");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    throw std::runtime_error("shuffle width " + std::to_string(width) + " is not a power of 2 <= 32");
  L.mask = mask;
  L.bits = bits;
  L.kind = kind;
  L.arg = arg;
  L.width = width;
  park(L, At::shuffle);
  return L.got;
}

void set_reverse_order(bool on) { reverse_flag() = on; }

void enqueue_launch(LaunchSpec spec) {
  const dim3 g = spec.grid, b = spec.block;
  const std::uint64_t threads = std::uint64_t(b.x) * b.y * b.z;
  std::string bad;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) bad = "a zero extent";
  else if (threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) bad = "block of " + std::to_string(threads) + " threads";
  else if (g.x > 2147483647u) bad = "grid.x above 2^31 - 1";
  else if (g.y > 65535 || g.z > 65535) bad = "grid.y or grid.z above 65535";
  if (!bad.empty()) {
    std::fprintf(stderr, "cuda-emu: kernel %s: invalid launch configuration: grid (%u,%u,%u) block (%u,%u,%u): %s\n", spec.name, g.x,
                 g.y, g.z, b.x, b.y, b.z, bad.c_str());
    last_error = cudaErrorInvalidConfiguration;
    if (spec.stream != nullptr && spec.stream->capturing) spec.stream->invalidated = true;
    return;
  }
  auto shared = std::make_shared<LaunchSpec>(std::move(spec));
  cudaStream_t st = shared->stream;
  submit(st, [shared]() { run_launch(*shared); });
}

}  // namespace icmlkit::cuda_emu

using namespace icmlkit::cuda_emu;

void __syncthreads() {
  Lane& L = running_lane("__syncthreads");
  park(L, At::barrier);
}

// ---- runtime API --------------------------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return cudaGetErrorName(e);
  }
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidValue;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "icmlkit CUDA emulator (CPU)");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = std::size_t(16) << 30;
  p->multiProcessorCount = 1;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return capturing_any() ? cudaErrorStreamCaptureUnsupported : take_sync_error(); }
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  *total_bytes = std::size_t(16) << 30;
  std::size_t used = 0;
  std::lock_guard<std::mutex> lock(mem_mu);
  for (const auto& a : live()) used += a.second;
  *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > (std::size_t(16) << 30)) return cudaErrorMemoryAllocation;
  void* q = nullptr;
  if (posix_memalign(&q, 256, bytes) != 0) return cudaErrorMemoryAllocation;
  std::memset(q, 0xff, bytes);  // never-written memory reads as NaN
  std::lock_guard<std::mutex> lock(mem_mu);
  live()[reinterpret_cast<std::uintptr_t>(q)] = bytes;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* q = std::malloc(bytes);
  if (q == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(mem_mu);
  pinned().insert(q);
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(mem_mu);
    if (pinned().erase(p) == 0) {
      std::fprintf(stderr, "cuda-emu: cudaFreeHost of %s, which cudaMallocHost did not return (or was freed)\n", hex(p).c_str());
      return cudaErrorInvalidValue;
    }
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(mem_mu);
    auto it = live().find(reinterpret_cast<std::uintptr_t>(p));
    if (it == live().end()) {
      std::fprintf(stderr, "cuda-emu: cudaFree of %s, which cudaMalloc did not return (or was freed)\n", hex(p).c_str());
      return cudaErrorInvalidDevicePointer;
    }
    live().erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

namespace {
/// Checks a copy's pointers against `kind`; one stderr line and false when they disagree.
bool copy_ok(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, const char* what) {
  if (bytes == 0) return true;
  const bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) return (in_device(dst, bytes) || !touches_device(dst)) && (in_device(src, bytes) || !touches_device(src));
  const bool ok = (dd ? in_device(dst, bytes) : !touches_device(dst)) && (sd ? in_device(src, bytes) : !touches_device(src));
  if (!ok)
    std::fprintf(stderr, "cuda-emu: %s of %zu bytes, kind %d: %s -> %s do not match the kind (or run past an allocation)\n", what, bytes,
                 int(kind), hex(src).c_str(), hex(dst).c_str());
  return ok;
}
}  // namespace

cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  if (bytes > 0 && !in_device(p, bytes)) {
    std::fprintf(stderr, "cuda-emu: cudaMemset of %zu bytes at %s outside device memory\n", bytes, hex(p).c_str());
    return cudaErrorInvalidValue;
  }
  std::memset(p, value, bytes);
  return take_sync_error();
}
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s) {
  if (bytes > 0 && !in_device(p, bytes)) {
    std::fprintf(stderr, "cuda-emu: cudaMemsetAsync of %zu bytes at %s outside device memory\n", bytes, hex(p).c_str());
    return cudaErrorInvalidValue;
  }
  submit(s, [p, value, bytes]() { std::memset(p, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (!copy_ok(dst, src, bytes, kind, "cudaMemcpy")) return cudaErrorInvalidValue;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return take_sync_error();
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (!copy_ok(dst, src, bytes, kind, "cudaMemcpyAsync")) return cudaErrorInvalidValue;
  const bool recorded = s != nullptr && s->capturing;  // checked again at replay: its memory may be gone by then
  submit(s, [=]() {
    if (recorded && !copy_ok(dst, src, bytes, kind, "cudaMemcpyAsync (replayed)")) {
      fault(cudaErrorIllegalAddress, "a replayed copy's memory is no longer allocated");
      return;
    }
    std::memmove(dst, src, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new Stream;
  live_streams().insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (live_streams().erase(s) == 0) return cudaErrorInvalidResourceHandle;
  if (s->capturing) delete s->graph;
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s != nullptr && s->capturing) {
    s->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  return take_sync_error();
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s == nullptr || live_streams().count(s) == 0) return cudaErrorStreamCaptureUnsupported;
  if (s->capturing) return cudaErrorIllegalState;
  s->capturing = true;
  s->invalidated = false;
  s->graph = new Graph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  *g = nullptr;
  if (s == nullptr || !s->capturing) return cudaErrorIllegalState;
  s->capturing = false;
  Graph* graph = s->graph;
  s->graph = nullptr;
  if (s->invalidated) {
    delete graph;
    return cudaErrorStreamCaptureInvalidated;
  }
  live_graphs().insert(graph);
  *g = graph;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  if (live_graphs().count(g) == 0) return cudaErrorInvalidResourceHandle;
  *exec = new Graph(*g);
  live_graphs().insert(*exec);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (live_graphs().count(exec) == 0) return cudaErrorInvalidResourceHandle;
  for (const auto& op : exec->ops) submit(s, op);
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, std::size_t* num_nodes) {
  if (live_graphs().count(g) == 0 || num_nodes == nullptr) return cudaErrorInvalidResourceHandle;
  if (nodes != nullptr) return cudaErrorNotSupported;
  *num_nodes = g->ops.size();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  if (live_graphs().erase(g) == 0) return cudaErrorInvalidResourceHandle;
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return cudaGraphDestroy(exec); }

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new Event;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  submit(s, [e]() {
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
  });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return take_sync_error(); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

// ---- cuBLAS ----------------------------------------------------------------------------------------
cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new BlasHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void* ws, std::size_t bytes) {
  if (bytes > 0 && !in_device(ws, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
std::size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
float element(const void* p, cudaDataType_t t, std::size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(p)[i];
  return t == CUDA_R_16F ? icmlkit::num::f16_to_f32(h) : icmlkit::num::bf16_to_f32(h);
}
/// op(X) as a dense rows x cols float matrix, X column-major with leading dimension ld.
Eigen::MatrixXf operand(const void* p, cudaDataType_t t, int ld, cublasOperation_t op, int rows, int cols) {
  Eigen::MatrixXf m(rows, cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i)
      m(i, j) = op == CUBLAS_OP_N ? element(p, t, std::size_t(j) * ld + i) : element(p, t, std::size_t(i) * ld + j);
  return m;
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType_t Atype, int lda, const void* B, cudaDataType_t Btype, int ldb,
                            const void* beta, void* C, cudaDataType_t Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, arows) || ldb < std::max(1, brows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const std::size_t a_bytes = (std::size_t(lda) * (acols - 1) + arows) * type_bytes(Atype);
  const std::size_t b_bytes = (std::size_t(ldb) * (bcols - 1) + brows) * type_bytes(Btype);
  const std::size_t c_bytes = (std::size_t(ldc) * (n - 1) + m) * 4;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto run = [=]() {
    const char* bad = k > 0 && !in_device(A, a_bytes) ? "A" : k > 0 && !in_device(B, b_bytes) ? "B" : !in_device(C, c_bytes) ? "C" : nullptr;
    if (bad != nullptr) {
      fault(cudaErrorIllegalAddress, std::string("cublasGemmEx: operand ") + bad + " (m " + std::to_string(m) + ", n " +
                                         std::to_string(n) + ", k " + std::to_string(k) + ") runs outside device memory");
      return;
    }
    Eigen::MatrixXf prod = Eigen::MatrixXf::Zero(m, n);
    const int threads = Eigen::nbThreads();
    Eigen::setNbThreads(1);  // small products: OpenMP's start-up and spinning cost more than they save
    if (k > 0) prod = operand(A, Atype, lda, ta, m, k) * operand(B, Btype, ldb, tb, k, n);
    Eigen::setNbThreads(threads);
    Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> c(static_cast<float*>(C), m, n, Eigen::OuterStride<>(ldc));
    if (be == 0.0f) c = al * prod;  // beta = 0: C is not read
    else c = al * prod + be * c;
  };
  submit(h->stream, run);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  return cublasGemmEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}
