#include "nn/trainer.hpp"
#include "nn/sgd.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "nn/adam_mini.hpp"
#include "nn/galore.hpp"
#include "io/h5array.hpp"
#include "lm/support.hpp"
#include "io/hdf5.hpp"
#include "util/error.hpp"

namespace icmlkit::nn {

namespace h5 = io::h5;

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = {{"seq_len", seq_len}, {"batch", batch},   {"accum", accum},
          {"steps", steps},     {"lr", lr},         {"min_lr", min_lr},
          {"warmup", warmup},   {"clip", clip},     {"beta1", adam.beta1},
          {"beta2", adam.beta2}, {"eps", adam.eps}, {"weight_decay", adam.weight_decay},
          {"optimizer", optimizer}, {"seed", seed}};
  if (optimizer == "foam")
    j.update({{"foam_level", foam.level}, {"foam_scale", foam.scale}, {"foam_res_scale", foam.res_scale},
              {"foam_second_moment", foam.paper_second_moment ? "paper" : "code"}});
  if (optimizer == "poet-x")
    j.update({{"poet_block", poet.block}, {"poet_merge_every", poet.merge_every}, {"poet_terms", poet.terms},
              {"poet_cayley", poet.polynomial == CayleyPolynomial::neumann ? "neumann" : "series"},
              {"poet_fully_stochastic", poet.fully_stochastic}, {"poet_lr", poet.lr}, {"poet_scale", poet.scale},
              {"poet_normalize", poet.normalize}, {"poet_clip_ramp_until", poet.clip_ramp_until}});
  if (optimizer == "galore")
    j.update({{"galore_rank", galore.rank}, {"galore_gap", galore.update_gap}, {"galore_scale", galore.scale}});
  // Only a run with the early-exit loss records its settings, so runs saved before the option
  // existed resume as before.
  if (exit.enabled()) j.update(exit.to_json());
  if (sparse.enabled()) j["sparse"] = sparse.to_json();  // dense runs' options stay as before
  if (moe_model)  // llama runs' stay as before
    j.update({{"moe_aux", moe_aux}, {"router_bias_update", router_bias_update}, {"moe_capacity_factor", moe_capacity}});
  return j;
}

double EvalResult::perplexity() const { return std::exp(loss); }

namespace {
// Targets that are the arg-max of their row of logits [targets.size(), V] (the lower id on ties).
std::int64_t count_top1(const std::vector<float>& logits, const std::vector<int>& targets, int V) {
  std::int64_t n = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    const float* row = logits.data() + r * std::size_t(V);
    n += static_cast<int>(std::max_element(row, row + V) - row) == targets[r];
  }
  return n;
}
}  // namespace

EvalResult evaluate(LlamaParams<float>& params, const std::vector<int>& stream, int S, int batch,
                    std::int64_t max_tokens, const std::function<void(std::int64_t, std::int64_t)>& on_progress,
                    TrainCache<float>* given) {
  EvalResult r;
  if (stream.size() < 2) return r;
  TrainCache<float> own;
  TrainCache<float>& cache = given ? *given : own;
  double sum = 0;
  const std::int64_t all = std::int64_t(stream.size()) - 1;
  const std::int64_t targets = max_tokens > 0 ? std::min(all, max_tokens) : all;  // the first ones
  const std::int64_t full = targets / S;
  // Held-out losses are the engine's: no token dropping whatever the training capacity.
  struct NoCapacity {
    LlamaParams<float>& p;
    double keep;
    ~NoCapacity() { p.moe_capacity = keep; }
  } no_capacity{params, params.moe_capacity};
  params.moe_capacity = 0;
  const int V = params.config.vocab_size;
  const std::vector<float>& logits = cache.logits;  // the last forward's [rows, V]
  std::vector<int> in, tg;
  std::int64_t w = 0;
  while (w < full) {
    const int b = static_cast<int>(std::min<std::int64_t>(batch, full - w));
    in.clear();
    tg.clear();
    Windows win{&stream, S};
    for (int i = 0; i < b; ++i) win.get(w + i, in, tg);
    sum += llama_loss(params, in, tg, b, S, 0.0, cache);
    r.correct += count_top1(logits, tg, V);
    r.tokens += std::int64_t(b) * S;
    w += b;
    if (on_progress) on_progress(r.tokens, targets);
  }
  const std::int64_t rest = targets - full * S;
  if (rest > 0) {
    const std::size_t o = std::size_t(full) * S;
    in.assign(stream.begin() + o, stream.begin() + o + rest);
    tg.assign(stream.begin() + o + 1, stream.begin() + o + rest + 1);
    sum += llama_loss(params, in, tg, 1, static_cast<int>(rest), 0.0, cache);
    r.correct += count_top1(logits, tg, V);
    r.tokens += rest;
    if (on_progress) on_progress(r.tokens, targets);
  }
  r.loss = r.tokens > 0 ? sum / double(r.tokens) : 0.0;
  return r;
}

