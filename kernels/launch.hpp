// Kernel launches spelled so that both nvcc and the CPU emulator (test/cuda_emu) compile them.
//
//   ICMLKIT_LAUNCH(kernel, grid, block, stream)(args...)
//
// is `kernel<<<grid, block, 0, stream>>>(args...)` under nvcc.  Where the emulator's
// cuda_runtime.h is included instead of CUDA's, it defines ICMLKIT_LAUNCH itself: the launch
// then runs the kernel's threads on the CPU (test/cuda_emu/include/cuda_runtime.h).
#pragma once

#if !defined(ICMLKIT_LAUNCH)
#define ICMLKIT_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif
