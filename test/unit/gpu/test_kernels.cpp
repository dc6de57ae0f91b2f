// CUDA kernels against the CPU (Eigen) result; skipped when no GPU is present.
#include <doctest/doctest.h>

#include <Eigen/Core>

#include "kernels/device.hpp"
#include "kernels/gemm.hpp"
#include "util/rng.hpp"

TEST_CASE("kernels: cuBLAS gemm_f32 matches Eigen within float tolerance" * doctest::skip(icmlkit::kernels::device_count() == 0)) {
  // Truth: the same product in double precision on the CPU.  Tolerance: k * eps_f32 * |a||b|
  // bound for a float32 dot product of length k = 64 with entries in [-1, 1].
  const int m = 33, n = 17, k = 64;
  icmlkit::Rng rng(7);
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a(m, k), b(k, n), c(m, n);
  for (int i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(rng.uniform(-1, 1));
  for (int i = 0; i < b.size(); ++i) b.data()[i] = static_cast<float>(rng.uniform(-1, 1));
  icmlkit::kernels::gemm_f32(m, n, k, a.data(), b.data(), c.data());
  const Eigen::MatrixXd ref = a.cast<double>() * b.cast<double>();
  CHECK((c.cast<double>() - ref).cwiseAbs().maxCoeff() < 64 * 1.2e-7 * 64);
}

TEST_CASE("kernels: device_count never throws and is non-negative") {
  CHECK(icmlkit::kernels::device_count() >= 0);
}
