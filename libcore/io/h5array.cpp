#include "io/h5array.hpp"

#include <cmath>

#include "num/half.hpp"
#include "util/error.hpp"

namespace icmlkit::io::h5 {

FloatStorage parse_float_storage(const std::string& name, const std::string& where) {
  if (name == "f32") return FloatStorage::f32;
  if (name == "f16") return FloatStorage::f16;
  if (name == "bf16") return FloatStorage::bf16;
  throw UsageError("unknown dtype '" + name + "' (expected f32, f16 or bf16)", where);
}

const char* storage_name(FloatStorage s) noexcept {
  switch (s) {
    case FloatStorage::f16: return "f16";
    case FloatStorage::bf16: return "bf16";
    default: return "f32";
  }
}

namespace {

Handle open_dataset(const Handle& loc, const std::string& name, const std::string& label) {
  if (!exists(loc, name)) throw InputError("missing dataset", label);
  Handle ds(H5Dopen2(loc.get(), name.c_str(), H5P_DEFAULT));
  if (!ds) throw InputError("not a dataset, or a corrupted one", label);
  return ds;
}

std::vector<std::uint64_t> shape_of(const Handle& ds) {
  Handle space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> d(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
  return {d.begin(), d.end()};
}

std::size_t count_of(const std::vector<std::uint64_t>& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

template <class T>
void write_attr_scalar(const Handle& loc, const std::string& name, hid_t type, T value) {
  if (H5Aexists(loc.get(), name.c_str()) > 0) H5Adelete(loc.get(), name.c_str());
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(loc.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr || H5Awrite(attr.get(), type, &value) < 0)
    throw RuntimeError("cannot write HDF5 attribute", name);
}

bool read_attr_number(const Handle& loc, const std::string& name, double& value,
                      const std::string& label) {
  if (H5Aexists(loc.get(), name.c_str()) <= 0) return false;
  Handle attr(H5Aopen(loc.get(), name.c_str(), H5P_DEFAULT));
  Handle type(H5Aget_type(attr.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  Handle space(H5Aget_space(attr.get()));
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || H5Sget_simple_extent_npoints(space.get()) != 1)
    throw InputError("attribute '" + name + "' is not a number", label);
  if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    throw InputError("cannot read attribute '" + name + "'", label);
  return true;
}

}  // namespace

bool exists(const Handle& loc, const std::string& name) {
  // Check each path component so that a missing intermediate group is not an HDF5 error.
  std::size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string part = name.substr(0, pos);
    if (!part.empty() && part != "/" && H5Lexists(loc.get(), part.c_str(), H5P_DEFAULT) <= 0)
      return false;
    if (pos == std::string::npos) return true;
  }
}

void write_floats(const Handle& loc, const std::string& name, const float* data,
                  const std::vector<std::uint64_t>& dims, FloatStorage as) {
  const std::vector<hsize_t> hd(dims.begin(), dims.end());
  const std::size_t n = count_of(dims);
  if (as == FloatStorage::f32) {
    Handle ds = create_dataset(loc, name, H5T_IEEE_F32LE, hd);
    if (n && H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      throw RuntimeError("cannot write HDF5 dataset", name);
    return;
  }
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i)
    bits[i] = as == FloatStorage::f16 ? num::f32_to_f16(data[i]) : num::f32_to_bf16(data[i]);
  Handle ds = create_dataset(loc, name, H5T_STD_U16LE, hd);
  if (n && H5Dwrite(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
  write_attr(ds, "dtype", storage_name(as));
}

FloatArray read_floats(const Handle& loc, const std::string& name, const std::string& label) {
  Handle ds = open_dataset(loc, name, label);
  FloatArray out;
  out.dims = shape_of(ds);
  const std::size_t n = count_of(out.dims);
  Handle type(H5Dget_type(ds.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  std::string dtype;
  const bool tagged = read_attr(ds, "dtype", dtype);
  if (cls == H5T_FLOAT) {
    if (tagged && dtype != "f32")
      throw InputError("dataset is floating point but tagged dtype '" + dtype + "'", label);
    out.data.resize(n);
    if (n && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data()) < 0)
      throw InputError("cannot read dataset", label);
    return out;
  }
  if (cls != H5T_INTEGER || H5Tget_size(type.get()) != 2 || H5Tget_sign(type.get()) != H5T_SGN_NONE)
    throw InputError("unsupported tensor type (expected float32, or uint16 tagged f16/bf16)", label);
  if (!tagged) throw InputError("uint16 tensor without a dtype attribute (f16 or bf16)", label);
  if (dtype == "f16") out.stored = FloatStorage::f16;
  else if (dtype == "bf16") out.stored = FloatStorage::bf16;
  else throw InputError("unknown dtype '" + dtype + "' (expected f16 or bf16)", label);
  std::vector<std::uint16_t> bits(n);
  if (n && H5Dread(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()) < 0)
    throw InputError("cannot read dataset", label);
  out.data.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    out.data[i] = out.stored == FloatStorage::f16 ? num::f16_to_f32(bits[i]) : num::bf16_to_f32(bits[i]);
  return out;
}

void write_ints(const Handle& loc, const std::string& name, const std::vector<std::int32_t>& v) {
  Handle ds = create_dataset(loc, name, H5T_STD_I32LE, {static_cast<hsize_t>(v.size())});
  if (!v.empty() && H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}

std::vector<std::int32_t> read_ints(const Handle& loc, const std::string& name, const std::string& label) {
  Handle ds = open_dataset(loc, name, label);
  Handle type(H5Dget_type(ds.get()));
  if (H5Tget_class(type.get()) != H5T_INTEGER) throw InputError("dataset is not integral", label);
  std::vector<std::int32_t> out(count_of(shape_of(ds)));
  if (!out.empty() && H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw InputError("cannot read dataset", label);
  return out;
}

void write_bytes(const Handle& loc, const std::string& name, const std::string& bytes) {
  Handle ds = create_dataset(loc, name, H5T_STD_U8LE, {static_cast<hsize_t>(bytes.size())});
  if (!bytes.empty() && H5Dwrite(ds.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}

std::string read_bytes(const Handle& loc, const std::string& name, const std::string& label) {
  Handle ds = open_dataset(loc, name, label);
  Handle type(H5Dget_type(ds.get()));
  const auto dims = shape_of(ds);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 || dims.size() != 1)
    throw InputError("expected a 1-D uint8 dataset", label);
  std::string bytes(dims[0], '\0');
  if (!bytes.empty() && H5Dread(ds.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw InputError("cannot read dataset", label);
  return bytes;
}

void write_attr_int(const Handle& loc, const std::string& name, std::int64_t value) {
  write_attr_scalar(loc, name, H5T_NATIVE_INT64, value);
}

void write_attr_double(const Handle& loc, const std::string& name, double value) {
  write_attr_scalar(loc, name, H5T_NATIVE_DOUBLE, value);
}

bool read_attr_int(const Handle& loc, const std::string& name, std::int64_t& value,
                   const std::string& label) {
  double d;
  if (!read_attr_number(loc, name, d, label)) return false;
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
    throw InputError("attribute '" + name + "' is not an integer", label);
  value = static_cast<std::int64_t>(d);
  return true;
}

bool read_attr_double(const Handle& loc, const std::string& name, double& value,
                      const std::string& label) {
  return read_attr_number(loc, name, value, label);
}

}  // namespace icmlkit::io::h5
