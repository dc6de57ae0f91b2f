// The analytic cost model of LatentMoE (Elango et al., arXiv 2601.18089, sections 2-3 and Table 1)
// for one configuration of mixture-of-experts layers, in three variants side by side:
//   standard  N experts of width d, top-K;
//   eff       (l-MoE_eff) the routed experts work in a latent space of width l = d / alpha, shared
//             projections W_down (l x d) and W_up (d x l), N' = alpha N experts, K' = K;
//   acc       (l-MoE_acc) the same with K' = alpha K.
// The router (N' rows of width d) and the shared experts stay at width d in every variant.
//
// Per variant: parameters (per layer, total and active), the weight bytes read per decode step,
// the per-expert roofline (tokens per expert t_exp = t K' / N', arithmetic intensity, the t_exp at
// which an expert matrix becomes compute-bound) and the all-to-all traffic under expert
// parallelism against the experts' compute:
//   I      = 2 t_exp w m / (b_w w m + b_a t_exp (w + m))           (paper: b_w = b_a = 1, w = d)
//   M_comm = (b_dispatch + b_combine) (N' / EP) t_exp w             (paper: 0.5 + 2 = 2.5 bytes)
//   C_comp = 2 c (N' / EP) t_exp w m                                (paper: c = 1 matrix)
// with w the width the experts see (d, or l for the latent variants) and c the matrices per expert
// counted in the compute.  With the paper's GB200 figures and Qwen3-235B's shape these give its
// worked numbers: t_exp >= 1418.8 tokens per expert, t_comm / t_comp = 5 F / (4 m BW_NVL) = 9.04.
#pragma once

#include <string>
#include <vector>

