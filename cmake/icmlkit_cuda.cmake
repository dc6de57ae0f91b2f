# Decides whether the CUDA kernels target is built (ICMLKIT_CUDA = AUTO | ON | OFF).
#
# AUTO builds it when a CUDA compiler is found; ON fails the configure step without one;
# OFF never looks.  The default architecture is 90 (H200); override with
# -DCMAKE_CUDA_ARCHITECTURES=...  ("native" fails on machines without a GPU).
set(ICMLKIT_HAVE_CUDA OFF)
string(TOUPPER "${ICMLKIT_CUDA}" _icmlkit_cuda_mode)
if(NOT _icmlkit_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ICMLKIT_CUDA must be AUTO, ON or OFF (got '${ICMLKIT_CUDA}')")
endif()

if(NOT _icmlkit_cuda_mode STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(ICMLKIT_HAVE_CUDA ON)
    message(STATUS "icmlkit: CUDA kernels ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, arch ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(_icmlkit_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "ICMLKIT_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "icmlkit: CUDA kernels OFF (no CUDA compiler found)")
  endif()
else()
  message(STATUS "icmlkit: CUDA kernels OFF (ICMLKIT_CUDA=OFF)")
endif()
