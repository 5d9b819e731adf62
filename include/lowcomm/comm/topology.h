// Where every rank of a communicator runs: its node (host key, lowcomm/net/shm.h) and its site
// (CommOptions::site, from the launcher's LOWCOMM_SITE). A communicator learns both at creation
// by an allgather, so every rank holds the same Topology; split() communicators hold their
// members' entries in their own rank order.
#pragma once

#include <algorithm>
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
  // The site layout the `sites` allreduce assumes (src/comm/algo/allreduce_sites.cpp): when the
  // ranks span sites, every rank declared one and each site's ranks are contiguous in rank order,
  // all sites of the same size but the last (which may be smaller): that size (< size()).
  // 0 when the ranks do not span sites; kNoSiteBlocks when they do but not in that layout.
  static constexpr int kNoSiteBlocks = -1;
  int siteBlock() const {
    if (!spansSites()) return 0;
    const int n = static_cast<int>(site_of.size());
    int size = 0;  // the first site's rank count
    while (size < n && site_of[size] == site_of[0]) ++size;
    std::vector<int> seen;
    for (int first = 0; first < n; first += size) {
      const int s = site_of[first];
      if (s < 0 || std::find(seen.begin(), seen.end(), s) != seen.end()) return kNoSiteBlocks;
      seen.push_back(s);
      for (int r = first; r < std::min(n, first + size); ++r)
        if (site_of[r] != s) return kNoSiteBlocks;
    }
    return size;
  }
};

}  // namespace lowcomm::comm
