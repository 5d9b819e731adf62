// launch(): validates the options, chooses the master port (and, with --cluster, places the
// ranks on the nodes and measures the wire bytes), and runs a Supervisor (supervisor.h).
#include "lowcomm/launch/launcher.h"

#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/launch/cluster.h"
#include "lowcomm/net/rdzv_store.h"
#include "supervisor.h"
#include "wire_report.h"

namespace lowcomm::launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxProcs = 1024;

void validate(const LaunchOptions& o) {
  if (o.nproc < 1 || o.nproc > kMaxProcs)
    throw ConfigError("nproc must be in 1.." + std::to_string(kMaxProcs) + ", got " +
                      std::to_string(o.nproc));
  if (o.command.empty() || o.command[0].empty())
    throw ConfigError("no worker command given (expected `-- CMD ARGS...`)");
  if (o.master_addr.empty()) throw ConfigError("master address is empty");
  if (o.master_port < 0 || o.master_port > 65535)
    throw ConfigError("master port must be in 0..65535, got " + std::to_string(o.master_port));
  if (o.grace.count() < 0) throw ConfigError("grace period must not be negative");
  for (const auto& [key, value] : o.extra_env) {
    if (key.empty() || key.find('=') != std::string::npos)
      throw ConfigError("invalid environment variable name '" + key + "'");
    for (const char* reserved : kTorchrunVars)
      if (key == reserved)
        throw ConfigError(key + " is set by the launcher for each rank; it cannot be an extra "
                          "environment variable");
  }
}

}  // namespace

std::string newJobToken() {
  uint8_t bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t r = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {hex[b >> 4], hex[b & 15]};
  return out;
}

LaunchOptions withJobToken(LaunchOptions opts) {
  if (!std::getenv("LOWCOMM_JOB_TOKEN") && !opts.extra_env.count("LOWCOMM_JOB_TOKEN"))
    opts.extra_env["LOWCOMM_JOB_TOKEN"] = newJobToken();
  return opts;
}

// The Python backend's authenticated store listens on LOWCOMM_RDZV_PORT (torch's own store holds
// MASTER_PORT): a free one of its own, unless the user chose it.
static LaunchOptions withRdzvPort(const LaunchOptions& opts, const std::string& addr, int master_port) {
  LaunchOptions o = opts;
  if (std::getenv("LOWCOMM_RDZV_PORT") || o.extra_env.count("LOWCOMM_RDZV_PORT")) return o;
  int port = findFreePort(addr);
  for (int i = 0; i < 16 && port == master_port; ++i) port = findFreePort(addr);
  o.extra_env["LOWCOMM_RDZV_PORT"] = std::to_string(port);
  return o;
}

namespace {

// --elastic: the launcher hosts the job's store, which must outlive every worker, and keeps a
// client of its own for the membership. Made inside `netns` (node 0's on a cluster, where the
// workers reach MASTER_ADDR); a socket stays in the namespace it was made in.
struct HostedStore {
  std::unique_ptr<net::RdzvServer> server;
  std::shared_ptr<net::RdzvClient> client;
};

std::string tokenOf(const LaunchOptions& o) {
  if (const char* t = std::getenv("LOWCOMM_JOB_TOKEN"); t && *t) return t;
  return o.extra_env.at("LOWCOMM_JOB_TOKEN");
}

HostedStore hostStore(const LaunchOptions& o, const std::string& addr, int port, const std::string& netns) {
  HostedStore h;
  auto make = [&] {
    h.server = std::make_unique<net::RdzvServer>(addr, port, tokenOf(o));
    h.client = std::make_shared<net::RdzvClient>(addr, port, tokenOf(o), std::chrono::seconds(10));
  };
  if (netns.empty()) make();
  else runInNetns(netns, make);
  return h;
}

}  // namespace

int launch(const LaunchOptions& given, std::ostream& log, LaunchReport* report) {
  if (report) *report = LaunchReport{};
  validate(given);
  // --elastic: one token known here, for the store the launcher hosts.
  const LaunchOptions opts = given.elastic.enabled ? withJobToken(given) : given;
  if (opts.cluster.empty()) {
    if (!opts.wire_json.empty()) throw ConfigError("wire bytes (--wire-json) are measured only with --cluster");
    const int port = opts.master_port != 0 ? opts.master_port : findFreePort(opts.master_addr);
    const LaunchOptions with_rdzv = withRdzvPort(opts, opts.master_addr, port);  // the Supervisor keeps a reference
    HostedStore hosted;
    if (opts.elastic.enabled) hosted = hostStore(opts, opts.master_addr, port, "");
    Supervisor supervisor(with_rdzv, opts.master_addr, port, nullptr, placeRanks(opts.nproc, 1, opts.nproc), log,
                          report);
    if (hosted.client) supervisor.setElasticStore(hosted.client);
    return supervisor.run();
  }
  const Cluster cluster = loadCluster(opts.cluster);
  const int ppn = opts.procs_per_node > 0 ? opts.procs_per_node : cluster.procs_per_node;
  auto placement = placeRanks(opts.nproc, static_cast<int>(cluster.nodes.size()), ppn);
  const std::string& master = cluster.nodes[0].address;
  int port = opts.master_port;
  if (port == 0) runInNetns(cluster.nodes[0].netns, [&] { port = findFreePort(master); });
  LaunchOptions with_rdzv;
  runInNetns(cluster.nodes[0].netns, [&] { with_rdzv = withRdzvPort(opts, master, port); });
  const int used_nodes = placement.back().node + 1;
  std::vector<LinkCounters> before(used_nodes);
  for (int i = 0; i < used_nodes; ++i) before[i] = readCounters(cluster.nodes[i].netns, cluster.iface);
  std::vector<LinkCounters> wan_before(cluster.sites.size());
  for (size_t s = 0; s < cluster.sites.size(); ++s) wan_before[s] = readCounters(cluster.sites[s].netns, cluster.sites[s].iface);
  const double wan_cpu0 = wanDaemonCpuSeconds(cluster);
  const auto t0 = Clock::now();
  int rc;
  {
    HostedStore hosted;
    if (opts.elastic.enabled) hosted = hostStore(opts, master, port, cluster.nodes[0].netns);
    Supervisor supervisor(with_rdzv, master, port, &cluster, placement, log, report);
    if (hosted.client) supervisor.setElasticStore(hosted.client);
    rc = supervisor.run();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<LinkCounters> delta(used_nodes);
  for (int i = 0; i < used_nodes; ++i) delta[i] = readCounters(cluster.nodes[i].netns, cluster.iface) - before[i];
  std::vector<LinkCounters> wan_delta(cluster.sites.size());
  for (size_t s = 0; s < cluster.sites.size(); ++s)
    wan_delta[s] = readCounters(cluster.sites[s].netns, cluster.sites[s].iface) - wan_before[s];
  try {
    reportWire(opts, cluster, placement, delta, wan_delta, wanDaemonCpuSeconds(cluster) - wan_cpu0, wall, log);
  } catch (const std::exception& e) {
    if (rc == 0) throw;
    log << "lowcomm launch: " << e.what() << std::endl;  // the workers' failure is the news
  }
  return rc;
}

}  // namespace lowcomm::launch
