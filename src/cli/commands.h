// Subcommand entry points; argv[0] is the subcommand name.
#pragma once

namespace lowcomm::cli {
int cmdLaunch(int argc, char** argv);
int cmdBench(int argc, char** argv);
int cmdTrain(int argc, char** argv);
int cmdSimulate(int argc, char** argv);
int cmdConfig(int argc, char** argv);
}  // namespace lowcomm::cli