void check_sparse_shapes(const SparseOptions& so, const lm::ModelConfig& config) {
  const auto shapes = llama_param_shapes(config);
  std::size_t g = 0;
  for (int i : attention_mlp_matrices(config)) g = std::gcd(g, std::size_t(shapes[std::size_t(i)].second[0]) * std::size_t(shapes[std::size_t(i)].second[1]));
  auto sizes = [&] {  // the block sizes that divide every matrix
    std::string list;
    int shown = 0;
    for (std::size_t b = 1; b <= g && shown < 12; ++b)
      if (g % b == 0) {
        list += (list.empty() ? "" : ", ") + std::to_string(b);
        ++shown;
      }
    return list;
  };
  for (int i : attention_mlp_matrices(config)) {
    const auto& [name, shape] = shapes[std::size_t(i)];
    const std::size_t numel = std::size_t(shape[0]) * std::size_t(shape[1]), b = std::size_t(so.block);
    if (numel % b != 0)
      throw UsageError(fmt::format("sparse block size {} does not divide {} [{}, {}] ({} entries), so its density could not be exact; "
                                   "sizes that divide every matrix: {}",
                                   b, name, shape[0], shape[1], numel, sizes()),
                       "--sparse-block");
    if (so.density < 1.0 && sparse_block_count(numel, so.block, so.density) == numel / b)
      throw UsageError(fmt::format("density {} with blocks of {} leaves {} [{}, {}] ({} blocks) dense; use a lower density or "
                                   "smaller blocks",
                                   so.density, b, name, shape[0], shape[1], numel / b),
                       so.block > 1 ? "--sparse-block" : "--density");
  }
}

nlohmann::json checkpoint_train_options(const std::string& path) noexcept {
  try {
    if (!holds_training_state(path)) return nullptr;
    h5::Handle file = h5::open_file(path);
    h5::Handle g = h5::open_group(file, "/train", path);
    std::string s;
    if (!h5::read_attr(g, "options", s)) return nullptr;
    return nlohmann::json::parse(s, nullptr, false);
  } catch (...) {
    return nullptr;
  }
}

void check_train_options(const TrainOptions& opt, const lm::ModelConfig& config) {
  const std::string& o = opt.optimizer;
  if (o != "adamw" && o != "adam-mini" && o != "galore" && o != "foam" && o != "poet-x" && o != "sgd")
    throw UsageError("unknown optimizer '" + o + "' (adamw, adam-mini, galore, foam, poet-x or sgd)", "--optimizer");
  if (config.has_moe() && o != "adamw")  // the other optimizers' partitions and projections are not defined per expert yet
    throw UsageError(fmt::format("a model with moe blocks trains with AdamW only for now (got --optimizer {})", o), "--optimizer");
  if (config.has_moe() && opt.sparse.enabled())
    throw UsageError("sparse training of a model with moe blocks is not supported yet", "--sparse");
  if (!(opt.moe_aux >= 0) || !std::isfinite(opt.moe_aux))
    throw UsageError(fmt::format("the load-balancing coefficient must be >= 0 (got {})", opt.moe_aux), "--moe-aux-loss");
  if (!(opt.router_bias_update >= 0) || !std::isfinite(opt.router_bias_update))
    throw UsageError(fmt::format("the router bias update must be >= 0 (got {})", opt.router_bias_update), "--router-bias-update");
  if (!(opt.moe_capacity >= 0) || !std::isfinite(opt.moe_capacity))
    throw UsageError(fmt::format("the capacity factor must be >= 0 (got {}; 0 = no limit)", opt.moe_capacity), "--moe-capacity-factor");
  if (opt.router_bias_update > 0 && !(config.has_moe() && config.moe.router == lm::RouterKind::sigmoid))
    throw UsageError("--router-bias-update moves a sigmoid router's selection bias: the model needs moe blocks with --router sigmoid",
                     "--router-bias-update");
  if (o == "foam")
    for (const auto& [name, shape] : llama_param_shapes(config)) foam_check_level(opt.foam.level, name, shape);
  if (opt.sparse.enabled()) {
    if (o != "adamw")
      throw UsageError(fmt::format("--sparse {} trains with AdamW (Adam with state for the active entries only, as SMET's Adam_block); "
                                   "--optimizer {} has no sparse state",
                                   sparse_method_name(opt.sparse.method), o),
                       "--sparse");
    check_sparse_options(opt.sparse);
    check_sparse_shapes(opt.sparse, config);
  }
  if (o == "poet-x") {
    check_poet_shapes(config, opt.poet);
    if (!(opt.poet.lr > 0) || !(opt.poet.scale >= 0)) throw UsageError("POET-X needs poet_lr > 0 and poet_scale >= 0", "--poet-lr");
    if (opt.poet.merge_every < 0) throw UsageError("the merge interval must be >= 0", "--poet-merge-every");
  }
}

