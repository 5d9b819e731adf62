// Sites joined by a WAN in the simulated platform (private to the sim layer; the model is
// described at PlatformSpec::sites in lowcomm/sim/platform.h).
#pragma once

#include <optional>
#include <string>

#include "engine.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

// A setting of sites, "SsNxP@LAN/WAN,RTTms[,LOSS%]" (or with '-' for '/'), as a platform: nodes
// S x N, the LAN's tbf burst and queue as parseSetting's. Nothing when `setting` is not of that
// form; ConfigError when it is but cannot describe a platform (fewer than 2 sites, loss >= 100 %).
std::optional<PlatformSpec> parseSiteSetting(const std::string& setting);

// The star of p.sites > 1: hosts and their links as the plain star's, a WAN uplink per site and a
// route for every pair of hosts (n^2 routes: meant for tens of nodes, not thousands).
void buildSites(const PlatformSpec& p, SimPlatform& out);

// Throws ConfigError naming the field when the site values cannot describe a platform.
void validateSites(const PlatformSpec& p);

}  // namespace lowcomm::sim
