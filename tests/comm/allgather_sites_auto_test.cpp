// The automatic allgather(v) across sites: comm::autoAllgather's site rule (hierarchical with
// the site as the group) and communicators whose ranks declare sites (CommOptions::site, as the
// launcher's LOWCOMM_SITE): exact results for uneven and empty blocks, each block crossing the
// WAN once (fewer inter-site bytes than the ring), the group size used in the timeline; a
// forced hier still groups by node, sites not in blocks keep the choice without sites.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/comm/topology.h"
#include "lowcomm/comm/traffic.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using lowcomm::test::CommPtr;

namespace {

TEST(AllgatherSites, AutoGroupsBySiteWhenTheRanksSpanSites) {
  const AllgatherChoice across = autoAllgather(4, 1, 2);
  EXPECT_EQ(across.algo, Algo::hierarchical);
  EXPECT_EQ(across.group_size, 2);
  const AllgatherChoice over_nodes = autoAllgather(8, 2, 4);  // the site's 4 ranks, not the node's 2
  EXPECT_EQ(over_nodes.algo, Algo::hierarchical);
  EXPECT_EQ(over_nodes.group_size, 4);
  // One site, no sites, sites not in blocks, sites of one rank: the choice without sites.
  for (int site_block : {0, 4, Topology::kNoSiteBlocks, 1}) {
    EXPECT_EQ(autoAllgather(4, 1, site_block).algo, Algo::ring) << site_block;
    EXPECT_EQ(autoAllgather(4, 2, site_block).algo, Algo::hierarchical) << site_block;
    EXPECT_EQ(autoAllgather(4, 2, site_block).group_size, 2) << site_block;
  }
}

std::vector<CommPtr> sitedComms(const std::vector<int>& sites, int group_size) {
  return test::makeComms(static_cast<int>(sites.size()), [&](int r) {
    CommOptions o;
    o.shm = ShmMode::off;  // threads of one host
    o.group_size = group_size;
    o.site = sites[r];
    return o;
  });
}

uint64_t interSiteSent(Communicator& c) {
  const auto s = c.meter().snapshot();
  const auto it = s.by_link.find(kInterSite);
  return it == s.by_link.end() ? 0 : it->second.bytes_sent;
}

// Runs allgatherv of `counts` i32 elements (rank r's element i: 1000 r + i) on every rank and
// checks every rank's result; returns each rank's inter-site bytes sent.
std::vector<uint64_t> checkAllgatherv(std::vector<CommPtr>& comms, const std::vector<size_t>& counts, Algo algo) {
  const int n = static_cast<int>(comms.size());
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(total, -1));
  for (auto& c : comms) c->meter().reset();
  test::onRanks(n, [&](int r) {
    std::vector<int32_t> mine(counts[r]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<int32_t>(1000 * r + i);
    comms[r]->allgatherv(mine.data(), mine.size(), out[r].data(), counts, DType::i32, algo);
  });
  std::vector<int32_t> want;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < counts[r]; ++i) want.push_back(static_cast<int32_t>(1000 * r + i));
  std::vector<uint64_t> sent(n);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r], want) << "rank " << r;
    sent[r] = interSiteSent(*comms[r]);
  }
  return sent;
}

