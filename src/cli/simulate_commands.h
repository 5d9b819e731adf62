// `lowcomm simulate` subcommands beyond collectives and calibrate (cmd_simulate_replay.cpp);
// argv[0] is the subcommand's name.
#pragma once

#include "lowcomm/sim/platform.h"

namespace lowcomm::cli {

// What an NxP@RATE setting (sim::parseSetting) decides of `p`: nodes, processes per node, the
// links' rate and their shape (tools/cluster's tbf burst and queue); the rest of `p` stays.
inline void useSetting(sim::PlatformSpec& p, const sim::PlatformSpec& setting) {
  p.nodes = setting.nodes;
  p.ppn = setting.ppn;
  p.link_Bps = setting.link_Bps;
  p.link_burst_bytes = setting.link_burst_bytes;
  p.link_queue_s = setting.link_queue_s;
}

int simulateReplay(int argc, char** argv);
int simulateValidate(int argc, char** argv);
int simulatePredict(int argc, char** argv);  // cmd_simulate_predict.cpp
int simulateTune(int argc, char** argv);     // cmd_simulate_tune.cpp
}  // namespace lowcomm::cli
