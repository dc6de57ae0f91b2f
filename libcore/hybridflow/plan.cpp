#include "hybridflow/plan.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "util/error.hpp"

namespace icmlkit::hybridflow {

namespace {

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A whole-string base-10 integer (blanks around it allowed), like Python's int().
bool parse_int(std::string_view s, int& out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string join_ids(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int> all_before(int id) {
  std::vector<int> v;
  for (int i = 1; i < id; ++i) v.push_back(i);
  return v;
}

}  // namespace

std::map<std::string, std::string> tag_attributes(std::string_view body) {
  std::map<std::string, std::string> attrs;
  std::size_t i = 0;
  while (i < body.size()) {
    // \w+=" ... " (non-greedy): find the next word followed by ="
    if (!is_word_char(body[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < body.size() && is_word_char(body[j])) ++j;
    if (j + 1 < body.size() && body[j] == '=' && body[j + 1] == '"') {
      const std::size_t close = body.find('"', j + 2);
      if (close == std::string_view::npos) break;
      attrs[std::string(body.substr(i, j - i))] = std::string(body.substr(j + 2, close - j - 2));
      i = close + 1;
    } else {
      i = j;
    }
  }
  return attrs;
}

std::vector<Step> PlanParser::feed(std::string_view chunk) {
  buffer_.append(chunk);
  std::vector<Step> out;
  for (;;) {
    // `<Step\s+(.*?)/>`: "<Step", at least one blank, then the shortest body up to "/>".
    std::size_t at = 0, open = std::string::npos;
    while ((at = buffer_.find("<Step", at)) != std::string::npos) {
      if (at + 5 < buffer_.size() && std::isspace(static_cast<unsigned char>(buffer_[at + 5]))) {
        open = at;
        break;
      }
      if (at + 5 >= buffer_.size()) break;  // "<Step" at the end: wait for more
      at += 5;
    }
    if (open == std::string::npos) {
      if (buffer_.find("</Plan>") != std::string::npos) {
        closed_ = true;
        buffer_.clear();
      }
      // Keep only a tail that may begin a tag.
      const std::size_t keep = buffer_.rfind('<');
      buffer_ = keep == std::string::npos ? std::string() : buffer_.substr(keep);
      return out;
    }
    const std::size_t end = buffer_.find("/>", open + 6);
    if (end == std::string::npos) {
      buffer_.erase(0, open);
      return out;
    }
    if (buffer_.substr(0, open).find("</Plan>") != std::string::npos) closed_ = true;
    const std::string xml = buffer_.substr(open, end + 2 - open);
    std::string body = buffer_.substr(open + 5, end - open - 5);
    buffer_.erase(0, end + 2);
    auto attrs = tag_attributes(body);

    Step s;
    s.xml = xml;
    if (!attrs.count("ID") || !parse_int(attrs["ID"], s.id) || s.id < 1) {
      warnings_.push_back(fmt::format("dropped a step without a positive integer ID: {}", xml.substr(0, 80)));
      continue;
    }
    if (std::any_of(steps_.begin(), steps_.end(), [&](const Step& t) { return t.id == s.id; })) {
      warnings_.push_back(fmt::format("dropped a second step with ID {}", s.id));
      continue;
    }
    s.task = attrs.count("Task") ? attrs["Task"] : std::string();
    if (!attrs.count("Difficulty") || !parse_int(attrs["Difficulty"], s.difficulty)) s.difficulty = 5;
    if (attrs.count("Token") && !parse_int(attrs["Token"], s.token)) s.token = -1;
    const std::string rely = attrs.count("Rely") ? attrs["Rely"] : std::string();
    if (options_.chain) {
      s.rely = options_.single_rely ? (s.id > 1 ? std::vector<int>{s.id - 1} : std::vector<int>{}) : all_before(s.id);
    } else if (s.id != 1 && !rely.empty()) {
      std::size_t pos = 0;
      bool bad = false;
      while (pos <= rely.size()) {
        std::size_t comma = rely.find(',', pos);
        if (comma == std::string::npos) comma = rely.size();
        int r = 0;
        if (!parse_int(std::string_view(rely).substr(pos, comma - pos), r) || r >= s.id) bad = true;
        else if (std::find(s.rely.begin(), s.rely.end(), r) == s.rely.end()) s.rely.push_back(r);
        pos = comma + 1;
      }
      if (bad) s.rely = all_before(s.id);
    }
    if (s.id == 1) s.rely.clear();
    steps_.push_back(s);
    out.push_back(std::move(s));
  }
}

std::vector<int> PlanParser::finish() {
  std::set<int> ids;
  for (const auto& s : steps_) ids.insert(s.id);
  std::vector<int> changed;
  for (auto& s : steps_) {
    std::vector<int> kept;
    for (int r : s.rely)
      if (ids.count(r)) kept.push_back(r);
    if (kept.size() != s.rely.size()) {
      warnings_.push_back(fmt::format("step {} relied on steps that never arrived; its Rely is now '{}'", s.id, join_ids(kept)));
      s.rely = kept;
      changed.push_back(s.id);
    }
  }
  return changed;
}

std::vector<Step> parse_plan(std::string_view text, const SanitizeOptions& options, const std::string& where,
                             std::vector<std::string>* warnings) {
  PlanParser p(options);
  p.feed(text);
  p.finish();
  if (p.steps().empty()) throw InputError("the plan holds no <Step .../> with an ID", where);
  if (warnings) *warnings = p.warnings();
  return p.steps();
}

std::string plan_xml(const std::vector<Step>& steps) {
  std::string s = "<Plan>\n";
  for (const auto& st : steps) {
    s += fmt::format("<Step ID=\"{}\" Task=\"{}\" Difficulty=\"{}\"", st.id, st.task, st.difficulty);
    if (st.token >= 0) s += fmt::format(" Token=\"{}\"", st.token);
    s += fmt::format(" Rely=\"{}\"/>\n", join_ids(st.rely));
  }
  return s + "</Plan>";
}

}  // namespace icmlkit::hybridflow