namespace {
/// The lm-train flags that give the sparse settings `sp` (a checkpoint's "sparse" options).
std::string sparse_flags(const nlohmann::json& sp) {
  if (!sp.is_object()) return "--sparse ?";
  std::string f = fmt::format("--sparse {} --density {}", sp.value("method", std::string("?")), sp.value("density", 0.0));
  if (sp.value("method", std::string()) != "static")
    f += fmt::format(" --update-every {} --prune-rate {} --prune-rate-min {} --prune-schedule {}", sp.value("update_every", 0),
                     sp.value("prune_rate", 0.0), sp.value("prune_rate_min", 0.0), sp.value("prune_schedule", std::string("?")));
  if (sp.value("block", 1) != 1) f += fmt::format(" --sparse-block {}", sp.value("block", 1));
  if (sp.value("method", std::string()) != "smet") {
    if (sp.value("local_steps", false)) f += " --sparse-local-steps";
    if (sp.value("density_lr", false)) f += " --sparse-density-lr";
  }
  if (sp.value("warmup", 0) != (sp.value("method", std::string()) == "smet" ? 100 : 0)) f += fmt::format(" --sparse-warmup {}", sp.value("warmup", 0));
  std::string forms;
  for (const char* k : {"warmup", "lr", "steps"})
    if (sp.value(std::string("code_") + k, false)) forms += (forms.empty() ? "" : ",") + std::string(k);
  if (!forms.empty()) f += " --sparse-code-form " + forms;
  return f;
}

/// `m` without its weight matrices (config, norms and tokenizer kept): the weights live in the
/// parameter store, and a second copy would cost as much memory as the model itself.
lm::Model without_matrices(const lm::Model& init) {
  lm::Model m;
  m.config = init.config;
  m.tokenizer_model = init.tokenizer_model;
  m.stored = init.stored;
  m.output_norm = init.output_norm;
  m.layers.resize(init.layers.size());
  for (std::size_t l = 0; l < init.layers.size(); ++l) {
    m.layers[l].attn_norm = init.layers[l].attn_norm;
    m.layers[l].ffn_norm = init.layers[l].ffn_norm;
  }
  auto shape = [](const lm::Matrix& from, lm::Matrix& to) {
    to.rows = from.rows;
    to.cols = from.cols;
  };
  shape(init.token_embd, m.token_embd);
  shape(init.output, m.output);
  shape(init.adapter, m.adapter);  // a recurrent-depth model's root matrix
  for (std::size_t l = 0; l < init.layers.size(); ++l) {
    const auto& a = init.layers[l];
    auto& b = m.layers[l];
    b.router_bias = a.router_bias;  // the sigmoid router's selection bias is not trained by gradient: kept as is
    std::vector<lm::Matrix*> to = b.matrices_all();
    const std::vector<const lm::Matrix*> from = a.matrices_all();
    for (std::size_t i = 0; i < from.size(); ++i) shape(*from[i], *to[i]);
  }
  return m;
}
}  // namespace

Trainer::Trainer(const lm::Model& init, std::vector<int> stream, TrainOptions opt)
    : base_(without_matrices(init)), params_(params_from_model<float>(init)), stream_(std::move(stream)),
      opt_(opt), order_(opt.seed, 0) {
  const auto& c = init.config;
  lm::require_blocks(lm::Runner::trainer, c);
  opt_.moe_model = c.has_moe();
  check_train_options(opt_, c);
  params_.moe_aux = opt_.moe_model ? opt_.moe_aux : 0.0;
  params_.moe_capacity = opt_.moe_model ? opt_.moe_capacity : 0.0;
  if (opt_.seq_len > c.n_ctx)
    throw InputError(fmt::format("context {} is larger than the model allows (n_ctx = {})", opt_.seq_len, c.n_ctx),
                     "--seq-len");
  windows_ = Windows{&stream_, opt_.seq_len};
  if (windows_.count() == 0)
    throw InputError(fmt::format("training text has {} tokens, fewer than one window of {} + 1", stream_.size(),
                                 opt_.seq_len));
  order_ = DataOrder(opt_.seed, windows_.count());
  schedule_ = WarmupCosine{opt_.lr, opt_.min_lr, opt_.warmup, opt_.steps};
  if (opt_.optimizer == "adamw") {
    optimizer_ = std::make_unique<AdamW>(params_.store, opt_.adam);
  } else if (opt_.optimizer == "sgd") {
    optimizer_ = std::make_unique<Sgd>(opt_.adam.weight_decay);
  } else if (opt_.optimizer == "foam") {
    FoamOptions f = opt_.foam;
    f.beta1 = opt_.adam.beta1;
    f.beta2 = opt_.adam.beta2;
    f.eps = opt_.adam.eps;
    f.weight_decay = opt_.adam.weight_decay;
    optimizer_ = std::make_unique<Foam>(params_.store, f);
  } else if (opt_.optimizer == "galore") {
    optimizer_ = std::make_unique<Galore>(params_.store, opt_.adam, opt_.galore);
  } else if (opt_.optimizer == "adam-mini") {
    optimizer_ = std::make_unique<AdamMini>(params_.store, opt_.adam, c.head_dim());
  } else if (opt_.optimizer == "poet-x") {
    enable_poet(params_, opt_.poet, opt_.seed);
    std::vector<char> is_q(params_.store.params.size(), 0);
    for (const auto& pl : params_.poet) is_q[pl.q] = 1;
    FoamOptions a;
    a.beta1 = opt_.adam.beta1;
    a.beta2 = opt_.adam.beta2;
    a.eps = opt_.adam.eps;
    a.weight_decay = opt_.adam.weight_decay;
    optimizer_ = std::make_unique<PoetAdamW>(params_.store, std::move(is_q), a, opt_.poet.lr / opt_.lr * opt_.poet.scale,
                                             opt_.poet.merge_every);
  } else {
    throw UsageError("unknown optimizer '" + opt_.optimizer + "' (adamw, adam-mini, galore, foam, poet-x or sgd)", "--optimizer");
  }
  if (opt_.sparse.enabled()) init_sparse();
}

