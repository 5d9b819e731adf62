// The automatic allreduce across sites: Topology::siteBlock (the layout the sites algorithm
// needs), comm::autoAllreduce's sites rule, and communicators whose ranks declare sites
// (CommOptions::site, as the launcher's LOWCOMM_SITE) with one rank per node (group_size 1):
// the automatic choice runs `sites` over the topology's site grouping, also when forced and in
// split() communicators; sites that are not contiguous never get it, and forcing it is a
// ConfigError; a tuned table does not override it.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "comm/typed_data.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/comm/topology.h"
#include "lowcomm/comm/traffic.h"
#include "lowcomm/comm/tuned_table.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using lowcomm::test::CommPtr;

namespace {

int block(std::vector<int> sites) {
  Topology t;
  t.site_of = std::move(sites);
  return t.siteBlock();
}

TEST(SiteBlock, ContiguousSitesOfOneSizeButTheLast) {
  EXPECT_EQ(block({0, 0, 1, 1}), 2);
  EXPECT_EQ(block({3, 3, 3, 1, 1, 1, 2}), 3);  // the launcher's numbers, a smaller last site
  EXPECT_EQ(block({0, 1, 2}), 1);
  EXPECT_EQ(block({-1, -1, -1}), 0);  // no sites declared
  EXPECT_EQ(block({2, 2, 2}), 0);     // one site
  EXPECT_EQ(block({}), 0);
  EXPECT_EQ(block({0, 1, 0, 1}), Topology::kNoSiteBlocks);     // interleaved
  EXPECT_EQ(block({0, 0, 1, 1, 1}), Topology::kNoSiteBlocks);  // a larger later site
  EXPECT_EQ(block({0, 1, 1}), Topology::kNoSiteBlocks);        // a smaller first site
  EXPECT_EQ(block({0, 0, 1, 1, 0}), Topology::kNoSiteBlocks);  // a site in two blocks
  EXPECT_EQ(block({0, 0, 1, -1}), Topology::kNoSiteBlocks);    // some ranks without a site
  EXPECT_EQ(block({0, 0, -1, -1}), 0);  // one known site: unknown sites never cross (crossSite)
}

TEST(SitesSelector, SitesWheneverTheRanksSpanSites) {
  for (size_t bytes : {size_t{4}, size_t{16} << 10, size_t{64} << 20}) {
    EXPECT_EQ(autoAllreduce(bytes, 4, 1, 2), Algo::sites) << bytes;
    EXPECT_EQ(autoAllreduce(bytes, 8, 2, 4), Algo::sites) << bytes;  // over the node groups' hier
    EXPECT_EQ(autoAllreduce(bytes, 3, 0, 1), Algo::sites) << bytes;
  }
  // One site, no sites, sites not in blocks: the choice without sites.
  for (int site_block : {0, 4, Topology::kNoSiteBlocks}) {
    EXPECT_EQ(autoAllreduce(4, 4, 1, site_block), Algo::halving_doubling);
    EXPECT_EQ(autoAllreduce(64 << 20, 4, 1, site_block), Algo::ring);
    EXPECT_EQ(autoAllreduce(64 << 20, 4, 2, site_block), Algo::hierarchical);
  }
}

std::vector<CommPtr> sitedComms(const std::vector<int>& sites) {
  return test::makeComms(static_cast<int>(sites.size()), [&](int r) {
    CommOptions o;
    o.shm = ShmMode::off;  // threads of one host: else shared memory would come first
    o.group_size = 1;      // one rank per node, as `lowcomm train` on 2s2x1
    o.site = sites[r];
    return o;
  });
}

uint64_t interSiteSent(Communicator& c) {
  const auto s = c.meter().snapshot();
  const auto it = s.by_link.find(kInterSite);
  return it == s.by_link.end() ? 0 : it->second.bytes_sent;
}

void checkExactSum(std::vector<CommPtr>& comms, size_t count, Algo algo) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<char>> bufs(n);
  test::onRanks(n, [&](int r) {
    bufs[r] = test::filled(r, count, DType::f32);
    comms[r]->allreduce(bufs[r].data(), count, DType::f32, ReduceOp::sum, algo);
  });
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(test::load(DType::f32, bufs[r].data(), i), test::expectedReduce(n, i, DType::f32, ReduceOp::sum))
          << "rank " << r << " index " << i;
}

