// io/: Table (CSV/JSON/HDF5), atomic writes, SHA-256, row filters.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "io/table_filter.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using io::Table;
namespace fs = std::filesystem;

namespace {
// A file in a per-test directory (ctest runs test cases in parallel processes).
fs::path scratch(const std::string& name, const std::string& test = "misc") {
  const fs::path dir = fs::temp_directory_path() / ("icmlkit_unit_io_" + std::to_string(::getpid())) / test;
  fs::create_directories(dir);
  return dir / name;
}
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}
}  // namespace

TEST_CASE("io: SHA-256 matches the FIPS 180-2 test vectors") {
  CHECK(io::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(io::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const auto p = scratch("abc.txt");
  io::write_text(p.string(), "abc");
  CHECK(io::sha256_file(p.string()) == io::sha256_hex("abc"));
}

TEST_CASE("io: CSV with quotes, CRLF, blank lines and a BOM") {
  const std::string text = "\xEF\xBB\xBFname,x,note\r\n\"a,b\",1.5,\"say \"\"hi\"\"\"\r\n\r\nc,2e3,\"multi\nline\"\r\n";
  Table t = Table::parse_csv(text, "t.csv");
  REQUIRE(t.rows() == 2);
  CHECK(t.names() == std::vector<std::string>{"name", "x", "note"});
  CHECK(t.texts("name")[0] == "a,b");
  CHECK(t.texts("note")[0] == "say \"hi\"");
  CHECK(t.texts("note")[1] == "multi\nline");
  CHECK(t.numbers("x") == std::vector<double>{1.5, 2000.0});
  CHECK(t.where(1) == "t.csv, row 2, line 4");
}

TEST_CASE("io: CSV without a header names columns c1..cN") {
  io::TableReadOptions o;
  o.header = false;
  Table t = Table::parse_csv("1,2\n3,4\n", "n.csv", o);
  CHECK(t.names() == std::vector<std::string>{"c1", "c2"});
  CHECK(t.numbers("c2") == std::vector<double>{2, 4});
}

TEST_CASE("io: bad tables give one-line errors naming file, row, line and column") {
  CHECK(message_of([] { Table::parse_csv("a,b\n1,2\n3\n", "r.csv"); }) == "row has 1 fields, expected 2 (r.csv, row 2, line 3)");
  Table t = Table::parse_csv("a,b\n1,2\n3,x\n4,\n", "r.csv");
  CHECK(message_of([&] { t.numbers("b"); }) == "not a number: 'x' in column 'b' (r.csv, row 2, line 3)");
  CHECK(message_of([&] { t.numbers("zz"); }).rfind("missing column 'zz'", 0) == 0);
  Table n = Table::parse_csv("a\nnan\n", "n.csv");
  CHECK(message_of([&] { n.numbers("a"); }) == "non-finite value nan in column 'a' (n.csv, row 1, line 2)");
  Table z = Table::parse_csv("a\n0\n", "z.csv");
  CHECK(message_of([&] { z.numbers("a", io::NumberCheck{true, true}); }) == "value 0 in column 'a' must be > 0 (z.csv, row 1, line 2)");
  CHECK(message_of([] { Table::parse_csv("", "e.csv"); }) == "table is empty (e.csv)");
  CHECK(message_of([] { Table::parse_csv("a,a\n1,2\n", "d.csv"); }) == "duplicate column name 'a' (if the first line is data, not column names, give --no-header) (d.csv, line 1)");
  CHECK(message_of([] { Table::parse_csv("a\n\"open\n", "q.csv"); }) == "unterminated quoted field (q.csv, line 2)");
}

TEST_CASE("io: JSON records, a rows wrapper and JSON Lines") {
  Table a = Table::parse_json(R"([{"n": 1, "s": "x"}, {"n": 2.5, "s": "y"}])", "a.json", false);
  CHECK(a.numbers("n") == std::vector<double>{1, 2.5});
  CHECK(a.texts("s") == std::vector<std::string>{"x", "y"});
  Table b = Table::parse_json(R"({"meta": {}, "rows": [{"n": 3}]})", "b.json", false);
  CHECK(b.rows() == 1);
  Table c = Table::parse_json("{\"meta\": {}}\n{\"n\": 1}\n\n{\"n\": 2}\n", "c.jsonl", true);
  CHECK(c.numbers("n") == std::vector<double>{1, 2});
  CHECK(message_of([] { Table::parse_json("[1,", "m.json", false); }) == "malformed JSON (m.json)");
  Table d = Table::parse_json(R"([{"n": 1}, {"n": "oops"}])", "d.json", false);
  CHECK(message_of([&] { d.numbers("n"); }) == "not a number: 'oops' in column 'n' (d.json, record 2)");
}

TEST_CASE("io: tables round-trip through CSV, JSON, JSON Lines and HDF5 exactly") {
  Table t;
  t.set_column("x", std::vector<double>{0.1, 1e-300, 6.02214076e23});
  t.set_column("name", std::vector<std::string>{"a", "b,c", "d\"e"});
  for (const char* ext : {".csv", ".json", ".jsonl", ".h5"}) {
    const auto p = scratch(std::string("rt") + ext);
    t.write(p.string());
    Table u = Table::read(p.string());
    CAPTURE(ext);
    CHECK(u.names() == t.names());
    CHECK(u.numbers("x") == t.numbers("x"));
    CHECK(u.texts("name") == t.texts("name"));
  }
}

TEST_CASE("io: atomic writes never leave partial files or clobber good ones") {
  const auto p = scratch("keep.json", "atomic");
  io::write_text(p.string(), "good\n");
  {
    io::AtomicFile f(p);
    std::ofstream(f.temp_path()) << "half-writ";
    // no commit: simulates a failure after partial output
  }
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  CHECK(s == "good");
  // No temporary left behind.
  int tmp = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path())) tmp += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(tmp == 0);
  CHECK_THROWS_AS(io::write_text("/nonexistent-dir/x.json", "x"), RuntimeError);
}

