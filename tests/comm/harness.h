// Ranks as threads: one Communicator per thread over a shared MemoryStore, real Gloo TCP pairs
// on 127.0.0.1.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::test {

using CommPtr = std::shared_ptr<comm::Communicator>;

// Creates `n` connected communicators (rank i at index i).
std::vector<CommPtr> makeComms(int n, const comm::CommOptions& opts = {});
// The same with options of their own per rank (e.g. each rank's site).
std::vector<CommPtr> makeComms(int n, const std::function<comm::CommOptions(int)>& optsOf);

// Runs fn(rank) on n threads; rethrows the first exception after all threads finish.
void onRanks(int n, const std::function<void(int)>& fn);

}  // namespace lowcomm::test
