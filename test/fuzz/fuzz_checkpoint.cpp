// libFuzzer harness: our HDF5 model checkpoint reader (lm::load_any -> load_checkpoint: the config
// attributes, every tensor's type and shape, the embedded SentencePiece tokenizer).
//
// The input is not the HDF5 bytes themselves: mutating those would fuzz the HDF5 library (not
// instrumented, not ours), and would almost never reach our checks.  It is a JSON recipe of a file,
// written with the HDF5 C API and then read back by our reader, so each mutation is a change a
// real file can carry (an attribute of the wrong type or value, a missing, misshapen, mistyped or
// non-finite tensor, a corrupt tokenizer):
//
//   {"attrs": {"format": "icmlkit-lm-v2", "d_model": 16, "rope_theta": 10000.0,
//              "fixed": {"fixed": "text"}, "list": [1, 2]},
//    "tensors": {"token_embd.weight": {"shape": [40, 16], "type": "f32", "fill": 0.01,
//                                      "values": [0.5, "nan"]},
//                "blk.0.ffn_up.weight": {"shape": [24, 16], "type": "u16", "dtype": "bf16"},
//                "tokenizer/model": {"type": "u8", "hex": "0a1b..."}}}
//
// attrs: an integer is a scalar int64, a float a float64, a string a variable-length string,
// {"fixed": s} a fixed-length string, an array of 1 to 64 numbers a 1-D attribute (int64 when all
// are integers, else float64; "nan", "inf", "-inf" allowed, anything else 0), a boolean a uint8;
// anything else is skipped.  tensors: type f32 | f64 | u16 | i32 | i64 | u8 | str; shape [] is a
// scalar; "values" fill the first elements ("nan", "inf", "-inf" allowed; NaN is 0 and other
// values saturate in an integer type), "fill" the rest; "dtype" adds the string attribute that
// marks a u16 tensor as f16 or bf16 bits; "hex" gives a u8 tensor's bytes (and for another type
// only its length, overriding "shape").  "libver": "earliest" writes HDF5's oldest file format
// (what h5py writes by default) instead of the 1.8+ format our writer uses.  Names are cut at a
// NUL.  Bounded so that every input is cheap: at most 2^20 elements, 256 attributes and 1024
// tensors per file, names of at most 256 bytes and 4 '/' (deeper paths cost HDF5 quadratic
// memory); what exceeds a bound is skipped.
//
// A bad file may only be refused with our Error (the user's exit 1), never a crash, sanitizer
// report, other exception or timeout, and the reader must leave no HDF5 object open.  A model it
// accepts must be what its config says: a valid config, every weight finite.
//
// With ICMLKIT_FUZZ_EMIT_SEEDS=DIR in the environment, the harness instead writes the recipe of
// each HDF5 file named by ICMLKIT_FUZZ_SEED_MODELS (colon-separated) into DIR and exits: run.sh
// seeds the corpus that way from models made by lm-init.
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_file.hpp"
#include "io/hdf5.hpp"
#include "lm/model_io.hpp"
#include "util/error.hpp"

