// Every rank must run the same job: the trainer compares the ranks' resolved configurations,
// data set sizes and world view at start, so a rank started with another config or data set is
// an error naming it instead of a hang or a silently different run.
#pragma once

#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

// `description` is this rank's job as "key = value" lines (jobDescription). Collective: one
// 8-byte hash per rank; only when the hashes differ are the descriptions exchanged. Throws
// MismatchError on every rank naming each rank that differs from rank 0 and the keys that differ
// (with both values).
void checkSameJob(comm::Communicator& world, const std::string& description);

// The resolved config (toToml) as "section.key = value" lines, except the keys that may differ
// per host (comm.iface, comm.address, data.dir, checkpoint.dir), plus the data set sizes and the
// world size.
std::string jobDescription(const std::string& resolved_toml, int64_t train_size, int64_t test_size, int world);

}  // namespace lowcomm::train
