#include "lowcomm/launch/cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
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

int toInt(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& file) {
  const auto it = kv.find(key);
  if (it == kv.end()) throw ConfigError("cluster file '" + file + "': missing key '" + key + "'");
  try {
    size_t used = 0;
    const int v = std::stoi(it->second, &used);
    if (used == it->second.size() && v >= 1) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("cluster file '" + file + "': key '" + key + "' must be a positive integer, got '" +
                    it->second + "'");
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
      throw ConfigError("cluster file '" + file + "': key '" + key + "' must be 'NETNS ADDRESS', got '" + kv[key] + "'");
    c.nodes.push_back(n);
  }
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
