// The allreduce selector fed by the calibrated cost model (`lowcomm simulate tune`): every
// candidate algorithm simulated at every size on a (calibrated) platform, the fastest kept per
// size, and the winners turned into a comm::TunedTable the communicator then follows.
#pragma once

#include <cstddef>
#include <vector>

#include "lowcomm/comm/tuned_table.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

struct TuneRow {
  size_t bytes = 0;
  std::vector<double> time_s;  // per candidate, in the order given
  comm::Algo best = comm::Algo::ring;
};

struct TuneResult {
  std::vector<comm::Algo> candidates;  // those of the asked that can run the platform's shape
  std::vector<TuneRow> rows;           // per size, increasing
  comm::TunedTable table;              // one shape: (world, ppn)
};

// Simulates the f32 allreduce of each size (rounded to whole elements) with each of `algos` that
// can run on p's shape (hier and rails need several processes per node and several nodes), and
// keeps the fastest. Between two sizes whose winners differ the boundary is their geometric
// mean; the largest size's winner takes every larger buffer. ConfigError for no size, no
// candidate, or an algorithm that is not a network allreduce.
TuneResult tune(const PlatformSpec& p, std::vector<size_t> sizes, const std::vector<comm::Algo>& algos,
                size_t segment_bytes);

}  // namespace lowcomm::sim