// 2 sites x 2 nodes x 1 rank: `sites` for every size, grouped by site (each rank sends half the
// buffer across, once), not by the node's single rank (which would send it whole to both ranks
// of the other site); forcing it groups alike.
TEST(SitesSelector, AutomaticAcrossSitesRunsSitesByTheTopology) {
  auto comms = sitedComms({0, 0, 1, 1});
  for (size_t bytes : {size_t{4}, size_t{64} << 20}) EXPECT_EQ(comms[0]->chooseAllreduce(bytes), Algo::sites);
  const size_t count = 4096;
  ASSERT_EQ(sitesPieces(count * 4), 1u);
  for (Algo algo : {Algo::automatic, Algo::sites}) {
    for (auto& c : comms) c->meter().reset();
    checkExactSum(comms, count, algo);
    for (auto& c : comms) EXPECT_EQ(interSiteSent(*c), count * 4 / 2) << algoName(algo);
  }
  // A tuned table (its rules know world and group size only) does not override sites.
  TunedRule rule;
  rule.world = 4;
  rule.group_size = 1;
  rule.max_bytes = SIZE_MAX;
  rule.algo = Algo::ring;
  CommOptions o = comms[0]->options();
  o.tuned = std::make_shared<TunedTable>(TunedTable::fromRules({rule}, "test"));
  comms[0]->setOptions(o);
  EXPECT_EQ(comms[0]->chooseAllreduce(1 << 20), Algo::sites);
}

TEST(SitesSelector, SitesNotInBlocksNeverGetSites) {
  auto comms = sitedComms({0, 1, 0, 1});
  EXPECT_EQ(comms[0]->chooseAllreduce(4), Algo::halving_doubling);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::ring);
  try {
    comms[0]->chooseAllreduce(64, Algo::sites);
    FAIL() << "forced sites over interleaved sites";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("contiguous"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0,1,0,1]"), std::string::npos) << e.what();
  }
  checkExactSum(comms, 1000, Algo::automatic);
}

// Without sites nothing changes; one site alike.
TEST(SitesSelector, OneSiteOrNoneKeepsTheChoiceWithoutSites) {
  for (int site : {-1, 5}) {
    auto comms = sitedComms({site, site, site, site});
    EXPECT_EQ(comms[0]->chooseAllreduce(4), Algo::halving_doubling);
    EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::ring);
  }
}

// A split communicator decides by its own members' sites.
TEST(SitesSelector, SplitCommunicatorsUseTheirMembersSites) {
  auto comms = sitedComms({0, 0, 1, 1});
  std::vector<CommPtr> across(4), inside(4);
  test::onRanks(4, [&](int r) {
    across[r] = comms[r]->split(r % 2, r);  // {0, 2}, {1, 3}: one rank per site
    inside[r] = comms[r]->split(r / 2, r);  // {0, 1}, {2, 3}: one site each
  });
  EXPECT_EQ(across[0]->chooseAllreduce(64 << 20), Algo::sites);
  EXPECT_EQ(inside[0]->chooseAllreduce(64 << 20), Algo::ring);
  std::vector<std::vector<char>> bufs(4);
  test::onRanks(4, [&](int r) {
    bufs[r] = test::filled(r / 2, 333, DType::f32);  // the pair's members differ in r / 2
    across[r]->allreduce(bufs[r].data(), 333, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 4; ++r)
    for (size_t i = 0; i < 333; ++i)
      ASSERT_EQ(test::load(DType::f32, bufs[r].data(), i), test::expectedReduce(2, i, DType::f32, ReduceOp::sum));
}

}  // namespace
