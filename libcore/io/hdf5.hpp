// Thin RAII layer over the HDF5 C API: files, groups, 1-D columns, string attributes.
//
// Every failure becomes an InputError/RuntimeError naming the file and dataset path; the
// HDF5 library's own error-stack printing is switched off.
#pragma once

#include <hdf5.h>

#include <string>
#include <variant>
#include <vector>

#include "io/provenance.hpp"

namespace icmlkit::io::h5 {

/// Owns one HDF5 identifier and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) { reset(); id_ = o.id_; o.id_ = H5I_INVALID_HID; }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  /// The raw identifier.
  hid_t get() const noexcept { return id_; }
  /// Whether the identifier is valid.
  explicit operator bool() const noexcept { return id_ >= 0; }
  /// Closes the identifier now.
  void reset() noexcept;
  /// Gives up ownership without closing.
  void release() noexcept { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// Turns off HDF5's automatic error printing (idempotent, called by every open).
void quiet_errors() noexcept;

/// Opens an existing file read-only.  Throws InputError when missing or not HDF5.
Handle open_file(const std::string& path);
/// Flushes and closes a file being written, checking the status (the flush is where a full
/// disk shows).  Throws RuntimeError naming `label`.
void close_file(Handle& file, const std::string& label);
/// Creates (truncates) a file for writing, in HDF5's 1.8+ format (superblock and object headers
/// checksummed, so a corrupted header is an error on reading, not a crash).  Throws RuntimeError.
Handle create_file(const std::string& path);
/// Opens a group ("/" for the root).  Throws InputError naming file and group.
Handle open_group(const Handle& file, const std::string& group, const std::string& file_label);
/// Creates a group that tracks link creation order (and no modification times).
Handle create_group(const Handle& file, const std::string& group);
/// Creates dataset `name` (intermediate groups too) of HDF5 type `file_type` and shape `dims`
/// under `loc`, recording no object times, so files written from the same inputs are
/// byte-identical (HDF5 stamps each object with its creation time by default).  Every writer
/// creates its datasets here.  Throws RuntimeError naming `name`.
Handle create_dataset(const Handle& loc, const std::string& name, hid_t file_type, const std::vector<hsize_t>& dims);

/// A 1-D dataset read as numbers or as strings.
using Column = std::variant<std::vector<double>, std::vector<std::string>>;

/// Names of the datasets directly under `group`, in creation order when tracked, else by name.
std::vector<std::string> dataset_names(const Handle& group);
/// Reads a 1-D numeric or string dataset.  `label` names it in errors ("f.h5:/runs/loss").
Column read_column(const Handle& group, const std::string& name, const std::string& label);
/// Writes a 1-D float64 dataset.
void write_doubles(const Handle& loc, const std::string& name, const std::vector<double>& v);
/// Writes a 1-D variable-length UTF-8 string dataset.
void write_strings(const Handle& loc, const std::string& name, const std::vector<std::string>& v);
/// Writes (replaces) a scalar UTF-8 string attribute on `loc`, fixed-length and null-padded (its
/// bytes inside the checksummed object header; h5py reads it as bytes).
void write_attr(const Handle& loc, const std::string& name, const std::string& value);
/// Reads a scalar string attribute, variable- or fixed-length; returns false when it is absent.
bool read_attr(const Handle& loc, const std::string& name, std::string& value);
/// Writes provenance as root attributes: tool, version, command, seed, inputs (JSON), meta (JSON).
void write_provenance(const Handle& file, const Provenance& prov);

}  // namespace icmlkit::io::h5