void Trainer::init_sparse() {
  const SparseOptions& so = opt_.sparse;
  auto& adam = static_cast<AdamW&>(*optimizer_);
  params_.sparse.assign(params_.store.params.size(), {});
  adam.set_per_entry_steps(so.local_steps);  // before the masks: only then are step counts stored
  const std::vector<int> targets = attention_mlp_matrices(params_.config);
  for (std::size_t k = 0; k < targets.size(); ++k) {
    Param<float>& W = params_.store.params[std::size_t(targets[k])];
    Rng rng(sparse_seed(opt_.seed, 0, static_cast<int>(k)));
    SparseMask mask = random_mask(W.numel(), so.block, so.density, rng);
    if (mask.blocks.size() == mask.num_blocks()) continue;  // full (density 1): the matrix stays dense
    std::vector<float> kept(W.numel(), 0.0f);
    for (std::int32_t j : mask.entries()) kept[std::size_t(j)] = W.value[std::size_t(j)];
    W.value = std::move(kept);
    masks_.emplace_back(targets[k], std::move(mask));
    install_mask(masks_.size() - 1, 0);
  }
  adam.set_momentum_warmup(so.warmup, so.code_warmup);
  if (so.density_lr) {  // lr0 / d per sparse matrix (the code's form: divided cumulatively in store order)
    double running = 1.0;
    std::size_t k = 0;
    for (std::size_t i = 0; i < params_.store.params.size(); ++i) {
      const bool sparse_i = k < masks_.size() && std::size_t(masks_[k].first) == i;
      const double d = sparse_i ? masks_[k++].second.density() : 1.0;
      if (so.code_lr) {
        running /= d;
        adam.set_lr_scale(static_cast<int>(i), running);
      } else if (sparse_i) {
        adam.set_lr_scale(static_cast<int>(i), 1.0 / d);
      }
    }
  }
  // the fixed probe batch: the stream's first windows
  probe_batch_ = static_cast<int>(std::min<std::int64_t>(std::min(opt_.batch, 8), windows_.count()));
  for (int b = 0; b < probe_batch_; ++b) windows_.get(b, probe_in_, probe_tg_);
}

void Trainer::install_mask(std::size_t k, std::int32_t new_step) {
  const int i = masks_[k].first;
  std::vector<std::int32_t> e = masks_[k].second.entries();
  params_.store.params[std::size_t(i)].grad.assign(e.size(), 0.0f);
  static_cast<AdamW&>(*optimizer_).set_active(i, e, new_step);
  params_.sparse[std::size_t(i)] = std::move(e);
}

double Trainer::probe_loss() {
  if (probe_batch_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const double sum = llama_loss(params_, probe_in_, probe_tg_, probe_batch_, opt_.seq_len, 0.0, probe_cache_);
  return sum / double(std::int64_t(probe_batch_) * opt_.seq_len);
}

std::int64_t Trainer::grad_bytes() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : params_.store.params) n += std::int64_t(p.grad.size() * sizeof(float));
  return n;
}

TopologyEvent Trainer::update_topology(std::int64_t step) {
  const SparseOptions& so = opt_.sparse;
  TopologyEvent ev;
  ev.prune_fraction = prune_fraction(so, step, opt_.steps);
  ev.probe_before = probe_loss();
  const std::int64_t update = step / so.update_every;
  for (std::size_t k = 0; k < masks_.size(); ++k) {
    auto& [i, mask] = masks_[k];
    Param<float>& W = params_.store.params[std::size_t(i)];
    const std::size_t n = prune_count(mask, ev.prune_fraction);
    const std::vector<std::int32_t> pruned = magnitude_prune(mask, W.value.data(), n);
    std::vector<std::int32_t> grown;
    if (so.method == SparseMethod::rigl) {
      grown = gradient_regrow(mask, pruned, params_.dense_grad[std::size_t(i)].data(), n);
    } else {
      Rng rng(sparse_seed(opt_.seed, update, static_cast<int>(k)));
      grown = score_regrow(mask, uniform_scores(mask.num_blocks(), rng), n);
    }
    zero_blocks(mask, pruned, W.value.data());
    zero_blocks(mask, grown, W.value.data());  // regrown at w = 0 (RigL may regrow a block it just pruned)
    apply_topology(mask, pruned, grown);
    install_mask(k, so.code_steps ? 1 : 0);
    ev.layers.push_back({W.name, pruned.size(), grown.size(), mask.density()});
  }
  params_.dense_grad.clear();
  ev.probe_after = probe_loss();
  return ev;
}

std::vector<std::int64_t> Trainer::next_windows() {
  std::vector<std::int64_t> w(std::size_t(opt_.batch) * std::size_t(opt_.accum));
  for (auto& x : w) x = order_.next();
  return w;
}

StepStats Trainer::step() { return step(next_windows()); }

void Trainer::skip_step() { optimizer_->set_steps(optimizer_->steps() + 1); }