// 2 sites x 2 nodes x 1 rank: hierarchical over the sites' 2 ranks; each site leader sends its
// site's blocks across once (the ring would send blocks 1 and 3 across twice).
TEST(AllgatherSites, AutomaticAcrossSitesRunsHierarchicalBySite) {
  auto comms = sitedComms({0, 0, 1, 1}, 1);
  const AllgatherChoice how = comms[0]->chooseAllgather();
  EXPECT_EQ(how.algo, Algo::hierarchical);
  EXPECT_EQ(how.group_size, 2);
  for (const std::vector<size_t>& counts :
       {std::vector<size_t>{300, 5, 0, 77}, {0, 0, 0, 9}, {4, 0, 0, 0}, {0, 0, 0, 0}, {64, 64, 64, 64}}) {
    const auto sent = checkAllgatherv(comms, counts, Algo::automatic);
    EXPECT_EQ(sent[0], (counts[0] + counts[1]) * 4);
    EXPECT_EQ(sent[1], 0u);
    EXPECT_EQ(sent[2], (counts[2] + counts[3]) * 4);
    EXPECT_EQ(sent[3], 0u);
    const auto ring = checkAllgatherv(comms, counts, Algo::ring);
    const uint64_t hier_total = sent[0] + sent[2];
    const uint64_t ring_total = std::accumulate(ring.begin(), ring.end(), uint64_t{0});
    EXPECT_EQ(ring_total, (counts[0] + 2 * counts[1] + counts[2] + 2 * counts[3]) * 4);
    if (counts[1] + counts[3] > 0) {
      EXPECT_LT(hier_total, ring_total);
    }
  }
  // The timeline records the group that ran: the site's.
  Trace trace;
  for (auto& c : comms) c->setTrace(&trace);
  checkAllgatherv(comms, {3, 1, 4, 1}, Algo::automatic);
  const auto events = trace.events();
  ASSERT_EQ(events.size(), 4u);
  for (const auto& e : events) {
    EXPECT_EQ(e.args.at("algo"), "hier");
    EXPECT_EQ(e.args.at("group_size"), "2");
  }
}

// A forced hier groups by node (options().group_size), as documented: on 2 sites of 2 nodes of
// 2 ranks the automatic choice groups the site's 4 ranks, the forced one the node's 2.
TEST(AllgatherSites, ForcedHierStillGroupsByNode) {
  auto comms = sitedComms({0, 0, 0, 0, 1, 1, 1, 1}, 2);
  EXPECT_EQ(comms[0]->chooseAllgather().group_size, 4);
  const AllgatherChoice forced = comms[0]->chooseAllgather(Algo::hierarchical);
  EXPECT_EQ(forced.algo, Algo::hierarchical);
  EXPECT_EQ(forced.group_size, 2);
  const std::vector<size_t> counts{5, 0, 7, 1, 0, 2, 3, 11};
  const auto by_site = checkAllgatherv(comms, counts, Algo::automatic);
  const auto by_node = checkAllgatherv(comms, counts, Algo::hierarchical);
  // By site: leaders 0 and 4 send their site's blocks across once. By node: the 4 node leaders'
  // ring, two of its links crossing.
  EXPECT_EQ(by_site[0] + by_site[4], std::accumulate(counts.begin(), counts.end(), size_t{0}) * 4);
  EXPECT_LT(by_site[0] + by_site[4], std::accumulate(by_node.begin(), by_node.end(), uint64_t{0}));
  auto o = comms[0]->options();  // comm.allgather = "hier" alike
  o.allgather_algo = Algo::hierarchical;
  comms[0]->setOptions(o);
  EXPECT_EQ(comms[0]->chooseAllgather().group_size, 2);
}

// Sites not in blocks, one site or none: today's choice (the ring on one rank per node).
TEST(AllgatherSites, WithoutSiteBlocksTheChoiceIsUnchanged) {
  for (const std::vector<int>& sites : {std::vector<int>{0, 1, 0, 1}, {-1, -1, -1, -1}, {3, 3, 3, 3}}) {
    auto comms = sitedComms(sites, 1);
    EXPECT_EQ(comms[0]->chooseAllgather().algo, Algo::ring) << sites[0] << sites[1];
    checkAllgatherv(comms, {2, 0, 9, 4}, Algo::automatic);
  }
  auto nodes = sitedComms({0, 1, 0, 1}, 2);
  EXPECT_EQ(nodes[0]->chooseAllgather().algo, Algo::hierarchical);
  EXPECT_EQ(nodes[0]->chooseAllgather().group_size, 2);
}

}  // namespace
