// `lowcomm simulate` subcommands beyond collectives and calibrate (cmd_simulate_replay.cpp);
// argv[0] is the subcommand's name.
#pragma once

namespace lowcomm::cli {
int simulateReplay(int argc, char** argv);
int simulateValidate(int argc, char** argv);
int simulatePredict(int argc, char** argv);  // cmd_simulate_predict.cpp
int simulateTune(int argc, char** argv);     // cmd_simulate_tune.cpp
}  // namespace lowcomm::cli
