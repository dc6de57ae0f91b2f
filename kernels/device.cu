#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/device.hpp"

namespace icmlkit::kernels {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace icmlkit::kernels
