#include "decode/adaptive.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/sha256.hpp"
#include "lm/blocks.hpp"
#include "lm/matmul.hpp"
#include "util/threads.hpp"

namespace icmlkit::decode {

double PassCost::at(int k) const {
  if (ks.empty() || ks.size() != seconds.size()) throw std::logic_error("PassCost: nothing measured");
  if (ks.size() == 1 || k <= ks[0]) return seconds[0];
  std::size_t i = 1;
  while (i + 1 < ks.size() && ks[i] < k) ++i;
  // Between (or, past the last, along) the segment ks[i-1] .. ks[i].
  const double slope = (seconds[i] - seconds[i - 1]) / double(ks[i] - ks[i - 1]);
  return std::max(seconds[0], seconds[i - 1] + slope * double(k - ks[i - 1]));
}

nlohmann::json PassCost::to_json() const {
  nlohmann::json ck = nlohmann::json::object();
  for (int k : ks) ck[std::to_string(k)] = c(k);
  return {{"k", ks}, {"seconds", seconds}, {"c_k", ck}};
}

bool PassCost::from_json(const nlohmann::json& j) {
  try {
    PassCost p;
    p.ks = j.at("k").get<std::vector<int>>();
    p.seconds = j.at("seconds").get<std::vector<double>>();
    if (p.ks.empty() || p.ks.size() != p.seconds.size() || p.ks[0] != 1) return false;
    for (std::size_t i = 0; i < p.ks.size(); ++i)
      if (!(p.seconds[i] > 0.0) || (i > 0 && p.ks[i] <= p.ks[i - 1])) return false;
    *this = std::move(p);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

PassCost measure_pass_cost(lm::Engine& engine, int n_past, int token, int kmax, int reps) {
  const lm::ModelConfig& mc = engine.config();
  PassCost pc;
  lm::ForwardOptions opt;
  opt.all_logits = false;
  opt.greedy_only = true;
  // k rows as a decode step lays them: the input and k - 1 rows attending it (a chain).
  auto batch = [&](int k) {
    lm::Batch b;
    b.add(token, n_past);
    for (int i = 1; i < k; ++i) {
      std::vector<int> anc;
      for (int a = i - 1; a >= 0; --a) anc.push_back(a);
      b.add((token + i) % mc.vocab_size, n_past + i, 0, std::move(anc));
    }
    opt.logits_rows.clear();
    for (int i = 0; i < k; ++i) opt.logits_rows.push_back(i);
    return b;
  };
  std::vector<int> ks;
  for (int k : {1, 4, 12})
    if (k <= std::max(1, kmax) && n_past + k <= mc.n_ctx) ks.push_back(k);
  engine.forward(batch(ks.back()), opt);  // untimed: buffers sized, threads awake
  std::vector<lm::Batch> batches;
  for (int k : ks) batches.push_back(batch(k));
  // Rounds over all k (a burst of load hits every k alike), the fastest of each (noise only adds).
  std::vector<double> best(ks.size(), 0.0);
  for (int r = 0; r < std::max(1, reps); ++r)
    for (std::size_t i = 0; i < ks.size(); ++i) {
      opt.logits_rows.clear();
      for (int j = 0; j < ks[i]; ++j) opt.logits_rows.push_back(j);
      const auto t0 = std::chrono::steady_clock::now();
      engine.forward(batches[i], opt);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[i] = r == 0 ? t : std::min(best[i], t);
    }
  for (std::size_t i = 0; i < ks.size(); ++i) {
    pc.ks.push_back(ks[i]);
    // More rows never cost less: a k measured faster than a smaller one was noise.
    pc.seconds.push_back(i == 0 ? best[i] : std::max(best[i], pc.seconds.back()));
  }
  return pc;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown cpu";
}

}  // namespace

std::string pass_cost_key(const lm::Engine& engine) {
  const lm::ModelConfig& c = engine.config();
  std::string blocks;
  for (lm::BlockType t : c.all_block_types()) blocks += std::string(lm::block_type_name(t)) + ",";
  const std::string desc = fmt::format(
      "vocab {} d {} layers {} heads {}/{} hd {} ff {} moe {}x{}/{} blocks {} | {} {} | threads {} | {} | {}",
      c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim(), c.d_ff, c.moe.n_experts, c.moe.top_k,
      c.moe.d_expert, blocks, engine.device(), engine.settings().dump(), threads(), lm::isa_name(lm::best_isa()),
      cpu_model());
  return io::sha256_hex(desc).substr(0, 16) + " " + desc;
}

std::string default_pass_cost_cache() {
  // XDG: a relative XDG_CACHE_HOME is ignored.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/icmlkit/pass-cost.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/icmlkit/pass-cost.json";
  return "";
}

namespace {

constexpr const char* kCacheFormat = "icmlkit-pass-cost-v1";

/// The cache file's entries; `ours` says whether the path may be written: absent, empty, or a
/// file in this format (anything else — a model, a prompt, a directory — is never overwritten).
nlohmann::json read_cache(const std::string& path, bool* ours = nullptr) {
  std::error_code ec;
  if (ours) *ours = false;
  if (!std::filesystem::exists(path, ec)) {
    if (ours) *ours = !ec;
    return nlohmann::json::object();
  }
  if (!std::filesystem::is_regular_file(path, ec)) return nlohmann::json::object();
  if (std::filesystem::file_size(path, ec) == 0 && !ec) {
    if (ours) *ours = true;
    return nlohmann::json::object();
  }
  std::ifstream in(path);
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || j.value("format", "") != kCacheFormat) return nlohmann::json::object();
    if (ours) *ours = true;
    return j;
  } catch (const std::exception&) {
    return nlohmann::json::object();
  }
}

std::string key_id(const std::string& key) { return key.substr(0, key.find(' ')); }

}  // namespace

