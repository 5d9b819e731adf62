// lowcomm command line: dispatches to one subcommand per file.
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "commands.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/exit_status.h"

namespace {
void usage() {
  std::cerr << "usage: lowcomm <command> [options]\n"
               "commands:\n"
               "  launch   start N local worker processes (torchrun-style)\n"
               "  train    data-parallel training: `lowcomm train --config configs/fmnist_cnn_ddp.toml`\n"
               "  bench    benchmarks: `lowcomm bench collectives --help`\n"
               "  simulate the same algorithms on a simulated cluster (SimGrid): `lowcomm simulate collectives --help`\n"
               "  config   configuration keys and resolved configs: `lowcomm config keys`\n"
               "run `lowcomm <command> --help` for its options\n";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? lowcomm::kExitConfig : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "launch") return lowcomm::cli::cmdLaunch(argc - 1, argv + 1);
    if (cmd == "bench") return lowcomm::cli::cmdBench(argc - 1, argv + 1);
    if (cmd == "train") return lowcomm::cli::cmdTrain(argc - 1, argv + 1);
    if (cmd == "simulate") return lowcomm::cli::cmdSimulate(argc - 1, argv + 1);
    if (cmd == "config") return lowcomm::cli::cmdConfig(argc - 1, argv + 1);
  } catch (const c10::Error& e) {  // LibTorch's message without its C++ backtrace
    std::cerr << "lowcomm " << cmd << ": error (LibTorch): " << e.what_without_backtrace() << "\n";
    return lowcomm::kExitError;
  } catch (const std::exception& e) {  // the status tells a launcher the error's class
    std::cerr << "lowcomm " << cmd << ": error: " << e.what() << "\n";
    return lowcomm::exitStatusFor(e);
  }
  std::cerr << "lowcomm: unknown command '" << cmd << "'\n";
  usage();
  return lowcomm::kExitConfig;
}
