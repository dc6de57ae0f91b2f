// cuBLAS matrix product on host buffers (row-major), the first operation of the CUDA backend.
#pragma once

#include <cstddef>

namespace icmlkit::kernels {

/// C[m, n] = A[m, k] * B[k, n], float32, row-major host arrays; copies to and from the
/// device.  Throws std::runtime_error with the CUDA/cuBLAS error text on failure.
void gemm_f32(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, float* c);

}  // namespace icmlkit::kernels