bool load_pass_cost(const std::string& path, const std::string& key, PassCost& out) {
  if (path.empty()) return false;
  const nlohmann::json j = read_cache(path);
  const auto it = j.find(key_id(key));
  return it != j.end() && it->is_object() && it->contains("cost") && out.from_json((*it)["cost"]);
}

bool save_pass_cost(const std::string& path, const std::string& key, const std::string& description,
                    const PassCost& cost, std::string* why) {
  if (path.empty()) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  bool ours = false;
  nlohmann::json j = read_cache(path, &ours);
  if (!ours) {
    if (why) *why = "it exists and is not a pass-cost cache (left as it is)";
    return false;
  }
  j["format"] = kCacheFormat;
  j[key_id(key)] = {{"what", description}, {"cost", cost.to_json()}};
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) {
      if (why) *why = std::string("cannot create ") + tmp + ": " + std::strerror(errno);
      return false;
    }
    out << j.dump(1) << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    if (why) *why = ec.message();
    std::error_code ignored;
    fs::remove(tmp, ignored);
  }
  return !ec;
}

nlohmann::json Arm::to_json() const {
  return {{"name", name}, {"window", window}, {"ngram", ngram}, {"guesses", guesses}};
}

namespace {
constexpr double kAlpha = 0.25;      // weight of the newest step in an arm's running averages
constexpr std::size_t kShadow = 64;  // resolved shadow matches kept (the newest)
constexpr int kRecheckEvery = 24;    // steps between re-tries of a window arm
constexpr double kClose = 0.8;       // re-try an arm whose estimate is at least this share of the best's
constexpr int kStale = 96;           // ... or that has not run for this many steps (and could beat the best)
constexpr double kTrialMargin = 1.1; // try an arm only when its bound beats the best by this factor
}  // namespace

AdaptiveSchedule::AdaptiveSchedule(int W, int N, int G, int max_draft, PassCost cost)
    : max_draft_(std::max(0, max_draft)), cost_(std::move(cost)) {
  arms_.push_back({max_draft_ > 0 ? "ar/prompt" : "ar", 0, 0, 0});
  for (const auto [w, n, g] : {std::array<int, 3>{3, 3, 3}, std::array<int, 3>{W, N, G}}) {
    Arm a{"", std::min(w, W), std::min(n, N), std::min(g, G)};
    a.name = fmt::format("lookahead W{} N{} G{}", a.window, a.ngram, a.guesses);
    if (a.window > 0 && (arms_.size() < 2 || arms_.back().name != a.name)) arms_.push_back(a);
  }
  stats_.resize(arms_.size());
}

