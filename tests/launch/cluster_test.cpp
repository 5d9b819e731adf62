// The launcher's view of an emulated cluster (tools/cluster): rank placement, /proc/net/dev
// parsing, the state file and the counters arithmetic. Everything here but the last two tests
// runs unprivileged; those need root (network namespaces) and are skipped otherwise.
#include "lowcomm/launch/cluster.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::launch {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The message of the ConfigError `fn` throws; fails the test when it throws nothing or another type.
template <typename Fn>
std::string configError(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return "";
}

// ---- placeRanks ----

TEST(ClusterPlacement, RanksFillNodesContiguously) {
  const auto p = placeRanks(6, 3, 2);
  ASSERT_EQ(p.size(), 6u);
  const int node[] = {0, 0, 1, 1, 2, 2};
  const int local[] = {0, 1, 0, 1, 0, 1};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(p[r].node, node[r]) << "rank " << r;
    EXPECT_EQ(p[r].local_rank, local[r]) << "rank " << r;
    EXPECT_EQ(p[r].local_world_size, 2) << "rank " << r;
  }
}

TEST(ClusterPlacement, OneProcessPerNode) {
  const auto p = placeRanks(4, 4, 1);
  ASSERT_EQ(p.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r].node, r);
    EXPECT_EQ(p[r].local_rank, 0);
    EXPECT_EQ(p[r].local_world_size, 1);
  }
}

TEST(ClusterPlacement, LastNodePartiallyFilledAndUnusedNodesStayEmpty) {
  // 3 nodes x 4 slots, 6 ranks: node 0 gets 0..3, node 1 gets 4..5, node 2 nothing.
  const auto p = placeRanks(6, 3, 4);
  ASSERT_EQ(p.size(), 6u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r].node, 0) << "rank " << r;
    EXPECT_EQ(p[r].local_rank, r) << "rank " << r;
    EXPECT_EQ(p[r].local_world_size, 4) << "rank " << r;
  }
  for (int r = 4; r < 6; ++r) {
    EXPECT_EQ(p[r].node, 1) << "rank " << r;
    EXPECT_EQ(p[r].local_rank, r - 4) << "rank " << r;
    EXPECT_EQ(p[r].local_world_size, 2) << "rank " << r;
  }
  // Fewer ranks than one node holds: one node, local world = nproc.
  const auto q = placeRanks(3, 2, 8);
  for (const auto& pl : q) {
    EXPECT_EQ(pl.node, 0);
    EXPECT_EQ(pl.local_world_size, 3);
  }
}

TEST(ClusterPlacement, ExactlyFullClusterFits) {
  const auto p = placeRanks(8, 2, 4);
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(p.back().node, 1);
  EXPECT_EQ(p.back().local_rank, 3);
  EXPECT_EQ(p.back().local_world_size, 4);
}

TEST(ClusterPlacement, TooManyRanksNamesTheSlots) {
  const std::string msg = configError([] { placeRanks(5, 2, 2); });
  EXPECT_TRUE(contains(msg, "--nproc 5")) << msg;
  EXPECT_TRUE(contains(msg, "2 nodes x 2 processes per node = 4 slots")) << msg;
}

TEST(ClusterPlacement, DegenerateArgumentsAreConfigErrors) {
  EXPECT_TRUE(contains(configError([] { placeRanks(0, 2, 2); }), "--nproc 0"));
  EXPECT_TRUE(contains(configError([] { placeRanks(-1, 2, 2); }), "--nproc -1"));
  EXPECT_TRUE(contains(configError([] { placeRanks(1, 0, 2); }), ">= 1 node"));
  EXPECT_TRUE(contains(configError([] { placeRanks(1, 2, 0); }), ">= 1 process per node"));
}

// ---- parseNetDev ----

// The layout the kernel prints (net/core/net-procfs.c): name right-aligned to 6 columns, then
// 8 receive and 8 transmit counters. A counter wider than its column touches the colon.
const char* const kNetDev =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
    "carrier compressed\n"
    "    lo:    8820      98    0    0    0     0          0         0     8820      98    0    0    0     0       "
    "0          0\n"
    "  eth0:5368709120 4194304    1    2    3     4          5         6 123456789012  987654    7    8    9    10      "
    "11         12\n"
    "  eth1:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       "
    "0          0\n"
    " veth0: 1111111    2222    0    0    0     0          0         0  3333333    4444    0    0    0     0       "
    "0          0\n";

