// The mixture that minimises a weighted sum of predicted domain losses (mixlaw-optimize), and
// loading a fitted mixing law back from mixlaw-fit's JSON.
#pragma once

#include <Eigen/Core>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fit/mixlaw.hpp"

namespace icmlkit::fit {

/// A law with its fitted parameters and domain order.
struct FittedMixLaw {
  std::unique_ptr<MixLaw> law;
  std::vector<std::string> domains;
  Eigen::VectorXd params;
  std::vector<bool> scored;  ///< domains whose losses were observed in the fit (others are never predicted)
};

/// Reads one law from mixlaw-fit output.  `law_name` empty: the only law, or capacity-noise
/// when several were fitted.  Throws InputError naming `where` for a malformed file or a
/// missing parameter.
FittedMixLaw load_fitted_mixlaw(const nlohmann::json& j, const std::string& law_name, const std::string& where);

/// Per-domain values from "VALUE" (every domain) or "dom=VALUE,dom2=VALUE" (unnamed domains
/// keep `fallback`).  Throws UsageError naming `flag` for an unknown domain or a bad number.
Eigen::ArrayXd parse_domain_values(const std::string& text, const std::vector<std::string>& domains, double fallback,
                                   const std::string& flag);

/// Objective weights v over the fitted domains: "--domain-weights" text, default 1/|scored|
/// on scored domains; unscored domains get 0 and may not be named.  Throws UsageError for a
/// negative weight, an unscored or unknown domain, or all-zero weights.
Eigen::ArrayXd objective_weights(const FittedMixLaw& f, const std::string& text, const std::string& flag);

/// Options of `optimize_mixture`.
struct MixOptimizeOptions {
  Eigen::ArrayXd lower, upper;  ///< per-domain bounds [K]
  int max_iterations = 20000;
  double tolerance = 1e-12;     ///< stop when the projected step moves h by less than this (max-norm)
};

/// Result of `optimize_mixture`.
struct MixOptimum {
  Eigen::ArrayXd h;        ///< [K] optimal mixture
  double objective = 0;    ///< sum_i v_i L_i(h)
  int iterations = 0;      ///< over all starts
  int starts = 0;
};

/// Minimises sum_i v_i L_i(h; N, D) over the bounded simplex by projected gradient descent
/// with Armijo backtracking, from the uniform mixture and from each domain's corner (K + 1
/// starts; the law is not convex in h), keeping the best.  Throws InputError when the law
/// cannot be evaluated at (N, D) (parameters outside its domain), std::invalid_argument for
/// infeasible bounds, RuntimeError when no start stays finite.
MixOptimum optimize_mixture(const MixLaw& law, const Eigen::VectorXd& params, double N, double D,
                            const Eigen::ArrayXd& v, const MixOptimizeOptions& opt);

}  // namespace icmlkit::fit
