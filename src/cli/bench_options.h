// Options of `lowcomm bench collectives` and their parsing helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::cli {

struct CollectiveBenchOptions {
  int nproc = 0;                       // >0: launch this many local workers
  std::vector<size_t> sizes;           // bytes per message, as nccl-tests counts them
  std::vector<std::string> ops{"allreduce"};
  std::vector<std::string> algos{"auto", "ring", "hd", "shm"};
  comm::DType dtype = comm::DType::f32;
  int warmup = 2;
  int max_iters = 1000;
  int min_iters = 3;
  double seconds_per_size = 1.0;       // timing budget per (op, algo, size)
  int rounds = 1;  // each size's algorithms timed in turn this many times; a row is the median round
  bool baseline = true;                // also measure c10d::ProcessGroupGloo
  bool torch_lowcomm = false;          // also measure our c10d backend (ProcessGroupLowcomm)
  std::string json;
  std::string iface, address;
  int group_size = 0;                  // hierarchical allreduce; 0 = LOCAL_WORLD_SIZE
  int timeout_s = 300;
  size_t segment_bytes = comm::CommOptions{}.segment_bytes;
  comm::ShmMode shm = comm::ShmMode::automatic;
  std::string tuning;                  // a `simulate tune` file for the automatic allreduce
  size_t shm_piece_bytes = comm::CommOptions{}.shm_piece_bytes;
  int streams = comm::kAutoStreams;    // TCP connections per cross-site pair (striping)
  size_t stripe_min_bytes = comm::CommOptions{}.stripe_min_bytes;
  size_t eager_max_bytes = comm::CommOptions{}.eager_max_bytes;
  std::string congestion_control = "system";  // of our pair sockets; the baseline keeps the system's
};

// "4B:256MiB" (powers of two between), "1KiB,64MiB" (a list), "65536" (bytes).
std::vector<size_t> parseSizes(const std::string& spec);
size_t parseSize(const std::string& s);  // "4B", "8KiB", "64MiB", "1GiB", "1k", "4M"
std::string formatSize(size_t bytes);
std::vector<std::string> splitList(const std::string& s);
// The --algos entries that run `op`: for allreduce every entry but broadcast's (tree, chain);
// for broadcast and allgather the entries naming one of their algorithms (not auto); for other
// ops none. Empty: the caller runs the op's default.
std::vector<std::string> algosFor(const std::string& op, const std::vector<std::string>& algos);
// The order of `cases` cases in round `round` of --rounds: a permutation drawn from a generator
// seeded with (round, salt), the same on every rank. A case's time can depend on the one before
// it (caches, TCP windows, the shared cores' scheduling), so no case always follows the same one.
std::vector<size_t> roundOrder(size_t cases, int round, uint64_t salt);

}  // namespace lowcomm::cli