TEST(ClusterNetDev, ParsesAllFourCountersOfTheNamedInterface) {
  const LinkCounters eth0 = parseNetDev(kNetDev, "eth0");
  EXPECT_EQ(eth0.rx_bytes, 5368709120ull);  // > 2^32: no 32-bit truncation
  EXPECT_EQ(eth0.rx_packets, 4194304ull);
  EXPECT_EQ(eth0.tx_bytes, 123456789012ull);
  EXPECT_EQ(eth0.tx_packets, 987654ull);

  const LinkCounters lo = parseNetDev(kNetDev, "lo");
  EXPECT_EQ(lo.rx_bytes, 8820u);
  EXPECT_EQ(lo.rx_packets, 98u);
  EXPECT_EQ(lo.tx_bytes, 8820u);
  EXPECT_EQ(lo.tx_packets, 98u);

  // The whole name must match: eth0 is not veth0, eth1 is its own line.
  const LinkCounters veth0 = parseNetDev(kNetDev, "veth0");
  EXPECT_EQ(veth0.rx_bytes, 1111111u);
  EXPECT_EQ(veth0.rx_packets, 2222u);
  EXPECT_EQ(veth0.tx_bytes, 3333333u);
  EXPECT_EQ(veth0.tx_packets, 4444u);
  const LinkCounters eth1 = parseNetDev(kNetDev, "eth1");
  EXPECT_EQ(eth1.rx_bytes, 0u);
  EXPECT_EQ(eth1.tx_bytes, 0u);
}

TEST(ClusterNetDev, UnknownInterfaceNamesIt) {
  const std::string msg = configError([] { parseNetDev(kNetDev, "eth9"); });
  EXPECT_TRUE(contains(msg, "'eth9'")) << msg;
  EXPECT_TRUE(contains(msg, "not found")) << msg;
  // A prefix of a listed interface is not that interface.
  EXPECT_TRUE(contains(configError([] { parseNetDev(kNetDev, "eth"); }), "'eth'"));
  EXPECT_TRUE(contains(configError([] { parseNetDev("", "eth0"); }), "'eth0'"));
}

TEST(ClusterNetDev, TruncatedLineIsAConfigErrorNamingTheInterface) {
  const std::string msg = configError([] { parseNetDev("  eth0: 1 2 3\n", "eth0"); });
  EXPECT_TRUE(contains(msg, "'eth0'")) << msg;
}

// ---- LinkCounters ----

TEST(ClusterCounters, SubtractionIsFieldByField) {
  LinkCounters after{5000000000ull, 400, 3000000000ull, 300};
  LinkCounters before{1000, 100, 2000, 200};
  const LinkCounters d = after - before;
  EXPECT_EQ(d.rx_bytes, 5000000000ull - 1000);
  EXPECT_EQ(d.rx_packets, 300u);
  EXPECT_EQ(d.tx_bytes, 3000000000ull - 2000);
  EXPECT_EQ(d.tx_packets, 100u);
  const LinkCounters zero = after - after;
  EXPECT_EQ(zero.rx_bytes + zero.rx_packets + zero.tx_bytes + zero.tx_packets, 0u);
}

// ---- loadCluster ----

class ClusterFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "lowcomm_cluster_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes PREFIX.env as tools/cluster does, with `drop` left out and `replace` (KEY=VALUE) swapped in.
  std::string write(const std::string& prefix, const std::string& drop = "", const std::string& replace = "") {
    const std::vector<std::string> lines = {"prefix=" + prefix,
                                            "nodes=2",
                                            "procs_per_node=3",
                                            "rate=1gbit",
                                            "rate_bps=1000000000",
                                            "iface=eth0",
                                            "bridge_ns=" + prefix + "-br",
                                            "node0=" + prefix + "-n0 198.18.0.1",
                                            "node1=" + prefix + "-n1 198.18.0.2"};
    const std::string file = dir_ + "/" + prefix + ".env";
    std::ofstream f(file);
    const std::string replace_key = replace.substr(0, replace.find('='));
    for (const auto& l : lines) {
      const std::string key = l.substr(0, l.find('='));
      if (key == drop) continue;
      f << (!replace.empty() && key == replace_key ? replace : l) << "\n";
    }
    return file;
  }

  std::string dir_;
};

TEST_F(ClusterFile, GoodFileLoads) {
  write("lc");
  const Cluster c = loadCluster("lc", dir_);
  EXPECT_EQ(c.prefix, "lc");
  EXPECT_EQ(c.iface, "eth0");
  EXPECT_EQ(c.rate, "1gbit");
  EXPECT_DOUBLE_EQ(c.rate_bps, 1e9);
  EXPECT_EQ(c.procs_per_node, 3);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].netns, "lc-n0");
  EXPECT_EQ(c.nodes[0].address, "198.18.0.1");
  EXPECT_EQ(c.nodes[1].netns, "lc-n1");
  EXPECT_EQ(c.nodes[1].address, "198.18.0.2");
}

