// HybridFlow plans (arXiv 2512.22137, Sec. 3.1; reference planner/execution.py): the planner's XML
//   <Plan>
//   <Step ID="1" Task="...?" Difficulty="4" Token="50" Rely=""/>
//   <Step ID="2" Task="...?" Difficulty="6" Token="30" Rely="1"/>
//   </Plan>
// parsed incrementally from a token stream, so a step can start while the plan is still arriving,
// and sanitised by the reference's rules (process_xml_buffer).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace icmlkit::hybridflow {

/// One subtask of a plan, after sanitising.
struct Step {
  int id = 0;               ///< the plan's ID (positive integer)
  std::string task;         ///< the question put to the executor
  int difficulty = 5;       ///< planner's estimate 1-9 (1-4 edge, 5-9 cloud at threshold 5); 5 when absent
  int token = -1;           ///< planner's estimated answer length in tokens; -1 when absent
  std::vector<int> rely;    ///< IDs this step depends on (sanitised: all < id), in the plan's order
  std::string xml;          ///< the step's tag as it arrived (for the simulator's planner time)
};

/// How the reference rewrites Rely (config.yaml models.sequential_execution / single_rely).
struct SanitizeOptions {
  bool chain = false;        ///< sequential_execution: Rely = 1..ID-1 (HybridFlow-Chain, no DAG parallelism)
  bool single_rely = false;  ///< with chain: Rely = ID-1 only
};

/// Incremental parser of a streamed plan.  Feed the planner's deltas as they arrive; each complete
/// `<Step .../>` tag is returned once, sanitised:
///  - attributes are read as name="value" pairs (the reference's regexes `<Step\s+(.*?)/>` and
///    `(\w+)="(.*?)"`; no XML entity decoding, as the reference);
///  - ID 1 gets Rely ""; a missing or non-integer Difficulty becomes 5; with `chain`, Rely becomes
///    1..ID-1 (or ID-1 with single_rely); otherwise a Rely entry >= the step's own ID (or one that is
///    not an integer) replaces the whole list by every earlier ID 1..ID-1 (the reference's guard
///    against waiting on the future);
///  - beyond the reference, which would crash or hang: a tag without a positive integer ID, or with
///    an ID already seen, is dropped and counted in warnings().
/// After the stream ends, finish() drops Rely entries naming IDs that never arrived (a truncated
/// plan), recording each in warnings(), so that no step can wait forever.
class PlanParser {
 public:
  explicit PlanParser(SanitizeOptions options = {}) : options_(options) {}
  /// Appends a chunk of the planner's output; returns the steps completed by it, in order.
  std::vector<Step> feed(std::string_view chunk);
  /// Ends the stream.  Returns the IDs whose Rely lost entries that never arrived (their Rely is
  /// updated in steps()).
  std::vector<int> finish();
  /// Every accepted step so far, in arrival order.
  const std::vector<Step>& steps() const noexcept { return steps_; }
  /// Whether "</Plan>" has been seen.
  bool closed() const noexcept { return closed_; }
  /// Problems met (dropped tags, dangling Rely), one line each.
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }

 private:
  SanitizeOptions options_;
  std::string buffer_;
  std::vector<Step> steps_;
  std::vector<std::string> warnings_;
  bool closed_ = false;
};

/// Parses a whole plan text at once (recorded plans): feed + finish.  Throws InputError naming
/// `where` when it holds no step.
std::vector<Step> parse_plan(std::string_view text, const SanitizeOptions& options, const std::string& where,
                             std::vector<std::string>* warnings = nullptr);

/// The plan written back as XML (<Plan>, one <Step .../> per line, </Plan>), attributes in the
/// reference's order (ID Task Difficulty Token Rely; Token omitted when absent).
std::string plan_xml(const std::vector<Step>& steps);

/// The name="value" attributes of one tag body, in order (the reference's `(\w+)="(.*?)"`).
std::map<std::string, std::string> tag_attributes(std::string_view body);

}  // namespace icmlkit::hybridflow
