#include "util/build_info_access.hpp"

#include <Eigen/Core>
#include <fmt/core.h>

#include "icmlkit/build_info.hpp"

namespace icmlkit {

std::string build_description() {
  std::string s = fmt::format("icmlkit {}\n", build::version);
  s += fmt::format("build: {}, {}\n", build::build_type, build::compiler);
  if (build::cuda) s += fmt::format("cuda: on (architectures {})\n", build::cuda_architectures);
  else s += "cuda: off\n";
  s += fmt::format("mpi: {}\n", build::mpi ? "on" : "off");
  s += fmt::format("sanitizers: {}\n", build::sanitize ? "address,undefined" : "off");
  s += fmt::format("libraries: Eigen {}.{}.{}, Ceres {}, HDF5 {}\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
                   EIGEN_MINOR_VERSION, build::ceres_version, build::hdf5_version);
  return s;
}

nlohmann::json build_summary() {
  return {{"version", build::version}, {"build_type", build::build_type}, {"cuda", build::cuda}, {"mpi", build::mpi},
          {"compiler", build::compiler}};
}

}  // namespace icmlkit
