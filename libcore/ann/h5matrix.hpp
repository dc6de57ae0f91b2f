// 2-D numeric HDF5 datasets (row-major) for vector files and saved indexes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/hdf5.hpp"

namespace icmlkit::ann {

/// Shape of a 2-D dataset.
struct Shape2 {
  std::size_t rows = 0, cols = 0;
};

/// Whether `loc` has a link named `name`.
bool h5_exists(const io::h5::Handle& loc, const std::string& name);
/// Reads a 2-D dataset converted to float32 (1-D datasets are read as [n, 1]).  Throws
/// InputError naming `label` when absent, of another rank, or unreadable.
std::vector<float> h5_read_floats(const io::h5::Handle& loc, const std::string& name, const std::string& label, Shape2& shape);
/// Reads a 1-D or 2-D dataset converted to int64.  Throws InputError naming `label`.
std::vector<std::int64_t> h5_read_ints(const io::h5::Handle& loc, const std::string& name, const std::string& label, Shape2& shape);
/// Writes a 2-D float32 dataset.  Throws RuntimeError.
void h5_write_floats(const io::h5::Handle& loc, const std::string& name, const std::vector<float>& v, Shape2 shape);
/// Writes a 2-D int32 dataset (cols = 1 for a vector).  Throws RuntimeError.
void h5_write_ints(const io::h5::Handle& loc, const std::string& name, const std::vector<std::int32_t>& v, Shape2 shape);

}  // namespace icmlkit::ann
