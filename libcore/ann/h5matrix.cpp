#include "ann/h5matrix.hpp"

#include <fmt/core.h>

#include "util/error.hpp"

namespace icmlkit::ann {
using io::h5::Handle;

bool h5_exists(const Handle& loc, const std::string& name) {
  return H5Lexists(loc.get(), name.c_str(), H5P_DEFAULT) > 0;
}

namespace {
template <class T>
std::vector<T> read_any(const Handle& loc, const std::string& name, const std::string& label, Shape2& shape, hid_t mem_type) {
  io::h5::quiet_errors();
  if (!h5_exists(loc, name)) throw InputError("missing dataset", label);
  Handle ds(H5Dopen2(loc.get(), name.c_str(), H5P_DEFAULT));
  if (!ds) throw InputError("cannot open dataset (corrupted?)", label);
  Handle space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 1 && rank != 2) throw InputError(fmt::format("expected a 1-D or 2-D dataset, found rank {}", rank), label);
  hsize_t dims[2] = {0, 1};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  Handle type(H5Dget_type(ds.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) throw InputError("dataset is not numeric", label);
  shape.rows = dims[0];
  shape.cols = rank == 2 ? dims[1] : 1;
  std::vector<T> out(shape.rows * shape.cols);
  if (!out.empty() && H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw InputError("cannot read dataset", label);
  return out;
}

template <class T>
void write_any(const Handle& loc, const std::string& name, const std::vector<T>& v, Shape2 shape, hid_t file_type, hid_t mem_type) {
  Handle ds = io::h5::create_dataset(loc, name, file_type, {shape.rows, shape.cols});
  if (!v.empty() && H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw RuntimeError("cannot write dataset", name);
}
}  // namespace

std::vector<float> h5_read_floats(const Handle& loc, const std::string& name, const std::string& label, Shape2& shape) {
  return read_any<float>(loc, name, label, shape, H5T_NATIVE_FLOAT);
}
std::vector<std::int64_t> h5_read_ints(const Handle& loc, const std::string& name, const std::string& label, Shape2& shape) {
  return read_any<std::int64_t>(loc, name, label, shape, H5T_NATIVE_INT64);
}
void h5_write_floats(const Handle& loc, const std::string& name, const std::vector<float>& v, Shape2 shape) {
  write_any(loc, name, v, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT);
}
void h5_write_ints(const Handle& loc, const std::string& name, const std::vector<std::int32_t>& v, Shape2 shape) {
  write_any(loc, name, v, shape, H5T_STD_I32LE, H5T_NATIVE_INT32);
}

}  // namespace icmlkit::ann
