// `lowcomm simulate` subcommands beyond collectives and calibrate (cmd_simulate_replay.cpp);
// argv[0] is the subcommand's name.
#pragma once

#include <string>
#include <vector>

#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::cli {

// What a setting (sim::parseSetting) decides of `p`: nodes, processes per node, the links' rate
// and their shape (tools/cluster's tbf burst and queue), and for sites their number and the WAN's
// nominal rate, round trip and loss; the rest of `p` (fitted factors) stays.
inline void useSetting(sim::PlatformSpec& p, const sim::PlatformSpec& setting) {
  p.sites = setting.sites;
  p.wan_Bps = setting.wan_Bps;
  p.wan_rtt_s = setting.wan_rtt_s;
  p.wan_loss = setting.wan_loss;
  p.nodes = setting.nodes;
  p.ppn = setting.ppn;
  p.link_Bps = setting.link_Bps;
  p.link_burst_bytes = setting.link_burst_bytes;
  p.link_queue_s = setting.link_queue_s;
}

// `simulate calibrate --measured` values: FILE (rows measured on `setting`) or SETTING=FILE (a
// setting of sites differing from `setting` only in its loss: its rows carry that loss). Throws
// ConfigError naming the value.
std::vector<sim::MeasuredRow> readMeasuredFiles(const std::string& setting, const std::vector<std::string>& values);
// The WAN values a calibration of a setting of sites found (cmd_simulate_wan.cpp).
void printWanCalibration(const std::string& setting, const sim::Calibration& c);

// The striping a run used, when its config is there (p's otherwise): the streams its summary says
// its world used across sites (comm.streams = auto chooses them at run time), else its config's
// comm.streams, its comm.stripe_min_bytes and comm.eager_max_bytes. `run` is the directory of
// the run's timeline.json, summary.json and run/config.toml (a bench/e2e row). Returns whether
// its sockets ran BBR (then p has no loss bound per stream: BBR paces at the path's measured
// rate and does not back off on random loss, so its streams are capped by the links only).
bool useRunStreams(sim::PlatformSpec& p, const std::string& run);

int simulateReplay(int argc, char** argv);
int simulateValidate(int argc, char** argv);
int simulatePredict(int argc, char** argv);  // cmd_simulate_predict.cpp
int simulateTune(int argc, char** argv);     // cmd_simulate_tune.cpp
}  // namespace lowcomm::cli
