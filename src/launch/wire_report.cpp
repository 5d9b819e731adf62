#include "wire_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"

namespace lowcomm::launch {

namespace {

std::string mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// Names from tools/cluster and numbers only: nothing here needs JSON escaping beyond quotes.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Per site: its WAN uplink's counters and what its nodes sent inside the site (their tx minus
// what left over the WAN; broadcasts such as ARP count in both, a few hundred bytes).
std::string sitesJson(const Cluster& cluster, const std::vector<LinkCounters>& delta,
                      const std::vector<LinkCounters>& wan) {
  std::ostringstream j;
  j << "[";
  for (size_t s = 0; s < wan.size(); ++s) {
    uint64_t sent = 0;
    for (size_t i = 0; i < delta.size(); ++i)
      if (cluster.nodes[i].site == static_cast<int>(s)) sent += delta[i].tx_bytes;
    j << (s ? "," : "") << "\n  {\"site\": " << s << ", \"netns\": " << quoted(cluster.sites[s].netns)
      << ", \"wan_tx_bytes\": " << wan[s].tx_bytes << ", \"wan_rx_bytes\": " << wan[s].rx_bytes
      << ", \"intra_site_tx_bytes\": " << (sent > wan[s].tx_bytes ? sent - wan[s].tx_bytes : 0) << "}";
  }
  return j.str() + "\n ]";
}

}  // namespace

void reportWire(const LaunchOptions& opts, const Cluster& cluster, const std::vector<Placement>& placement,
                const std::vector<LinkCounters>& delta, const std::vector<LinkCounters>& wan, double wan_cpu_s,
                double wall_s, std::ostream& log) {
  LinkCounters total;
  for (const auto& d : delta) {
    total.tx_bytes += d.tx_bytes;
    total.rx_bytes += d.rx_bytes;
    total.tx_packets += d.tx_packets;
    total.rx_packets += d.rx_packets;
  }
  log << "lowcomm launch: wire bytes on cluster " << cluster.prefix << " (" << delta.size() << " nodes, "
      << cluster.rate << "): sent " << mb(total.tx_bytes) << ", received " << mb(total.rx_bytes) << "; per node sent";
  for (const auto& d : delta) log << " " << mb(d.tx_bytes);
  uint64_t inter_site = 0;
  for (const auto& w : wan) inter_site += w.tx_bytes;
  if (!wan.empty()) {
    char cpu[64];
    std::snprintf(cpu, sizeof(cpu), "%.1f CPU s (%.1f %% of one core)", wan_cpu_s,
                  wall_s > 0 ? 100 * wan_cpu_s / wall_s : 0.0);
    log << "; across the WAN " << mb(inter_site) << " (" << wan.size() << " sites; the WAN emulator used " << cpu << ")";
  }
  log << std::endl;
  if (opts.wire_json.empty()) return;

  std::ostringstream j;
  j << "{\n \"cluster\": " << quoted(cluster.prefix) << ",\n \"rate\": " << quoted(cluster.rate)
    << ",\n \"rate_bps\": " << static_cast<uint64_t>(cluster.rate_bps) << ",\n \"iface\": " << quoted(cluster.iface)
    << ",\n \"nproc\": " << placement.size() << ",\n \"procs_per_node\": "
    << (placement.empty() ? 0 : placement[0].local_world_size) << ",\n \"wall_s\": " << wall_s
    << ",\n \"tx_bytes\": " << total.tx_bytes << ",\n \"rx_bytes\": " << total.rx_bytes
    << ",\n \"tx_packets\": " << total.tx_packets << ",\n \"rx_packets\": " << total.rx_packets << ",\n \"nodes\": [";
  for (size_t i = 0; i < delta.size(); ++i) {
    j << (i ? "," : "") << "\n  {\"node\": " << i << ", \"netns\": " << quoted(cluster.nodes[i].netns)
      << ", \"address\": " << quoted(cluster.nodes[i].address) << ", \"site\": " << cluster.nodes[i].site
      << ", \"ranks\": [";
    bool first = true;
    for (size_t r = 0; r < placement.size(); ++r)
      if (placement[r].node == static_cast<int>(i)) {
        j << (first ? "" : ", ") << r;
        first = false;
      }
    j << "], \"tx_bytes\": " << delta[i].tx_bytes << ", \"rx_bytes\": " << delta[i].rx_bytes
      << ", \"tx_packets\": " << delta[i].tx_packets << ", \"rx_packets\": " << delta[i].rx_packets << "}";
  }
  j << "\n ]";
  if (!wan.empty())
    j << ",\n \"inter_site_tx_bytes\": " << inter_site << ",\n \"wan_cpu_s\": " << wan_cpu_s
      << ",\n \"sites\": " << sitesJson(cluster, delta, wan);
  j << "\n}\n";
  // The run directory holds it even when the workers failed before they made it.
  const auto dir = std::filesystem::path(opts.wire_json).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);  // a failure shows in the write's error
  writeFileAtomically(opts.wire_json, j.str());
}

}  // namespace lowcomm::launch
