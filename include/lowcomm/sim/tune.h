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
  comm::Algo fastest = comm::Algo::ring;  // the simulated fastest
  comm::Algo fixed = comm::Algo::ring;    // the fixed table's choice (comm::autoAllreduce)
  comm::Algo best = comm::Algo::ring;     // chosen: fastest, or fixed when within the margin
};

struct TuneResult {
  std::vector<comm::Algo> candidates;  // those of the asked that can run the platform's shape
  std::vector<TuneRow> rows;           // per size, increasing
  comm::TunedTable table;              // one shape: (world, ppn); no rules on a platform of sites
};

// Simulates the f32 allreduce of each size (rounded to whole elements) with each of `algos` that
// can run on p's shape (hier and rails need several processes per node and several nodes), and
// keeps the fastest, unless the fixed table's choice (comm::autoAllreduce, simulated as well) is
// within `margin` of it (a fraction: 0.15 keeps the fixed choice unless another is predicted 15 %
// faster; the model's own error on the measured rows is the guide). Between two sizes whose
// winners differ the boundary is their geometric mean; the largest size's winner takes every
// larger buffer. ConfigError for no size, no candidate, a negative margin, an algorithm that
// is not a network allreduce, or (p has call_overhead_s) a candidate without a host time per call.
// On a platform of sites the fixed choice is `sites` (comm::autoAllreduce with the sites) and the
// rows are simulated as everywhere, but the table gets no rules: across sites the communicator
// runs `sites` before it consults a table (selector.h), whose rules cannot name sites.
TuneResult tune(const PlatformSpec& p, std::vector<size_t> sizes, const std::vector<comm::Algo>& algos,
                size_t segment_bytes, double margin = 0);

}  // namespace lowcomm::sim