// Issue 26: streams (/dev/null, a FIFO) are written into, never replaced, and pass extension
// checks; the device is still a character device afterwards and a FIFO receives the bytes.
TEST_CASE("io: stream outputs are written into, not replaced, whatever their name") {
  CHECK(io::is_stream_path("/dev/null"));
  CHECK(io::is_stream_path("/dev/stdout"));
  CHECK(io::is_stream_path("/dev/fd/1"));
  CHECK_FALSE(io::is_stream_path("-"));
  const auto p = scratch("plain.json", "stream");
  io::write_text(p.string(), "x\n");
  CHECK_FALSE(io::is_stream_path(p.string()));
  CHECK_FALSE(io::is_stream_path((p.parent_path() / "absent.json").string()));
  CHECK_NOTHROW(io::require_output_extension("/dev/null", "-o", {".h5"}, "the model is HDF5"));
  CHECK_NOTHROW(io::require_output_extension("OUT.JSON", "-o", {".json"}, "the result is JSON"));
  CHECK_THROWS_WITH_AS(io::require_output_extension("out.txt", "-o", {".h5", ".hdf5"}, "the index is HDF5"),
                       "the index is HDF5: give a path ending in .h5 or .hdf5", UsageError);
  CHECK_THROWS_AS(io::require_output_extension("-", "-o", {".h5"}, "x"), UsageError);
  CHECK_NOTHROW(io::require_output_extension("-", "-o", {".json"}, "x", true));
  io::write_text("/dev/null", "discarded\n");
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  const auto fifo = p.parent_path() / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(io::is_stream_path(fifo.string()));
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo);
    std::getline(in, got);
  });
  io::write_text(fifo.string(), "through the pipe\n");
  reader.join();
  CHECK(got == "through the pipe");
  CHECK(fs::is_fifo(fifo));
  // Several outputs may name /dev/null.
  CHECK_NOTHROW(io::check_distinct_outputs({{"-o", "/dev/null"}, {"--log", "/dev/null"}}, {}));
  CHECK_THROWS_AS(io::check_distinct_outputs({{"-o", "/dev/stdout"}, {"--log", "/dev/stdout"}}, {}), UsageError);
  CHECK(io::descriptor_path("/dev/stdout") == 1);
  CHECK(io::descriptor_path("/proc/self/fd/2") == 2);
  CHECK(io::descriptor_path("/dev/fd/7") == 7);
  CHECK(io::descriptor_path("/dev/null") == -1);
}

// Issue 26: an unreadable input says the system's reason.
TEST_CASE("io: unreadable inputs name the system's reason") {
  const auto d = scratch("adir", "reason");
  fs::create_directories(d);
  CHECK(std::string(unreadable_file((d.parent_path() / "absent.csv").string()).what()) == "cannot read file: No such file or directory");
  CHECK(std::string(unreadable_file(d.string()).what()) == "cannot read file: Is a directory");
  CHECK_THROWS_WITH_AS(io::Table::read((d.parent_path() / "absent.csv").string()), doctest::Contains("No such file or directory"),
                       InputError);
}