TEST_F(ClusterFile, DirectoryComesFromTheEnvironment) {
  write("abc");
  const char* old = std::getenv("LOWCOMM_CLUSTER_DIR");
  const std::string saved = old ? old : "";
  ::setenv("LOWCOMM_CLUSTER_DIR", dir_.c_str(), 1);
  EXPECT_EQ(clusterStateDir(), dir_);
  EXPECT_EQ(loadCluster("abc").nodes.size(), 2u);
  ::unsetenv("LOWCOMM_CLUSTER_DIR");
  EXPECT_EQ(clusterStateDir(), "/run/lowcomm/cluster");
  if (old) ::setenv("LOWCOMM_CLUSTER_DIR", saved.c_str(), 1);
}

TEST_F(ClusterFile, MissingFileSaysHowToStartTheCluster) {
  const std::string msg = configError([&] { loadCluster("nosuch", dir_); });
  EXPECT_TRUE(contains(msg, "tools/cluster up")) << msg;
  EXPECT_TRUE(contains(msg, "--prefix nosuch")) << msg;
  EXPECT_TRUE(contains(msg, dir_ + "/nosuch.env")) << msg;
}

TEST_F(ClusterFile, MissingKeyNamesTheFileAndTheKey) {
  for (const std::string key : {"nodes", "procs_per_node", "iface", "node1"}) {
    const std::string file = write("lc", key);
    const std::string msg = configError([&] { loadCluster("lc", dir_); });
    EXPECT_TRUE(contains(msg, file)) << key << ": " << msg;
    EXPECT_TRUE(contains(msg, "'" + key + "'")) << key << ": " << msg;
  }
}

TEST_F(ClusterFile, BadNumberNamesTheFileAndTheKey) {
  for (const std::string bad : {"nodes=two", "nodes=0", "nodes=2x", "procs_per_node=-1", "procs_per_node=",
                                "rate_bps=fast", "rate_bps=1e9x"}) {
    const std::string file = write("lc", "", bad);
    const std::string key = bad.substr(0, bad.find('='));
    const std::string msg = configError([&] { loadCluster("lc", dir_); });
    EXPECT_TRUE(contains(msg, file)) << bad << ": " << msg;
    EXPECT_TRUE(contains(msg, "'" + key + "'")) << bad << ": " << msg;
  }
}

TEST_F(ClusterFile, MalformedLinesNameTheFile) {
  const std::string file = write("lc", "", "node1=lc-n1");  // no address
  std::string msg = configError([&] { loadCluster("lc", dir_); });
  EXPECT_TRUE(contains(msg, file)) << msg;
  EXPECT_TRUE(contains(msg, "'node1'")) << msg;
  {
    std::ofstream f(file, std::ios::app);
    f << "this line has no equals sign\n";
  }
  msg = configError([&] { loadCluster("lc", dir_); });
  EXPECT_TRUE(contains(msg, file)) << msg;
  EXPECT_TRUE(contains(msg, "no equals sign")) << msg;
}

// A cluster file of two sites as tools/cluster writes it: nodes 0, 1 in site 0, node 2, 3 in site 1.
std::string writeSites(const std::string& dir, const std::string& extra = "") {
  const std::string file = dir + "/ws.env";
  std::ofstream f(file);
  f << "prefix=ws\nnodes=4\nprocs_per_node=1\nrate=1gbit\nrate_bps=1000000000\niface=eth0\nbridge_ns=ws-b0\n"
       "sites=2\nwan_rate=100mbit\nwan_rate_bps=100000000\nwan_delay_ms=25\nwan_loss=0.1\nwan_jitter_ms=0\n"
       "node0=ws-n0 198.18.0.1 0\nnode1=ws-n1 198.18.0.2 0\nnode2=ws-n2 198.18.1.1 1\nnode3=ws-n3 198.18.1.2 1\n"
       "site0=ws-b0 wan0\nsite1=ws-b1 wan0\n"
    << extra;
  return file;
}

TEST_F(ClusterFile, SitesAndTheWanLoad) {
  writeSites(dir_);
  const Cluster c = loadCluster("ws", dir_);
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.siteCount(), 2);
  EXPECT_EQ(c.nodes[1].site, 0);
  EXPECT_EQ(c.nodes[2].site, 1);
  EXPECT_EQ(c.sites[1].netns, "ws-b1");
  EXPECT_EQ(c.sites[1].iface, "wan0");
  EXPECT_EQ(c.wan.rate, "100mbit");
  EXPECT_DOUBLE_EQ(c.wan.rate_bps, 1e8);
  EXPECT_DOUBLE_EQ(c.wan.delay_ms, 25);
  EXPECT_DOUBLE_EQ(c.wan.loss_percent, 0.1);
  write("lc");  // one site: no site key, every node in site 0
  const Cluster one = loadCluster("lc", dir_);
  EXPECT_EQ(one.siteCount(), 1);
  EXPECT_TRUE(one.sites.empty());
  EXPECT_EQ(one.nodes[1].site, 0);
}

