#include <xbt/log.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <utility>
#include <vector>

#include "engine.h"
#include "lowcomm/base/error.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

double parseRate(const std::string& rate) {
  static const std::regex re(R"((\d+(?:\.\d+)?)(bit|kbit|mbit|gbit))", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(rate, m, re))
    throw ConfigError("rate '" + rate + "': expected a number and bit, kbit, mbit or gbit (e.g. 100mbit)");
  std::string unit = m[2];
  for (auto& c : unit) c = static_cast<char>(std::tolower(c));
  const double scale = unit == "gbit" ? 1e9 : unit == "mbit" ? 1e6 : unit == "kbit" ? 1e3 : 1;
  const double bits = std::stod(m[1]) * scale;
  if (bits <= 0) throw ConfigError("rate '" + rate + "' must be positive");
  return bits;
}

double emulatedBurstBytes(double link_Bps) { return std::max(std::floor(link_Bps / 250), 131072.0); }

PlatformSpec parseSetting(const std::string& setting) {
  static const std::regex re(R"((\d+)x(\d+)@(.+))");
  std::smatch m;
  if (!std::regex_match(setting, m, re))
    throw ConfigError("setting '" + setting + "': expected NODESxPROCS@RATE, e.g. 4x1@100mbit");
  PlatformSpec p;
  p.nodes = std::stoi(m[1]);
  p.ppn = std::stoi(m[2]);
  p.link_Bps = parseRate(m[3]) / 8;
  p.link_burst_bytes = emulatedBurstBytes(p.link_Bps);
  p.link_queue_s = kEmulatedQueueS;
  validate(p);
  return p;
}

void validate(const PlatformSpec& p) {
  auto bad = [](const std::string& field, const std::string& why) {
    throw ConfigError("platform." + field + " " + why);
  };
  if (p.topology != "star" && p.topology != "fat-tree" && p.topology != "torus" && p.topology != "rail")
    bad("topology", "'" + p.topology + "' is not simulated (known: star, fat-tree, torus, rail)");
  if (p.topology == "fat-tree") {
    if (p.leaf_size < 1) bad("leaf_size", "must be at least 1");
    if (p.oversubscription < 1) bad("oversubscription", "must be at least 1");
    if (p.nodes > p.leaf_size && p.nodes % p.leaf_size != 0)
      bad("nodes", std::to_string(p.nodes) + " do not fill leaves of " + std::to_string(p.leaf_size) + " (platform.leaf_size)");
    if (p.leafHosts() % p.oversubscription != 0)
      bad("oversubscription", std::to_string(p.oversubscription) + " does not divide the " + std::to_string(p.leafHosts()) +
                                  " hosts of a leaf (their links over the leaf's uplinks)");
  }
  if (p.nodes < 1) bad("nodes", "must be at least 1");
  if (p.ppn < 1) bad("ppn", "must be at least 1");
  if (p.cores < 1) bad("cores", "must be at least 1");
  if (!(p.link_Bps > 0)) bad("link_Bps", "must be positive");
  if (!(p.loopback_Bps > 0)) bad("loopback_Bps", "must be positive");
  if (!(p.reduce_Bps > 0)) bad("reduce_Bps", "must be positive");
  if (!(p.node_memory_Bps > 0)) bad("node_memory_Bps", "must be positive");
  if (!(p.bandwidth_factor > 0) || p.bandwidth_factor > 1.5) bad("bandwidth_factor", "must be in (0, 1.5]");
  if (p.link_latency_s < 0 || p.loopback_latency_s < 0) bad("latency", "must not be negative");
  if (!(p.notice_bytes >= 0)) bad("notice_bytes", "must not be negative");
  if (!(p.message_overhead_s >= 0)) bad("message_overhead_s", "must not be negative");
  if (!(p.link_burst_bytes >= 0)) bad("link_burst_bytes", "must not be negative");
  if (p.link_burst_bytes > 0 && p.topology != "star")
    bad("link_burst_bytes", "models the emulated cluster's shaped links (a star), not '" + p.topology + "'");
  if (!(p.link_queue_s >= 0)) bad("link_queue_s", "must not be negative");
  if (p.link_queue_s > 0 && p.topology != "star")
    bad("link_queue_s", "models the emulated cluster's shaped links (a star), not '" + p.topology + "'");
  if (p.in_network_aggregation) {
    if (p.topology != "star")
      bad("in_network_aggregation", "is simulated on a star (one switch, SwitchML's rack), not on '" + p.topology + "'");
    if (p.ppn != 1) bad("in_network_aggregation", "is simulated with one rank per node (platform.ppn 1), not " + std::to_string(p.ppn));
    if (p.ina_chunk_bytes == 0) bad("ina_chunk_bytes", "must be positive");
    if (p.ina_window < 1) bad("ina_window", "must be at least 1");
  }
}