namespace icmlkit::nn {

/// The routed (and shared) expert's MLP.
enum class ExpertType {
  swiglu,  ///< gate, up and down matrices: 3 w m weights
  relu2,   ///< squared-ReLU, FC1 and FC2: 2 w m weights (Nemotron's, the paper's 95B model)
};

/// Parses "swiglu" or "relu2"; throws UsageError (--expert) otherwise.
ExpertType parse_expert_type(const std::string& name);
std::string expert_type_name(ExpertType t);
/// Weight matrices in one expert (3 or 2).
int expert_matrices(ExpertType t) noexcept;

/// Which layer the costs are for.
enum class MoeVariant { standard, eff, acc };
std::string moe_variant_name(MoeVariant v);

/// One configuration of the cost model.  Sizes are counts (d, l, m in weights; FLOP/s and bytes/s
/// per GPU).  The defaults are the paper's worked example: Qwen3-235B's MoE shape on GB200 (FP4
/// 10 PFLOP/s, HBM 8 TB/s, NVLink 900 GB/s per direction), EP = 64.
struct MoeCostConfig {
  double d = 4096;           ///< model width
  double latent = 0;         ///< l, the latent width; 0 = d / alpha
  double alpha = 4;          ///< d / l when latent is 0 (the paper's recommended 4)
  int experts = 128;         ///< N, the standard layer's routed experts
  int top_k = 8;             ///< K, routed experts per token
  int shared = 0;            ///< S, shared experts (always active, width d)
  double m = 1536;           ///< the routed experts' hidden width
  double m_shared = 0;       ///< the shared experts' hidden width (0 = m)
  int layers = 94;           ///< MoE layers
  ExpertType expert = ExpertType::swiglu;
  int ep = 64;               ///< expert-parallel degree (GPUs the experts are spread over)
  double tokens = 8192;      ///< t, tokens in flight per layer step over the EP group
  double decode_batch = 1;   ///< tokens per decode step for the weight bytes read
  double flops = 10e15;      ///< F, FLOP/s per GPU
  double hbm_bw = 8e12;      ///< BW_HBM, bytes/s per GPU
  double link_bw = 900e9;    ///< BW_NVL, bytes/s per GPU and direction
  double weight_bytes = 1;   ///< bytes per weight (the paper's roofline counts 1 per element; FP4 is 0.5)
  double act_bytes = 1;      ///< bytes per activation element in the roofline
  double dispatch_bytes = 0.5;  ///< bytes per element sent to the experts (FP4)
  double combine_bytes = 2;     ///< bytes per element sent back (BF16)
  int cost_matrices = 0;     ///< matrices per expert in C_comp (0 = the expert's own; 1 = the paper's form)
  double other_params = 0;   ///< parameters outside the MoE layers (attention, embeddings): all active
};

/// Refuses a configuration the model cannot cost: a non-positive size, rate or count, K > N,
/// alpha N (or alpha K for acc) not a whole number, l > d.  Throws UsageError naming the flag.
void check_moe_cost_config(const MoeCostConfig& c);

/// The latent width l (latent, or d / alpha).
double latent_width(const MoeCostConfig& c) noexcept;

/// A variant's layer shape: routed experts N', top-K', and the width w the experts see.
struct MoeShape {
  MoeVariant variant = MoeVariant::standard;
  int experts = 0, top_k = 0;
  double width = 0;
};
/// standard: (N, K, d); eff: (alpha N, K, l); acc: (alpha N, alpha K, l), alpha = d / l.
/// Throws UsageError when alpha N or alpha K is not a whole number.
MoeShape moe_shape(const MoeCostConfig& c, MoeVariant v);

/// Everything the model gives for one variant.
struct MoeVariantCost {
  MoeShape shape;
  double alpha = 1;              ///< d / l (1 for standard)
  // parameters per MoE layer
  double expert_params = 0;      ///< one routed expert: matrices x w x m
  double routed_params = 0;      ///< N' experts
  double shared_params = 0;      ///< S experts of width d and hidden m_shared
  double router_params = 0;      ///< N' x d
  double projection_params = 0;  ///< W_down and W_up: 2 d l (latent variants), else 0
  double layer_total = 0;        ///< routed + shared + router + projections
  double layer_active = 0;       ///< K' experts + shared + router + projections (per token)
  // whole model
  double total_params = 0;       ///< layers x layer_total + other_params
  double active_params = 0;      ///< layers x layer_active + other_params
  // decode (memory-bound)
  double decode_experts = 0;     ///< expected distinct experts per layer for decode_batch tokens (uniform routing)
  double decode_weight_bytes = 0;  ///< weight bytes read per decode step, every layer and the other parameters
  // the roofline of one expert matrix
  double tokens_per_expert = 0;  ///< t_exp = t K' / N'
  double intensity = 0;          ///< FLOP per byte at t_exp
  double roof_tokens = 0;        ///< t_exp where the intensity reaches F / BW_HBM (infinity: never)
  // expert parallelism, per GPU and layer
  double comm_bytes = 0;         ///< all-to-all bytes M_comm
  double comp_flops = 0;         ///< expert FLOPs C_comp
  double comm_seconds = 0, comp_seconds = 0;  ///< M_comm / BW_NVL and C_comp / F
  double comm_comp_ratio = 0;    ///< t_comm / t_comp
};

/// The costs of variant `v` under `c` (checked first: UsageError as check_moe_cost_config).
MoeVariantCost moe_cost(const MoeCostConfig& c, MoeVariant v);

/// The tokens per expert at which a w x m matrix's intensity 2 t w m / (b_w w m + b_a t (w + m))
/// reaches `ridge` (FLOP per byte, F / BW): ridge b_w w m / (2 w m - ridge b_a (w + m)), or
/// infinity when the intensity's limit 2 w m / (b_a (w + m)) does not exceed the ridge.
double roofline_tokens(double w, double m, double ridge, double weight_bytes, double act_bytes) noexcept;

/// Expected distinct experts hit when `tokens` tokens each pick k of n experts uniformly at random
/// without repeats: n (1 - (1 - k / n)^tokens).
double expected_distinct_experts(int n, int k, double tokens) noexcept;

}  // namespace icmlkit::nn