namespace {

using nlohmann::json;
using icmlkit::io::h5::Handle;

constexpr std::uint64_t kMaxElements = 1u << 20;
constexpr std::size_t kMaxAttrs = 256, kMaxTensors = 1024, kMaxName = 256, kMaxDepth = 4;

/// Whether `name` is within the bounds on names (length, '/' count).
bool name_ok(const std::string& name) {
  return !name.empty() && name.size() <= kMaxName && std::size_t(std::count(name.begin(), name.end(), '/')) <= kMaxDepth;
}

/// Parses "nan" / "inf" / "-inf" or a JSON number; anything else is 0.
double number_of(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return 0;
}

/// The link-creation property list that makes intermediate groups ("tokenizer/model").
Handle intermediate_groups() {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return lcpl;
}

/// Writes attribute `name` on `loc` as the recipe's value `v` says (header comment); skips a name
/// out of bounds or already there, and a value of no recipe type.
void write_attr(hid_t loc, const std::string& name, const json& v) {
  if (!name_ok(name) || H5Aexists(loc, name.c_str()) != 0) return;
  Handle space, type;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::string text;
  const void* buf = nullptr;
  hid_t mem = H5T_NATIVE_INT64;
  std::uint8_t flag = 0;
  const char* text_ptr = nullptr;
  if (v.is_boolean()) {
    flag = v.get<bool>() ? 1 : 0;
    space = Handle(H5Screate(H5S_SCALAR));
    type = Handle(H5Tcopy(H5T_STD_U8LE));
    mem = H5T_NATIVE_UINT8;
    buf = &flag;
  } else if (v.is_string() || (v.is_object() && v.contains("fixed") && v["fixed"].is_string())) {
    const bool fixed = v.is_object();
    text = fixed ? v["fixed"].get<std::string>() : v.get<std::string>();
    space = Handle(H5Screate(H5S_SCALAR));
    type = Handle(H5Tcopy(H5T_C_S1));
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    H5Tset_size(type.get(), fixed ? text.size() + 1 : H5T_VARIABLE);
    mem = type.get();
    text_ptr = text.c_str();
    buf = fixed ? static_cast<const void*>(text_ptr) : static_cast<const void*>(&text_ptr);
  } else if (v.is_number() || (v.is_array() && !v.empty() && v.size() <= 64)) {
    // numbers: a scalar, or an array as a 1-D attribute; int64 when all are integers, else float64
    const json items = v.is_array() ? v : json::array({v});
    bool integral = true;
    for (const auto& e : items) integral = integral && e.is_number_integer();
    for (const auto& e : items) {
      if (!integral) reals.push_back(number_of(e));
      else ints.push_back(e.is_number_unsigned() ? static_cast<std::int64_t>(e.get<std::uint64_t>()) : e.get<std::int64_t>());
    }
    const hsize_t n = items.size();
    space = Handle(v.is_array() ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR));
    type = Handle(H5Tcopy(integral ? H5T_STD_I64LE : H5T_IEEE_F64LE));
    mem = integral ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    buf = integral ? static_cast<const void*>(ints.data()) : static_cast<const void*>(reals.data());
  } else {
    return;
  }
  Handle a(H5Acreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (a) H5Awrite(a.get(), mem, buf);
}

void write_tensor(hid_t file, const std::string& name, const json& t, std::uint64_t& budget) {
  if (!name_ok(name) || !t.is_object()) return;
  const std::string kind = t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "f32";
  const std::string* hex = t.contains("hex") && t["hex"].is_string() ? &t["hex"].get_ref<const std::string&>() : nullptr;
  std::vector<hsize_t> dims;
  std::uint64_t n = 1;
  if (hex) {
    dims.push_back(hex->size() / 2);
    n = dims[0];
  } else if (t.contains("shape") && t["shape"].is_array()) {
    if (t["shape"].size() > 4) return;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > kMaxElements) return;
      dims.push_back(d.get<std::uint64_t>());
      n *= dims.back();
      if (n > budget) return;
    }
  } else {
    return;
  }
  if (n > budget) return;
  budget -= n;
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr));
  Handle lcpl = intermediate_groups();
  const json none = json::array();
  const json& values = t.contains("values") && t["values"].is_array() ? t["values"] : none;
  const double fill = t.contains("fill") ? number_of(t["fill"]) : 0.0;
  auto value = [&](std::uint64_t i) { return i < values.size() ? number_of(values[i]) : fill; };
  auto put = [&](hid_t file_type, hid_t mem_type, const void* data) {
    Handle ds(H5Dcreate2(file, name.c_str(), file_type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!ds) return ds;
    if (n > 0) H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    return ds;
  };
  // Integers out of their type's range saturate rather than overflow (undefined on the cast).
  auto clamp = [](double x, double lo, double hi) { return std::isnan(x) ? 0.0 : x < lo ? lo : x > hi ? hi : x; };
  Handle ds;
  if (kind == "f32") {
    std::vector<float> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(value(i));
    ds = put(H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v.data());
  } else if (kind == "f64") {
    std::vector<double> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = value(i);
    ds = put(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data());
  } else if (kind == "u16") {
    std::vector<std::uint16_t> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint16_t>(clamp(value(i), 0, 65535));
    ds = put(H5T_STD_U16LE, H5T_NATIVE_UINT16, v.data());
  } else if (kind == "i32") {
    std::vector<std::int32_t> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(clamp(value(i), -2147483648.0, 2147483647.0));
    ds = put(H5T_STD_I32LE, H5T_NATIVE_INT32, v.data());
  } else if (kind == "i64") {
    std::vector<std::int64_t> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(clamp(value(i), -9.0e18, 9.0e18));
    ds = put(H5T_STD_I64LE, H5T_NATIVE_INT64, v.data());
  } else if (kind == "u8") {
    std::vector<std::uint8_t> v(n);
    if (hex) {
      for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(std::strtoul(hex->substr(2 * i, 2).c_str(), nullptr, 16));
    } else {
      for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(clamp(value(i), 0, 255));
    }
    ds = put(H5T_STD_U8LE, H5T_NATIVE_UINT8, v.data());
  } else if (kind == "str") {
    Handle type(H5Tcopy(H5T_C_S1));
    H5Tset_size(type.get(), 8);
    std::vector<char> v(n * 8, 'x');
    ds = put(type.get(), type.get(), v.data());
  }
  if (ds && t.contains("dtype")) write_attr(ds.get(), "dtype", t["dtype"]);
}

