#include "nn/distill.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "lm/support.hpp"
#include "nn/corpus.hpp"
#include "nn/layers.hpp"
#include "nn/schedule.hpp"
#include "util/error.hpp"

namespace icmlkit::nn {

lm::Model make_student(const lm::Model& teacher, const lm::MlstmConfig& mixer, int n_ctx) {
  const lm::ModelConfig& tc = teacher.config;
  for (int l = 0; l < tc.n_layers; ++l)
    if (tc.block_type(l) != lm::BlockType::llama)
      throw UsageError(fmt::format("the teacher's block {} is {}: a student is distilled from llama blocks only", l,
                                   lm::block_type_name(tc.block_type(l))));
  lm::ModelConfig c = tc;
  c.block_types.assign(std::size_t(c.n_layers), lm::BlockType::mlstm_hybrid);
  c.mlstm = mixer;
  c.n_ctx = n_ctx;
  lm::Model s = lm::allocate_model(c, "student config");
  s.tokenizer_model = teacher.tokenizer_model;
  s.stored = io::h5::FloatStorage::f32;
  // the teacher's tensors, by name (every tensor of a llama block exists in the student)
  const auto from = lm::tensor_slots(teacher);
  auto to = lm::tensor_slots(s);
  std::size_t j = 0;
  for (const auto& t : from) {
    while (j < to.size() && to[j].gguf != t.gguf) ++j;
    if (j == to.size()) throw RuntimeError("student layout lacks " + t.gguf);
    std::copy_n(t.data, std::size_t(t.rows) * std::max(t.cols, 1), to[j].data);
  }
  const int hd = c.head_dim(), nh = c.n_heads;
  for (auto& L : s.layers) {
    for (lm::Matrix* F : {&L.mlstm_fq, &L.mlstm_fk})
      for (int r = 0; r < F->rows; ++r) F->row(r)[r % hd] = 1.0f;  // identity per head
    for (int h = 0; h < nh; ++h)
      L.mlstm_fgate_b[std::size_t(h)] = static_cast<float>(3.0 + 3.0 * (nh > 1 ? double(h) / (nh - 1) : 0.0));
  }
  return s;
}

bool is_mixer_tensor(const std::string& name) noexcept { return name.find(".mlstm_") != std::string::npos; }

void align_layers(const lm::Model& teacher, lm::Model& student, const std::vector<int>& stream, const AlignOptions& opt,
                  const std::function<void(const AlignStep&)>& on_step) {
  const lm::ModelConfig& c = student.config;
  if (teacher.config.d_model != c.d_model || teacher.config.n_layers != c.n_layers || teacher.config.vocab_size != c.vocab_size)
    throw InputError("the student's shape differs from the teacher's");
  lm::require_blocks(lm::Runner::trainer, c);
  Windows win{&stream, opt.seq_len};
  if (win.count() < 1) throw InputError(fmt::format("the training stream holds no window of {} tokens", opt.seq_len));
  auto T = params_from_model<float>(teacher, true);
  auto P = params_from_model<float>(student);
  for (std::size_t i = 0; i < P.store.params.size(); ++i)
    if (!is_mixer_tensor(P.store.params[i].name)) P.store.freeze(int(i));
  AdamW adam(P.store, opt.adam);
  DataOrder order(opt.seed, win.count());
  // cosine from lr at the first step to min_lr at the last
  const WarmupCosine lr_at{opt.lr, opt.min_lr, 0, std::max<std::int64_t>(opt.steps - 1, 0)};
  const int B = opt.batch, S = opt.seq_len, N = B * S, d = c.d_model, L = c.n_layers;
  TrainCache<float> tc, sc;
  tc.layers.resize(1);
  sc.layers.resize(1);
  std::vector<int> pos(N), in, tg;
  for (int n = 0; n < N; ++n) pos[n] = n % S;
  rope_tables(pos.data(), N, c.head_dim(), c.rope_theta, tc.cs, tc.sn);
  sc.cs = tc.cs;
  sc.sn = tc.sn;
  std::vector<float> x(std::size_t(N) * d), xs(x.size()), dx(x.size());
  for (std::int64_t step = 0; step < opt.steps; ++step) {
    in.clear();
    tg.clear();
    for (int b = 0; b < B; ++b) win.get(order.next(), in, tg);
    P.store.zero_grad();
    embedding_forward(T.embd().value.data(), d, in.data(), N, x.data());
    AlignStep st;
    st.step = step + 1;
    st.block_mse.assign(std::size_t(L), 0.0);
    const double scale = 2.0 / (double(N) * d * L);  // d/dy of the mean over elements and blocks
    for (int l = 0; l < L; ++l) {
      xs = x;
      block_train_forward(T, l, B, S, tc, tc.layers[0], x.data());     // the teacher's block: x becomes its output
      block_train_forward(P, l, B, S, sc, sc.layers[0], xs.data());    // the student's, from the same input
      double sse = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double e = double(xs[i]) - double(x[i]);
        sse += e * e;
        dx[i] = static_cast<float>(scale * e);
      }
      st.block_mse[std::size_t(l)] = sse / (double(N) * d);
      st.mse += st.block_mse[std::size_t(l)] / L;
      block_train_backward(P, l, B, S, sc, sc.layers[0], dx.data());
    }
    if (!std::isfinite(st.mse)) throw RuntimeError(fmt::format("non-finite Stage I loss at step {}", step + 1));
    st.lr = lr_at(step);
    st.grad_norm = P.store.clip_grad_norm(opt.clip);
    adam.step(P.store, st.lr);
    if (on_step) on_step(st);
  }
  params_to_model(P, student);
}

