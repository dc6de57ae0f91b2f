#include "unlearn/run.hpp"

#include "util/error.hpp"

namespace icmlkit::unlearn {

const char* hvp_mode_name(HvpMode m) noexcept {
  switch (m) {
    case HvpMode::fisher: return "fisher";
    case HvpMode::ggn: return "ggn";
    case HvpMode::exact: return "exact";
  }
  return "fisher";
}

HvpMode parse_hvp_mode(const std::string& name) {
  for (HvpMode m : {HvpMode::fisher, HvpMode::ggn, HvpMode::exact})
    if (name == hvp_mode_name(m)) return m;
  throw UsageError("unknown curvature product '" + name + "' (fisher, ggn or exact)", "--hvp");
}

}  // namespace icmlkit::unlearn
