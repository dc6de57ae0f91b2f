// N-dimensional numeric arrays, raw bytes and numeric attributes in HDF5 (C API).
//
// Arrays are row-major (C order).  float32 tensors may be stored narrowed to half precision:
// HDF5 1.10 has no half type, so an f16/bf16 tensor is a uint16 dataset of the raw IEEE
// binary16 / bfloat16 bit patterns with a string attribute `dtype` = "f16" | "bf16";
// read_floats() widens them back.  Every failure names "file:/dataset".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/hdf5.hpp"

namespace icmlkit::io::h5 {

/// Storage precision of a float tensor.
enum class FloatStorage { f32, f16, bf16 };

/// Parses "f32" | "f16" | "bf16".  Throws UsageError naming `where` otherwise.
FloatStorage parse_float_storage(const std::string& name, const std::string& where);
/// "f32" | "f16" | "bf16".
const char* storage_name(FloatStorage s) noexcept;

/// A float tensor as read: values widened to float32, its shape, and the stored precision.
struct FloatArray {
  std::vector<float> data;          ///< row-major values
  std::vector<std::uint64_t> dims;  ///< shape
  FloatStorage stored = FloatStorage::f32;
};

/// Writes `data` (row-major, shape `dims`) as dataset `name` under `loc`, narrowed to `as`
/// (round to nearest even).  Intermediate groups are created.  Throws RuntimeError.
void write_floats(const Handle& loc, const std::string& name, const float* data,
                  const std::vector<std::uint64_t>& dims, FloatStorage as = FloatStorage::f32);

/// Reads a float32/float64 dataset, or a uint16 one with attribute dtype = f16|bf16.
/// Throws InputError (label = "file:/path") when absent, of another type, or of unknown dtype.
FloatArray read_floats(const Handle& loc, const std::string& name, const std::string& label);

/// Writes a 1-D int32 dataset (intermediate groups created).  Throws RuntimeError.
void write_ints(const Handle& loc, const std::string& name, const std::vector<std::int32_t>& v);
/// Reads a 1-D integer dataset as int32.  Throws InputError when absent or not integral.
std::vector<std::int32_t> read_ints(const Handle& loc, const std::string& name, const std::string& label);

/// Whether a dataset (or any link) `name` exists under `loc`.
bool exists(const Handle& loc, const std::string& name);

/// Writes raw bytes as a 1-D uint8 dataset (e.g. a tokenizer model).
void write_bytes(const Handle& loc, const std::string& name, const std::string& bytes);
/// Reads a 1-D uint8 dataset.  Throws InputError.
std::string read_bytes(const Handle& loc, const std::string& name, const std::string& label);

/// Writes (replaces) a scalar int64 / float64 attribute on `loc`.
void write_attr_int(const Handle& loc, const std::string& name, std::int64_t value);
void write_attr_double(const Handle& loc, const std::string& name, double value);
/// Reads a scalar numeric attribute; false when absent.  Throws InputError when the
/// attribute is not numeric or (for ints) not integral.
bool read_attr_int(const Handle& loc, const std::string& name, std::int64_t& value,
                   const std::string& label);
bool read_attr_double(const Handle& loc, const std::string& name, double& value,
                      const std::string& label);

}  // namespace icmlkit::io::h5
