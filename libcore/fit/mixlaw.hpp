// Data-mixing laws: per-domain validation loss as a function of the mixture h (on the
// simplex), model size N and tokens D, with one interface for the method and its baselines.
//
//   capacity-noise  Dai & Zheng (ICML 2026), "Explaining Data Mixing Scaling Laws", eq. 3:
//                   L_i = c_i x_i*(h, N)^(-b_i) + A_i (D h_i)^(-a_i) + E_i          5K+1 params
//   capacity        the same without the noise term (their eq. 1):
//                   L_i = c_i x_i*(h, N)^(-b_i) + E_i                                3K+1 params
//   exponential     Ye et al. (ICLR 2025), Data Mixing Laws:
//                   L_i = c_i + k_i exp(sum_j t_ij h_j)                              K(K+2) params
//   linear          RegMix-style linear regression on the weights (no intercept: the
//                   weights sum to 1):  L_i = sum_j beta_ij h_j                      K^2 params
//
// x*(h, N) is the capacity allocation
//   x* = argmin_x sum_i h_i c_i x_i^(-b_i)  s.t.  sum_i x_i = N + (K-1) H,  x_i >= H,
// whose KKT solution is x_i(lambda) = max(H, (h_i b_i c_i / lambda)^(1/(b_i+1))) with the
// scalar lambda found by a safeguarded Newton root-find on ln lambda.  N is in millions of
// parameters and D in billions of tokens (the paper's units); h_i is floored at 1e-4 inside
// the noise term.  BiMix and the additive law are not offered: their exact equations could
// not be established from their own sources here.
#pragma once

#include <Eigen/Core>

#include <memory>
#include <string>
#include <vector>

namespace icmlkit::fit {

/// Mixture runs: one row per trained model.
struct MixData {
  std::vector<std::string> domains;  ///< K domain names
  Eigen::ArrayXXd h;                 ///< [n, K] mixture weights (rows on the simplex)
  Eigen::ArrayXXd loss;              ///< [n, K] validation loss per domain (NaN = not observed)
  Eigen::ArrayXXd mask;              ///< [n, K] 1 where the entry counts in fit and metrics, else 0
  Eigen::ArrayXd params;             ///< [n] model size N (millions of parameters)
  Eigen::ArrayXd tokens;             ///< [n] training tokens D (billions)
  /// Rows `idx` as a new data set.
  MixData rows(const std::vector<Eigen::Index>& idx) const;
  /// Sets mask = (h > min_weight) and loss finite.
  void set_mask(double min_weight);
};

/// The capacity allocation x*(h, N; c, b, H) and the quantities its derivatives need.
struct Allocation {
  Eigen::ArrayXd x;     ///< [K] allocation, sum = N + (K-1) H, each >= H
  Eigen::Array<bool, Eigen::Dynamic, 1> free;  ///< [K] x_i > H (interior of the constraint)
  double log_lambda = 0;  ///< ln of the KKT multiplier
};

/// Solves the KKT conditions for one mixture h [K].  Requires c, b > 0, 0 < H < N.
/// Throws std::invalid_argument when N <= H or no weight is positive.
Allocation allocate_capacity(const Eigen::ArrayXd& h, const Eigen::ArrayXd& c, const Eigen::ArrayXd& b, double H,
                             double N);

/// One mixing law, chosen by name (`make_mixlaw`).  Parameters are a flat vector whose
/// layout is given by `param_names`.
class MixLaw {
 public:
  virtual ~MixLaw() = default;
  /// Registry name.
  virtual std::string name() const = 0;
  /// The law as text.
  virtual std::string equation() const = 0;
  /// Where the law comes from.
  virtual std::string source() const = 0;
  /// Parameter names for K domains, e.g. "c[arxiv]", "t[arxiv][github]", "H".
  virtual std::vector<std::string> param_names(const std::vector<std::string>& domains) const = 0;
  /// Whether predictions depend on the model size N and tokens D (the capacity laws); the
  /// exponential and linear laws see the mixture only, so their tools need neither.
  virtual bool uses_scale() const { return true; }
  /// For laws whose domains have separate parameter blocks (exponential, linear): the block
  /// size, so unobserved domains can be left out of parameter counts; 0 for coupled laws.
  virtual int block_size(int K) const { return 0; }
  /// Lower/upper bounds of every parameter (+-inf where unbounded).
  virtual void bounds(int K, Eigen::VectorXd& lo, Eigen::VectorXd& hi) const = 0;
  /// Predicted losses [n, K].  Returns false when p is outside the domain.
  virtual bool predict(const double* p, const MixData& d, Eigen::ArrayXXd& out) const = 0;
  /// Sum over rows and masked domains of (L_hat - L)^2, divided by the number of rows; with
  /// `grad` [n_params] its analytic gradient.  Returns false outside the domain.
  virtual bool objective(const double* p, const MixData& d, double* f, double* grad) const = 0;
  /// A reasonable starting point (used before random perturbations).
  virtual Eigen::VectorXd initial(const MixData& d) const = 0;
  /// d/dh_j of sum_i v_i L_i(h) at one mixture (for mixlaw-optimize); returns the value.
  virtual double weighted_loss_grad(const double* p, const Eigen::ArrayXd& h, double N, double D,
                                    const Eigen::ArrayXd& v, Eigen::ArrayXd* grad_h) const = 0;
};

/// Creates a law: capacity-noise, capacity, exponential, linear.  Throws UsageError.
std::unique_ptr<MixLaw> make_mixlaw(const std::string& name);
/// Names accepted by make_mixlaw, in the paper's table order.
std::vector<std::string> mixlaw_names();

}  // namespace icmlkit::fit