namespace {

// The squarest X x Y = n (X <= Y).
std::vector<unsigned long> torusDims(int n) {
  int x = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) x = d;
  return {static_cast<unsigned long>(x), static_cast<unsigned long>(n / x)};
}

// Fat-tree and torus: SimGrid's cluster zones, their hosts and loopbacks made by callbacks.
void buildCluster(const PlatformSpec& p, SimPlatform& out) {
  out.hosts.assign(p.nodes, nullptr);
  auto netpoint = [&p, &out](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
    auto* host = zone->create_host("node" + std::to_string(id), p.reduce_Bps);
    host->set_core_count(p.cores);
    out.hosts.at(id) = host;
    return std::make_pair(host->get_netpoint(), static_cast<simgrid::kernel::routing::NetPoint*>(nullptr));
  };
  auto loopback = [&p](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
    auto* link = zone->create_link("loopback" + std::to_string(id), p.loopback_Bps);
    link->set_latency(p.loopback_latency_s);
    return link;
  };
  const sg4::ClusterCallbacks callbacks(netpoint, loopback, {});
  const double bw = p.link_Bps * p.bandwidth_factor;
  sg4::NetZone* zone = nullptr;
  if (p.topology == "fat-tree") {
    const auto hosts = static_cast<unsigned>(p.leafHosts());
    const auto leaves = static_cast<unsigned>(p.nodes) / hosts, spines = hosts / static_cast<unsigned>(p.oversubscription);
    zone = sg4::create_fatTree_zone("cluster", nullptr, sg4::FatTreeParams(2, {hosts, leaves}, {1, spines}, {1, 1}),
                                    callbacks, bw, p.link_latency_s, sg4::Link::SharingPolicy::SPLITDUPLEX);
  } else {
    zone = sg4::create_torus_zone("cluster", nullptr, torusDims(p.nodes), callbacks, bw, p.link_latency_s,
                                  sg4::Link::SharingPolicy::SPLITDUPLEX);
  }
  zone->seal();
}

