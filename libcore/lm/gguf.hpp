// GGUF (llama.cpp) model files: a hardened reader and an F32/F16/BF16 writer for the llama
// architecture.  Spec: github.com/ggerganov/ggml docs/gguf.md (version 2 and 3).
//
// Every count, length, offset, dimension and the alignment read from a file is checked against
// the bytes that remain and against overflow before it is used; tensor byte ranges are checked
// against shape x type and against each other.  A malformed file throws InputError naming the
// file and the field — never a crash, a hang or an allocation larger than the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "io/h5array.hpp"
#include "io/provenance.hpp"
#include "lm/model.hpp"

namespace icmlkit::lm::gguf {

/// The architecture name of moe models llama.cpp's llama architecture does not compute (a
/// sigmoid router, shared experts, unnormalised or scaled weights, squared-ReLU experts,
/// latent-moe or mixed blocks): the llama keys and tensor names under this prefix, plus
/// icmlkit.block_types / expert_act / latent_length, so that llama.cpp refuses the file.
inline const std::string kMoeArch = "icmlkit-moe";

/// ggml tensor types this toolkit reads (numbers as in ggml.h).
enum class TensorType : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30 };

/// A metadata value: scalars are held widened; arrays keep their element type's values.
using Value = std::variant<std::int64_t, std::uint64_t, double, bool, std::string,
                           std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>>;

/// One tensor's directory entry.
struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;  ///< GGUF order: ne[0] varies fastest (= columns)
  TensorType type = TensorType::f32;
  std::uint64_t offset = 0;       ///< absolute offset of the data in the file
  std::uint64_t nbytes = 0;
};

/// A parsed GGUF header: metadata and tensor directory, validated.
struct File {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::map<std::string, Value> meta;
  std::vector<TensorInfo> tensors;
  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(const std::string& name) const;
};

/// Parses and validates a GGUF header from `size` bytes (the whole file).  `where` names the
/// file in errors.  Throws InputError.
File parse(const std::uint8_t* data, std::size_t size, const std::string& where);

/// Decodes a tensor's elements to float32 (F32, F16, BF16, Q8_0, Q4_0).  `data` is the whole file.
std::vector<float> dequantize(const std::uint8_t* data, const TensorInfo& t);

/// Loads a llama-architecture GGUF file (dense, or a Mixtral: expert_count > 0, the experts
/// as 3-D ffn_{gate,up,down}_exps tensors) or a kMoeArch file as a native Model (rope_style
/// interleaved, as GGUF stores q/k).  The tokenizer is rebuilt as a SentencePiece model from tokenizer.ggml.* when the
/// tokenizer type is "llama" (or taken verbatim from icmlkit.tokenizer.sentencepiece_model);
/// other types are refused by name.  Throws InputError.
Model load_model(const std::string& path);

/// load_model() on bytes already in memory (the whole file); `where` names it in errors.
Model load_model(const std::uint8_t* data, std::size_t size, const std::string& where);

/// Writes `model` as GGUF v3 (a Mixtral under the llama architecture with llama.cpp's expert
/// keys and 3-D expert tensors; other moe models under kMoeArch) (matrices F32, F16 or BF16 = ggml type 30 with general.file_type
/// 32, as llama.cpp's MOSTLY_BF16; norms F32).  A rope_style=half model has its q/k rows
/// permuted to the interleaved layout llama.cpp expects (lm/README.md).  The tokenizer goes in
/// as tokenizer.ggml.* (type "llama") plus the exact SentencePiece bytes.  Throws UsageError
/// from lm::check_narrowing (a weight beyond the storage's range) before anything is written,
/// RuntimeError on write failure.
void save_model(const std::string& path, const Model& model, io::h5::FloatStorage storage,
                const io::Provenance& prov);

/// save_model with every matrix whose rows are a multiple of 32 long quantised to `quant`
/// (TensorType::q8_0 or q4_0, ggml's reference rounding: Q8_0 d = max|x| / 127, q = round(x / d);
/// Q4_0 d = m / -8 for m the value of largest magnitude, q = min(15, trunc(x / d + 8.5))); other
/// matrices and norms as `storage`.  Throws UsageError for another `quant`.
void save_model_quantised(const std::string& path, const Model& model, io::h5::FloatStorage storage, TensorType quant,
                          const io::Provenance& prov);

/// One row of K values (K a multiple of 32) quantised to ggml blocks of `quant` (q8_0 or q4_0)
/// into `out` (lm::weight_row_bytes bytes).
void quantize_row(TensorType quant, const float* x, int K, std::uint8_t* out);

/// Permutes the rows of a q or k weight [n_head*hd, d] from rotate-half to interleaved
/// pairing (inverse = false) or back (inverse = true): interleaved row 2i+j of a head is
/// rotate-half row j*hd/2 + i (llama.cpp convert_hf_to_gguf.py's permute).
Matrix permute_rope_rows(const float* w, int rows, int cols, int n_head, bool inverse);
inline Matrix permute_rope_rows(const Matrix& w, int n_head, bool inverse) {
  return permute_rope_rows(w.data.data(), w.rows, w.cols, n_head, inverse);
}

}  // namespace icmlkit::lm::gguf