// Truth: the file system itself (a directory made here, one that is not, one made read-only).
TEST_CASE("io: check_output_dir refuses a missing or read-only directory, naming it") {
  const fs::path dir = scratch("out", "outdir");
  fs::create_directories(dir);
  CHECK_NOTHROW(io::check_output_dir((dir / "x.json").string()));
  CHECK_NOTHROW(io::check_output_dir("-"));
  CHECK_NOTHROW(io::check_output_dir(""));
  CHECK_NOTHROW(io::check_output_dir("bare-name.json"));             // the current directory
  CHECK_NOTHROW(io::check_output_dir((dir / "new-hf-dir/").string()));  // a directory to be made: its parent counts
  CHECK(message_of([&] { io::check_output_dir((dir / "nodir" / "x.json").string()); }) ==
        "output directory does not exist (" + (dir / "nodir").string() + ")");
  CHECK_THROWS_AS(io::AtomicFile(dir / "nodir" / "x.json"), RuntimeError);
  CHECK_THROWS_AS(io::check_output_dir((dir / "nodir" / "x.json").string()), RuntimeError);  // exit 1, not 2
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() == 0) {
    MESSAGE("running as root, which may write anywhere: the read-only directory check is not exercised");
  } else {
    CHECK(message_of([&] { io::check_output_dir((dir / "x.json").string()); }) ==
          "output directory is not writable (" + dir.string() + ")");
  }
  fs::permissions(dir, fs::perms::owner_all);
}

// Truth: the paths are built here to name one file in different spellings (relative with and
// without "./", "..", absolute, a symbolic link to the directory), existing or not.
TEST_CASE("io: check_distinct_outputs refuses two outputs or an output and an input naming one file") {
  const fs::path dir = scratch("d", "distinct");
  fs::create_directories(dir / "sub");
  const fs::path link = dir.parent_path() / "distinct-link";
  fs::remove(link);
  fs::create_directory_symlink(dir, link);
  const fs::path here = fs::current_path();
  fs::current_path(dir);
  const std::string in = (dir / "in.csv").string();
  io::write_text(in, "x\n1\n");
  using O = io::NamedOutput;
  CHECK_NOTHROW(io::check_distinct_outputs({{"-o", "a.json"}, {"--samples", "a.h5"}, {"--log", "-"}, {"--x", ""}, {"--y", "-"}}, {in}));
  CHECK(message_of([&] { io::check_distinct_outputs({O{"-o", "new.h5"}, O{"--best", "./new.h5"}}, {}); }) ==
        "-o and --best name the same file; give each output its own path (./new.h5)");
  CHECK_THROWS_AS(io::check_distinct_outputs({O{"-o", "sub/../new.h5"}, O{"--best", (dir / "new.h5").string()}}, {}), UsageError);
  CHECK_THROWS_AS(io::check_distinct_outputs({O{"-o", "x.h5"}, O{"--best", (link / "x.h5").string()}}, {}), UsageError);
  CHECK(message_of([&] { io::check_distinct_outputs({O{"--marginals", "./in.csv"}}, {in}); }) ==
        "--marginals would overwrite the input file; write the output elsewhere (./in.csv)");
  CHECK_NOTHROW(io::check_distinct_outputs({O{"--marginals", "sub/in.csv"}}, {in}));
  fs::current_path(here);
  fs::remove(link);
}

TEST_CASE("io: --where filters and drop_largest") {
  Table t = Table::parse_csv("name,loss\na,3\nb,1\nc,2\nd,5\n", "w.csv");
  CHECK(io::filter_rows(t, {"loss<3"}) == std::vector<std::size_t>{1, 2});
  CHECK(io::filter_rows(t, {"loss>=2", "name!=d"}) == std::vector<std::size_t>{0, 2});
  CHECK(io::filter_rows(t, {"name==b"}) == std::vector<std::size_t>{1});
  CHECK(io::drop_largest(t, "loss", 2) == std::vector<std::size_t>{1, 2});
  CHECK_THROWS_AS(io::filter_rows(t, {"loss"}), UsageError);
  CHECK_THROWS_AS(io::filter_rows(t, {"name<b"}), UsageError);
  CHECK_THROWS_AS(io::drop_largest(t, "loss", 4), UsageError);
}
