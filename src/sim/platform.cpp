#include <malloc.h>
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
#include "sites.h"

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
  if (auto sites = parseSiteSetting(setting)) return *sites;
  static const std::regex re(R"((\d+)x(\d+)@(.+))");
  std::smatch m;
  if (!std::regex_match(setting, m, re))
    throw ConfigError("setting '" + setting + "': expected NODESxPROCS@RATE, e.g. 4x1@100mbit, or sites "
                      "SITESsNODESxPROCS@LAN/WAN,RTTms[,LOSS%], e.g. 2s2x1@1gbit/100mbit,50ms,0.1%");
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
    if (p.topology != "star" && p.topology != "fat-tree")
      bad("in_network_aggregation", "is simulated on a star or a fat-tree (switches that sum), not on '" + p.topology + "'");
    if (p.ina_chunk_bytes == 0) bad("ina_chunk_bytes", "must be positive");
    if (p.ina_window < 1) bad("ina_window", "must be at least 1");
  }
  validateSites(p);
}

namespace {

// The squarest X x Y = n (X <= Y).
std::vector<unsigned long> torusDims(int n) {
  int x = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) x = d;
  return {static_cast<unsigned long>(x), static_cast<unsigned long>(n / x)};
}

// Fat-tree and torus: SimGrid's cluster zones, their hosts and loopbacks made by callbacks
// (`parent`: null, or the root zone that in-network aggregation's hosts share).
void buildCluster(const PlatformSpec& p, SimPlatform& out, const sg4::NetZone* parent) {
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
    zone = sg4::create_fatTree_zone("cluster", parent, sg4::FatTreeParams(2, {hosts, leaves}, {1, spines}, {1, 1}),
                                    callbacks, bw, p.link_latency_s, sg4::Link::SharingPolicy::SPLITDUPLEX);
  } else {
    zone = sg4::create_torus_zone("cluster", parent, torusDims(p.nodes), callbacks, bw, p.link_latency_s,
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

// The links of the fat-tree's route from a to b: a's up, [its leaf's up to a spine, the spine's
// down to b's leaf,] b's down.
std::vector<sg4::Link*> routeLinks(const sg4::Host* a, const sg4::Host* b, size_t expected) {
  std::vector<sg4::Link*> links;
  double latency = 0;
  a->route_to(b, links, &latency);
  LC_ENFORCE(links.size() == expected, "fat-tree route " + a->get_name() + " -> " + b->get_name() + ": " +
                                           std::to_string(links.size()) + " links, expected " + std::to_string(expected));
  return links;
}

// In-network aggregation on the fat-tree `out.hosts` (one per node) is in: a zone of its own
// (under `root`) with a stand-in port host per node, a summing host per leaf switch and per spine,
// whose routes are the fat-tree's own links, found from its routes. Spine s is the one the
// fat-tree's routes take to a leaf's pos[s]-th host (SimGrid routes by destination), so that
// every leaf's way to and from spine s are its links to one switch (the links up are checked
// against a second route where there are more than two leaves).
void addInaFatTree(const PlatformSpec& p, SimPlatform& out, const sg4::NetZone* root) {
  const std::vector<sg4::Host*>& node = out.hosts;
  const int hosts = p.leafHosts(), leaves = p.nodes / hosts;
  auto* zone = sg4::create_full_zone("ina");
  zone->set_parent(root);
  auto route = [zone](sg4::Host* a, sg4::Host* b, sg4::Link* link) {
    zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(link)}, false);
  };
  for (int l = 0; l < leaves; ++l) out.ina.leaf.push_back(zone->create_host("ina-leaf" + std::to_string(l), p.reduce_Bps));
  std::vector<sg4::Host*> port(p.nodes);
  for (int n = 0; n < p.nodes; ++n) {
    port[n] = zone->create_host("ina-port" + std::to_string(n), p.reduce_Bps);
    if (p.nodes == 1) break;  // no call spans nodes
    const int other = n == 0 ? 1 : 0;
    const size_t hops = p.leafOf(other) == p.leafOf(n) ? 2 : 4;
    sg4::Host* leaf = out.ina.leaf[p.leafOf(n)];
    route(port[n], leaf, routeLinks(node[n], node[other], hops).front());
    route(leaf, port[n], routeLinks(node[other], node[n], hops).back());
  }
  for (int r = 0; r < p.world(); ++r) {
    out.ina.port.push_back(port[p.nodeOf(r)]);
    out.ina.leaf_of.push_back(p.leafOf(p.nodeOf(r)));
  }
  if (leaves > 1) {
    std::vector<int> pos;  // per spine: the first position of leaf 1 that leaf 0's routes reach over it
    std::vector<sg4::Link*> seen;
    for (int q = 0; q < hosts; ++q) {
      sg4::Link* up = routeLinks(node[0], node[hosts + q], 4)[1];
      if (std::find(seen.begin(), seen.end(), up) == seen.end()) seen.push_back(up), pos.push_back(q);
    }
    const int spines = static_cast<int>(pos.size());
    LC_ENFORCE(spines == hosts / p.oversubscription, "fat-tree: " + std::to_string(spines) + " spines found, expected " +
                                                         std::to_string(hosts / p.oversubscription));
    for (int s = 0; s < spines; ++s) out.ina.spine.push_back(zone->create_host("ina-spine" + std::to_string(s), p.reduce_Bps));
    std::vector<std::vector<sg4::Link*>> up(leaves, std::vector<sg4::Link*>(spines)), up_seen = up;
    for (int l = 0; l < leaves; ++l) {
      const int other = (l + 1) % leaves;
      for (int s = 0; s < spines; ++s) {
        up[l][s] = routeLinks(node[l * hosts], node[other * hosts + pos[s]], 4)[1];
        const auto in = routeLinks(node[other * hosts], node[l * hosts + pos[s]], 4);
        up_seen[other][s] = in[1];
        route(out.ina.leaf[l], out.ina.spine[s], up[l][s]);
        route(out.ina.spine[s], out.ina.leaf[l], in[2]);
      }
    }
    LC_ENFORCE(up == up_seen, "fat-tree: a leaf's routes reach spine s over different links by source");
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
  // Actors' stacks (8 MiB, zeroed) always from mmap, back to the kernel when the actor ends. By
  // default glibc raises its mmap threshold to the size of a freed block, so once the first
  // short-lived actors (in-network aggregation makes two per rank and call) have ended, later
  // stacks come from the heap, zeroed page by page: a 1024-rank simulation grew past 20 GB.
  // Nor a cap on mmapped blocks (glibc's default is 65536): halving-doubling over 4096 ranks has
  // ~100 000 connection actors, and the stacks past the 65536th came from the heap, zeroed (a
  // 4096-rank barrier: 6.3 GB).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_MMAP_MAX, 1 << 24);
  if (p.sites > 1) {
    buildSites(p, out);
    return out;
  }
  if (p.topology == "rail") {
    buildRail(p, out);
    return out;
  }
  if (p.topology != "star") {
    sg4::NetZone* root = p.in_network_aggregation ? sg4::create_full_zone("root") : nullptr;
    buildCluster(p, out, root);
    if (root != nullptr) {
      addInaFatTree(p, out, root);
      root->seal();
    }
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
    auto* sw = zone->create_host("switch", p.reduce_Bps);
    auto* fabric = zone->create_split_duplex_link("switch-fabric", p.nodes * p.link_Bps * p.bandwidth_factor);
    zone->add_route(sw->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(fabric, sg4::LinkInRoute::Direction::UP)}, true);
    out.ina.port = out.hosts;
    out.ina.leaf_of.assign(out.hosts.size(), 0);
    out.ina.leaf = {sw};
  }
  zone->seal();
  return out;
}

}  // namespace lowcomm::sim
