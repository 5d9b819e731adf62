#include "lowcomm/launch/cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "lowcomm/base/error.h"

namespace lowcomm::launch {

std::string clusterStateDir() {
  const char* dir = std::getenv("LOWCOMM_CLUSTER_DIR");
  return dir && *dir ? dir : "/run/lowcomm/cluster";
}

namespace {

int toInt(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& file,
          int min = 1) {
  const auto it = kv.find(key);
  if (it == kv.end()) throw ConfigError("cluster file '" + file + "': missing key '" + key + "'");
  try {
    size_t used = 0;
    const int v = std::stoi(it->second, &used);
    if (used == it->second.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("cluster file '" + file + "': key '" + key + "' must be " +
                    (min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min)) + ", got '" +
                    it->second + "'");
}

double toNumber(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& file) {
  const auto it = kv.find(key);
  if (it == kv.end()) throw ConfigError("cluster file '" + file + "': missing key '" + key + "'");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= 0))
    throw ConfigError("cluster file '" + file + "': key '" + key + "' must be a number >= 0, got '" + it->second + "'");
  return v;
}

// The sites and the WAN of a cluster file (nothing when `sites` is absent or 1).
void loadSites(const std::map<std::string, std::string>& kv, const std::string& file, Cluster& c) {
  const int sites = kv.count("sites") ? toInt(kv, "sites", file) : 1;
  for (size_t i = 0; i < c.nodes.size(); ++i)
    if (c.nodes[i].site >= sites)
      throw ConfigError("cluster file '" + file + "': node" + std::to_string(i) + " is in site " +
                        std::to_string(c.nodes[i].site) + ", but there are " + std::to_string(sites) + " sites");
  if (sites == 1) return;
  c.wan.rate = kv.count("wan_rate") ? kv.at("wan_rate") : "?";
  c.wan.rate_bps = toNumber(kv, "wan_rate_bps", file);
  c.wan.delay_ms = toNumber(kv, "wan_delay_ms", file);
  c.wan.loss_percent = toNumber(kv, "wan_loss", file);
  c.wan.jitter_ms = toNumber(kv, "wan_jitter_ms", file);
  for (int s = 0; s < sites; ++s) {
    const std::string key = "site" + std::to_string(s);
    const auto it = kv.find(key);
    if (it == kv.end()) throw ConfigError("cluster file '" + file + "': missing key '" + key + "'");
    std::istringstream words(it->second);
    ClusterSite site;
    if (!(words >> site.netns >> site.iface))
      throw ConfigError("cluster file '" + file + "': key '" + key + "' must be 'NETNS IFACE', got '" + it->second + "'");
    c.sites.push_back(site);
  }
}

}  // namespace

Cluster loadCluster(const std::string& prefix, const std::string& dir) {
  const std::string file = dir + "/" + prefix + ".env";
  std::ifstream in(file);
  if (!in)
    throw ConfigError("cluster '" + prefix + "' is not up (no " + file + "); start it with: tools/cluster up --nodes N --prefix " +
                      prefix);
  std::map<std::string, std::string> kv;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("cluster file '" + file + "': bad line '" + line + "'");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  Cluster c;
  c.prefix = prefix;
  c.iface = kv.count("iface") ? kv["iface"] : "";
  if (c.iface.empty()) throw ConfigError("cluster file '" + file + "': missing key 'iface'");
  c.rate = kv.count("rate") ? kv["rate"] : "?";
  if (kv.count("rate_bps")) {
    const std::string& v = kv["rate_bps"];
    char* end = nullptr;
    c.rate_bps = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(c.rate_bps > 0))
      throw ConfigError("cluster file '" + file + "': key 'rate_bps' must be a positive number, got '" + v + "'");
  }
  c.procs_per_node = toInt(kv, "procs_per_node", file);
  const int nodes = toInt(kv, "nodes", file);
  for (int i = 0; i < nodes; ++i) {
    const std::string key = "node" + std::to_string(i);
    if (!kv.count(key)) throw ConfigError("cluster file '" + file + "': missing key '" + key + "'");
    std::istringstream words(kv[key]);
    ClusterNode n;
    if (!(words >> n.netns >> n.address))
      throw ConfigError("cluster file '" + file + "': key '" + key + "' must be 'NETNS ADDRESS [SITE]', got '" +
                        kv[key] + "'");
    std::string site;
    const std::string site_key = key + "'s site";
    if (words >> site) n.site = toInt({{site_key, site}}, site_key, file, 0);  // < sites: loadSites checks
    c.nodes.push_back(n);
  }
  loadSites(kv, file, c);
  if (!c.sites.empty()) c.wan_dir = dir + "/" + prefix + ".d";
  return c;
}

