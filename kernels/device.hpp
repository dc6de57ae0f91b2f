// CUDA device discovery.  Safe to call on machines without a GPU or driver.
#pragma once

#include <string>

namespace icmlkit::kernels {

/// Number of usable CUDA devices; 0 when there is no GPU or no driver (never throws).
int device_count() noexcept;
/// "NVIDIA H200 (sm_90, 139.8 GiB)" for device `index`; empty when unavailable.
std::string device_name(int index);

}  // namespace icmlkit::kernels
