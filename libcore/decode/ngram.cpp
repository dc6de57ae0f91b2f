#include "decode/ngram.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace icmlkit::decode {

void NgramPool::insert(const std::vector<int>& gram) {
  if (gram.size() < 2) throw InputError("an n-gram needs at least 2 tokens");
  auto& q = map_[gram[0]];
  auto it = std::find(q.begin(), q.end(), gram);
  if (it != q.end()) {
    q.erase(it);
    --count_;
  }
  q.push_front(gram);
  ++count_;
  while (static_cast<int>(q.size()) > per_key_) {
    q.pop_back();
    --count_;
  }
}

std::vector<std::vector<int>> NgramPool::lookup(int token) const {
  auto it = map_.find(token);
  if (it == map_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

LookaheadWindow::LookaheadWindow(int window, int ngram, const std::vector<int>& seed_tokens, Rng& rng) : w_(window) {
  if (window < 1 || ngram < 2) throw UsageError("lookahead window needs W >= 1 and N >= 2");
  if (seed_tokens.empty()) throw InputError("lookahead window needs at least one seed token");
  lv_.assign(ngram - 1, std::vector<int>(window));
  for (auto& level : lv_)
    for (int& t : level) t = seed_tokens[rng.below(seed_tokens.size())];
}

void LookaheadWindow::advance(const std::vector<int>& out, NgramPool& pool) {
  const int n_lv = levels();
  std::vector<int> gram(n_lv + 1);
  for (int i = 0; i < w_; ++i) {
    for (int l = 0; l < n_lv; ++l) gram[l] = lv_[l][i];
    gram[n_lv] = out[i];
    pool.insert(gram);
  }
  for (int l = 0; l + 1 < n_lv; ++l) lv_[l] = lv_[l + 1];
  lv_[n_lv - 1] = out;
}

void CandidateTrie::add(const std::vector<int>& cont, int max_depth, unsigned source) {
  int node = 0;
  const int n = std::min<int>(static_cast<int>(cont.size()), max_depth);
  for (int i = 0; i < n; ++i) {
    int c = child(node, cont[i]);
    if (c < 0) {
      c = size();
      nodes.push_back(Node{cont[i], node, nodes[node].depth + 1, {}, 0});
      nodes[node].children.push_back(c);
    }
    nodes[c].sources |= source;
    node = c;
  }
}

int CandidateTrie::child(int node, int token) const {
  for (int c : nodes[node].children)
    if (nodes[c].token == token) return c;
  return -1;
}

std::vector<int> prompt_lookup(const std::vector<int>& ctx, int max_ngram, int min_ngram, int k) {
  const int len = static_cast<int>(ctx.size());
  for (int n = max_ngram; n >= min_ngram; --n) {
    if (n >= len) continue;
    // Most recent earlier occurrence of the suffix ctx[len-n, len).
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(ctx.begin() + start, ctx.begin() + start + n, ctx.end() - n)) continue;
      const int from = start + n;
      const int to = std::min(len, from + k);
      return {ctx.begin() + from, ctx.begin() + to};
    }
  }
  return {};
}

}  // namespace icmlkit::decode
