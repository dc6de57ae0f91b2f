// Hugging Face Llama checkpoints: config.json + *.safetensors (single or sharded with
// model.safetensors.index.json) + tokenizer.model, read with hardened parsing; and a writer.
//
// safetensors layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data.  Every length and offset is checked against the file and against shape x dtype, byte
// ranges must not overlap, names must be unique; a bad file throws InputError (exit 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/h5array.hpp"
#include "io/provenance.hpp"
#include "lm/model.hpp"

namespace icmlkit::lm::safetensors {

/// One tensor of a safetensors file.
struct Entry {
  std::string dtype;                  ///< "F32" | "F16" | "BF16"
  std::vector<std::uint64_t> shape;   ///< row-major
  std::uint64_t begin = 0, end = 0;   ///< absolute byte range in the file
};

/// A parsed, validated header.
struct Header {
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;
};

/// Parses and validates the header of a safetensors file of `size` bytes.  Throws InputError
/// naming `where` (file) and the tensor.
Header parse(const std::uint8_t* data, std::size_t size, const std::string& where);

/// Decodes one tensor to float32.
std::vector<float> to_floats(const std::uint8_t* data, const Entry& e);

/// Loads a Hugging Face Llama model from a directory (config.json + model.safetensors or an
/// index of shards, tokenizer.model if present) or a .safetensors file with config.json beside
/// it.  rope_style = half (Hugging Face rotate-half).  Throws InputError.
Model load_model(const std::string& path);

/// Writes `model` as a Hugging Face Llama directory: config.json, model.safetensors (matrices in
/// `storage`, norms F32), tokenizer.model when the model has one.  A rope_style = interleaved
/// model has its q/k rows permuted back to rotate-half.  The directory is created; files inside
/// are written atomically.  Throws RuntimeError, and UsageError from lm::check_narrowing before
/// anything is written.
void save_model(const std::string& dir, const Model& model, io::h5::FloatStorage storage,
                const io::Provenance& prov);

}  // namespace icmlkit::lm::safetensors