struct TopKDistillLoss::State {
  LlamaParams<float> teacher;
  TrainCache<float> cache;
  std::vector<float> logits;
  int S, k;
  double ce, kl;
  State(const lm::Model& t, int S_, int k_, double ce_, double kl_)
      : teacher(params_from_model<float>(t, true)), S(S_), k(k_), ce(ce_), kl(kl_) {}
};

TopKDistillLoss::TopKDistillLoss(const lm::Model& teacher, int seq_len, int k, double ce_weight, double kl_weight) {
  if (k < 1 || k > teacher.config.vocab_size)
    throw UsageError(fmt::format("top-k of {} outside [1, vocab = {}]", k, teacher.config.vocab_size), "--top-k");
  if (!(ce_weight >= 0) || !(kl_weight >= 0) || ce_weight + kl_weight <= 0)
    throw UsageError("the cross-entropy and KL weights must be >= 0 and not both 0", "--ce-weight");
  s_ = std::make_shared<State>(teacher, seq_len, k, ce_weight, kl_weight);
}

double TopKDistillLoss::operator()(const std::vector<int>& tokens, const float* logits, int N, int V, float* dlogits,
                                   double grad_scale) {
  State& s = *s_;
  if (N % s.S != 0 || V != s.teacher.config.vocab_size) throw InputError("distillation batch does not fit the teacher");
  std::vector<int> none(tokens.size(), -1);
  llama_loss(s.teacher, tokens, none, N / s.S, s.S, 0.0, s.cache, &s.logits);
  const int k = s.k;
  double total = 0;
  std::vector<int> idx(static_cast<std::size_t>(V));
  std::vector<double> pt(static_cast<std::size_t>(k)), ps(static_cast<std::size_t>(k));
  for (int n = 0; n < N; ++n) {
    const float* t = s.logits.data() + std::size_t(n) * V;
    const float* z = logits + std::size_t(n) * V;
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [t](int a, int b) { return t[a] > t[b] || (t[a] == t[b] && a < b); });
    // softmax of each model over the teacher's k largest logits
    double mt = -INFINITY, ms = -INFINITY;
    for (int i = 0; i < k; ++i) {
      mt = std::max(mt, double(t[idx[std::size_t(i)]]));
      ms = std::max(ms, double(z[idx[std::size_t(i)]]));
    }
    double zt = 0, zs = 0;
    for (int i = 0; i < k; ++i) {
      zt += pt[std::size_t(i)] = std::exp(double(t[idx[std::size_t(i)]]) - mt);
      zs += ps[std::size_t(i)] = std::exp(double(z[idx[std::size_t(i)]]) - ms);
    }
    double klv = 0;
    for (int i = 0; i < k; ++i) {
      pt[std::size_t(i)] /= zt;
      ps[std::size_t(i)] /= zs;
      if (pt[std::size_t(i)] > 0) klv += pt[std::size_t(i)] * (std::log(pt[std::size_t(i)]) - std::log(ps[std::size_t(i)]));
    }
    total += klv;
    if (!dlogits) continue;
    float* g = dlogits + std::size_t(n) * V;
    for (int v = 0; v < V; ++v) g[v] = static_cast<float>(s.ce * g[v]);
    for (int i = 0; i < k; ++i)
      g[idx[std::size_t(i)]] += static_cast<float>(s.kl * grad_scale * (ps[std::size_t(i)] - pt[std::size_t(i)]));
  }
  return total;
}

lm::Model merge_experts(const std::vector<lm::Model>& experts, const std::vector<double>& weights,
                        const std::vector<std::string>& names) {
  if (experts.empty()) throw UsageError("no expert to merge", "--merge");
  if (weights.size() != experts.size())
    throw UsageError(fmt::format("{} merge weights for {} experts", weights.size(), experts.size()), "--merge-weights");
  double sum = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w)) throw UsageError(fmt::format("merge weight {} is not a finite number >= 0", w), "--merge-weights");
    sum += w;
  }
  if (std::abs(sum - 1.0) > 1e-6) throw UsageError(fmt::format("merge weights sum to {}, not 1", sum), "--merge-weights");
  const lm::Model& first = experts[0];
  lm::Model out = first;
  auto dst = lm::tensor_slots(out);
  for (auto& t : dst) std::fill_n(t.data, std::size_t(t.rows) * std::max(t.cols, 1), 0.0f);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const lm::Model& m = experts[e];
    const std::string& who = e < names.size() ? names[e] : fmt::format("expert {}", e);
    const lm::ModelConfig &a = m.config, &b = first.config;
    if (a.n_layers != b.n_layers || a.d_model != b.d_model || a.vocab_size != b.vocab_size || a.all_block_types() != b.all_block_types() ||
        a.mlstm.window != b.mlstm.window || a.mlstm.sinks != b.mlstm.sinks || a.mlstm.mixer != b.mlstm.mixer || a.n_heads != b.n_heads ||
        a.n_kv_heads != b.n_kv_heads || a.d_ff != b.d_ff || a.tied != b.tied)
      throw InputError("its architecture differs from the first expert's", who);
    if (m.tokenizer_model != first.tokenizer_model) throw InputError("its tokenizer differs from the first expert's", who);
    const auto src = lm::tensor_slots(m);
    for (std::size_t i = 0; i < dst.size(); ++i) {
      const std::size_t n = std::size_t(dst[i].rows) * std::max(dst[i].cols, 1);
      for (std::size_t j = 0; j < n; ++j) dst[i].data[j] += static_cast<float>(weights[e] * double(src[i].data[j]));
    }
  }
  out.stored = io::h5::FloatStorage::f32;
  return out;
}

}  // namespace icmlkit::nn
