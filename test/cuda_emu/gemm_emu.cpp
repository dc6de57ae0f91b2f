// kernels/gemm.cu compiled as C++ against the CUDA emulator (include/cuda_runtime.h).
#include "kernels/gemm.cu"