StepStats Trainer::step(const std::vector<std::int64_t>& windows) {
  const int B = opt_.batch, S = opt_.seq_len;
  if (windows.size() != std::size_t(B) * std::size_t(opt_.accum))
    throw InputError(fmt::format("a step takes batch x accum = {} windows, not {}", B * opt_.accum, windows.size()));
  for (const std::int64_t w : windows)
    if (w < 0 || w >= windows_.count())
      throw InputError(fmt::format("window {} outside the training stream's {} windows", w, windows_.count()));
  const std::int64_t step_tokens = std::int64_t(B) * S * opt_.accum;
  params_.store.zero_grad();
  const SparseOptions& so = opt_.sparse;
  const std::int64_t next = optimizer_->steps() + 1;  // the step this call takes
  const bool topology_step = !in_control_ && !masks_.empty() && so.dynamic() && next % so.update_every == 0 && next < opt_.steps;
  if (topology_step && so.method == SparseMethod::rigl) {  // RigL: this step's dense gradient scores the regrowth
    params_.dense_grad.assign(params_.store.params.size(), {});
    for (const auto& [i, mask] : masks_) params_.dense_grad[std::size_t(i)].assign(mask.numel, 0.0f);
  }
  // The step's sums, micro-batch by micro-batch (issue 41): each micro-batch's gradient and
  // statistics are computed from zero and folded into the running sum in micro-batch order, over
  // this process alone or over the ranks of a data-parallel job (dist::ChainReducer), so the bits
  // do not depend on the rank count.  Doubles: loss, aux, hook, recurrence, the exits' losses,
  // then the experts' loads and drops per block.
  ExitPlan plan = exit_loss_plan(opt_.exit, base_.config.n_layers, optimizer_->steps(), opt_.steps);
  const std::size_t n_exit = plan.steps.size();
  if (opt_.moe_model) {  // the router statistics' shapes, [n_layers][E] (empty rows for llama blocks), before any forward
    const auto& c = base_.config;
    params_.moe_load.resize(std::size_t(c.n_layers));
    params_.moe_dropped.resize(std::size_t(c.n_layers), 0.0);
    for (int l = 0; l < c.n_layers; ++l)
      if (lm::is_moe_block(c.block_type(l))) params_.moe_load[std::size_t(l)].resize(std::size_t(c.moe.n_experts), 0.0);
  }
  std::size_t n_load = 0;
  for (const auto& load : params_.moe_load) n_load += load.size();
  std::vector<double>& sums_d = reduce_doubles_;
  sums_d.assign(4 + n_exit + n_load + params_.moe_dropped.size(), 0.0);
  if (!reducer_ || reducer_accum_ != opt_.accum) {
    reducer_ = std::make_unique<dist::ChainReducer>(comm_ ? *comm_ : static_cast<dist::Comm&>(self_comm_), opt_.accum);
    reducer_accum_ = opt_.accum;
  }
  const std::vector<int> mine = reducer_->mine();
  // one process, one micro-batch: the gradients are the step's as they lie (no copy)
  const bool direct = !comm_ && opt_.accum == 1;
  std::size_t n_float = 0;
  for (const auto& p : params_.store.params) n_float += p.grad.size();
  if (topology_step && so.method == SparseMethod::rigl)
    for (const auto& [i, mask] : masks_) n_float += mask.numel;
  if (!direct) reduce_floats_.resize(n_float);
  const dist::Sums sums{std::span<float>(reduce_floats_.data(), direct ? 0 : n_float), std::span<double>(sums_d)};
  std::vector<int> in, tg;
  for (const int a : mine) {
    params_.store.zero_grad();
    for (auto& g : params_.dense_grad) std::fill(g.begin(), g.end(), 0.0f);
    for (auto& load : params_.moe_load) std::fill(load.begin(), load.end(), 0.0);
    std::fill(params_.moe_dropped.begin(), params_.moe_dropped.end(), 0.0);
    in.clear();
    tg.clear();
    for (int b = 0; b < B; ++b) windows_.get(windows[std::size_t(a) * B + b], in, tg);
    double recurrence = 0;
    if (base_.config.is_recdepth()) {  // Huginn: this micro-batch's recurrence and initial state, from (seed, step, a)
      const std::uint64_t rs = derive_seed(derive_seed(opt_.seed, 0x7ecde9u), std::uint64_t(next) * opt_.accum + a);
      const auto [n_free, n_grad] = sample_recurrence(base_.config.recdepth.mean_recurrence, base_.config.recdepth.backprop_depth, rs);
      cache_.rd_no_grad = n_free;
      cache_.rd_grad = n_grad;
      cache_.rd_seed = derive_seed(rs, 1);
      recurrence = n_free + n_grad;
    }
    sums_d[0] = llama_loss(params_, in, tg, B, S, 1.0 / double(step_tokens), cache_, static_cast<std::vector<float>*>(nullptr), {},
                           opt_.exit.enabled() ? &plan : nullptr);
    sums_d[1] = cache_.aux_loss;
    sums_d[2] = cache_.hook_sum;
    sums_d[3] = recurrence;
    std::size_t o = 4, loads = 0;
    for (const auto& load : params_.moe_load) loads += load.size();
    if (loads != n_load || params_.moe_dropped.size() + n_load + n_exit + 4 != sums_d.size())
      throw RuntimeError("the router statistics changed shape within a step");
    for (std::size_t i = 0; i < n_exit; ++i) sums_d[o++] = i < plan.losses.size() ? plan.losses[i] : 0.0;
    for (const auto& load : params_.moe_load)
      for (double x : load) sums_d[o++] = x;
    for (double x : params_.moe_dropped) sums_d[o++] = x;
    if (!direct) {
      float* f = reduce_floats_.data();
      for (const auto& p : params_.store.params) f = std::copy(p.grad.begin(), p.grad.end(), f);
      for (const auto& g : params_.dense_grad) f = std::copy(g.begin(), g.end(), f);
    }
    reducer_->add(a, sums);
  }
  reducer_->finish(sums);
  if (!direct) {  // the step's total back into the gradients
    const float* f = reduce_floats_.data();
    for (auto& p : params_.store.params) {
      std::copy(f, f + p.grad.size(), p.grad.begin());
      f += p.grad.size();
    }
    for (auto& g : params_.dense_grad) {
      std::copy(f, f + g.size(), g.begin());
      f += g.size();
    }
  }
  const double loss = sums_d[0], aux = sums_d[1], hook = sums_d[2], recurrence = sums_d[3];
  std::vector<double> exit_sum(sums_d.begin() + 4, sums_d.begin() + 4 + std::ptrdiff_t(n_exit));
  {
    std::size_t o = 4 + n_exit;
    for (auto& load : params_.moe_load)
      for (double& x : load) x = sums_d[o++];
    for (double& x : params_.moe_dropped) x = sums_d[o++];
  }
  cache_.rd_no_grad = cache_.rd_grad = -1;
  StepStats st;
  st.windows = windows;
  if (base_.config.is_recdepth()) st.recurrence = recurrence / opt_.accum;
  if (opt_.moe_model) {
    int moe_steps = 0;
    for (int l = 0; l < base_.config.n_layers; ++l) moe_steps += lm::is_moe_block(base_.config.block_type(l));
    st.aux_loss = aux / double(std::max(1, moe_steps * opt_.accum));
    st.expert_load = params_.moe_load;
    st.expert_dropped = params_.moe_dropped;
  }
  st.loss = loss / double(step_tokens);
  if (cache_.logits_hook) st.hook_loss = hook / double(step_tokens);
  st.objective = plan.final_weight * st.loss;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const double mean = exit_sum[i] / double(step_tokens);
    st.exit_losses.emplace_back(plan.steps[i] + 1, mean);
    st.objective += plan.weights[i] * mean;
  }
  st.lr = schedule_(optimizer_->steps());
  st.grad_norm = params_.store.clip_grad_norm(clip_limit());
  if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm))
    throw RuntimeError(fmt::format("non-finite training {} at step {}", std::isfinite(st.loss) ? "gradient" : "loss",
                                   optimizer_->steps() + 1));
  optimizer_->step(params_.store, st.lr);
  if (opt_.router_bias_update > 0)  // DeepSeek-V3's auxiliary-loss-free balancing of a sigmoid router
    for (int l = 0; l < base_.config.n_layers; ++l) {
      if (!params_.has(l, LlamaParams<float>::router_bias) || std::size_t(l) >= params_.moe_load.size()) continue;
      const std::vector<double>& load = params_.moe_load[std::size_t(l)];
      double mean = 0;
      for (double x : load) mean += x / double(load.size());
      std::vector<float>& b = params_.layer(l, LlamaParams<float>::router_bias).value;
      const float g = static_cast<float>(opt_.router_bias_update);
      for (std::size_t e = 0; e < b.size(); ++e) b[e] += load[e] < mean ? g : load[e] > mean ? -g : 0.0f;
    }
  const int T = opt_.poet.merge_every;
  if (!params_.poet.empty() && T > 0 && optimizer_->steps() % T == 0) {  // POET-X: merge-then-reinitialise
    poet_merge(params_, opt_.seed, optimizer_->steps() / T);
    static_cast<PoetAdamW&>(*optimizer_).reset_q();
  }
  tokens_ += step_tokens;
  st.step = optimizer_->steps();
  st.tokens = tokens_;
  if (!masks_.empty() && !in_control_) {  // the probe batch around each (for static: each would-be) topology update
    const std::int64_t U = so.update_every, since = st.step % U;
    if ((st.step + 1) % U == 0 && st.step + 1 < opt_.steps) {
      st.since_update = -1;
      st.probe_loss = probe_loss();
    } else if (st.step > U && since >= 1 && since <= so.probe_steps) {
      st.since_update = static_cast<int>(since);
      st.probe_loss = probe_loss();
    } else if (!so.dynamic() && since == 0 && st.step < opt_.steps) {  // static: the control, no update at u
      st.since_update = 0;
      st.probe_loss = probe_loss();
    }
    if (topology_step) {
      std::vector<double> control;
      if (so.probe_control) control = control_branch();  // from the state the update starts from
      st.topology = update_topology(st.step);
      st.topology->control_probe = std::move(control);
    }
  }
  return st;
}

