// One interface for parametric loss laws L(inputs; params), chosen by name at run time
// (faiss-style factory), so every law shares the same fitting and reporting harness.
#pragma once

#include <Eigen/Core>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace icmlkit::fit {

/// Inputs of a law, one column per input role, rows = training runs.
struct LawData {
  Eigen::ArrayXXd x;      ///< [n_rows, n_inputs], raw units (parameters, tokens)
  Eigen::ArrayXd loss;    ///< [n_rows] observed loss (nats/token), > 0
  Eigen::ArrayXXd log_x;  ///< ln x, filled by prepare() (laws recompute it when empty)
  /// Caches ln x so the fitting loop evaluates no logarithm of the inputs.
  void prepare() { log_x = x.log(); }
};

/// One axis of a start grid: a parameter and the values it takes.
struct GridAxis {
  std::string name;
  std::vector<double> values;
};

/// A parametric loss law fitted in log space with the Huber objective of Chinchilla
/// approach 3: sum_i Huber_delta(log L_hat(x_i; p) - log L_i).
class Law {
 public:
  virtual ~Law() = default;
  /// Registry name ("chinchilla", "data-constrained").
  virtual std::string name() const = 0;
  /// The law as text (for JSON output and --help).
  virtual std::string equation() const = 0;
  /// Names of the fitted parameters in vector order (log-scale a, b, e for A, B, E).
  virtual std::vector<std::string> param_names() const = 0;
  /// Input roles in column order ("params", "tokens", "unique_tokens").
  virtual std::vector<std::string> input_names() const = 0;
  /// The default start grid (one axis per parameter).
  virtual std::vector<GridAxis> default_grid() const = 0;
  /// Predicted loss for each row; p has param_names().size() entries.
  virtual Eigen::ArrayXd predict(const double* p, const LawData& d) const = 0;
  /// log of the predicted loss for every row into `out` [n]; when `jac` is not null also
  /// d log L_hat / d p into `jac` [n, n_params].  Returns false when p is outside the domain.
  virtual bool log_predict(const double* p, const LawData& d, Eigen::ArrayXd& out, Eigen::ArrayXXd* jac) const = 0;
  /// Parameters as a JSON object with both fitted and natural names (A = e^a, ...).
  virtual nlohmann::json to_json(const double* p) const;
  /// Reads parameters back from `to_json` output (natural names accepted where defined).
  /// Throws InputError naming the missing parameter.
  virtual Eigen::VectorXd from_json(const nlohmann::json& j, const std::string& where) const;
};

/// Creates a law by name; throws UsageError listing the known names.
std::unique_ptr<Law> make_law(const std::string& name);
/// Every loss-law name the tools know: "chinchilla" and "data-constrained" (built by
/// make_law) and "infolaw" (fitted through fit/infolaw.hpp).
std::vector<std::string> law_names();

/// Chinchilla (Hoffmann et al. 2022): L = E + A/N^alpha + B/D^beta, params (a, b, e, alpha,
/// beta) with A = e^a, B = e^b, E = e^e; inputs (params N, tokens D).
class ChinchillaLaw : public Law {
 public:
  std::string name() const override { return "chinchilla"; }
  std::string equation() const override { return "L = E + A/N^alpha + B/D^beta"; }
  std::vector<std::string> param_names() const override { return {"a", "b", "e", "alpha", "beta"}; }
  std::vector<std::string> input_names() const override { return {"params", "tokens"}; }
  std::vector<GridAxis> default_grid() const override;
  Eigen::ArrayXd predict(const double* p, const LawData& d) const override;
  bool log_predict(const double* p, const LawData& d, Eigen::ArrayXd& out, Eigen::ArrayXXd* jac) const override;
};

/// Data-constrained law (Muennighoff et al. 2023, eq. 5-7):
///   L = E + A / N'^alpha + B / D'^beta
///   D' = U_D + U_D R_D* (1 - exp(-R_D / R_D*)),  R_D = max(D/U_D - 1, 0)
///   N' = U_N + U_N R_N* (1 - exp(-R_N / R_N*)),  R_N = max(N/U_N - 1, 0)
///   U_N = min(N, N_opt(U_D)),  N_opt(U) = G (G U)^(beta/alpha),  G = (alpha A / (beta B))^(1/(alpha+beta))
/// params (a, b, e, alpha, beta, rd_star, rn_star); inputs (params N, tokens D, unique_tokens U_D).
class DataConstrainedLaw : public Law {
 public:
  std::string name() const override { return "data-constrained"; }
  std::string equation() const override {
    return "L = E + A/N'^alpha + B/D'^beta; D' = U_D(1 + R_D*(1-exp(-R_D/R_D*))), "
           "N' = U_N(1 + R_N*(1-exp(-R_N/R_N*))), U_N = min(N, G(G U_D)^(beta/alpha))";
  }
  std::vector<std::string> param_names() const override {
    return {"a", "b", "e", "alpha", "beta", "rd_star", "rn_star"};
  }
  std::vector<std::string> input_names() const override { return {"params", "tokens", "unique_tokens"}; }
  std::vector<GridAxis> default_grid() const override;
  Eigen::ArrayXd predict(const double* p, const LawData& d) const override;
  bool log_predict(const double* p, const LawData& d, Eigen::ArrayXd& out, Eigen::ArrayXXd* jac) const override;
};

/// Compute-optimal allocation under L = E + A/N^alpha + B/D^beta with C = 6 N D
/// (Hoffmann et al. 2022, eq. 4): N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = (C/6)/N_opt,
/// G = (alpha A / (beta B))^(1/(alpha+beta)).  C in FLOPs, > 0.
struct ComputeOptimum {
  double flops;   ///< the budget C (FLOPs)
  double params;  ///< N_opt (parameters)
  double tokens;  ///< D_opt (tokens)
  double loss;    ///< L(N_opt, D_opt) (nats/token)
};
/// The compute-optimal allocation above.  Throws InputError when flops <= 0.
ComputeOptimum compute_optimal(double A, double B, double E, double alpha, double beta, double flops);

}  // namespace icmlkit::fit
