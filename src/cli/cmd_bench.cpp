// `lowcomm bench <what>`: dispatch to one benchmark per file.
#include <cstring>
#include <iostream>

#include "commands.h"
#include "lowcomm/base/error.h"

namespace lowcomm::cli {

int benchCollectives(int argc, char** argv);
int benchTrain(int argc, char** argv);
int benchCompress(int argc, char** argv);

int cmdBench(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << "usage: lowcomm bench collectives|train|compress [options]   (see --help)\n";
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "collectives")) return benchCollectives(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "train")) return benchTrain(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "compress")) return benchCompress(argc - 1, argv + 1);
  throw ConfigError(std::string("unknown benchmark '") + argv[1] + "' (expected: collectives, train, compress)");
}

}  // namespace lowcomm::cli
