// Which failures a new process can get past (private to lowcomm_launch): the one rule that both
// the restart of a whole job (restarts.cpp) and the replacement of one worker (elastic_host.h)
// apply.
#pragma once

#include <string>

#include "lowcomm/base/exit_status.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {

// Empty when a new process may get past the failure; otherwise why it would fail the same way.
inline std::string whyItWouldRecur(const LaunchReport& r) {
  if (r.signal > 0) return "";  // killed from outside: the OOM killer, an operator, a lost node
  if (r.exit_status > 0 && exitStatusHeals(r.exit_status)) return "";
  if (r.exit_status < 0) return "how it failed is unknown";
  if (r.exit_status == kExitError || !exitStatusName(r.exit_status)) return "its error is of no class known to heal";
  return "a restart would fail the same way";
}

}  // namespace lowcomm::launch
