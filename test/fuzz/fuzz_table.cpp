// libFuzzer harness: the CSV/TSV and JSON / JSON Lines table readers (every table a user gives
// infolaw-fit, mixlaw-fit, the rank and smc tools) on arbitrary text.  The first byte picks the
// form (CSV with or without a header, TSV, JSON, JSON Lines); the rest is the text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/table.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace icmlkit;
  if (size == 0) return 0;
  const int form = data[0] % 5;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    io::Table t;
    if (form < 3) {
      io::TableReadOptions o;
      o.header = form != 1;
      o.delimiter = form == 2 ? '\t' : ',';
      t = io::Table::parse_csv(text, "fuzz.csv", o);
    } else {
      t = io::Table::parse_json(text, "fuzz.json", form == 4);
    }
    // what the tools do next: look at every column as numbers
    for (std::size_t c = 0; c < t.cols(); ++c) (void)t.is_numeric(t.names()[c]);
  } catch (const Error&) {
  }
  return 0;
}