std::vector<double> Trainer::control_branch() {
  std::vector<std::vector<float>> values, floats;
  std::vector<std::vector<std::int32_t>> ints;
  for (const auto& p : params_.store.params) values.push_back(p.value);
  for (const auto& sb : optimizer_->state()) {
    if (sb.ints) ints.push_back(*sb.ints);
    else floats.push_back(*sb.data);
  }
  const std::int64_t steps = optimizer_->steps(), tokens = tokens_;
  const DataOrder order = order_;
  std::vector<std::vector<float>> dense_grad;
  dense_grad.swap(params_.dense_grad);  // RigL's scoring gradient: kept out of the branch's steps
  auto restore = [&] {
    for (std::size_t i = 0; i < values.size(); ++i) params_.store.params[i].value = std::move(values[i]);
    std::size_t f = 0, n = 0;
    for (const auto& sb : optimizer_->state()) {
      if (sb.ints) *sb.ints = std::move(ints[n++]);
      else *sb.data = std::move(floats[f++]);
    }
    optimizer_->set_steps(steps);
    tokens_ = tokens;
    order_ = order;
    params_.dense_grad.swap(dense_grad);
    in_control_ = false;
  };
  std::vector<double> losses;
  in_control_ = true;
  try {
    const std::int64_t left = opt_.steps - steps;  // the control stops where the run does
    for (int k = 0; k < opt_.sparse.probe_steps && k < left; ++k) {
      step();
      losses.push_back(probe_loss());
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return losses;
}

double Trainer::clip_limit() const noexcept {
  // calc_poet_grad_clipping_value (poet_torch/utils/model_utils.py): from 0.1 c up to c over the 10
  // steps after each merge, while the steps done lie in [T, clip_ramp_until]
  const std::int64_t s = optimizer_->steps(), T = opt_.poet.merge_every;
  if (params_.poet.empty() || T <= 0 || s < T || s > opt_.poet.clip_ramp_until || s % T >= 10) return opt_.clip;
  return (0.1 + 0.9 * double(s % T) / 10.0) * opt_.clip;
}

std::string Trainer::state_digest(LlamaParams<float>& written) {
  io::Sha256 h;
  for (const auto& p : written.store.params) h.update(p.value.data(), p.value.size() * sizeof(float));
  for (const auto& sb : optimizer_->state()) {
    if (sb.ints) h.update(sb.ints->data(), sb.ints->size() * sizeof(std::int32_t));
    else h.update(sb.data->data(), sb.data->size() * sizeof(float));
  }
  for (const auto& pl : params_.poet)
    for (int i : {pl.weight, pl.q}) h.update(params_.store.params[i].value.data(), params_.store.params[i].value.size() * sizeof(float));
  for (const auto& [i, mask] : masks_) h.update(mask.blocks.data(), mask.blocks.size() * sizeof(std::int32_t));
  return h.hex();
}

std::string Trainer::state_sha256() {
  return io::sha256_hex(fmt::format("{} {} {} {} {}", state_digest(params_), optimizer_->steps(), tokens_, order_.epoch(), order_.pos()));
}

std::int64_t Trainer::optimizer_state_bytes() {
  std::int64_t n = 0;
  for (const auto& b : optimizer_->state()) n += static_cast<std::int64_t>(b.bytes());
  return n;
}

lm::Model Trainer::model() {
  lm::Model m = base_;
  params_to_model(params_, m);
  return m;
}

void Trainer::save(const std::string& path, const io::Provenance& prov, const nlohmann::json& extra) {
  io::AtomicFile out(path);
  const std::string tmp = out.temp_path().string();
  const lm::Model written = model();
  lm::save_checkpoint(tmp, written, h5::FloatStorage::f32, prov);
  LlamaParams<float> values = params_from_model<float>(written);
  const std::string digest = state_digest(values);
  {
    h5::quiet_errors();
    h5::Handle file(H5Fopen(tmp.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    if (!file) throw RuntimeError("cannot reopen checkpoint for writing", path);
    {
      h5::Handle g = h5::create_group(file, "train");
      h5::write_attr(g, "options", opt_.to_json().dump());
      h5::write_attr(g, "extra", extra.is_null() ? "{}" : extra.dump());
      h5::write_attr_int(g, "step", optimizer_->steps());
      h5::write_attr_int(g, "tokens", tokens_);
      h5::write_attr_int(g, "data_epoch", order_.epoch());
      h5::write_attr_int(g, "data_pos", order_.pos());
      h5::write_attr(g, "optimizer", optimizer_->name());
      if (!corpus_sha256_.empty()) h5::write_attr(g, "corpus_sha256", corpus_sha256_);
      h5::write_attr(g, "state_sha256", digest);
      for (const auto& sb : optimizer_->state()) {
        if (sb.ints) h5::write_ints(g, "optim/" + sb.name, *sb.ints);
        else h5::write_floats(g, "optim/" + sb.name, sb.data->data(), {sb.data->size()}, h5::FloatStorage::f32);
      }
      for (const auto& [i, mask] : masks_)  // sparse training: each matrix's active blocks
        h5::write_ints(g, "sparse/" + params_.store.params[std::size_t(i)].name, mask.blocks);
      for (const auto& pl : params_.poet)  // POET-X: W0 and Q (the model holds the effective weights)
        for (int i : {pl.weight, pl.q}) {
          const auto& p = params_.store.params[i];
          h5::write_floats(g, "poet/" + p.name, p.value.data(), {p.value.size()}, h5::FloatStorage::f32);
        }
    }
    h5::close_file(file, path);
  }
  out.commit();
}

bool holds_training_state(const std::string& path) noexcept {
  try {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    h5::Handle file = h5::open_file(path);
    h5::Handle root = h5::open_group(file, "/", path);
    return h5::exists(root, "train");
  } catch (...) {  // not an HDF5 file of ours
    return false;
  }
}

nlohmann::json Trainer::load(const std::string& path) {
  const lm::Model m = lm::load_checkpoint(path);
  const auto& a = m.config;
  const auto& b = base_.config;
  if (a.vocab_size != b.vocab_size || a.d_model != b.d_model || a.n_layers != b.n_layers || a.n_heads != b.n_heads ||
      a.n_kv_heads != b.n_kv_heads || a.d_ff != b.d_ff || a.tied != b.tied || a.rope_style != b.rope_style)
    throw InputError("checkpoint's model shape differs from this run's", path);
  if (m.tokenizer_model != base_.tokenizer_model) throw InputError("checkpoint's tokenizer differs from this run's", path);
  h5::Handle file = h5::open_file(path);
  h5::Handle root = h5::open_group(file, "/", path);
  if (!h5::exists(root, "train")) throw InputError("no training state (/train) to resume from", path);
  h5::Handle g = h5::open_group(file, "/train", path);
  std::string s;
  if (!h5::read_attr(g, "options", s)) throw InputError("missing /train options", path);
  nlohmann::json saved = nlohmann::json::parse(s, nullptr, false);
  if (saved.is_object() && saved.contains("moe_aux") && !saved.contains("moe_capacity_factor"))
    saved["moe_capacity_factor"] = 0.0;  // moe runs saved before the capacity factor existed had none
  const nlohmann::json now = opt_.to_json();
  if (saved.contains("optimizer") && saved["optimizer"] != now["optimizer"])  // before its own options
    throw InputError(fmt::format("resume: option optimizer is {} here but {} in the checkpoint", now["optimizer"].dump(),
                                 saved["optimizer"].dump()),
                     path);
  if (saved.contains("sparse") && !now.contains("sparse")) {  // a sparse run cannot resume dense
    throw InputError(fmt::format("resume: the checkpoint was trained sparse ({}); pass the same sparse options",
                                 sparse_flags(saved["sparse"])),
                     path);
  }
  if (!saved.contains("sparse") && now.contains("sparse"))
    throw InputError(fmt::format("resume: the checkpoint was trained dense; drop the sparse options ({}) or start a new run with --init",
                                 sparse_flags(now["sparse"])),
                     path);
  if (saved.contains("sparse") && now.contains("sparse") && saved["sparse"].is_object() && saved["sparse"] != now["sparse"]) {
    // name the sparse setting that differs, the method first (it implies SMET's parts)
    std::vector<std::string> keys{"method"};
    for (auto it = now["sparse"].begin(); it != now["sparse"].end(); ++it)
      if (it.key() != "method") keys.push_back(it.key());
    for (const std::string& key : keys) {
      const nlohmann::json& value = now["sparse"][key];
      if (!saved["sparse"].contains(key) || saved["sparse"][key] != value)
        throw InputError(fmt::format("resume: sparse option {} is {} here but {} in the checkpoint (it was trained with {})", key,
                                     value.dump(), saved["sparse"].contains(key) ? saved["sparse"][key].dump() : "absent",
                                     sparse_flags(saved["sparse"])),
                         path);
    }
  }
  for (auto it = now.begin(); it != now.end(); ++it)
    if (!saved.contains(it.key()) || saved[it.key()] != it.value())
      throw InputError(fmt::format("resume: option {} is {} here but {} in the checkpoint{}", it.key(), it.value().dump(),
                                   saved.contains(it.key()) ? saved[it.key()].dump() : "absent",
                                   it.key() == "steps" ? "; the step count (set by --steps or --tokens) fixes the learning-rate "
                                                         "schedule, so it cannot change on resume (to train longer, start a new run "
                                                         "with --init from the checkpoint)"
                                                       : ""),
                       path);
  if (saved.contains("exit_loss") && !now.contains("exit_loss")) {  // the early-exit loss cannot be dropped on resume
    std::string was;
    for (const auto& [key, flag] : {std::pair{"exit_loss", "--exit-loss"}, {"exit_every", "--exit-every"},
                                    {"exit_curriculum", "--exit-curriculum"}, {"exit_weights", "--exit-weights"}})
      if (saved.contains(key))
        was += fmt::format("{}{} {}", was.empty() ? "" : " ", flag,
                           saved[key].is_string() ? saved[key].get<std::string>() : saved[key].dump());
    throw InputError(fmt::format("resume: the checkpoint was trained with the early-exit loss; pass the same options: {}", was), path);
  }
  std::int64_t step = 0, tokens = 0, ep = 0, pos = 0;
  const std::string label = path + ":/train";
  if (!h5::read_attr_int(g, "step", step, label) || !h5::read_attr_int(g, "tokens", tokens, label) ||
      !h5::read_attr_int(g, "data_epoch", ep, label) || !h5::read_attr_int(g, "data_pos", pos, label))
    throw InputError("incomplete training state", label);
  if (step < 0 || tokens < 0 || ep < 0 || pos < 0) throw InputError("negative step, token count or data position", label);
  for (std::size_t k = 0; k < masks_.size(); ++k) {  // the masks first: they size the optimizer's sparse state
    SparseMask& mask = masks_[k].second;
    const std::string name = params_.store.params[std::size_t(masks_[k].first)].name, where = label + "/sparse/" + name;
    std::vector<std::int32_t> blocks = h5::read_ints(g, "sparse/" + name, where);
    if (blocks.size() != mask.blocks.size()) throw InputError("sparse mask has the wrong size", where);
    for (std::size_t j = 0; j < blocks.size(); ++j)
      if (blocks[j] < 0 || std::size_t(blocks[j]) >= mask.num_blocks() || (j > 0 && blocks[j] <= blocks[j - 1]))
        throw InputError("sparse mask: block indices must be increasing and inside the matrix", where);
    mask.blocks = std::move(blocks);
    install_mask(k, 0);
  }
  for (const auto& sb : optimizer_->state()) {
    const std::string where = label + "/optim/" + sb.name;
    if (sb.ints) {
      auto arr = h5::read_ints(g, "optim/" + sb.name, where);
      if (arr.size() != sb.ints->size()) throw InputError("optimizer state has the wrong size", where);
      *sb.ints = std::move(arr);
      continue;
    }
    const auto arr = h5::read_floats(g, "optim/" + sb.name, where);
    if (arr.data.size() != sb.data->size()) throw InputError("optimizer state has the wrong size", where);
    *sb.data = arr.data;
  }
  LlamaParams<float> p = params_from_model<float>(m);
  for (std::size_t i = 0; i < p.store.params.size(); ++i) params_.store.params[i].value = p.store.params[i].value;
  std::string recorded;
  for (std::size_t i = 0; i < params_.poet.size(); ++i) {  // POET-X: W0, Q and the permutations of the last merge
    auto& pl = params_.poet[i];
    for (int k : {pl.weight, pl.q}) {
      auto& dst = params_.store.params[k];
      const auto arr = h5::read_floats(g, "poet/" + dst.name, label + "/poet/" + dst.name);
      if (arr.data.size() != dst.value.size()) throw InputError("POET-X state has the wrong size", label + "/poet/" + dst.name);
      dst.value = arr.data;
    }
    const std::int64_t T = opt_.poet.merge_every;
    pl.draw_permutations(poet_permutation_seed(opt_.seed, T > 0 ? step / T : 0, static_cast<int>(i)));
  }
  if (h5::read_attr(g, "state_sha256", recorded) && recorded != state_digest(p))
    throw InputError("the checkpoint's weights or training state do not match the checksum it was saved with (a corrupted file?)",
                     path);
  optimizer_->set_steps(step);
  tokens_ = tokens;
  order_.set_position(ep, pos);
  checkpoint_corpus_sha256_.clear();
  h5::read_attr(g, "corpus_sha256", checkpoint_corpus_sha256_);
  std::string extra;
  h5::read_attr(g, "extra", extra);
  return nlohmann::json::parse(extra.empty() ? "{}" : extra, nullptr, false);
}

}  // namespace icmlkit::nn