/// Writes the recipe's file at `path` (what exceeds a bound is left out).  Aborts when the file
/// cannot be created or closed: that would silently stop the fuzzing (e.g. a handle the reader
/// leaked keeping the scratch file open).
void write_recipe(const json& r, const std::string& path) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (!(r.contains("libver") && r["libver"] == "earliest")) H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110);
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file) {
    std::fprintf(stderr, "fuzz_checkpoint: cannot create %s\n", path.c_str());
    std::abort();
  }
  if (r.contains("attrs") && r["attrs"].is_object() && r["attrs"].size() <= kMaxAttrs)
    for (const auto& [k, v] : r["attrs"].items()) write_attr(file.get(), k, v);
  std::uint64_t budget = kMaxElements;
  if (r.contains("tensors") && r["tensors"].is_object() && r["tensors"].size() <= kMaxTensors)
    for (const auto& [k, v] : r["tensors"].items()) write_tensor(file.get(), k, v, budget);
  const hid_t id = file.get();
  file.release();
  if (H5Fclose(id) < 0) {
    std::fprintf(stderr, "fuzz_checkpoint: cannot close %s\n", path.c_str());
    std::abort();
  }
}

// ---- seeds: the recipe of an existing file ----

json attr_recipe(hid_t a) {
  Handle type(H5Aget_type(a)), space(H5Aget_space(a));
  const auto npoints = H5Sget_simple_extent_npoints(space.get());
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      std::int64_t v = 0;
      return npoints == 1 && H5Aread(a, H5T_NATIVE_INT64, &v) >= 0 ? json(v) : json();
    }
    case H5T_FLOAT: {
      double v = 0;
      return npoints == 1 && H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0 ? json(v) : json();
    }
    case H5T_STRING: {
      std::string s;
      if (H5Tis_variable_str(type.get()) > 0) {
        char* p = nullptr;
        if (H5Aread(a, type.get(), &p) >= 0 && p) s = p;
        H5free_memory(p);
        return s;
      }
      std::string buf(H5Tget_size(type.get()), '\0');
      H5Aread(a, type.get(), buf.data());
      return json{{"fixed", std::string(buf.c_str())}};
    }
    default: return json();
  }
}

herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* out) {
  Handle a(H5Aopen(loc, name, H5P_DEFAULT));
  json v = attr_recipe(a.get());
  if (!v.is_null()) (*static_cast<json*>(out))[name] = v;
  return 0;
}

