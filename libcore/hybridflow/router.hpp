// HybridFlow's utility router (arXiv 2512.22137; reference planner/router.py and
// planner/router_train.py): a small MLP scores each subtask from its text embedding, a meta vector
// and the resource ratios (r_B, r_L); the budget-adaptive threshold turns the score into a cloud
// probability.  Also: its training on offline edge/cloud profiles (the reference's Huber + budget
// penalty loss, AdamW, hand-written forward and backward in double precision), its safetensors
// file with the torch state_dict keys, and an evaluation against random and fixed-threshold routing
// at equal cloud share.
//
// Precision: weights are stored as float32 (the torch file's dtype); inference (forward_raw)
// accumulates in double from those floats; training keeps double master weights and rounds them to
// float32 when it returns.
#pragma once

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace icmlkit::hybridflow {

/// A float32 matrix stored row-major, [out, in] like torch.nn.Linear.weight.
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The reference RouterNet: input x = concat(e [embed_dim], meta [meta_dim], r_B, r_L), then
/// `depth` times (Linear(d, hidden) -> ReLU -> Dropout(0.1)), then Linear(hidden, 1) (torch keys
/// net.{3i}.weight / net.{3i}.bias, i = 0..depth).  The reference: embed_dim 1024, meta_dim 8,
/// hidden 256, depth 2, so input 1034.
struct RouterNet {
  int embed_dim = 1024;  ///< embedding length (Qwen3-Embedding-0.6B: 1024)
  int meta_dim = 8;      ///< meta vector length
  int hidden = 256;      ///< hidden width (0 when depth is 0)
  int depth = 2;         ///< number of hidden layers
  std::vector<RowMatrixF> weight;    ///< depth + 1 matrices, [out, in]: [hidden, input_dim], [hidden, hidden]..., [1, hidden]
  std::vector<Eigen::VectorXf> bias;  ///< depth + 1 vectors, [out]

  /// embed_dim + meta_dim + 2.
  int input_dim() const noexcept { return embed_dim + meta_dim + 2; }
  /// The network's raw output (eval mode: no dropout) for one input of input_dim() floats,
  /// accumulated in double.  This is s_raw of the training loss.
  double forward_raw(const float* x) const;
  /// sigmoid(forward_raw(x)): the inference score s in (0, 1) (router.py).
  double score(const float* x) const;
};

/// A RouterNet with torch's default nn.Linear initialisation: weight and bias uniform in
/// [-1/sqrt(fan_in), 1/sqrt(fan_in)], drawn layer by layer (weight row-major, then bias) from
/// Rng(seed).  Throws UsageError when a size is not positive (hidden may be 0 only with depth 0).
RouterNet init_router(int embed_dim, int meta_dim, int hidden, int depth, std::uint64_t seed);

/// Reads a router from a safetensors file holding net.{3i}.weight / net.{3i}.bias (F32, F16 or
/// BF16; what scripts/hybridflow/convert_router_pt.py writes from the reference's .pt, and what
/// save_router writes).  depth, hidden and embed_dim are inferred from the shapes (meta_dim is 8,
/// or the file's "meta_dim" metadata).  Throws InputError naming the file on a bad file, a missing
/// or unexpected tensor, or shapes that do not chain.
RouterNet load_router(const std::string& path);

/// Writes `net` as safetensors (F32, keys as torch's state_dict, so
/// `model.load_state_dict(safetensors.torch.load_file(path))` loads it), atomically.  __metadata__
/// holds "format": "pt", the sizes, and every top-level entry of `metadata` (strings as they are,
/// other values as JSON text).  Throws RuntimeError when the file cannot be written.
void save_router(const std::string& path, const RouterNet& net, const nlohmann::json& metadata);

/// Python's len(text.split()): the number of runs of non-whitespace characters (whitespace: the
/// ASCII space, \t \n \v \f \r and \x1c-\x1f; non-ASCII whitespace counts as a word character).
std::size_t word_count(const std::string& text);

/// The inference meta vector (router.py): [n_rely, w, min(w / 100, 1), 0, 0, 0, 0, 0] with
/// w = word_count(text), text = question + Task (no separator) and n_rely the number of relied-on
/// steps (len(Rely.split(',')) when Rely is non-empty, else 0).
std::array<float, 8> inference_meta(const std::string& text, std::size_t n_rely);

/// The routing hyperparameters of router.py (config.yaml presets: B_max / L_max 512 / 10 "low",
/// 2048 / 25 default, 8192 / 50 "high").
struct RouterParams {
  double delta0 = 0;     ///< base threshold
  double alpha_B = 0.5;  ///< threshold slope in r_B
  double alpha_L = 0.5;  ///< threshold slope in r_L
  double tau = 0.1;      ///< temperature of the cloud probability
  double B_max = 2048;   ///< token budget (tokens)
  double L_max = 25;     ///< latency budget (seconds)
};

/// The threshold delta_t = clip(delta0 + alpha_B r_B + alpha_L r_L, 0, 1) (router.py).
double route_threshold(double r_B, double r_L, const RouterParams& p);

/// p_cloud = sigmoid((s - delta_t) / tau) for a score s in (0, 1) (router.py).  For fixed s it is
/// non-increasing in r_B and r_L when alpha_B, alpha_L >= 0.
double cloud_probability(double s, double r_B, double r_L, const RouterParams& p);

/// One routing decision and what led to it.
struct RouteDecision {
  double score = 0;    ///< s = sigmoid(net(x))
  double r_B = 0;      ///< cumulative_tokens / B_max
  double r_L = 0;      ///< elapsed_s / L_max
  double delta_t = 0;  ///< route_threshold(r_B, r_L)
  double p_cloud = 0;  ///< cloud_probability(s, r_B, r_L)
  double draw = 0;     ///< the uniform draw u
  bool cloud = false;  ///< u < p_cloud
};

/// router.py's pre_evaluate_step without its forced-cloud rules: x = concat(embedding,
/// inference_meta(text, n_rely), r_B, r_L) in float32 (text = question + Task), s = sigmoid(net(x)),
/// cloud iff u < p_cloud.  `cumulative_tokens`: tokens used so far by all models; `elapsed_s`:
/// seconds since the query started; `u`: a uniform draw in [0, 1).  The network sees r_B and r_L
/// too, so p_cloud is monotone in them only through delta_t (and through what the net learned).
/// s, delta_t and p_cloud are computed in double (the reference rounds s - delta_t to float32 before
/// its sigmoid: differences below 1e-7).
/// Throws InputError when embedding.size() != net.embed_dim or net.meta_dim != 8.
RouteDecision route(const RouterNet& net, const std::vector<float>& embedding, std::size_t n_rely, const std::string& text,
                    double cumulative_tokens, double elapsed_s, const RouterParams& params, double u);

/// One profiled subtask: its run on the edge and on the cloud model (router_train.py's JSONL row).
struct SubtaskProfile {
  std::string task;         ///< "task": the whole question
  std::string description;  ///< "subtask.description"
  std::size_t n_depends = 0;  ///< len(subtask.depends_on)
  double edge_latency_s = 0, cloud_latency_s = 0;  ///< edge/cloud .latency_ms / 1000
  long edge_total_tokens = 0, edge_completion_tokens = 0;    ///< edge.usage.{total,completion}_tokens
  long cloud_total_tokens = 0, cloud_completion_tokens = 0;  ///< cloud.usage.{total,completion}_tokens
  int difficulty = -1;  ///< optional top-level "difficulty" (the planner's 1..9), -1 when absent
  std::string id;       ///< optional top-level "id" (a string or an integer), "" when absent
};

/// Reads profiles, one JSON object a line (blank lines skipped; "-" = stdin):
/// {"task": str, "subtask": {"description": str, "depends_on": [...] (optional)},
///  "edge": {"latency_ms": num >= 0, "usage": {"total_tokens": int >= 0, "completion_tokens": int >= 0}},
///  "cloud": {same}, "difficulty": int 1..9 (optional), "id": str|int (optional)}; other fields are
/// ignored.  Throws InputError naming the file and line on anything malformed or missing, and when
/// the file holds no profile.  `sha256` (optional) receives the digest of the bytes read.
std::vector<SubtaskProfile> read_profiles(const std::string& path, std::string* sha256 = nullptr);

/// The training target (router_train.py): dU = 1.0 dq - 0.5 dt - 0.001 k_c with
/// dq = (cloud - edge completion tokens) / 100, dt = L_c - L_e (seconds), k_c = cloud total tokens.
double delta_utility(const SubtaskProfile& p);

/// The text whose embedding the router sees for a profile: task + description (no separator, as
/// inference's question + Task) by default; task + " " + description (router_train.py) when
/// `reference_text`.
std::string router_text(const SubtaskProfile& p, bool reference_text = false);

/// The meta vector of a profile: inference_meta(router_text(p), n_depends) by default, so that
/// training sees what inference sees; with `reference_meta`, router_train.py's
/// [n_depends, k_e, k_c, L_e, L_c, dq, dt, dU] (which contains the target dU and differs from the
/// inference vector: a router trained on it is then queried with a different vector).
std::array<float, 8> profile_meta(const SubtaskProfile& p, bool reference_meta);

/// Training settings: router_train.py's defaults.
struct TrainOptions {
  int epochs = 30;
  int batch = 32;             ///< minibatch size (the last one of an epoch may be smaller)
  double lr = 1e-4;           ///< AdamW learning rate
  double weight_decay = 1e-4; ///< AdamW decoupled weight decay, on every tensor (biases too, as torch's default group)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip = 1.0;          ///< global gradient-norm clip (torch clip_grad_norm_), <= 0: none
  double dropout = 0.1;       ///< dropout after each hidden ReLU, active in training
  double huber_delta = 1.0;
  double delta0 = 0, alpha_B = 1, alpha_L = 1;  ///< delta = delta0 + alpha_B (r_B - 1) + alpha_L (r_L - 1)
  double tau = 0.5;           ///< p = sigmoid((s_raw - delta) / tau)
  double B_max = 5000;        ///< token budget of the penalty (tokens)
  double L_max = 5;           ///< latency budget of the penalty (seconds)
  double lambda_B = 1, lambda_L = 1;  ///< penalty weights
  double r_lo = 0.5, r_hi = 1.5;      ///< r_B, r_L ~ U(r_lo, r_hi), drawn once per row
  bool reference_meta = false;  ///< train on profile_meta(p, true) (router_train.py) instead of the inference vector
  int hidden = 256;
  int depth = 2;
};

/// A RouterNet's parameters in double (training master copy; also the shape of its gradient).
struct RouterWeights {
  std::vector<Eigen::MatrixXd> weight;  ///< [out, in] per layer
  std::vector<Eigen::VectorXd> bias;    ///< [out] per layer
};

/// The double copy of a net's weights.
RouterWeights weights_of(const RouterNet& net);
/// Stores `w` (rounded to float32) into `net`; the shapes must match (std::invalid_argument otherwise).
void set_weights(RouterNet& net, const RouterWeights& w);

/// One minibatch of the training loss.
struct RouterBatch {
  Eigen::MatrixXd x;  ///< [n, input_dim]: rows concat(e, meta, r_B, r_L)
  Eigen::VectorXd dU;  ///< targets, [n]
  Eigen::VectorXd k_c;  ///< cloud total tokens, [n]
  Eigen::VectorXd L_e, L_c;  ///< edge and cloud latency (s), [n]
  Eigen::VectorXd r_B, r_L;  ///< the rows' resource ratios (also the last two columns of x), [n]
};

/// router_train.py's loss on a batch and, when `grad` is set, its gradient (same shapes as `w`):
///   L = Huber_delta(s_raw, dU) (mean) + lambda_B relu(mean(p k_c) - B_max)^2
///       + lambda_L relu(mean(p L_c + (1 - p) L_e) - L_max)^2,
///   p = sigmoid((s_raw - delta) / tau),  delta = delta0 + alpha_B (r_B - 1) + alpha_L (r_L - 1),
/// s_raw the network output (no sigmoid).  `masks`: per hidden layer an [n, hidden] matrix
/// multiplied into that layer's ReLU output (entries 0 or 1/(1 - dropout): inverted dropout), or
/// empty for eval mode.
double router_loss(const RouterWeights& w, const RouterBatch& batch, const TrainOptions& opt,
                   const std::vector<Eigen::MatrixXd>& masks, RouterWeights* grad);

/// A trained router and its per-epoch loss (mean of the epoch's batch losses, as the reference prints).
struct TrainResult {
  RouterNet net;
  std::vector<double> epoch_loss;
};

/// Trains a router (router_train.py): torch-default init, r_B and r_L drawn once per row, rows
/// shuffled each epoch, dropout, the loss above, global-norm clipping, AdamW.  `embeddings[i]` is
/// profile i's embedding (all the same length).  Deterministic for a seed (streams derived with
/// derive_seed: init, r draws, shuffles, dropout).  Throws InputError when the sizes disagree or
/// there are no profiles, UsageError on a bad option.
TrainResult train_router(const std::vector<SubtaskProfile>& profiles, const std::vector<std::vector<float>>& embeddings,
                         const TrainOptions& opt, std::uint64_t seed);

/// One comparison at a cloud share: every rule sends exactly n_cloud of the n subtasks to the
/// cloud.  Utility of an assignment = mean over subtasks of (cloud ? dU : 0), the gain over
/// all-edge.
struct ShareComparison {
  std::string rule;      ///< "difficulty>=T" (the fixed threshold T) or "share"
  int threshold = -1;    ///< T, or -1 for a fixed share
  double share = 0;      ///< n_cloud / n
  std::size_t n_cloud = 0;
  double threshold_utility = 0;  ///< the fixed-threshold rule's utility (NaN for a fixed share)
  double router_utility = 0;     ///< the n_cloud subtasks with the highest router score to the cloud
  double random_expected = 0;    ///< uniform random n_cloud-subsets: exactly (n_cloud / n) mean(dU)
  double random_draws_mean = 0;  ///< mean over the seeded random draws (NaN when none)
  double random_draws_sd = 0;    ///< their standard deviation (NaN when fewer than 2)
  double router_beats_draws = 0; ///< share of the draws the router's utility exceeds (NaN when none)
  double oracle_utility = 0;     ///< the n_cloud subtasks with the highest dU to the cloud
};

/// The equal-share evaluation of a router on held-out profiles.
struct RoutingEvaluation {
  std::size_t n = 0;            ///< subtasks
  double mean_dU = 0;           ///< mean dU (= all-cloud utility)
  bool have_difficulty = false; ///< every profile has a difficulty (threshold rows present)
  std::vector<double> scores;   ///< the router's s per subtask (at r_B = r_L = 1)
  std::vector<ShareComparison> rows;  ///< thresholds 2..9 (when have_difficulty), then shares 0.25, 0.5, 0.75
};

/// Scores every held-out subtask with the router at r_B = r_L = 1 (the centre of the training
/// draws, where the training threshold is delta0) on the inference input (inference_meta of
/// router_text(p)) and compares, at equal cloud share, the router's top-by-score choice with the
/// fixed difficulty thresholds T = 2..9 (cloud iff difficulty >= T; their share sets n_cloud), random
/// routing (exact expectation, plus `random_draws` seeded uniform subsets) and the oracle
/// (top-by-dU); and at shares 0.25, 0.5, 0.75 (n_cloud = round(share n)).  Ties in score go to the
/// earlier row.  Throws InputError when sizes disagree.
RoutingEvaluation evaluate_routing(const RouterNet& net, const std::vector<SubtaskProfile>& profiles,
                                   const std::vector<std::vector<float>>& embeddings, std::size_t random_draws,
                                   std::uint64_t seed);

/// The evaluation as JSON: {n, mean_dU, scored_at: {r_B: 1, r_L: 1}, utility_definition, rows: [...]}
/// (NaN written as null).
nlohmann::json evaluation_json(const RoutingEvaluation& ev);

}  // namespace icmlkit::hybridflow
