// The wire bytes of one launch on an emulated cluster: a log line and an optional JSON file.
#pragma once

#include <ostream>
#include <vector>

#include "lowcomm/launch/cluster.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {

// `delta[i]` is node i's counter difference over the run (only nodes that ran ranks); `wan[s]`
// site s's WAN uplink's (empty with one site): what it sent is the run's inter-site traffic from
// that site, and its nodes' tx minus that stayed inside the site; `wan_cpu_s` the CPU seconds the
// WAN's daemons used during the run (they share the workers' cores). Writes opts.wire_json
// (atomically, via a temporary file) when set; ConfigError when it cannot.
void reportWire(const LaunchOptions& opts, const Cluster& cluster, const std::vector<Placement>& placement,
                const std::vector<LinkCounters>& delta, const std::vector<LinkCounters>& wan, double wan_cpu_s,
                double wall_s, std::ostream& log);

}  // namespace lowcomm::launch