double AdaptiveSchedule::step_seconds(double k) const {
  // Steps of exactly this many rows already ran: their measured time (running average).
  const int ki = static_cast<int>(k);
  if (double(ki) == k && ki >= 1 && ki < static_cast<int>(measured_.size()) && measured_[std::size_t(ki)] > 0)
    return measured_[std::size_t(ki)];
  const int lo = std::max(1, static_cast<int>(k));
  const double t = cost_.at(lo) + (k - lo) * (cost_.at(lo + 1) - cost_.at(lo));
  return t * scale_;
}

double AdaptiveSchedule::prompt_speed(int d) const {
  // Arm 0 with draft d over the recent steps: each drafted min(available, d) tokens and would
  // have had min(accepted-if-drafted, d) accepted.
  if (d <= 0 || shadow_.empty()) return 1.0 / step_seconds(1);
  double tokens = 0, seconds = 0;
  for (const auto& [avail, acc] : shadow_) {
    tokens += 1 + std::min(acc, d);
    seconds += step_seconds(1 + std::min(avail, d));
  }
  return tokens / seconds;
}

std::pair<int, double> AdaptiveSchedule::best_prompt() const {
  std::pair<int, double> best{0, prompt_speed(0)};
  for (int d = 1; d <= max_draft_; ++d) {
    const double v = prompt_speed(d);
    if (v > best.second) best = {d, v};
  }
  return best;
}

double AdaptiveSchedule::estimate(int i) const {
  const Stats& s = stats_[std::size_t(i)];
  return s.steps > 0 && s.sec_avg > 0 ? s.acc_avg / s.sec_avg : 0.0;
}

double AdaptiveSchedule::bound(int i) const {
  // Every step accepting its deepest candidate (a full n-gram, or the best prompt draft) with
  // the window's rows and G n-grams of N - 1 rows verified.
  const Arm& a = arms_[std::size_t(i)];
  const int d = best_prompt().first;
  const int depth = std::max(a.ngram - 1, d);
  return (1.0 + depth) / step_seconds(a.base_rows() + d + a.guesses * (a.ngram - 1));
}

AdaptiveSchedule::Choice AdaptiveSchedule::choose(int match_available) {
  const int step = observed_;
  const auto [d, prompt_v] = best_prompt();
  const Choice arm0{0, match_available > 0 ? d : 0};
  if (step == 0) {
    reason_ = "measure AR";
    return {0, 0};
  }
  if (run_left_ == 0 && run_arm_ > 0 && step - last_ar_ >= kRecheckEvery) {
    // While a window arm leads, AR's own time is re-measured now and then (its estimate must
    // not rest on a stale or mis-scaled pass cost).
    last_ar_ = step;
    reason_ = "recheck AR";
    return {0, 0};
  }
  if (run_left_ > 0) {  // a trial runs its steps in a row (a window needs N - 1 steps to yield n-grams)
    --run_left_;
    reason_ = "trial";
    return {run_arm_, d};
  }
  // The best so far: arm 0 (by its shadow speed) or a window arm (by its measured speed).
  int best = 0;
  double best_v = prompt_v;
  for (int i = 1; i < static_cast<int>(arms_.size()); ++i)
    if (estimate(i) > best_v) best = i, best_v = estimate(i);
  auto start = [&](int i, const char* why) {
    run_arm_ = i;
    run_left_ = arms_[std::size_t(i)].ngram;  // N + 1 steps with this one
    reason_ = why;
    last_recheck_ = step;
    return Choice{i, d};
  };
  for (int i = 1; i < static_cast<int>(arms_.size()); ++i)
    if (stats_[std::size_t(i)].steps == 0 && bound(i) > kTrialMargin * best_v) return start(i, "trial");
  if (step - last_recheck_ >= kRecheckEvery) {
    int pick = -1;
    for (int i = 1; i < static_cast<int>(arms_.size()); ++i) {
      if (i == best) continue;
      const Stats& s = stats_[std::size_t(i)];
      const bool close = s.steps > 0 && estimate(i) >= kClose * best_v;
      const bool stale = s.steps > 0 && step - s.last_step >= kStale && bound(i) > kTrialMargin * best_v;
      if ((close || stale) && (pick < 0 || s.last_step < stats_[std::size_t(pick)].last_step)) pick = i;
    }
    if (pick >= 0) return start(pick, "recheck");
  }
  reason_ = "best";
  run_arm_ = best;
  return best == 0 ? arm0 : Choice{best, d};
}