herr_t collect_dataset(hid_t root, const char* name, const H5O_info_t* info, void* out) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  Handle ds(H5Dopen2(root, name, H5P_DEFAULT));
  Handle type(H5Dget_type(ds.get())), space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  json t;
  t["shape"] = dims;
  const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get()));
  const bool is_float = H5Tget_class(type.get()) == H5T_FLOAT;
  const std::size_t width = H5Tget_size(type.get());
  if (!is_float && width == 1) {  // bytes (the tokenizer): all of them, in hex
    std::vector<std::uint8_t> b(n);
    if (n) H5Dread(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
    std::string hex;
    char two[3];
    for (auto x : b) std::snprintf(two, sizeof two, "%02x", x), hex += two;
    t = json{{"type", "u8"}, {"hex", hex}};
  } else {  // numbers: the type, the first value as the fill (a constant but valid tensor)
    t["type"] = is_float ? (width == 8 ? "f64" : "f32") : width == 2 ? "u16" : width == 4 ? "i32" : "i64";
    std::vector<double> v(n);
    if (n) H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    if (n) t["fill"] = v[0];
    json attrs = json::object();
    H5Aiterate2(ds.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr, &attrs);
    if (attrs.contains("dtype")) t["dtype"] = attrs["dtype"];
  }
  (*static_cast<json*>(out))[name] = t;
  return 0;
}

/// The recipe of the HDF5 file at `path` (root attributes, every dataset, the bytes of u8 ones).
json recipe_of(const std::string& path) {
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file) return json();
  json attrs = json::object(), tensors = json::object();
  H5Aiterate2(file.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr, &attrs);
  for (const char* noise : {"tool", "version", "command", "seed", "inputs", "meta"}) attrs.erase(noise);
  H5Ovisit2(file.get(), H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &tensors, H5O_INFO_BASIC);
  return json{{"attrs", attrs}, {"tensors", tensors}};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const char* dir = std::getenv("ICMLKIT_FUZZ_EMIT_SEEDS");
  if (!dir) return 0;
  std::string models = std::getenv("ICMLKIT_FUZZ_SEED_MODELS") ? std::getenv("ICMLKIT_FUZZ_SEED_MODELS") : "";
  int written = 0, failed = 0;
  for (std::size_t at = 0; at <= models.size();) {
    const std::size_t end = models.find(':', at) == std::string::npos ? models.size() : models.find(':', at);
    const std::string path = models.substr(at, end - at);
    at = end + 1;
    if (path.empty()) continue;
    const json r = recipe_of(path);
    const std::string seed = std::string(dir) + "/" + path.substr(path.find_last_of('/') + 1) + ".json";
    if (r.is_null()) {
      std::fprintf(stderr, "fuzz_checkpoint: cannot open %s as an HDF5 file\n", path.c_str());
      ++failed;
    } else if (std::ofstream out(seed); !(out << r.dump())) {
      std::fprintf(stderr, "fuzz_checkpoint: cannot write %s\n", seed.c_str());
      ++failed;
    } else {
      ++written;
    }
  }
  std::printf("fuzz_checkpoint: wrote %d seed recipes to %s\n", written, dir);
  std::exit(written > 0 && failed == 0 ? 0 : 1);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  const json recipe = json::parse(data, data + size, nullptr, false);
  if (recipe.is_discarded() || !recipe.is_object()) return 0;
  const std::string path = fuzz::scratch_file(nullptr, 0, ".h5");
  write_recipe(recipe, path);
  lm::Model m;
  bool accepted = true;
  try {
    m = lm::load_any(path);
  } catch (const Error&) {
    accepted = false;
  }
  // Refused or not, the reader closed everything it opened.
  if (const auto open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); open != 0) {
    std::fprintf(stderr, "fuzz_checkpoint: the reader left %lld HDF5 objects open\n", static_cast<long long>(open));
    std::abort();
  }
  if (!accepted) return 0;
  // What was accepted is what its config says: a valid config, every weight finite.
  try {
    m.config.validate("accepted checkpoint");
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz_checkpoint: accepted an invalid config: %s\n", e.what());
    std::abort();
  }
  for (const auto& t : lm::tensor_slots(std::as_const(m)))
    for (std::size_t i = 0; i < std::size_t(t.rows) * std::size_t(t.cols ? t.cols : 1); ++i)
      if (!std::isfinite(t.data[i])) {
        std::fprintf(stderr, "fuzz_checkpoint: accepted a non-finite weight: %s[%zu]\n", t.gguf.c_str(), i);
        std::abort();
      }
  return 0;
}
