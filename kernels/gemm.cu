#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/gemm.hpp"

namespace icmlkit::kernels {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { check(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
};

struct Handle {
  cublasHandle_t h{};
  Handle() { check(cublasCreate(&h), "cublasCreate"); }
  ~Handle() { cublasDestroy(h); }
};

}  // namespace

void gemm_f32(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, float* c) {
  DeviceBuffer da(m * k), db(k * n), dc(m * n);
  check(cudaMemcpy(da.p, a, m * k * sizeof(float), cudaMemcpyHostToDevice), "copy A");
  check(cudaMemcpy(db.p, b, k * n * sizeof(float), cudaMemcpyHostToDevice), "copy B");
  Handle h;
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: swap the operands.
  check(cublasSgemm(h.h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                    db.p, static_cast<int>(n), da.p, static_cast<int>(k), &zero, dc.p, static_cast<int>(n)),
        "cublasSgemm");
  check(cudaMemcpy(c, dc.p, m * n * sizeof(float), cudaMemcpyDeviceToHost), "copy C");
}

}  // namespace icmlkit::kernels
