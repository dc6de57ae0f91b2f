#include "io/hdf5.hpp"

#include "io/atomic_file.hpp"

#include <filesystem>

#include "util/error.hpp"

namespace icmlkit::io::h5 {

void Handle::reset() noexcept {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void quiet_errors() noexcept { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void close_file(Handle& file, const std::string& label) {
  const hid_t id = file.get();
  if (id < 0) return;
  H5Fflush(id, H5F_SCOPE_GLOBAL);
  file.release();
  if (H5Fclose(id) < 0) throw RuntimeError("cannot finish writing HDF5 file (disk full?)", label);
}

Handle open_file(const std::string& path) {
  quiet_errors();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw unreadable_file(path);
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError("not an HDF5 file", path);
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f) throw InputError("cannot open HDF5 file (corrupted?)", path);
  return f;
}

Handle create_file(const std::string& path) {
  quiet_errors();
  // The 1.8+ file format: superblock v2 and object headers v2 carry checksums, so a corrupted
  // header is reported as an error on reading instead of being followed (HDF5 1.8 and later
  // read these files; h5py does).
  // No modification times in the root group's header either: the same content gives the same bytes.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS)), fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110);
  H5Pset_obj_track_times(fcpl.get(), 0);
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!f) throw RuntimeError("cannot create HDF5 file", target_of_temp(path));
  return f;
}

Handle open_group(const Handle& file, const std::string& group, const std::string& file_label) {
  if (group != "/" && H5Lexists(file.get(), group.c_str(), H5P_DEFAULT) <= 0)
    throw InputError("no such group", file_label + ":" + group);
  Handle g(H5Gopen2(file.get(), group.c_str(), H5P_DEFAULT));
  if (!g) throw InputError("not a group, or a corrupted one", file_label + ":" + group);
  return g;
}

Handle create_group(const Handle& file, const std::string& group) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_obj_track_times(gcpl.get(), 0);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(file.get(), group.c_str(), lcpl.get(), gcpl.get(), H5P_DEFAULT));
  if (!g) throw RuntimeError("cannot create HDF5 group", group);
  return g;
}

Handle create_dataset(const Handle& loc, const std::string& name, hid_t file_type, const std::vector<hsize_t>& dims) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), 0);
  Handle ds(H5Dcreate2(loc.get(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!ds) throw RuntimeError("cannot create HDF5 dataset", name);
  return ds;
}

namespace {

herr_t collect_name(hid_t loc, const char* name, const H5L_info_t*, void* data) {
  H5O_info_t info;
  if (H5Oget_info_by_name2(loc, name, &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> dataset_names(const Handle& group) {
  std::vector<std::string> names;
  H5_index_t index = H5_INDEX_NAME;
  Handle gcpl(H5Gget_create_plist(group.get()));
  unsigned flags = 0;
  if (gcpl && H5Pget_link_creation_order(gcpl.get(), &flags) >= 0 && (flags & H5P_CRT_ORDER_INDEXED))
    index = H5_INDEX_CRT_ORDER;
  H5Literate(group.get(), index, H5_ITER_INC, nullptr, collect_name, &names);
  return names;
}

Column read_column(const Handle& group, const std::string& name, const std::string& label) {
  Handle ds(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT));
  if (!ds) throw InputError("cannot open dataset (corrupted?)", label);
  Handle space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 1) throw InputError("a table column must be a 1-D dataset, this one has rank " + std::to_string(rank), label);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  Handle type(H5Dget_type(ds.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    std::vector<double> v(n);
    if (n && H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
      throw InputError("cannot read numeric dataset", label);
    return v;
  }
  if (cls == H5T_STRING) {
    std::vector<std::string> out(n);
    if (H5Tis_variable_str(type.get()) > 0) {
      Handle mem(H5Tcopy(H5T_C_S1));
      H5Tset_size(mem.get(), H5T_VARIABLE);
      H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
      std::vector<char*> raw(n, nullptr);
      if (n && H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
        throw InputError("cannot read string dataset", label);
      for (hsize_t i = 0; i < n; ++i) out[i] = raw[i] ? raw[i] : "";
      if (n) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, raw.data());
    } else {
      const std::size_t size = H5Tget_size(type.get());
      std::vector<char> buf(n * size);
      if (n && H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
        throw InputError("cannot read string dataset", label);
      for (hsize_t i = 0; i < n; ++i) {
        const char* p = buf.data() + i * size;
        std::size_t len = 0;
        while (len < size && p[len] != '\0') ++len;
        out[i].assign(p, len);
      }
    }
    return out;
  }
  throw InputError("unsupported dataset type (want numbers or strings)", label);
}

void write_doubles(const Handle& loc, const std::string& name, const std::vector<double>& v) {
  const hsize_t n = v.size();
  Handle ds = create_dataset(loc, name, H5T_IEEE_F64LE, {n});
  if (n && H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}

namespace {
Handle utf8_vlen_type() {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}
}  // namespace

void write_strings(const Handle& loc, const std::string& name, const std::vector<std::string>& v) {
  const hsize_t n = v.size();
  Handle type = utf8_vlen_type();
  Handle ds = create_dataset(loc, name, type.get(), {n});
  std::vector<const char*> ptrs(n);
  for (hsize_t i = 0; i < n; ++i) ptrs[i] = v[i].c_str();
  if (n && H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}

void write_attr(const Handle& loc, const std::string& name, const std::string& value) {
  if (H5Aexists(loc.get(), name.c_str()) > 0) H5Adelete(loc.get(), name.c_str());
  Handle space(H5Screate(H5S_SCALAR));
  // A fixed-length string: its bytes live in the attribute message, inside the checksummed
  // object header.  (A variable-length string would live in the global heap, which has no
  // checksum: libhdf5 follows a corrupted heap entry into a crash.)
  std::string buf = value;
  if (buf.empty()) buf.push_back('\0');  // HDF5 strings are at least one byte
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), buf.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle a(H5Acreate2(loc.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), type.get(), buf.data()) < 0) throw RuntimeError("cannot write HDF5 attribute", name);
}

bool read_attr(const Handle& loc, const std::string& name, std::string& value) {
  if (H5Aexists(loc.get(), name.c_str()) <= 0) return false;
  Handle a(H5Aopen(loc.get(), name.c_str(), H5P_DEFAULT));
  if (!a) return false;
  Handle space(H5Aget_space(a.get()));
  if (!space || H5Sget_simple_extent_npoints(space.get()) != 1) return false;  // only scalar strings
  Handle type(H5Aget_type(a.get()));
  if (H5Tget_class(type.get()) != H5T_STRING) return false;
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem = utf8_vlen_type();
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) return false;
    value = p ? p : "";
    H5free_memory(p);
  } else {  // fixed length: null-padded or null-terminated
    std::string buf(H5Tget_size(type.get()), '\0');
    if (H5Aread(a.get(), type.get(), buf.data()) < 0) return false;
    value.assign(buf.c_str());
  }
  return true;
}

void write_provenance(const Handle& file, const Provenance& prov) {
  write_attr(file, "tool", prov.tool);
  write_attr(file, "version", prov.version);
  write_attr(file, "command", prov.command);
  write_attr(file, "seed", std::to_string(prov.seed));
  write_attr(file, "inputs", prov.to_json()["inputs"].dump());
  write_attr(file, "meta", prov.to_json().dump());
}

}  // namespace icmlkit::io::h5