std::vector<Placement> placeRanks(int nproc, int nodes, int procs_per_node) {
  if (nodes < 1 || procs_per_node < 1) throw ConfigError("a cluster needs >= 1 node and >= 1 process per node");
  if (nproc < 1 || nproc > nodes * procs_per_node)
    throw ConfigError("--nproc " + std::to_string(nproc) + " does not fit the cluster: " + std::to_string(nodes) +
                      " nodes x " + std::to_string(procs_per_node) + " processes per node = " +
                      std::to_string(nodes * procs_per_node) + " slots");
  std::vector<Placement> out(nproc);
  for (int r = 0; r < nproc; ++r) {
    out[r].node = r / procs_per_node;
    out[r].local_rank = r % procs_per_node;
    const int first = out[r].node * procs_per_node;
    out[r].local_world_size = std::min(procs_per_node, nproc - first);
  }
  return out;
}

std::vector<SitePlacement> placeSites(const std::vector<Placement>& placement, const std::vector<ClusterNode>& nodes,
                                      int sites) {
  std::vector<SitePlacement> out(placement.size());
  std::vector<int> size(sites, 0);
  for (size_t r = 0; r < placement.size(); ++r) {
    const int site = nodes.at(placement[r].node).site;
    if (site < 0 || site >= sites) throw ConfigError("node " + std::to_string(placement[r].node) + " is in no site");
    out[r].site = site;
    out[r].sites = sites;
    out[r].site_rank = size[site]++;
  }
  for (auto& p : out) p.site_size = size[p.site];
  return out;
}

double wanDaemonCpuSeconds(const Cluster& cluster) {
  if (cluster.wan_dir.empty()) return 0;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(cluster.wan_dir, ec)) {
    if (e.path().extension() != ".pid") continue;
    std::ifstream pf(e.path());
    long pid = 0;
    if (!(pf >> pid) || pid <= 0) continue;
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream f(text.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 13 && f >> field; ++i) {
    }  // fields 3..13: state .. cmajflt
    if (f >> utime >> stime) total += static_cast<double>(utime + stime) / tick;
  }
  return total;
}

LinkCounters operator-(const LinkCounters& a, const LinkCounters& b) {
  return {a.rx_bytes - b.rx_bytes, a.rx_packets - b.rx_packets, a.tx_bytes - b.tx_bytes, a.tx_packets - b.tx_packets};
}

void runInNetns(const std::string& netns, const std::function<void()>& fn) {
  if (netns.empty() || netns.find('/') != std::string::npos)
    throw ConfigError("bad network namespace name '" + netns + "'");
  const std::string path = "/run/netns/" + netns;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ConfigError("network namespace '" + netns + "' does not exist (" + path + ": " + std::strerror(errno) +
                      "); is the cluster up? (tools/cluster status)");
  std::exception_ptr failure;
  // setns changes only the calling thread; a fresh thread keeps the caller where it was.
  std::thread t([&] {
    try {
      if (::setns(fd, CLONE_NEWNET) != 0)
        throw ConfigError("cannot enter network namespace '" + netns + "': " + std::strerror(errno) +
                          (errno == EPERM ? " (needs root: CAP_SYS_ADMIN)" : ""));
      fn();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  t.join();
  ::close(fd);
  if (failure) std::rethrow_exception(failure);
}

LinkCounters parseNetDev(const std::string& text, const std::string& iface) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(' ');
    if (line.substr(start, colon - start) != iface) continue;
    // Receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes packets ...
    std::istringstream f(line.substr(colon + 1));
    uint64_t v[10] = {};
    for (auto& x : v)
      if (!(f >> x)) throw ConfigError("cannot parse /proc/net/dev line for '" + iface + "': " + line);
    return {v[0], v[1], v[8], v[9]};
  }
  throw ConfigError("interface '" + iface + "' not found in /proc/net/dev");
}

LinkCounters readCounters(const std::string& netns, const std::string& iface) {
  std::string text;
  runInNetns(netns, [&] {
    // /proc/thread-self/net follows this thread's namespace (/proc/net would follow the process's).
    std::ifstream f("/proc/thread-self/net/dev");
    if (!f) throw Error("cannot read /proc/thread-self/net/dev in namespace '" + netns + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  });
  try {
    return parseNetDev(text, iface);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (namespace '" + netns + "')");
  }
}

}  // namespace lowcomm::launch
