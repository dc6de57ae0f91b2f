// HybridFlow's utility router: network, file format, decision rule, training and evaluation
// (see router.hpp; reference planner/router.py and planner/router_train.py).
#include "hybridflow/router.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"
#include "io/sha256.hpp"
#include "lm/safetensors.hpp"
#include "nn/adamw.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::hybridflow {

using nlohmann::json;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

double sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

std::string layer_key(int layer, const char* what) { return fmt::format("net.{}.{}", 3 * layer, what); }

// Python's str.isspace() for one code point.
bool py_space(std::uint32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
  if (c < 0x80) return false;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

// Decodes the UTF-8 code point at s[i] (advancing i); an invalid byte decodes as itself (a
// non-space), so any byte string has a word count.
std::uint32_t next_code_point(const std::string& s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
  if (len <= 1 || i + len > s.size()) {
    ++i;
    return len == 1 ? b : 0xfffd;
  }
  std::uint32_t c = b & (0x7f >> len);
  for (int k = 1; k < len; ++k) {
    const auto t = static_cast<unsigned char>(s[i + k]);
    if ((t >> 6) != 0x2) {
      ++i;
      return 0xfffd;
    }
    c = (c << 6) | (t & 0x3f);
  }
  i += len;
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The network.

double RouterNet::forward_raw(const float* x) const {
  Eigen::VectorXd a = Eigen::Map<const Eigen::VectorXf>(x, input_dim()).cast<double>();
  for (std::size_t l = 0; l < weight.size(); ++l) {
    const RowMatrixF& W = weight[l];
    Eigen::VectorXd z(W.rows());
    for (Eigen::Index i = 0; i < W.rows(); ++i) z[i] = W.row(i).cast<double>().dot(a) + double(bias[l][i]);
    if (l + 1 < weight.size()) z = z.cwiseMax(0.0);  // ReLU; dropout is the identity in eval mode
    a = std::move(z);
  }
  return a[0];
}

double RouterNet::score(const float* x) const { return sigmoid(forward_raw(x)); }

RouterNet init_router(int embed_dim, int meta_dim, int hidden, int depth, std::uint64_t seed) {
  if (embed_dim <= 0 || meta_dim < 0 || depth < 0 || (depth > 0 && hidden <= 0))
    throw UsageError(fmt::format("router sizes must be positive (embed {}, meta {}, hidden {}, depth {})", embed_dim, meta_dim,
                                 hidden, depth));
  RouterNet net;
  net.embed_dim = embed_dim;
  net.meta_dim = meta_dim;
  net.depth = depth;
  net.hidden = depth > 0 ? hidden : 0;
  Rng rng(seed);
  int in = net.input_dim();
  for (int l = 0; l <= depth; ++l) {
    const int out = l < depth ? hidden : 1;
    const double bound = 1.0 / std::sqrt(double(in));
    RowMatrixF W(out, in);
    Eigen::VectorXf b(out);
    for (int i = 0; i < out; ++i)
      for (int j = 0; j < in; ++j) W(i, j) = float(rng.uniform(-bound, bound));
    for (int i = 0; i < out; ++i) b[i] = float(rng.uniform(-bound, bound));
    net.weight.push_back(std::move(W));
    net.bias.push_back(std::move(b));
    in = out;
  }
  return net;
}

// ---------------------------------------------------------------------------------------------
// The file.

RouterNet load_router(const std::string& path) {
  const io::MappedFile file(path);
  const lm::safetensors::Header h = lm::safetensors::parse(file.data(), file.size(), path);
  RouterNet net;
  if (auto it = h.metadata.find("meta_dim"); it != h.metadata.end()) {
    try {
      std::size_t used = 0;
      net.meta_dim = std::stoi(it->second, &used);
      if (used != it->second.size() || net.meta_dim < 0) throw std::invalid_argument("meta_dim");
    } catch (const std::exception&) {
      throw InputError("metadata meta_dim '" + it->second + "' is not a non-negative integer", path);
    }
  }
  int layers = 0;
  while (h.tensors.count(layer_key(layers, "weight"))) ++layers;
  if (layers == 0) throw InputError("no tensor net.0.weight: not a HybridFlow router", path);
  for (const auto& [name, e] : h.tensors) {
    bool known = false;
    for (int l = 0; l < layers && !known; ++l) known = name == layer_key(l, "weight") || name == layer_key(l, "bias");
    if (!known) throw InputError("unexpected tensor '" + name + "' (a router has net.{0,3,...}.weight and .bias)", path);
  }
  net.depth = layers - 1;
  std::uint64_t in = 0;
  for (int l = 0; l < layers; ++l) {
    const std::string wk = layer_key(l, "weight"), bk = layer_key(l, "bias");
    auto bit = h.tensors.find(bk);
    if (bit == h.tensors.end()) throw InputError("missing tensor " + bk, path);
    const auto& we = h.tensors.at(wk);
    const auto& be = bit->second;
    if (we.shape.size() != 2 || we.shape[0] == 0 || we.shape[1] == 0)
      throw InputError(fmt::format("{} must be a non-empty matrix [out, in]", wk), path);
    const std::uint64_t out = we.shape[0];
    if (l == 0) {
      in = we.shape[1];
      if (in <= std::uint64_t(net.meta_dim) + 2)
        throw InputError(fmt::format("{} has {} inputs: not more than meta {} + 2", wk, in, net.meta_dim), path);
      if (in > (1u << 24)) throw InputError(fmt::format("{} has {} inputs: too many", wk, in), path);
      net.embed_dim = int(in) - net.meta_dim - 2;
    } else if (we.shape[1] != in) {
      throw InputError(fmt::format("{} has {} inputs where the previous layer has {} outputs", wk, we.shape[1], in), path);
    }
    if (l + 1 == layers && out != 1) throw InputError(fmt::format("{} has {} outputs: the last layer has 1", wk, out), path);
    if (l + 1 < layers) {
      if (l == 0) net.hidden = int(std::min<std::uint64_t>(out, 1u << 24));
      if (out != std::uint64_t(net.hidden)) throw InputError(fmt::format("{} has {} outputs, not the hidden width {}", wk, out, net.hidden), path);
    }
    if (be.shape.size() != 1 || be.shape[0] != out) throw InputError(fmt::format("{} must have shape [{}]", bk, out), path);
    const std::vector<float> wv = lm::safetensors::to_floats(file.data(), we);
    const std::vector<float> bv = lm::safetensors::to_floats(file.data(), be);
    net.weight.push_back(Eigen::Map<const RowMatrixF>(wv.data(), Eigen::Index(out), Eigen::Index(in)));
    net.bias.push_back(Eigen::Map<const Eigen::VectorXf>(bv.data(), Eigen::Index(out)));
    in = out;
  }
  if (net.depth == 0) net.hidden = 0;
  return net;
}

void save_router(const std::string& path, const RouterNet& net, const json& metadata) {
  if (net.weight.size() != std::size_t(net.depth) + 1 || net.bias.size() != net.weight.size())
    throw std::invalid_argument("save_router: layer count does not match depth");
  json header = json::object();
  json meta = json::object();
  if (metadata.is_object())
    for (const auto& [k, v] : metadata.items()) meta[k] = v.is_string() ? v.get<std::string>() : v.dump();
  meta["format"] = "pt";
  meta["embed_dim"] = std::to_string(net.embed_dim);
  meta["meta_dim"] = std::to_string(net.meta_dim);
  meta["hidden"] = std::to_string(net.hidden);
  meta["depth"] = std::to_string(net.depth);
  header["__metadata__"] = meta;
  std::uint64_t off = 0;
  std::vector<std::pair<const float*, std::uint64_t>> blobs;
  for (std::size_t l = 0; l < net.weight.size(); ++l) {
    const auto& W = net.weight[l];
    const auto& b = net.bias[l];
    const std::uint64_t wb = std::uint64_t(W.size()) * 4, bb = std::uint64_t(b.size()) * 4;
    header[layer_key(int(l), "weight")] = {{"dtype", "F32"},
                                           {"shape", {std::uint64_t(W.rows()), std::uint64_t(W.cols())}},
                                           {"data_offsets", {off, off + wb}}};
    blobs.emplace_back(W.data(), wb);
    off += wb;
    header[layer_key(int(l), "bias")] = {{"dtype", "F32"}, {"shape", {std::uint64_t(b.size())}}, {"data_offsets", {off, off + bb}}};
    blobs.emplace_back(b.data(), bb);
    off += bb;
  }
  std::string hs = header.dump();
  hs.resize((hs.size() + 7) / 8 * 8, ' ');  // data 8-byte aligned, as the safetensors writer pads
  std::string bytes(8, '\0');
  const std::uint64_t n = hs.size();
  for (int k = 0; k < 8; ++k) bytes[k] = char((n >> (8 * k)) & 0xff);  // little-endian
  bytes += hs;
  bytes.reserve(bytes.size() + off);
  for (const auto& [p, nb] : blobs) bytes.append(reinterpret_cast<const char*>(p), nb);
  io::AtomicFile out(path);
  {
    std::ofstream f(out.temp_path(), std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    if (!f) throw RuntimeError("cannot write the router file", path);
  }
  out.commit();
}

// ---------------------------------------------------------------------------------------------
// Inference.

std::size_t word_count(const std::string& text) {
  std::size_t words = 0, i = 0;
  bool in_word = false;
  while (i < text.size()) {
    const bool space = py_space(next_code_point(text, i));
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

std::array<float, 8> inference_meta(const std::string& text, std::size_t n_rely) {
  const double w = double(word_count(text));
  return {float(n_rely), float(w), float(std::min(w / 100.0, 1.0)), 0.f, 0.f, 0.f, 0.f, 0.f};
}

double route_threshold(double r_B, double r_L, const RouterParams& p) {
  return std::clamp(p.delta0 + p.alpha_B * r_B + p.alpha_L * r_L, 0.0, 1.0);
}

double cloud_probability(double s, double r_B, double r_L, const RouterParams& p) {
  return sigmoid((s - route_threshold(r_B, r_L, p)) / p.tau);
}

RouteDecision route(const RouterNet& net, const std::vector<float>& embedding, std::size_t n_rely, const std::string& text,
                    double cumulative_tokens, double elapsed_s, const RouterParams& params, double u) {
  if (embedding.size() != std::size_t(net.embed_dim))
    throw InputError(fmt::format("embedding of length {}, the router takes {}", embedding.size(), net.embed_dim));
  if (net.meta_dim != 8) throw InputError(fmt::format("the router's meta vector has {} entries, inference gives 8", net.meta_dim));
  RouteDecision d;
  d.r_B = cumulative_tokens / params.B_max;
  d.r_L = elapsed_s / params.L_max;
  std::vector<float> x(embedding);
  const auto meta = inference_meta(text, n_rely);
  x.insert(x.end(), meta.begin(), meta.end());
  x.push_back(float(d.r_B));  // the reference feeds float32 tensors
  x.push_back(float(d.r_L));
  d.score = net.score(x.data());
  d.delta_t = route_threshold(d.r_B, d.r_L, params);
  d.p_cloud = cloud_probability(d.score, d.r_B, d.r_L, params);
  d.draw = u;
  d.cloud = u < d.p_cloud;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Profiles.

namespace {

const json& member(const json& j, const char* key, const std::string& ctx, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw InputError(fmt::format("missing field {}{}", ctx, key), where);
  return *it;
}

const json& object_member(const json& j, const char* key, const std::string& ctx, const std::string& where) {
  const json& v = member(j, key, ctx, where);
  if (!v.is_object()) throw InputError(fmt::format("field {}{} is not an object", ctx, key), where);
  return v;
}

std::string string_member(const json& j, const char* key, const std::string& ctx, const std::string& where) {
  const json& v = member(j, key, ctx, where);
  if (!v.is_string()) throw InputError(fmt::format("field {}{} is not a string", ctx, key), where);
  return v.get<std::string>();
}

double nonneg_number(const json& v, const std::string& name, const std::string& where) {
  if (!v.is_number()) throw InputError(fmt::format("field {} is not a number", name), where);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) throw InputError(fmt::format("field {} must be a finite number >= 0", name), where);
  return x;
}

long count_member(const json& j, const char* key, const std::string& ctx, const std::string& where) {
  const std::string name = ctx + key;
  const double x = nonneg_number(member(j, key, ctx, where), name, where);
  if (x != std::floor(x) || x > 1e15) throw InputError(fmt::format("field {} must be a whole number of tokens", name), where);
  return long(x);
}

void read_side(const json& row, const char* side, double& latency_s, long& total, long& completion, const std::string& where) {
  const json& s = object_member(row, side, "", where);
  const std::string ctx = std::string(side) + ".";
  latency_s = nonneg_number(member(s, "latency_ms", ctx, where), ctx + "latency_ms", where) / 1000.0;
  const json& usage = object_member(s, "usage", ctx, where);
  total = count_member(usage, "total_tokens", ctx + "usage.", where);
  completion = count_member(usage, "completion_tokens", ctx + "usage.", where);
}

}  // namespace

std::vector<SubtaskProfile> read_profiles(const std::string& path, std::string* sha256) {
  const std::string name = path == "-" ? "stdin" : path;
  std::vector<SubtaskProfile> out;
  io::for_each_jsonl(path, [&](const json& row, const std::string& where) {
    SubtaskProfile p;
    p.task = string_member(row, "task", "", where);
    const json& sub = object_member(row, "subtask", "", where);
    p.description = string_member(sub, "description", "subtask.", where);
    if (auto it = sub.find("depends_on"); it != sub.end() && !it->is_null()) {
      if (!it->is_array()) throw InputError("field subtask.depends_on is not an array", where);
      p.n_depends = it->size();
    }
    read_side(row, "edge", p.edge_latency_s, p.edge_total_tokens, p.edge_completion_tokens, where);
    read_side(row, "cloud", p.cloud_latency_s, p.cloud_total_tokens, p.cloud_completion_tokens, where);
    if (auto it = row.find("difficulty"); it != row.end() && !it->is_null()) {
      if (!it->is_number() || it->get<double>() != std::floor(it->get<double>()) || it->get<double>() < 1 || it->get<double>() > 9)
        throw InputError("field difficulty must be an integer in 1..9", where);
      p.difficulty = int(it->get<double>());
    }
    if (auto it = row.find("id"); it != row.end() && !it->is_null()) {
      if (it->is_string())
        p.id = it->get<std::string>();
      else if (it->is_number_integer())
        p.id = it->dump();
      else
        throw InputError("field id must be a string or an integer", where);
    }
    out.push_back(std::move(p));
  }, sha256);
  if (out.empty()) throw InputError("no profiles (one JSON object a line expected)", name);
  return out;
}

double delta_utility(const SubtaskProfile& p) {
  const double dq = double(p.cloud_completion_tokens - p.edge_completion_tokens) / 100.0;
  const double dt = p.cloud_latency_s - p.edge_latency_s;
  return 1.0 * dq - 0.5 * dt - 0.001 * double(p.cloud_total_tokens);
}

std::string router_text(const SubtaskProfile& p, bool reference_text) {
  return reference_text ? p.task + " " + p.description : p.task + p.description;
}

std::array<float, 8> profile_meta(const SubtaskProfile& p, bool reference_meta) {
  if (!reference_meta) return inference_meta(router_text(p, false), p.n_depends);
  const double dq = double(p.cloud_completion_tokens - p.edge_completion_tokens) / 100.0;
  const double dt = p.cloud_latency_s - p.edge_latency_s;
  return {float(p.n_depends),      float(p.edge_total_tokens), float(p.cloud_total_tokens), float(p.edge_latency_s),
          float(p.cloud_latency_s), float(dq),                  float(dt),                    float(delta_utility(p))};
}

// ---------------------------------------------------------------------------------------------
// Training.

RouterWeights weights_of(const RouterNet& net) {
  RouterWeights w;
  for (std::size_t l = 0; l < net.weight.size(); ++l) {
    w.weight.push_back(net.weight[l].cast<double>());
    w.bias.push_back(net.bias[l].cast<double>());
  }
  return w;
}

void set_weights(RouterNet& net, const RouterWeights& w) {
  if (w.weight.size() != net.weight.size() || w.bias.size() != net.bias.size())
    throw std::invalid_argument("set_weights: layer count differs");
  for (std::size_t l = 0; l < net.weight.size(); ++l) {
    if (w.weight[l].rows() != net.weight[l].rows() || w.weight[l].cols() != net.weight[l].cols() ||
        w.bias[l].size() != net.bias[l].size())
      throw std::invalid_argument("set_weights: shapes differ");
    net.weight[l] = w.weight[l].cast<float>();
    net.bias[l] = w.bias[l].cast<float>();
  }
}

double router_loss(const RouterWeights& w, const RouterBatch& batch, const TrainOptions& opt,
                   const std::vector<Eigen::MatrixXd>& masks, RouterWeights* grad) {
  const std::size_t L = w.weight.size();
  const Eigen::Index n = batch.x.rows();
  if (n == 0) throw std::invalid_argument("router_loss: empty batch");
  if (!masks.empty() && masks.size() + 1 != L) throw std::invalid_argument("router_loss: one mask per hidden layer");
  // Forward: acts[l] is layer l's input; pre[l] its pre-activation (hidden layers).
  std::vector<Eigen::MatrixXd> acts(L), pre(L);
  acts[0] = batch.x;
  for (std::size_t l = 0; l + 1 < L; ++l) {
    pre[l] = (acts[l] * w.weight[l].transpose()).rowwise() + w.bias[l].transpose();
    Eigen::MatrixXd h = pre[l].cwiseMax(0.0);
    if (!masks.empty()) h = h.cwiseProduct(masks[l]);
    acts[l + 1] = std::move(h);
  }
  const Eigen::VectorXd s = (acts[L - 1] * w.weight[L - 1].transpose()).col(0).array() + w.bias[L - 1][0];

  const double dn = double(n);
  double huber = 0;
  Eigen::VectorXd ds(n);
  Eigen::VectorXd p(n), dp(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double d = s[i] - batch.dU[i], a = std::abs(d), hd = opt.huber_delta;
    huber += a < hd ? 0.5 * d * d : hd * (a - 0.5 * hd);
    ds[i] = (a < hd ? d : (d > 0 ? hd : -hd)) / dn;
    const double delta = opt.delta0 + opt.alpha_B * (batch.r_B[i] - 1.0) + opt.alpha_L * (batch.r_L[i] - 1.0);
    p[i] = sigmoid((s[i] - delta) / opt.tau);
    dp[i] = p[i] * (1.0 - p[i]) / opt.tau;
  }
  huber /= dn;
  const double exp_C = p.dot(batch.k_c) / dn;
  const double exp_L = (p.cwiseProduct(batch.L_c) + (1.0 - p.array()).matrix().cwiseProduct(batch.L_e)).sum() / dn;
  const double over_B = std::max(exp_C - opt.B_max, 0.0), over_L = std::max(exp_L - opt.L_max, 0.0);
  const double loss = huber + opt.lambda_B * over_B * over_B + opt.lambda_L * over_L * over_L;
  if (!grad) return loss;

  // d penalty / d s_i = lambda 2 relu(E - max) dE/dp_i dp_i/ds_i.
  ds.array() += (2.0 * opt.lambda_B * over_B / dn) * batch.k_c.array() * dp.array() +
                (2.0 * opt.lambda_L * over_L / dn) * (batch.L_c - batch.L_e).array() * dp.array();
  grad->weight.assign(L, {});
  grad->bias.assign(L, {});
  grad->weight[L - 1] = ds.transpose() * acts[L - 1];
  grad->bias[L - 1] = Eigen::VectorXd::Constant(1, ds.sum());
  Eigen::MatrixXd da = ds * w.weight[L - 1];  // [n, hidden]
  for (std::size_t l = L - 1; l-- > 0;) {
    if (!masks.empty()) da = da.cwiseProduct(masks[l]);
    Eigen::MatrixXd dz = (pre[l].array() > 0.0).select(da, 0.0);
    grad->weight[l] = dz.transpose() * acts[l];
    grad->bias[l] = dz.colwise().sum().transpose();
    if (l > 0) da = dz * w.weight[l];
  }
  return loss;
}

namespace {

void check_options(const TrainOptions& o) {
  auto bad = [](const std::string& what, const char* flag) { throw UsageError(what, flag); };
  if (o.epochs < 1) bad("must be >= 1", "--epochs");
  if (o.batch < 1) bad("must be >= 1", "--batch");
  if (!(o.lr > 0)) bad("must be > 0", "--lr");
  if (!(o.weight_decay >= 0)) bad("must be >= 0", "--weight-decay");
  if (!(o.tau > 0)) bad("must be > 0", "--tau");
  if (!(o.dropout >= 0 && o.dropout < 1)) bad("must be in [0, 1)", "--dropout");
  if (!(o.huber_delta > 0)) bad("must be > 0", "--huber-delta");
  if (o.depth < 0) bad("must be >= 0", "--depth");
  if (o.depth > 0 && o.hidden < 1) bad("must be >= 1", "--hidden");
  if (!(o.r_lo <= o.r_hi)) bad("r_lo must not exceed r_hi", "");
}

// Scales `g` so that its global L2 norm is at most `max_norm` (torch clip_grad_norm_: the factor is
// max_norm / (norm + 1e-6), applied when below 1).
void clip_gradient(RouterWeights& g, double max_norm) {
  if (max_norm <= 0) return;
  double sq = 0;
  for (std::size_t l = 0; l < g.weight.size(); ++l) sq += g.weight[l].squaredNorm() + g.bias[l].squaredNorm();
  const double coef = max_norm / (std::sqrt(sq) + 1e-6);
  if (coef >= 1) return;
  for (std::size_t l = 0; l < g.weight.size(); ++l) {
    g.weight[l] *= coef;
    g.bias[l] *= coef;
  }
}

RouterWeights zeros_like(const RouterWeights& w) {
  RouterWeights z;
  for (std::size_t l = 0; l < w.weight.size(); ++l) {
    z.weight.push_back(Eigen::MatrixXd::Zero(w.weight[l].rows(), w.weight[l].cols()));
    z.bias.push_back(Eigen::VectorXd::Zero(w.bias[l].size()));
  }
  return z;
}

std::size_t check_embeddings(const std::vector<SubtaskProfile>& profiles, const std::vector<std::vector<float>>& embeddings) {
  if (profiles.empty()) throw InputError("no profiles");
  if (embeddings.size() != profiles.size())
    throw InputError(fmt::format("{} embeddings for {} profiles", embeddings.size(), profiles.size()));
  const std::size_t dim = embeddings[0].size();
  if (dim == 0) throw InputError("empty embedding (row 1)");
  for (std::size_t i = 0; i < embeddings.size(); ++i) {
    if (embeddings[i].size() != dim)
      throw InputError(fmt::format("embedding of row {} has length {}, row 1 has {}", i + 1, embeddings[i].size(), dim));
    for (const float v : embeddings[i])
      if (!std::isfinite(v)) throw InputError(fmt::format("embedding of row {} is not finite", i + 1));
  }
  return dim;
}

}  // namespace

TrainResult train_router(const std::vector<SubtaskProfile>& profiles, const std::vector<std::vector<float>>& embeddings,
                         const TrainOptions& opt, std::uint64_t seed) {
  check_options(opt);
  const std::size_t dim = check_embeddings(profiles, embeddings);
  const std::size_t N = profiles.size();
  TrainResult res;
  res.net = init_router(int(dim), 8, opt.hidden, opt.depth, derive_seed(seed, 0));
  const int in = res.net.input_dim();

  // The dataset, as make_router_dataset builds it (r_B, r_L drawn once per row).
  Rng r_rng(derive_seed(seed, 1));
  Eigen::MatrixXd X(Eigen::Index(N), in);
  Eigen::VectorXd dU(N), kC(N), Le(N), Lc(N), rB(N), rL(N);
  for (std::size_t i = 0; i < N; ++i) {
    const SubtaskProfile& p = profiles[i];
    const auto meta = profile_meta(p, opt.reference_meta);
    rB[i] = double(float(r_rng.uniform(opt.r_lo, opt.r_hi)));  // float32 tensors in the reference
    rL[i] = double(float(r_rng.uniform(opt.r_lo, opt.r_hi)));
    for (std::size_t k = 0; k < dim; ++k) X(i, k) = embeddings[i][k];
    for (int k = 0; k < 8; ++k) X(i, dim + k) = meta[k];
    X(i, dim + 8) = rB[i];
    X(i, dim + 9) = rL[i];
    dU[i] = delta_utility(p);
    kC[i] = double(p.cloud_total_tokens);
    Le[i] = p.edge_latency_s;
    Lc[i] = p.cloud_latency_s;
  }

  RouterWeights w = weights_of(res.net), m = zeros_like(w), v = zeros_like(w), g;
  const nn::AdamWOptions aw{opt.beta1, opt.beta2, opt.eps, opt.weight_decay};
  Rng shuffle_rng(derive_seed(seed, 2)), drop_rng(derive_seed(seed, 3));
  std::vector<std::size_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::int64_t step = 0;
  const std::size_t B = std::size_t(opt.batch);
  const double keep_scale = 1.0 / (1.0 - opt.dropout);
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    for (std::size_t i = N; i > 1; --i) std::swap(order[i - 1], order[shuffle_rng.below(i)]);  // Fisher-Yates
    double total = 0;
    std::size_t batches = 0;
    for (std::size_t start = 0; start < N; start += B) {
      const std::size_t n = std::min(B, N - start);
      RouterBatch b;
      b.x.resize(Eigen::Index(n), in);
      for (auto* vec : {&b.dU, &b.k_c, &b.L_e, &b.L_c, &b.r_B, &b.r_L}) vec->resize(Eigen::Index(n));
      for (std::size_t r = 0; r < n; ++r) {
        const std::size_t i = order[start + r];
        b.x.row(r) = X.row(i);
        b.dU[r] = dU[i], b.k_c[r] = kC[i], b.L_e[r] = Le[i], b.L_c[r] = Lc[i], b.r_B[r] = rB[i], b.r_L[r] = rL[i];
      }
      std::vector<Eigen::MatrixXd> masks;
      if (opt.dropout > 0 && opt.depth > 0) {
        for (int l = 0; l < opt.depth; ++l) {
          Eigen::MatrixXd mk(Eigen::Index(n), opt.hidden);
          for (Eigen::Index c = 0; c < mk.cols(); ++c)
            for (Eigen::Index r = 0; r < mk.rows(); ++r) mk(r, c) = drop_rng.uniform() < opt.dropout ? 0.0 : keep_scale;
          masks.push_back(std::move(mk));
        }
      }
      const double loss = router_loss(w, b, opt, masks, &g);
      if (!std::isfinite(loss))
        throw RuntimeError(fmt::format("the training loss is not finite (epoch {}); lower --lr or check the profiles", epoch + 1));
      clip_gradient(g, opt.clip);
      ++step;
      for (std::size_t l = 0; l < w.weight.size(); ++l) {
        nn::adamw_update<double>(w.weight[l].data(), g.weight[l].data(), m.weight[l].data(), v.weight[l].data(),
                                 std::size_t(w.weight[l].size()), step, opt.lr, aw, true);
        nn::adamw_update<double>(w.bias[l].data(), g.bias[l].data(), m.bias[l].data(), v.bias[l].data(),
                                 std::size_t(w.bias[l].size()), step, opt.lr, aw, true);
      }
      total += loss;
      ++batches;
    }
    res.epoch_loss.push_back(total / double(batches));
  }
  set_weights(res.net, w);
  return res;
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

RoutingEvaluation evaluate_routing(const RouterNet& net, const std::vector<SubtaskProfile>& profiles,
                                   const std::vector<std::vector<float>>& embeddings, std::size_t random_draws,
                                   std::uint64_t seed) {
  const std::size_t dim = check_embeddings(profiles, embeddings);
  if (dim != std::size_t(net.embed_dim))
    throw InputError(fmt::format("embeddings of length {}, the router takes {}", dim, net.embed_dim));
  if (net.meta_dim != 8) throw InputError(fmt::format("the router's meta vector has {} entries, inference gives 8", net.meta_dim));
  RoutingEvaluation ev;
  const std::size_t n = profiles.size();
  ev.n = n;
  std::vector<double> dU(n);
  ev.have_difficulty = true;
  for (std::size_t i = 0; i < n; ++i) {
    dU[i] = delta_utility(profiles[i]);
    ev.mean_dU += dU[i] / double(n);
    if (profiles[i].difficulty < 0) ev.have_difficulty = false;
    std::vector<float> x(embeddings[i]);
    const auto meta = inference_meta(router_text(profiles[i], false), profiles[i].n_depends);
    x.insert(x.end(), meta.begin(), meta.end());
    x.push_back(1.0f);
    x.push_back(1.0f);
    ev.scores.push_back(net.score(x.data()));
  }
  auto top_utility = [&](const std::vector<double>& key, std::size_t k) {
    std::vector<std::size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return key[a] > key[b]; });
    double u = 0;
    for (std::size_t r = 0; r < k; ++r) u += dU[idx[r]];
    return u / double(n);
  };
  auto compare = [&](ShareComparison row, std::size_t row_index) {
    row.share = double(row.n_cloud) / double(n);
    row.router_utility = top_utility(ev.scores, row.n_cloud);
    row.oracle_utility = top_utility(dU, row.n_cloud);
    row.random_expected = row.share * ev.mean_dU;
    row.random_draws_mean = row.random_draws_sd = row.router_beats_draws = kNaN;
    if (random_draws > 0) {
      Rng rng(derive_seed(seed, row_index));
      std::vector<std::size_t> idx(n);
      std::vector<double> draws;
      for (std::size_t d = 0; d < random_draws; ++d) {
        std::iota(idx.begin(), idx.end(), 0);
        double u = 0;
        for (std::size_t r = 0; r < row.n_cloud; ++r) {  // partial Fisher-Yates: a uniform k-subset
          std::swap(idx[r], idx[r + rng.below(n - r)]);
          u += dU[idx[r]];
        }
        draws.push_back(u / double(n));
      }
      double mean = 0, beats = 0;
      for (const double u : draws) mean += u / double(draws.size()), beats += row.router_utility > u ? 1.0 : 0.0;
      row.random_draws_mean = mean;
      row.router_beats_draws = beats / double(draws.size());
      if (draws.size() > 1) {
        double ss = 0;
        for (const double u : draws) ss += (u - mean) * (u - mean);
        row.random_draws_sd = std::sqrt(ss / double(draws.size() - 1));
      }
    }
    ev.rows.push_back(row);
  };
  std::size_t row_index = 0;
  if (ev.have_difficulty) {
    for (int thr = 2; thr <= 9; ++thr) {
      ShareComparison row;
      row.rule = fmt::format("difficulty>={}", thr);
      row.threshold = thr;
      double u = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (profiles[i].difficulty >= thr) ++row.n_cloud, u += dU[i];
      row.threshold_utility = u / double(n);
      compare(row, row_index++);
    }
  }
  for (const double share : {0.25, 0.5, 0.75}) {
    ShareComparison row;
    row.rule = "share";
    row.n_cloud = std::size_t(std::lround(share * double(n)));
    row.threshold_utility = kNaN;
    compare(row, row_index++);
  }
  return ev;
}

json evaluation_json(const RoutingEvaluation& ev) {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  json rows = json::array();
  for (const auto& r : ev.rows) {
    rows.push_back({{"rule", r.rule},
                    {"threshold", r.threshold >= 0 ? json(r.threshold) : json(nullptr)},
                    {"share", r.share},
                    {"n_cloud", r.n_cloud},
                    {"threshold_utility", num(r.threshold_utility)},
                    {"router_utility", num(r.router_utility)},
                    {"random_expected", num(r.random_expected)},
                    {"random_draws_mean", num(r.random_draws_mean)},
                    {"random_draws_sd", num(r.random_draws_sd)},
                    {"router_beats_draws", num(r.router_beats_draws)},
                    {"oracle_utility", num(r.oracle_utility)},
                    {"router_minus_random", num(r.router_utility - r.random_expected)},
                    {"router_minus_threshold", num(r.router_utility - r.threshold_utility)}});
  }
  return {{"n", ev.n},
          {"mean_dU", num(ev.mean_dU)},
          {"have_difficulty", ev.have_difficulty},
          {"scored_at", {{"r_B", 1.0}, {"r_L", 1.0}}},
          {"utility_definition",
           "mean over subtasks of (cloud ? dU : 0), dU = dq - 0.5 dt - 0.001 k_c (gain over all-edge); every rule of a row "
           "sends n_cloud subtasks to the cloud"},
          {"rows", rows}};
}

}  // namespace icmlkit::hybridflow
