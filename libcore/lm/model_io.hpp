// Model files of any supported format, detected from their content.
#pragma once

#include <string>

#include "io/h5array.hpp"
#include "io/provenance.hpp"
#include "lm/model.hpp"
#include "lm/tokenizer.hpp"

namespace icmlkit::lm {

/// Model file formats.
enum class ModelFormat { native_h5, gguf, hf_safetensors };

/// "native" | "gguf" | "hf".
const char* format_name(ModelFormat f) noexcept;

/// Detects the format of `path`: HDF5 signature -> native, "GGUF" magic -> gguf, a directory
/// with config.json or a .safetensors file -> hf.  Throws InputError when unrecognised.
ModelFormat detect_format(const std::string& path);

/// SHA-256 for provenance: of the file, or for a Hugging Face directory of the sorted
/// "name sha256" lines of its model files (config, safetensors, index, tokenizer).
std::string model_sha256(const std::string& path);

/// Loads a model of any supported format (every inference tool accepts all of them).
Model load_any(const std::string& path);

/// Where the tokenizer of the model at `path` comes from, for messages: "m.h5:/tokenizer/model",
/// "hf/tokenizer.model", "m.gguf:tokenizer.ggml.*" (by the detected format; the path itself
/// when it cannot be read).
std::string tokenizer_location(const std::string& path);

/// The model's tokenizer (read from `model.tokenizer_model`).  Throws InputError
/// "the model has no tokenizer (<location> missing)" naming `path` when it has none.
Tokenizer model_tokenizer(const Model& model, const std::string& path);

/// Output format from a path's extension, in any case: *.h5 / *.hdf5 -> native, *.gguf -> gguf,
/// anything else (a directory) -> hf; a stream (/dev/null, a pipe) -> native.  Throws UsageError for a file extension of another model
/// format (.safetensors, .bin, .pt, .pth, .json, .onnx), suggesting the directory form.
ModelFormat output_format(const std::string& path);

/// Writes `model` in `format` (matrices f32, f16 or bf16).  `gguf_quant` "q8_0" or "q4_0"
/// quantises the GGUF matrices whose rows are a multiple of 32 long (gguf::save_model_quantised);
/// for another format it is a UsageError ("" = none).
void save_any(const std::string& path, ModelFormat format, const Model& model,
              io::h5::FloatStorage storage, const io::Provenance& prov, const std::string& gguf_quant = "");

}  // namespace icmlkit::lm
