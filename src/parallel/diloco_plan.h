// Streaming DiLoCo's plan (private to the parallel layer): which parameters form each fragment,
// which member of a replica group carries each parameter across the groups, and after which inner
// step each fragment syncs. Pure functions of sizes and counts, so every rank computes the same.
#pragma once

#include <cstdint>
#include <vector>

namespace lowcomm::parallel {

struct DilocoPlan {
  // Parameter indices of each fragment: contiguous runs in model order (a transformer's blocks
  // stay whole where the sizes allow), ascending, every parameter in exactly one fragment.
  std::vector<std::vector<int>> fragments;
  // Per parameter: the member of its replica group (0..group_size-1) that sends it to the
  // other groups. Inside a fragment the largest parameters go first to the least-loaded member
  // (ties: the lower member), so each member carries about 1/group_size of every fragment.
  std::vector<int> carrier;
};

// `numels`: elements of each parameter. Fragments balance elements: fragment f ends after the
// first parameter at which the running total reaches (f+1)/P of the whole, leaving at least one
// parameter for each later fragment. Needs 1 <= fragments <= numels.size() (ConfigError naming
// diloco.fragments otherwise) and group_size >= 1.
DilocoPlan planFragments(const std::vector<int64_t>& numels, int fragments, int group_size);

// Fragment f of P syncs after inner step s (s = optimizer steps done, s >= 1) when
// s >= offset(f) and (s - offset(f)) is a multiple of `period`, offset(f) = f * period / P
// (integer division; offset(0) = 0, so fragment 0 syncs at period, 2 period, ...). Needs
// 1 <= P <= period.
int64_t fragmentOffset(int f, int fragments, int64_t period);
bool fragmentDue(int64_t steps_done, int f, int fragments, int64_t period);

}  // namespace lowcomm::parallel
