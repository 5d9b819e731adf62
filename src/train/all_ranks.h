// A check that may fail on some ranks only, made a verdict of all (private to lowcomm_train).
#pragma once

#include <exception>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

// Collective over `world`: when any rank's `mine` holds an exception, every rank throws — that
// rank its own exception, the others ConfigError "<what>: rank R failed (its error says why)" —
// so no rank goes on into a collective that another has left.
void throwIfAnyRankFailed(comm::Communicator& world, std::exception_ptr mine, const std::string& what);

}  // namespace lowcomm::train
