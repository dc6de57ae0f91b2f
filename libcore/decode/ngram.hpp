// N-gram pool, lookahead (Jacobi) window and candidate trie shared by the lossless decoders.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "util/rng.hpp"

namespace icmlkit::decode {

/// N-grams keyed by their first token, at most `per_key` per key, most recent first
/// (Lookahead Decoding's pool: re-inserting an n-gram refreshes it; the least recently
/// inserted one is dropped when a key holds more than `per_key`).
class NgramPool {
 public:
  /// per_key >= 1 (the guess set size G).
  explicit NgramPool(int per_key) : per_key_(per_key) {}
  /// Inserts `gram` (size >= 2) under gram[0].
  void insert(const std::vector<int>& gram);
  /// The n-grams starting with `token`, most recently inserted first (empty if none).
  std::vector<std::vector<int>> lookup(int token) const;
  /// Number of n-grams held.
  std::size_t size() const noexcept { return count_; }

 private:
  int per_key_;
  std::size_t count_ = 0;
  std::unordered_map<int, std::deque<std::vector<int>>> map_;
};

/// The W x (N-1) Jacobi window of Lookahead Decoding.  Level 0 column 0 is the current input
/// token; level l column i stands at position p0 + l + i.  One step's outputs of the last level
/// close one n-gram per column: (level0[i], ..., level_{N-2}[i], out[i]).
class LookaheadWindow {
 public:
  /// window W >= 1, ngram N >= 2; initial guesses drawn uniformly from `seed_tokens` (non-empty).
  LookaheadWindow(int window, int ngram, const std::vector<int>& seed_tokens, Rng& rng);
  int window() const noexcept { return w_; }
  int levels() const noexcept { return static_cast<int>(lv_.size()); }
  /// Token at (level, column); level 0 column 0 is set by set_input().
  int token(int level, int col) const { return lv_[level][col]; }
  /// Sets level 0 column 0 (the step's input token).
  void set_input(int token) { lv_[0][0] = token; }
  /// Given the last level's outputs [W], adds one n-gram per column to `pool` and shifts the
  /// window up a level (the outputs become the new last level).
  void advance(const std::vector<int>& last_level_out, NgramPool& pool);

 private:
  int w_;
  std::vector<std::vector<int>> lv_;  // [N-1][W]
};

/// A prefix tree of candidate continuations of the input token; node 0 is the root (the input
/// row).  Duplicate prefixes share nodes, so every distinct token at a node is tried once.
struct CandidateTrie {
  struct Node {
    int token = -1, parent = -1, depth = 0;
    std::vector<int> children;  ///< node indices, in insertion order
    unsigned sources = 0;       ///< OR of the `source` bits of the candidates through this node
  };
  std::vector<Node> nodes{Node{}};
  /// Adds a candidate continuation (tokens after the input token), at most `max_depth` long,
  /// marking its nodes with `source` (a bit saying who proposed it).
  void add(const std::vector<int>& continuation, int max_depth, unsigned source = 0);
  /// Child of `node` with `token`, or -1.
  int child(int node, int token) const;
  /// Node count including the root.
  int size() const noexcept { return static_cast<int>(nodes.size()); }
};

/// Prompt Lookup Decoding's draft: for n = max_ngram down to min_ngram, the most recent earlier
/// occurrence of the last n tokens of `context` and up to `k` tokens that followed it (empty when
/// none matches).
std::vector<int> prompt_lookup(const std::vector<int>& context, int max_ngram, int min_ngram, int k);

}  // namespace icmlkit::decode
