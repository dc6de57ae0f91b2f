#include "io/provenance.hpp"

#include "util/build_info_access.hpp"

namespace icmlkit::io {

void Provenance::add_input(const std::string& path, const std::string& sha256) {
  inputs.push_back({path, sha256});
}

nlohmann::json Provenance::to_json() const {
  nlohmann::json j;
  j["tool"] = tool;
  j["version"] = version;
  j["command"] = command;
  j["seed"] = seed;
  j["build"] = build_summary();
  nlohmann::json in = nlohmann::json::array();
  for (const auto& r : inputs) in.push_back({{"path", r.path}, {"sha256", r.sha256}});
  j["inputs"] = in;
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return j;
}

std::string shell_join(int argc, const char* const* argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool safe = !a.empty() && a.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") == std::string::npos;
    if (i) out += ' ';
    if (safe) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) {
        if (c == '\'') out += "'\\''";
        else out += c;
      }
      out += '\'';
    }
  }
  return out;
}

}  // namespace icmlkit::io
