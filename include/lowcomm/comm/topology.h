// Where every rank of a communicator runs: its node (host key, lowcomm/net/shm.h) and its site
// (CommOptions::site, from the launcher's LOWCOMM_SITE). A communicator learns both at creation
// by an allgather, so every rank holds the same Topology; split() communicators hold their
// members' entries in their own rank order.
#pragma once

#include <vector>

namespace lowcomm::comm {

struct Topology {
  // Ranks with the same host key share a node number; nodes are numbered 0, 1, ... in order of
  // their lowest rank.
  std::vector<int> node_of;
  // The site each rank declared (-1 = unknown). Sites are the launcher's numbers, not renumbered.
  std::vector<int> site_of;

  // Both ranks declared a site and the sites differ. Unknown sites never count as crossing.
  bool crossSite(int a, int b) const {
    return site_of[a] >= 0 && site_of[b] >= 0 && site_of[a] != site_of[b];
  }
  // Whether some pair of ranks crosses sites.
  bool spansSites() const {
    int first = -1;
    for (int s : site_of) {
      if (s < 0) continue;
      if (first < 0) first = s;
      else if (s != first) return true;
    }
    return false;
  }
};

}  // namespace lowcomm::comm