void AdaptiveSchedule::observe(const Choice& c, const std::vector<int>& match, const std::vector<int>& emitted, int rows,
                               double seconds) {
  // Time correction: this step's wall time over the calibrated time of its rows.
  const double ratio = seconds / cost_.at(std::max(1, rows));
  scale_ = scaled_ ? scale_ + kAlpha * (ratio - scale_) : ratio;
  scaled_ = true;
  if (rows >= 1 && rows < static_cast<int>(measured_.size())) {
    double& m = measured_[std::size_t(rows)];
    m = m > 0 ? m + kAlpha * (seconds - m) : seconds;
  }
  if (rows == 1) last_ar_ = observed_;
  // Shadow prompt matches: the new one starts at this step's first emitted token; every pending
  // one is compared with the tokens emitted now, and resolved at its first mismatch or end.
  pending_.push_back({match, 0});
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    bool open = true;
    for (int t : emitted) {
      if (p.matched >= static_cast<int>(p.match.size()) || p.match[std::size_t(p.matched)] != t) {
        open = false;
        break;
      }
      ++p.matched;
    }
    if (open && p.matched < static_cast<int>(p.match.size())) {
      still.push_back(std::move(p));
      continue;
    }
    // The input token's own step accepts `matched` drafts at most: emitted[0] is the first
    // token after the input, which the match's first token predicts.
    shadow_.emplace_back(static_cast<int>(p.match.size()), p.matched);
    if (shadow_.size() > kShadow) shadow_.erase(shadow_.begin());
  }
  pending_ = std::move(still);
  Stats& s = stats_[std::size_t(c.arm)];
  if (c.arm > 0) {  // arm 0's speed comes from the shadow matches and step times instead
    const double w = s.steps == 0 ? 1.0 : kAlpha;
    s.acc_avg += w * (static_cast<double>(emitted.size()) - s.acc_avg);
    s.sec_avg += w * (seconds - s.sec_avg);
  }
  s.accepted += static_cast<int>(emitted.size());
  s.rows += rows;
  ++s.steps;
  s.last_step = observed_++;
}

nlohmann::json AdaptiveSchedule::to_json() const {
  nlohmann::json arms = nlohmann::json::array();
  for (int i = 0; i < static_cast<int>(arms_.size()); ++i) {
    const Stats& s = stats_[std::size_t(i)];
    nlohmann::json a = arms_[std::size_t(i)].to_json();
    a["steps"] = s.steps;
    a["accepted"] = s.accepted;
    a["mean_accepted"] = s.steps ? double(s.accepted) / s.steps : 0.0;
    a["mean_rows"] = s.steps ? double(s.rows) / s.steps : 0.0;
    if (i > 0) {
      a["estimated_tokens_per_s"] = estimate(i);
      a["bound_tokens_per_s"] = bound(i);
    }
    arms.push_back(std::move(a));
  }
  const auto [d, v] = best_prompt();
  int with_match = 0;
  double acc = 0;
  for (const auto& [avail, a] : shadow_) {
    with_match += avail > 0;
    acc += a;
  }
  return {{"arms", arms},
          {"prompt_match", {{"recent_steps", shadow_.size()}, {"with_match", with_match},
                            {"mean_accepted_if_drafted", shadow_.empty() ? 0.0 : acc / double(shadow_.size())},
                            {"chosen_draft", d}, {"estimated_tokens_per_s", v},
                            {"ar_estimated_tokens_per_s", prompt_speed(0)}}},
          {"time_correction", scale_},
          {"pass_cost", cost_.to_json()}};
}

}  // namespace icmlkit::decode
