// Continuous paths X(t) built from irregular observations, with value and derivative at any t
// (the control of a neural CDE, dz = f(z) dX).  Kidger et al. 2020 / torchcde conventions;
// kernel and GP smoothers as in Serov, Kuleshov & Zaytsev (ICML 2026), reference code
// `awesomeslayer/Efficient_NCE_via_Attentive_Kernel_Smoothing`.
//
// A `Series` holds L observation times and an [L, C] value matrix; NaN marks a missing value.
// When `time_channel` is set, channel 0 is the observation time itself (never missing).
#pragma once

#include <Eigen/Dense>
#include <memory>
#include <string>
#include <vector>

namespace icmlkit::cde {

/// One multivariate series: times t [L] (strictly increasing) and values x [L, C] (NaN = missing).
struct Series {
  std::vector<double> t;
  Eigen::MatrixXd x;          ///< [L, C]
  bool time_channel = false;  ///< channel 0 equals t (added by the data loader)
};

/// Interpolation/smoothing schemes.
enum class PathKind { cubic, linear, rectilinear, kernel, gp };
/// Nadaraya-Watson kernels (normalised densities in u/b, as the reference code).
enum class KernelKind { gaussian, laplacian, cauchy, epanechnikov, tricube };

/// Parses "cubic" | "linear" | "rectilinear" | "kernel" | "gp"; throws UsageError naming `flag`.
PathKind parse_path_kind(const std::string& s, const std::string& flag);
/// Parses a kernel name; throws UsageError naming `flag`.
KernelKind parse_kernel_kind(const std::string& s, const std::string& flag);
std::string to_string(PathKind k);
std::string to_string(KernelKind k);

/// K_b(u) and its derivative in u (reference formulas; epanechnikov/tricube have compact support).
/// The tricube derivative is the exact one, 3x the reference code's (which drops the chain-rule 3).
double kernel_value(KernelKind k, double u, double b);
double kernel_derivative(KernelKind k, double u, double b);

/// A path over its parameter interval [t0(), t1()].  Not thread-safe (evaluation workspaces):
/// use one path per thread.
class Path {
 public:
  virtual ~Path() = default;
  /// Number of channels C.
  int channels() const { return channels_; }
  double t0() const { return t0_; }
  double t1() const { return t1_; }
  /// X(t) into x[C].
  virtual void value(double t, double* x) const = 0;
  /// dX/dt into dx[C].  At a kink (linear/rectilinear knot) `side` = +1 takes the right
  /// derivative, -1 the left one; smooth paths ignore it.
  virtual void derivative(double t, int side, double* dx) const = 0;
  /// Parameter values where the derivative jumps (solvers must step onto them); empty if C1.
  virtual std::vector<double> jump_times() const { return {}; }

  // ---- gradients with respect to per-observation weights w [L] (weighted smoothers only) ----
  /// Whether this path depends on weights (MV-CDE attention).
  virtual bool weighted() const { return false; }
  /// Accumulates dL/dw += (dX/dt(t))^T-VJP of `g_dx` [C].
  virtual void backward_derivative(double t, int side, const double* g_dx) {}
  /// Accumulates dL/dw from dL/dX(t) = g_x [C].
  virtual void backward_value(double t, const double* g_x) {}
  /// The accumulated dL/dw [L] (finalises any pending linear solves); zero for unweighted paths.
  virtual Eigen::VectorXd weight_gradient() { return {}; }

 protected:
  int channels_ = 0;
  double t0_ = 0, t1_ = 0;
};

/// Options of the smoothing paths.
struct SmoothOptions {
  KernelKind kernel = KernelKind::gaussian;
  double bandwidth = 0.1;     ///< kernel bandwidth b (time units)
  double length_scale = 1.0;  ///< GP RBF length-scale l (time units)
  double noise_std = 0.01;    ///< GP observation noise sigma
};

/// Fills NaN by linear interpolation in t per channel; leading/trailing NaN take the first/last
/// observed value (torchcde's linear_interpolation_coeffs).  Throws InputError when a channel
/// has no observed value (`where` names the series).
Eigen::MatrixXd fill_linear(const std::vector<double>& t, const Eigen::MatrixXd& x, const std::string& where);
/// Forward fill (leading NaN back-filled with the first observed value).  Same errors.
Eigen::MatrixXd fill_forward(const Eigen::MatrixXd& x, const std::string& where);

/// Builds a path.  `weights` [L] (may be null) are the per-observation weights of the
/// MV-CDE smoothers (kernel: K_b(t - t_i) w_i; GP: noise sigma^2/(w_i + 1e-5)); only kernel
/// and gp accept them.  Throws InputError for fewer than 2 observations, non-increasing
/// times, an all-missing channel or rectilinear without a time channel.
std::unique_ptr<Path> make_path(PathKind kind, const Series& s, const SmoothOptions& opt,
                                const Eigen::VectorXd* weights = nullptr, const std::string& where = {});

}  // namespace icmlkit::cde