TEST_F(ClusterFile, BadSitesNameTheFileAndTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"node3=ws-n3 198.18.1.2 2\n", "node3"},      // a site that does not exist
      {"node2=ws-n2 198.18.1.1 -1\n", "node2"},     // negative
      {"node2=ws-n2 198.18.1.1 one\n", "node2"},    // not a number
      {"wan_delay_ms=soon\n", "wan_delay_ms"},      // not a number
      {"site1=ws-b1\n", "site1"},                    // no interface
  };
  for (const auto& [line, key] : cases) {
    const std::string file = writeSites(dir_, line);  // a later line overrides the earlier one
    const std::string msg = configError([&] { loadCluster("ws", dir_); });
    EXPECT_TRUE(contains(msg, file)) << line << msg;
    EXPECT_TRUE(contains(msg, key)) << line << msg;
  }
}

TEST(ClusterPlacement, SitesNumberTheirRanksInRankOrder) {
  const std::vector<ClusterNode> nodes = {{"n0", "a", 0}, {"n1", "b", 0}, {"n2", "c", 1}, {"n3", "d", 1}};
  const auto p = placeRanks(7, 4, 2);  // node 3 holds only rank 6
  const auto s = placeSites(p, nodes, 2);
  ASSERT_EQ(s.size(), 7u);
  const std::vector<int> site = {0, 0, 0, 0, 1, 1, 1}, site_rank = {0, 1, 2, 3, 0, 1, 2};
  for (int r = 0; r < 7; ++r) {
    EXPECT_EQ(s[r].site, site[r]) << r;
    EXPECT_EQ(s[r].site_rank, site_rank[r]) << r;
    EXPECT_EQ(s[r].site_size, site[r] == 0 ? 4 : 3) << r;
    EXPECT_EQ(s[r].sites, 2) << r;
  }
}

// ---- network namespaces (root only) ----

TEST(ClusterNetns, NonexistentNamespaceIsAConfigErrorNamingIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: entering network namespaces (setns) needs CAP_SYS_ADMIN";
  const std::string name = "lcnosuch" + std::to_string(::getpid()) + "-n0";
  bool ran = false;
  const std::string msg = configError([&] { runInNetns(name, [&] { ran = true; }); });
  EXPECT_FALSE(ran);
  EXPECT_TRUE(contains(msg, "'" + name + "'")) << msg;
  EXPECT_TRUE(contains(msg, "does not exist")) << msg;
  // readCounters goes through runInNetns and says the same.
  EXPECT_TRUE(contains(configError([&] { readCounters(name, "eth0"); }), "'" + name + "'"));
  // Names that would escape /run/netns are refused before anything is opened.
  EXPECT_TRUE(contains(configError([&] { runInNetns("../../proc/1/ns/net", [] {}); }), "bad network namespace"));
  EXPECT_TRUE(contains(configError([&] { runInNetns("", [] {}); }), "bad network namespace"));
}

TEST(ClusterNetns, RunsInsideTheNamespaceAndReadsItsCounters) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: creating and entering network namespaces";
  const std::string name = "lcut" + std::to_string(::getpid());
  if (std::system(("ip netns add " + name + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "'ip netns add' failed: network namespaces unavailable here";
  struct Cleanup {
    std::string n;
    ~Cleanup() { (void)std::system(("ip netns del " + n + " 2>/dev/null").c_str()); }
  } cleanup{name};
  // A fresh namespace has only `lo`, down and silent; the host's interfaces are not visible.
  std::vector<std::string> ifaces;
  runInNetns(name, [&] {
    std::ifstream f("/proc/thread-self/net/dev");
    for (std::string line; std::getline(f, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t start = line.find_first_not_of(' ');
      ifaces.push_back(line.substr(start, colon - start));
    }
  });
  EXPECT_EQ(ifaces, std::vector<std::string>{"lo"});
  const LinkCounters lo = readCounters(name, "lo");
  EXPECT_EQ(lo.tx_bytes, 0u);
  EXPECT_EQ(lo.rx_bytes, 0u);
  const std::string msg = configError([&] { readCounters(name, "eth0"); });
  EXPECT_TRUE(contains(msg, "'eth0'")) << msg;
  EXPECT_TRUE(contains(msg, "'" + name + "'")) << msg;
  // Exceptions from the function propagate; the caller's thread stays in its own namespace.
  EXPECT_THROW(runInNetns(name, [] { throw DataError("inside"); }), DataError);
}

}  // namespace
}  // namespace lowcomm::launch
