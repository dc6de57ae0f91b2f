// lm-sweep's grid: a JSON description of a scaling-law sweep (model sizes x training tokens x
// data recipes over quality buckets x repetition x seeds), expanded into cells, each one
// lm-train run.  The format is documented in man/lm-sweep.h2m and README "Scaling laws on
// real runs"; Slurm's training-grid template (issue 42) uses the same file.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lm/config.hpp"

namespace icmlkit::sweep {

/// How one quality bucket is made.  A "made" bucket takes a share of the source corpus's
/// training documents and degrades each unit: words shuffled within the unit (`shuffle`),
/// then each word replaced, with probability `replace`, by a word drawn uniformly from the
/// source's training vocabulary of word types.  A "file" bucket is a corpus of its own
/// (`path`, read with `corpus`), taken as it is.
struct BucketSpec {
  std::string name;
  double share = 0;       ///< made: share of the source's training documents (> 0; shares sum to 1)
  double replace = 0;     ///< made: probability a word is replaced, in [0, 1]
  bool shuffle = false;   ///< made: shuffle the words of each unit
  std::string path;       ///< file: the corpus (else "")
  nlohmann::json corpus;  ///< file: corpus options (format, column, doc_column, field, doc_field, val_every)
  bool is_file() const { return !path.empty(); }
};

/// The data section: where the text comes from, how it is cut into buckets and units, the
/// tokenizer, and the validation sets.
struct DataSpec {
  std::string source;           ///< source corpus of the made buckets ("" when every bucket is a file)
  nlohmann::json source_corpus; ///< its corpus options (format, column, doc_column, val_every, ...)
  std::string unit = "line";    ///< sampling unit: "line" (each line of a document) or "document"
  std::uint64_t seed = 1;       ///< data seed: bucket assignment, degradation, unit order
  int vocab_size = 1024;        ///< tokenizer trained on the buckets' training units ...
  std::string tokenizer;        ///< ... unless a SentencePiece model is given here
  std::vector<BucketSpec> buckets;
  std::string validation;       ///< the bucket whose held-out loss is the table's `loss` (default: the first)
  std::int64_t val_tokens = 16384;  ///< predicted tokens per validation domain (0 = all)
};

/// One model of the grid: a full ModelConfig without vocabulary (the tokenizer's) and n_ctx
/// (the training seq_len), and the training options that differ for it (a learning rate scaled
/// with the width, say).
struct ModelSpec {
  std::string name;
  lm::ModelConfig config;  ///< vocab_size and n_ctx are filled in when the data is ready
  nlohmann::json json;     ///< as written in the grid (for the cell's spec hash)
  nlohmann::json train = nlohmann::json::object();  ///< overrides of the grid's "train" (not seq_len or tied)
};

/// One cell: one lm-train run and its evaluation.
struct Cell {
  std::size_t index = 0;   ///< position in the expanded grid (lm-sweep --cell INDEX)
  std::string id;          ///< "MODEL.RECIPE.D<tokens>.E<epochs|nat>.s<seed>", also its directory name
  std::string role;        ///< the block's role ("fit", "heldout-recipe", "heldout-scale", "noise", ...)
  std::string model;       ///< key into Grid::models
  std::string recipe;      ///< key into Grid::recipes
  std::int64_t tokens = 0; ///< training tokens D
  std::optional<double> epochs;  ///< requested epochs D / U (none: as many unique tokens as the buckets hold)
  std::uint64_t seed = 1;  ///< lm-train --seed and the order of the cell's corpus
};

/// A parsed, expanded grid.
struct Grid {
  std::string name;
  DataSpec data;
  std::map<std::string, ModelSpec> models;
  std::map<std::string, std::vector<double>> recipes;  ///< weights per bucket, in bucket order
  nlohmann::json train = nlohmann::json::object();     ///< lm-train options shared by every cell
  std::vector<Cell> cells;
  int seq_len = 128;       ///< train.seq_len
  nlohmann::json raw;      ///< the grid file as read
};

/// The lm-train flags a grid's "train" section may set (snake_case keys, passed as --kebab-case).
const std::vector<std::string>& allowed_train_keys();

/// Parses and expands a grid file.  Checks everything that does not need the data: unknown
/// keys, bucket shares (positive, summing to 1 within 1e-6), recipe weights (one per bucket,
/// each in [0, 1], summing to 1 within 1e-6), model shapes, known model and recipe names in
/// cells, tokens >= one optimizer step (batch x seq_len), epochs >= 1, distinct cell ids.
/// Throws InputError naming the file and the offending entry (the cell's id for a cell).
/// Relative paths in the data section are resolved against the grid file's directory.
Grid read_grid(const std::string& path);

/// Parses a grid from JSON (`where` names it in errors; paths are resolved against `base_dir`).
Grid parse_grid(const nlohmann::json& j, const std::string& where, const std::string& base_dir);

/// SHA-256 of the data section as parsed (defaults filled; each file named by the SHA-256 of
/// its bytes, not its path): the key of the data folder that every cell of the grid shares.
/// Throws InputError when a named file cannot be read.
std::string data_spec_sha256(const Grid& g);

/// The lm-train arguments of a model's shape (--d-model ... --n-ctx).
std::vector<std::string> model_args(const ModelSpec& m, int seq_len);

/// The lm-train arguments of the grid's "train" section with model `m`'s overrides, in a fixed order.
std::vector<std::string> train_args(const Grid& g, const ModelSpec& m);

}  // namespace icmlkit::sweep
