// LMCleaner (Xu et al., ICML 2026; reference open-unlearning src/trainer/unlearn/lmcleaner_core.py):
// certified online unlearning by truncated influence propagation, and what it is measured
// against.  A deleted batch's step is the atomic unit: the counterfactual skips the whole step,
// so the deviation it leaves is delta[tz+1] = u[tz] = theta[tz+1] - theta[tz] (Phase 1), which
// is carried forward by the linearised step map delta[s+1] = (I + J_s) delta[s], J_s = -eta_s H_s
// for SGD (Phase 2, truncated to K steps), removed as theta_hat = theta[tau] - v (Phase 3), and
// covered by calibrated Gaussian noise (Phase 4).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "unlearn/run.hpp"

namespace icmlkit::unlearn {

/// LMCleaner's Phase 1-2 settings.
struct LmCleanerOptions {
  /// Truncation window: steps propagated after each deleted step (K; < 0 = to the end, the
  /// "K = infinity" arm).  A deleted step tz propagates through tz+1 .. min(tz + K, tau - 1).
  std::int64_t K = -1;
  HvpMode mode = HvpMode::fisher;
  /// The reference's optional damping lambda: v <- v + J_s v - eta_s lambda v at each propagated
  /// step (0 = the paper's algorithm).
  double damping = 0;
  /// Measure the linearisation residual r_s = ||(u_s(theta) - u_s(theta - v)) - J_s v|| at each
  /// propagated step (one more step-map evaluation per step): the estimate of the linearisation
  /// term of the bound.
  bool probe = true;
};

/// One deleted step.
struct DeletedStep {
  std::int64_t step = 0;     ///< tz
  std::int64_t k_used = 0;   ///< K* = max(0, min(K, tau - tz - 1)) (K < 0: tau - tz - 1): steps its deviation was carried
  bool truncated = false;    ///< K* < tau - tz - 1 (steps after the window were not propagated)
  double u_norm = 0;         ///< ||u[tz]|| = ||delta[tz+1]||
};

/// The correction of Phases 1-2 and how it was obtained.
struct Correction {
  std::vector<double> v;               ///< sum of the propagated deviations: theta_hat = theta[tau] - v
  std::vector<DeletedStep> deleted;    ///< per deleted step, increasing
  /// Per propagated (deviation, step): ||v_after|| / ||v_before||, in walk order (the contraction
  /// the certificate's gamma is estimated from).
  std::vector<double> ratios;
  double gamma_hat = std::numeric_limits<double>::quiet_NaN();  ///< exp(mean log ratio); NaN without ratios
  double ratio_max = std::numeric_limits<double>::quiet_NaN();  ///< the largest ratio
  /// Sum over propagated (deviation, step) of the linearisation residual r_s (NaN without the
  /// probe).  When the deviations travel as one vector (K = inf, or one deleted step) and every
  /// step map theta -> theta + u_s(theta) is non-expansive (convex loss, eta_s (L + lambda) <= 2),
  /// it bounds the linearisation error ||theta_hat - theta_retrain||; deviations carried
  /// separately (different window ends) are probed separately, their interaction unmeasured.
  double lin_residual = std::numeric_limits<double>::quiet_NaN();
  /// advance() calls the walk made (the training steps replayed by the walk itself); the replay
  /// inside seek() (to the first deleted step, and over gaps between finite windows where nothing
  /// is carried) is the Run's and is not counted.
  std::int64_t steps_replayed = 0;
  std::int64_t products = 0;        ///< J_s v products
  std::int64_t probes = 0;          ///< step-map differences for the probe
  double seconds = 0;               ///< wall time of the walk
};

/// Phases 1-2 for the deletion of the batches of `deleted_steps` (any order, duplicates merged;
/// each in [0, tau), tau = run.end_step()): walks the recorded trajectory from the first deleted
/// step, replaying it, and carries each deviation for K steps.  Deviations of deleted steps are
/// propagated jointly and exactly linearly: at a later deleted step the counterfactual takes no
/// step, so the deviations so far pass it unchanged (delta[s+1] = delta[s] + u[s]); with K = inf
/// on a quadratic loss and mode exact this equals retraining without those batches up to
/// rounding.  Deviations with the same window end are summed and carried as one vector (one
/// product per step for K = inf).  Leaves the run at the end of its walk (its last window end,
/// or one past it when that step is deleted).  Throws UsageError for a step outside [0, tau) or
/// no step, InputError when the run cannot rebuild a state.
Correction lmcleaner_correction(Run& run, std::vector<std::int64_t> deleted_steps, const LmCleanerOptions& opt);

/// The retrain baseline (the gold standard): theta_retrain[tau] from theta[tz_min] by replaying
/// the recorded steps with each deleted step a no-op (same batches, same learning rate per step
/// index).  Leaves the run at tau holding theta_retrain.  Returns the steps taken (tau - tz_min).
/// Throws as lmcleaner_correction for the steps.
std::int64_t retrain(Run& run, std::vector<std::int64_t> deleted_steps, std::vector<double>& theta);

/// Phase 4's noise.
struct NoiseOptions {
  /// none | isotropic | subspace.  Default none: with gamma estimated near 1 the calibrated noise
  /// is far larger than the weights (data/repro/unlearn/README.md), so noise is asked for.
  std::string kind = "none";
  double epsilon = 1.0;           ///< > 0
  double delta = 1e-5;            ///< in (0, 1)
  int rank = 100;                 ///< subspace: k of the public projector (clamped to the dimension)
  double beta = 0.1;              ///< subspace: sigma_perp = beta sigma_par, beta in (0, 1]
  std::uint64_t public_seed = 42; ///< subspace: the seed of the public d x k Gaussian matrix
  std::uint64_t seed = 0;         ///< the noise draw's seed
};

/// The constants of the bound: each NaN = estimated from the trajectory (then `empirical`).
struct BoundOptions {
  double gamma = std::numeric_limits<double>::quiet_NaN();   ///< contraction factor, in (0, 1)
  double c_lin = std::numeric_limits<double>::quiet_NaN();   ///< linearisation constant C_lin >= 0
  /// Use ||v|| as the sensitivity (the reference's fallback when no bound is given): the
  /// certificate is then labelled `substitute`, never certified.
  bool substitute_norm = false;
};

/// Refuses epsilon <= 0, delta outside (0, 1), beta outside (0, 1], rank < 1, an unknown kind,
/// gamma outside (0, 1), c_lin < 0.  Throws UsageError naming the flag (--epsilon, --delta,
/// --beta, --noise-rank, --noise, --gamma, --c-lin).
void check_noise_options(const NoiseOptions& noise, const BoundOptions& bound);

/// Phase 4's calibration and what it rests on (written as the certificate JSON).
struct Certificate {
  /// "certified" (gamma and C_lin supplied as public constants, or no truncation and C_lin
  /// supplied: the paper's theorem under its assumptions), "empirical" (a constant estimated
  /// from this trajectory), "substitute" (||v|| in place of the bound) or "none" (no noise: no
  /// (epsilon, delta) statement).
  std::string kind;
  double epsilon = 0, delta = 0;  ///< the noise's budget (0 for kind none, written as null)
  /// Delta_det = sum over deleted steps of (C_lin + trunc_i) ||u_i||, with trunc_i =
  /// gamma^K*_i / (1 - gamma) for a truncated window and 0 otherwise (the paper's Theorem, summed
  /// over the batches of one request by the triangle inequality).  Infinite when a window is
  /// truncated and gamma >= 1.
  double sensitivity = 0;
  double linearisation_term = 0, truncation_term = 0;
  double gamma = 0, c_lin = 0;
  /// gamma: "supplied", "estimated" (the correction's gamma_hat; NaN when nothing was propagated)
  /// or "unused" (no window truncated and no ratio to estimate it from: gamma = 0).  c_lin:
  /// "supplied", "estimated" (lin_residual / sum ||u_i||) or "unavailable" (probe off, not
  /// supplied; only with noise none: c_lin and the linearisation term NaN).
  std::string gamma_source, c_lin_source;
  /// isotropic: sigma = Delta / eps sqrt(2 ln(1.25 / delta)) (both fields); subspace (Eq. 14-15):
  /// sigma_par = 2 Delta / eps sqrt(2 ln(2.5 / delta)), sigma_perp = beta sigma_par; none: 0.
  double sigma_par = 0, sigma_perp = 0;
  int rank = 0;     ///< subspace: k clamped to the dimension; otherwise 0
  double beta = 1;  ///< subspace: beta; otherwise 1
  std::string noise;  ///< the noise kind
  /// The certificate as JSON: every field above, then the correction's deleted steps (step,
  /// k_used, truncated, u_norm), ||v||, gamma_hat, ratio_max, the ratio count, lin_residual,
  /// products, probes, steps_replayed and seconds.  NaN and infinities are written as null.
  nlohmann::json to_json(const Correction& c) const;
};

/// Calibrates Phase 4 for correction `c`.  Delta_det uses the supplied constants, else the
/// correction's estimates; with substitute_norm Delta = ||v|| (the terms still reported).  Noise
/// none computes the terms and never throws for them.  Throws UsageError as check_noise_options,
/// and RuntimeError when the noise needs a finite sensitivity and the bound is infinite (a
/// truncated window and gamma >= 1 or not estimable; names --gamma), or when C_lin is to be
/// estimated but the probe was off (names --c-lin).
Certificate certify(const Correction& c, const BoundOptions& bound, const NoiseOptions& noise);

/// What add_noise drew.
struct NoiseDraw {
  double norm = 0;                    ///< ||xi||
  double rms_par = 0, rms_perp = 0;   ///< ||P xi|| / sqrt(k), ||(I - P) xi|| / sqrt(p - k) (isotropic: both over p)
  double theta_norm = 0;              ///< ||theta|| after the noise
  /// Whether the noise outweighs the weights it was added to (||xi|| > ||theta - xi|| roughly:
  /// 2 ||xi|| > ||theta||): the model is destroyed, which callers warn about.
  bool swamps() const noexcept { return 2 * norm > theta_norm; }
};

/// Adds Phase 4's noise xi to theta in place: isotropic N(0, sigma^2 I), or subspace
/// xi = sigma_par Q Q^T z + sigma_perp (I - Q Q^T) z, Q the orthonormalised public Gaussian
/// matrix (public_projector), k = noise.rank clamped to theta's length.  The sigmas come from
/// `cert`, the kind, rank and seeds from `noise`; z is drawn from noise.seed (p draws in order).
/// Deterministic in noise.seed.  No-op for kind none.  Memory: the d x k projector in doubles.
NoiseDraw add_noise(std::vector<double>& theta, const Certificate& cert, const NoiseOptions& noise);

/// The public projector's basis: a d x k Gaussian matrix from `seed` (column-major, columns
/// drawn in order), orthonormalised by modified Gram-Schmidt with each column's projections
/// repeated twice.  Returns Q [d, k] column-major.  Throws UsageError (--noise-rank) unless
/// 1 <= k <= d.
std::vector<double> public_projector(std::size_t d, int k, std::uint64_t seed);

/// Sequential composition of (epsilon_i, delta_i) unlearning steps (the paper's Theorem,
/// advanced composition via RDP): eps_tot = sum eps_i + sqrt(2 ln(1/delta') sum eps_i^2),
/// delta_tot = sum delta_i + delta'.  Returns {eps_tot, delta_tot}.  Throws UsageError for lists
/// of different lengths or delta' outside (0, 1).
std::pair<double, double> compose(const std::vector<double>& eps, const std::vector<double>& delta, double delta_prime);

/// Loss-threshold membership inference AUC (Yeom et al. 2018): the probability that a random
/// member has a lower loss than a random non-member (ties count 1/2), by ranks (O(n log n)).
/// 0.5 = indistinguishable (forgotten), 1 = every member below every non-member.  Throws
/// InputError when either set is empty or holds a non-finite loss.
double mia_auc(const std::vector<double>& member_losses, const std::vector<double>& nonmember_losses);

}  // namespace icmlkit::unlearn
