// A fork-join pool for the inference engine's short parallel loops (issue 37).
//
// A decode step is dozens of parallel loops of a few microseconds each.  With OpenMP the
// caller waits at every loop's end for every thread of the team: idle threads either spin
// (fast on a quiet machine, but a thread descheduled by another process then costs whole
// time slices) or sleep (robust, but every loop pays a wake-up).  Here the calling thread
// takes part and blocks are claimed one at a time from a shared counter, so the caller waits
// only for blocks a helper has actually claimed: a helper that has not woken up, or whose core
// is busy with another process, simply gets none, and the loop runs at one thread's speed
// instead of stalling.  Helpers spin for a short while after each loop (the next one usually
// follows within microseconds), then sleep.  Which thread runs a block never changes what the
// block computes, so results do not depend on the pool.
#pragma once

#include <type_traits>

namespace icmlkit {

/// Runs fn(ctx, b) for every b in [0, n), each exactly once, on the calling thread and up to
/// `threads` - 1 helper threads (started on first use, kept for the process), and returns when
/// all have finished.  threads <= 1, n <= 1 or a call from inside a block runs serially on the
/// caller.  Calls from different threads are serialised.  fn must not throw.
void parallel_blocks(int n, int threads, void (*fn)(void* ctx, int block), void* ctx) noexcept;

/// parallel_blocks with a callable f(int block).
template <class F>
void parallel_blocks(int n, int threads, F&& f) noexcept {
  parallel_blocks(n, threads, [](void* c, int b) { (*static_cast<std::remove_reference_t<F>*>(c))(b); },
                  const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace icmlkit
