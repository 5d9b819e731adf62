// The emulated cluster made by `tools/cluster`, as the launcher sees it.
//
// `tools/cluster up --prefix P` writes P.env into the cluster state directory
// ($LOWCOMM_CLUSTER_DIR, default /run/lowcomm/cluster): KEY=VALUE lines `prefix`, `nodes`,
// `procs_per_node`, `rate`, `rate_bps`, `iface`, `bridge_ns` and `nodeI=NETNS ADDRESS [SITE]` for
// every node I. Each node is a network namespace whose interface `iface` joins the others through a
// rate-limited veth; the kernel's counters on that interface are the node's wire bytes. A cluster
// of several sites (`sites` > 1) adds `wan_rate`, `wan_rate_bps`, `wan_delay_ms`, `wan_loss`,
// `wan_jitter_ms` and `siteS=NETNS IFACE` for every site S: the site's WAN uplink, whose counters
// are the bytes that crossed the WAN.
//
// Entering a namespace (setns) needs CAP_SYS_ADMIN; errors name the namespace and say so.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lowcomm::launch {

struct ClusterNode {
  std::string netns;    // e.g. "lc-n0"
  std::string address;  // the node's address on the emulated network
  int site = 0;         // which site the node is in (0 with one site)
};

// A site's WAN uplink: the interface in the site's bridge namespace that leads to the WAN.
struct ClusterSite {
  std::string netns;  // e.g. "lc-b0"
  std::string iface;  // "wan0"
};

// The WAN between sites, as given to tools/cluster (one site: all zero).
struct ClusterWan {
  std::string rate;  // e.g. "100mbit"
  double rate_bps = 0;
  double delay_ms = 0;  // each way
  double loss_percent = 0;
  double jitter_ms = 0;
};

struct Cluster {
  std::string prefix;
  std::string iface;  // the interface every node's processes bind (GLOO_SOCKET_IFNAME)
  std::string rate;   // as given to tools/cluster, e.g. "1gbit"
  double rate_bps = 0;
  int procs_per_node = 1;
  std::vector<ClusterNode> nodes;
  std::vector<ClusterSite> sites;  // one entry per site when there are several, else empty
  ClusterWan wan;
  std::string wan_dir;  // the WAN daemons' pid files (STATE_DIR/PREFIX.d), with several sites
  int siteCount() const { return sites.empty() ? 1 : static_cast<int>(sites.size()); }
};

// $LOWCOMM_CLUSTER_DIR or /run/lowcomm/cluster.
std::string clusterStateDir();

// Reads `dir`/`prefix`.env. ConfigError when the cluster is not up (naming the command that
// makes it) or the file is malformed (naming the file and the key).
Cluster loadCluster(const std::string& prefix, const std::string& dir = clusterStateDir());

// Where a rank runs: ranks fill the nodes in order, `procs_per_node` per node (contiguous).
struct Placement {
  int node = 0;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on the same node
};

// ConfigError when `nproc` does not fit (nodes × procs_per_node slots).
std::vector<Placement> placeRanks(int nproc, int nodes, int procs_per_node);

// Where a rank is among the sites (the launcher passes it as LOWCOMM_SITE, LOWCOMM_SITES,
// LOWCOMM_SITE_RANK and LOWCOMM_SITE_SIZE): its site, its index among that site's ranks in rank
// order, and how many ranks the site has.
struct SitePlacement {
  int site = 0;
  int sites = 1;
  int site_rank = 0;
  int site_size = 1;
};
std::vector<SitePlacement> placeSites(const std::vector<Placement>& placement, const std::vector<ClusterNode>& nodes,
                                      int sites);

// One interface's kernel counters (/proc/net/dev inside the node's namespace).
struct LinkCounters {
  uint64_t rx_bytes = 0, rx_packets = 0, tx_bytes = 0, tx_packets = 0;
};
LinkCounters operator-(const LinkCounters& a, const LinkCounters& b);

// CPU seconds (user + system) the WAN's daemons (vde_switch, vde_plug2tap, wirefilter) have used
// so far, from their pid files; 0 without sites. They run on the same cores as the workers.
double wanDaemonCpuSeconds(const Cluster& cluster);

// Runs `fn` on a thread that has entered network namespace `netns` (/run/netns/NAME); processes
// spawned from `fn` start in that namespace. Exceptions from `fn` propagate.
void runInNetns(const std::string& netns, const std::function<void()>& fn);

// Counters of `iface` in namespace `netns`.
LinkCounters readCounters(const std::string& netns, const std::string& iface);

// Parses /proc/net/dev text; ConfigError when `iface` is not in it.
LinkCounters parseNetDev(const std::string& text, const std::string& iface);

}  // namespace lowcomm::launch
