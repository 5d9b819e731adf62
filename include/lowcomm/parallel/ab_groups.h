// AB-training groups and sync modes (docs/ab-training.md, "Groups" and "Sync modes").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/low_rank.h"

namespace lowcomm::parallel {

// group_size values besides a positive size (config ab.group_size; docs/ab-training.md "Groups").
inline constexpr int kGroupHalves = -1;  // the reference's -1: two halves; one global group with only-b
inline constexpr int kGroupNode = -2;    // "node": one group per node (host key); two halves on one node
inline constexpr int kGroupWorld = -3;   // "world": one global group

// This rank's place in the AB group layout.
//  - group_size >= 1: max(1, world / group_size) groups of contiguous ranks; the world % groups
//    leftover ranks go one each to the first groups. kGroupHalves: two such groups (one with
//    all_b, as in the reference); kGroupWorld: one. kGroupNode: group g holds the ranks with
//    node_of[r] == g (nodes numbered 0.. by lowest rank, Communicator::nodeOf), or two halves
//    when every rank is on one node (or node_of is empty).
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

// Throws ConfigError naming ab.group_size for 0 or another negative value (a size >= world gives
// one group); lowcomm::Error for world < 1, a rank outside [0, world) or a node_of that is not
// numbered as nodeOf() numbers nodes.
AbGroups formGroups(int world, int rank, int group_size, bool all_b, const std::vector<int>& node_of = {});
// Regrouping (ab.regroup = "random"): the layout `layout` (formed for any rank: its group_of,
// a_rank and counts) with world rank perm[v] in virtual rank v's place, seen from `rank`.
AbGroups permuteGroups(const AbGroups& layout, const std::vector<int>& perm, int rank);
// The permutation of regrouping number `epoch` (0: identity), the same on every rank and
// platform (mt19937_64 and a Fisher-Yates shuffle of our own, not std::shuffle).
std::vector<int> regroupPermutation(int world, uint64_t seed, int64_t epoch);

// "node", "world", "-1" or the number, for messages and the summary.
std::string groupSizeName(int group_size);

enum class SyncMode { full, with_stale, only_learned, only_b, only_smaller };
SyncMode parseSyncMode(const std::string& name);  // ConfigError naming ab.sync_mode
const char* syncModeName(SyncMode m);
std::vector<std::string> syncModeNames();  // every SyncMode's name

// The periodic AB sync, collective over `world`; leaves `model` merged (full-rank) and identical
// on every rank. Per factorised layer:
//  - full:         W = mean over all ranks of A_r B_r;
//  - with-stale:   W = (mean_r A_r)(mean_r B_r);
//  - only-learned: W = (mean of A over the ranks training A)(mean of B over those training B);
//                  a factor nobody trained is identical everywhere and kept as it is;
//  - only-b:       W = A (mean_r B_r), A being untrained and identical everywhere;
//  - only-smaller: every rank trained the smaller factor of each layer (LowRankModel::trainedOf):
//                  that factor is averaged over all ranks, the other one is identical everywhere.
// Every other parameter (1-D, always-full-rank layers) and floating-point buffer is averaged over
// all ranks. `weights` (one per world rank, summing to 1; empty: equal) turns every mean into a
// weighted one (only-learned: weighted over the ranks that trained the factor, renormalised).
// Throws lowcomm::Error if the model is not factorised or the weights do not fit the world.
void abSync(comm::Communicator& world, nn::LowRankModel& model, const AbGroups& groups, SyncMode mode,
            const std::vector<double>& weights = {});

// Loss-weighted sync (ab.sync_weights = "inverse-loss"): per world rank, from every rank's mean
// training loss since the last sync. A group's weight is proportional to 1 / (its members' mean
// loss), shared equally by its members; the weights sum to 1. Empty (equal weights) when a loss
// is not finite and positive (e.g. no step since the last sync).
std::vector<double> inverseLossWeights(const AbGroups& groups, const std::vector<double>& rank_losses);

}  // namespace lowcomm::parallel

namespace lowcomm::parallel {

// Per-group learning rates (ab.group_lr = "explore"): in the ab phase group g of G trains with
// the scheduled rate times center * spread^e_g, the exponents e_g spread evenly over [-1, 1]
// (G = 1: 0; G = 2: -1, +1; G = 3: -1, 0, +1). One multiplier per group.
std::vector<double> groupLrMultipliers(double center, double spread, int groups);
// The center after a sync: the multiplier of the group with the lowest mean training loss since
// the previous sync (ties: the lower group), clamped to [spread^-4, spread^4]; `center` unchanged
// when a loss is not finite and positive or there is one group.
double exploreLrCenter(const AbGroups& groups, const std::vector<double>& rank_losses, double center, double spread);

}  // namespace lowcomm::parallel
