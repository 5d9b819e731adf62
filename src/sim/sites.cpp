#include "sites.h"

#include <cmath>
#include <regex>
#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

double PlatformSpec::streamCapBps() const {
  if (sites < 2 || !(wan_loss > 0)) return 0;
  return mss_bytes / wanRtt() * stream_c / std::pow(wan_loss, loss_exponent);
}

std::optional<PlatformSpec> parseSiteSetting(const std::string& setting) {
  static const std::regex re(R"((\d+)s(\d+)x(\d+)@([0-9.]+[a-zA-Z]+)[/-]([0-9.]+[a-zA-Z]+),(\d+(?:\.\d+)?)ms(?:,(\d+(?:\.\d+)?)%)?)");
  std::smatch m;
  if (!std::regex_match(setting, m, re)) return std::nullopt;
  PlatformSpec p = parseSetting(std::string(m[2]) + "x" + std::string(m[3]) + "@" + std::string(m[4]));
  p.sites = std::stoi(m[1]);
  p.nodes *= p.sites;
  p.wan_Bps = parseRate(m[5]) / 8;
  p.wan_rtt_s = std::stod(m[6]) * 1e-3;
  p.wan_loss = m[7].matched ? std::stod(m[7]) / 100 : 0.0;
  if (p.sites < 2) throw ConfigError("setting '" + setting + "': a setting of sites needs at least 2 sites");
  validate(p);
  return p;
}

void validateSites(const PlatformSpec& p) {
  auto bad = [](const std::string& field, const std::string& why) {
    throw ConfigError("platform." + field + " " + why);
  };
  if (p.sites < 1) bad("sites", "must be at least 1");
  if (p.sites == 1) return;
  if (p.topology != "star") bad("sites", "are simulated on a star (the emulated cluster), not on '" + p.topology + "'");
  if (p.nodes % p.sites != 0)
    bad("sites", std::to_string(p.sites) + " do not split " + std::to_string(p.nodes) + " nodes evenly");
  if (p.in_network_aggregation) bad("in_network_aggregation", "is not simulated across sites");
  if (!(p.wan_Bps > 0)) bad("wan_Bps", "must be positive");
  if (!(p.wan_factor > 0) || p.wan_factor > 1.5) bad("wan_factor", "must be in (0, 1.5]");
  if (!(p.wanRtt() >= 0) || p.wan_rtt_s < 0) bad("wan_rtt_s", "(with wan_rtt_extra_s) must not be negative");
  if (!(p.wan_loss >= 0 && p.wan_loss < 1)) bad("wan_loss", "must be in [0, 1)");
  if (p.wan_loss > 0 && !(p.wanRtt() > 0)) bad("wan_rtt_s", "must be positive on a lossy WAN (the stream bound)");
  if (!(p.stream_c > 0) || !(p.mss_bytes > 0)) bad("stream_c", "and mss_bytes must be positive");
  if (!(p.loss_exponent > 0 && p.loss_exponent <= 2)) bad("loss_exponent", "must be in (0, 2]");
  if (p.streams < 1) bad("streams", "must be at least 1");
}

namespace {

sg4::LinkInRoute up(sg4::Link* l) { return sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP); }
sg4::LinkInRoute down(sg4::Link* l) { return sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::DOWN); }

}  // namespace

void buildSites(const PlatformSpec& p, SimPlatform& out) {
  auto* zone = sg4::create_full_zone("cluster");
  std::vector<sg4::Host*> node(p.nodes);
  std::vector<sg4::Link*> lan(p.nodes), wan(p.sites);
  for (int s = 0; s < p.sites; ++s) {
    wan[s] = zone->create_split_duplex_link("wan" + std::to_string(s), p.wan_Bps * p.wan_factor);
    // No latency here: SimNetwork adds the WAN's one way after a message's bytes have left
    // (a send completes once written, as on a TCP socket; a flow's latency would hold it).
  }
  for (int i = 0; i < p.nodes; ++i) {
    node[i] = zone->create_host("node" + std::to_string(i), p.reduce_Bps);
    node[i]->set_core_count(p.cores);
    lan[i] = zone->create_split_duplex_link("link" + std::to_string(i), p.link_Bps * p.bandwidth_factor);
    lan[i]->set_latency(p.link_latency_s);
    auto* loop = zone->create_link("loopback" + std::to_string(i), p.loopback_Bps);
    loop->set_latency(p.loopback_latency_s);
    zone->add_route(node[i]->get_netpoint(), node[i]->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(loop)}, false);
  }
  for (int a = 0; a < p.nodes; ++a)
    for (int b = 0; b < p.nodes; ++b) {
      if (a == b) continue;
      const int sa = p.siteOf(a), sb = p.siteOf(b);
      std::vector<sg4::LinkInRoute> links = {up(lan[a])};
      if (sa != sb) links.insert(links.end(), {up(wan[sa]), down(wan[sb])});
      links.push_back(down(lan[b]));
      zone->add_route(node[a]->get_netpoint(), node[b]->get_netpoint(), nullptr, nullptr, links, false);
    }
  zone->seal();
  for (int i = 0; i < p.nodes; ++i)
    for (int k = 0; k < p.ppn; ++k) out.hosts.push_back(node[i]);
}

}  // namespace lowcomm::sim