// Rail-optimised: one host per rank; routes by fewest links (SimGrid's Dijkstra zone, one search
// per source, cached): a node's ranks through its memory (its bus and the unlimited way out: 2),
// same rail through the rail switch (2 NIC links), another node on another rail through one
// node's memory and the rail (4; equal routes: the first found), shorter than any spine route.
void buildRail(const PlatformSpec& p, SimPlatform& out) {
  auto* zone = sg4::create_dijkstra_zone("cluster", true);
  const int cores = std::max(1, p.cores / p.ppn);
  // SimGrid forbids empty routes: leaving a node's memory crosses this one unshared, unlimited link.
  auto* out_of_memory = zone->create_link("memory-out", 1e18)->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
  std::vector<simgrid::kernel::routing::NetPoint*> rails;
  for (int j = 0; j < p.ppn; ++j) rails.push_back(zone->create_router("rail" + std::to_string(j)));
  for (int n = 0; n < p.nodes; ++n) {
    auto* memory = zone->create_router("memory" + std::to_string(n));
    auto* bus = zone->create_link("membus" + std::to_string(n), p.loopback_Bps);
    bus->set_latency(p.loopback_latency_s);
    for (int j = 0; j < p.ppn; ++j) {
      auto* host = zone->create_host("node" + std::to_string(n) + "." + std::to_string(j), p.reduce_Bps);
      host->set_core_count(cores);
      auto* nic = zone->create_split_duplex_link("nic" + std::to_string(n) + "." + std::to_string(j),
                                                 p.link_Bps * p.bandwidth_factor);
      nic->set_latency(p.link_latency_s);
      zone->add_route(host->get_netpoint(), rails[j], nullptr, nullptr,
                      {sg4::LinkInRoute(nic, sg4::LinkInRoute::Direction::UP)}, false);
      zone->add_route(rails[j], host->get_netpoint(), nullptr, nullptr,
                      {sg4::LinkInRoute(nic, sg4::LinkInRoute::Direction::DOWN)}, false);
      // Into the node's memory costs its one shared link, out of it nothing more.
      zone->add_route(host->get_netpoint(), memory, nullptr, nullptr, {sg4::LinkInRoute(bus)}, false);
      zone->add_route(memory, host->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(out_of_memory)}, false);
      out.hosts.push_back(host);
    }
  }
  zone->seal();
}

}  // namespace

SimPlatform buildPlatform(const PlatformSpec& p) {
  validate(p);
  xbt_log_control_set("root.thres:critical");
  SimPlatform out;
  int argc = 1;
  char name[] = "lowcomm-simulate";
  char* argv[] = {name, nullptr};
  out.engine = std::make_unique<sg4::Engine>(&argc, argv);
  // Before the first zone: the model cannot change once a platform exists.
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic", false);
  // No guard page below each actor's stack: one memory mapping per actor instead of two, so that
  // tens of thousands of actors (4096 ranks' connections) stay under vm.max_map_count.
  sg4::Engine::set_config("contexts/guard-size:0");
  if (p.topology == "rail") {
    buildRail(p, out);
    return out;
  }
  if (p.topology != "star") {
    buildCluster(p, out);
    // One host per rank: the ranks of a node share it.
    std::vector<sg4::Host*> per_node = std::move(out.hosts);
    for (int r = 0; r < p.world(); ++r) out.hosts.push_back(per_node[p.nodeOf(r)]);
    return out;
  }
  auto* zone = sg4::create_star_zone("cluster");
  for (int i = 0; i < p.nodes; ++i) {
    auto* host = zone->create_host("node" + std::to_string(i), p.reduce_Bps);
    host->set_core_count(p.cores);
    auto* link = zone->create_split_duplex_link("link" + std::to_string(i), p.link_Bps * p.bandwidth_factor);
    link->set_latency(p.link_latency_s);
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
    // Ranks of one node talk through its loopback (one shared link: the memory system), never
    // through the node's network link (a star zone's default route to itself is up and down it).
    auto* loop = zone->create_link("loopback" + std::to_string(i), p.loopback_Bps);
    loop->set_latency(p.loopback_latency_s);
    zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(loop)}, false);
    for (int k = 0; k < p.ppn; ++k) out.hosts.push_back(host);
  }
  if (p.in_network_aggregation) {
    // The switch as a host: its fabric carries every port's rate at once, so only the nodes' own
    // links limit the aggregation; a node reaches it over its link (latency included).
    out.switch_host = zone->create_host("switch", p.reduce_Bps);
    auto* fabric = zone->create_split_duplex_link("switch-fabric", p.nodes * p.link_Bps * p.bandwidth_factor);
    zone->add_route(out.switch_host->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(fabric, sg4::LinkInRoute::Direction::UP)}, true);
  }
  zone->seal();
  return out;
}

}  // namespace lowcomm::sim
