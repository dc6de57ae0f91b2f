// kernels/engine.cu compiled as C++ against the CUDA emulator (include/cuda_runtime.h).
#include "kernels/engine.cu"
