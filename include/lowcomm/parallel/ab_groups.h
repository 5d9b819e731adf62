// AB-training groups and sync modes (AB_TRAINING.md, "Groups" and "Sync modes").
#pragma once

#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/low_rank.h"

namespace lowcomm::parallel {

// This rank's place in the AB group layout.
//  - The world is cut into `groups` groups of contiguous ranks: group_size <= 0 (config -1) means
//    one global group, otherwise max(1, world / group_size) groups; the world % groups leftover
//    ranks go one each to the first groups.
//  - The first a_groups = groups / 2 groups train A, the others train B (one group: it trains B).
//    With all_b every group trains B (sync mode only-b).
struct AbGroups {
  int group = 0;               // this rank's group
  int groups = 1;
  int a_groups = 0;
  bool trains_a = false;
  std::vector<int> members;    // world ranks of this rank's group, ascending
  std::vector<int> group_of;   // per world rank
  std::vector<bool> a_rank;    // per world rank: trains A
};

// Throws ConfigError naming ab.group_size for 0 (a size >= world gives one group); lowcomm::Error
// for world < 1 or a rank outside [0, world).
AbGroups formGroups(int world, int rank, int group_size, bool all_b);

enum class SyncMode { full, with_stale, only_learned, only_b };
SyncMode parseSyncMode(const std::string& name);  // ConfigError naming ab.sync_mode
const char* syncModeName(SyncMode m);

// The periodic AB sync, collective over `world`; leaves `model` merged (full-rank) and identical
// on every rank. Per factorised layer:
//  - full:         W = mean over all ranks of A_r B_r;
//  - with-stale:   W = (mean_r A_r)(mean_r B_r);
//  - only-learned: W = (mean of A over the ranks training A)(mean of B over those training B);
//                  a factor nobody trained is identical everywhere and kept as it is;
//  - only-b:       W = A (mean_r B_r), A being untrained and identical everywhere.
// Every other parameter (1-D, always-full-rank layers) and floating-point buffer is averaged over
// all ranks. Throws lowcomm::Error if the model is not factorised.
void abSync(comm::Communicator& world, nn::LowRankModel& model, const AbGroups& groups, SyncMode mode);

}  // namespace lowcomm::parallel
