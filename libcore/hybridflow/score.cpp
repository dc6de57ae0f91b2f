#include "hybridflow/score.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "util/error.hpp"

namespace icmlkit::hybridflow {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// The last match of `re` in `text`, group `g`.
std::optional<std::string> last_match(const std::string& text, const std::regex& re, int g) {
  std::optional<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) out = (*it)[g].str();
  return out;
}

}  // namespace

std::optional<char> answer_letter(const std::string& text) {
  static const std::regex stated(R"((?:answer|option|choice)\s*(?:is|:)?\s*\(?\s*([A-J])\b)", std::regex::icase);
  static const std::regex paren(R"(\(([A-J])\))");
  static const std::regex bare(R"((?:^|[^A-Za-z0-9])([A-J])(?=[.):]|\s*$|\s))");
  for (const auto* re : {&stated, &paren, &bare})
    if (auto m = last_match(text, *re, 1)) return static_cast<char>(std::toupper(static_cast<unsigned char>((*m)[0])));
  return std::nullopt;
}

std::optional<long long> answer_integer(const std::string& text) {
  static const std::regex boxed(R"(\\boxed\{\s*(-?[0-9][0-9,]*)\s*\})");
  static const std::regex number(R"((-?[0-9]{1,3}(?:,[0-9]{3})+|-?[0-9]+))");
  auto m = last_match(text, boxed, 1);
  if (!m) m = last_match(text, number, 1);
  if (!m) return std::nullopt;
  std::string digits;
  for (char c : *m)
    if (c != ',') digits += c;
  try {
    return std::stoll(digits);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> answer_solution(const std::string& text) {
  static const std::regex tag(R"(<solution>([\s\S]*?)</solution>)", std::regex::icase);
  auto m = last_match(text, tag, 1);
  if (!m) return std::nullopt;
  std::string out, item;
  const std::string body = *m + ",";
  bool first = true;
  for (char c : body) {
    if (c != ',') {
      item += c;
      continue;
    }
    out += (first ? "" : ",") + lower(trim(item));
    first = false;
    item.clear();
  }
  return out;
}

std::optional<bool> score_answer(const std::string& kind, const std::string& gold, const std::string& answer) {
  if (trim(gold).empty()) return std::nullopt;
  if (kind == "letter") {
    const auto g = answer_letter(gold), a = answer_letter(answer);
    return g && a && *g == *a;
  }
  if (kind == "integer") {
    const auto g = answer_integer(gold), a = answer_integer(answer);
    return g && a && *g == *a;
  }
  if (kind == "solution") {
    auto g = answer_solution(gold);
    if (!g) g = answer_solution("<solution>" + gold + "</solution>");
    const auto a = answer_solution(answer);
    return g && a && *g == *a;
  }
  if (kind == "exact") return lower(trim(gold)) == lower(trim(answer));
  throw UsageError("unknown scorer '" + kind + "': one of letter, integer, solution, exact");
}

bool judge_verdict(const std::string& reply) {
  const std::string t = lower(reply);
  return t.find("true") != std::string::npos && t.find("false") == std::string::npos;
}

std::string judge_prompt(const std::string& problem, const std::string& gold, const std::string& answer) {
  return "You grade answers. Compare the student's final answer with the reference answer.\n\nProblem:\n" + problem +
         "\n\nReference answer:\n" + gold + "\n\nStudent's answer:\n" + answer +
         "\n\nReply with the single word True if the student's final answer matches the reference answer, otherwise "
         "with the single word False.";
}

}  // namespace icmlkit::hybridflow
