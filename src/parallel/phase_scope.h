// Restores a communicator's traffic label when a scope ends (private to lowcomm_parallel): the
// bytes sent inside the scope count under `phase` in the traffic meter.
#pragma once

#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

class PhaseScope {
 public:
  PhaseScope(comm::Communicator& c, const std::string& phase) : c_(c), saved_(c.phase()) { c_.setPhase(phase); }
  ~PhaseScope() { c_.setPhase(saved_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  comm::Communicator& c_;
  std::string saved_;
};

}  // namespace lowcomm::parallel
