#include "lm/model_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "lm/gguf.hpp"
#include "lm/safetensors.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

namespace fs = std::filesystem;

const char* format_name(ModelFormat f) noexcept {
  switch (f) {
    case ModelFormat::gguf: return "gguf";
    case ModelFormat::hf_safetensors: return "hf";
    default: return "native";
  }
}

ModelFormat detect_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json")) return ModelFormat::hf_safetensors;
    throw InputError("directory has no config.json (not a Hugging Face model)", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_file(path);
  char head[8] = {0};
  in.read(head, 8);
  if (in.gcount() >= 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0) return ModelFormat::native_h5;
  if (in.gcount() >= 4 && std::memcmp(head, "GGUF", 4) == 0) return ModelFormat::gguf;
  if (fs::path(path).extension() == ".safetensors") return ModelFormat::hf_safetensors;
  throw InputError("unrecognised model file (native HDF5, GGUF or Hugging Face safetensors expected)", path);
}

std::string model_sha256(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return io::sha256_file(path);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && (n == "config.json" || n == "tokenizer.model" || n == "model.safetensors.index.json" ||
                                e.path().extension() == ".safetensors"))
      names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::string lines;
  for (const auto& n : names) lines += n + " " + io::sha256_file((fs::path(path) / n).string()) + "\n";
  return io::sha256_hex(lines);
}

Model load_any(const std::string& path) {
  switch (detect_format(path)) {
    case ModelFormat::gguf: return gguf::load_model(path);
    case ModelFormat::hf_safetensors: return safetensors::load_model(path);
    default: return load_checkpoint(path);
  }
}

std::string tokenizer_location(const std::string& path) {
  try {
    switch (detect_format(path)) {
      case ModelFormat::gguf: return path + ":tokenizer.ggml.*";
      case ModelFormat::hf_safetensors: {
        const fs::path p(path);
        std::error_code ec;
        return ((fs::is_directory(p, ec) ? p : p.parent_path()) / "tokenizer.model").string();
      }
      default: return path + ":/tokenizer/model";
    }
  } catch (const Error&) {
    return path;
  }
}

Tokenizer model_tokenizer(const Model& model, const std::string& path) {
  const std::string where = tokenizer_location(path);
  if (model.tokenizer_model.empty()) throw InputError("the model has no tokenizer (" + where + " missing)", path);
  return Tokenizer(model.tokenizer_model, where);
}

ModelFormat output_format(const std::string& path) {
  if (io::is_stream_path(path)) return ModelFormat::native_h5;  // /dev/null, a pipe: one file, the native one
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (ext == ".h5" || ext == ".hdf5") return ModelFormat::native_h5;
  if (ext == ".gguf") return ModelFormat::gguf;
  if (ext == ".safetensors" || ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".json" || ext == ".onnx") {
    const std::string dir = fs::path(path).replace_extension().string() + "/";
    throw UsageError(fmt::format("a Hugging Face model is written as a directory (config.json, model.safetensors, "
                                 "tokenizer files): give one such as {}, or *.h5 / *.gguf for one file", dir),
                     "-o " + path);
  }
  return ModelFormat::hf_safetensors;
}

void save_any(const std::string& path, ModelFormat format, const Model& model, io::h5::FloatStorage storage,
              const io::Provenance& prov, const std::string& gguf_quant) {
  if (!gguf_quant.empty() && format != ModelFormat::gguf)
    throw UsageError(gguf_quant + " is a GGUF block format: write *.gguf", "--dtype " + gguf_quant);
  if (format != ModelFormat::native_h5 && model.config.has_mlstm())
    throw UsageError("mlstm-hybrid blocks exist in the native HDF5 format only (no GGUF or Hugging Face architecture has them): "
                     "write *.h5", "-o " + path);
  if (format != ModelFormat::native_h5 && model.config.is_recdepth())
    throw UsageError("recurrent-depth models exist in the native HDF5 format only (GGUF and the Hugging Face writers have no "
                     "looped architecture): write *.h5", "-o " + path);
  switch (format) {
    case ModelFormat::gguf:
      if (gguf_quant.empty()) gguf::save_model(path, model, storage, prov);
      else gguf::save_model_quantised(path, model, storage, gguf_quant == "q8_0" ? gguf::TensorType::q8_0 : gguf::TensorType::q4_0, prov);
      break;
    case ModelFormat::hf_safetensors: safetensors::save_model(path, model, storage, prov); break;
    default: save_checkpoint(path, model, storage, prov); break;
  }
}

}  // namespace icmlkit::lm
