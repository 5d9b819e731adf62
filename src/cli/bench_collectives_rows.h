// Rows of `lowcomm bench collectives`: one timed case (ours or the c10d baseline), printed in
// nccl-tests' layout and written as JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lowcomm::cli {

struct CollectiveRow {
  std::string op, algo, backend, dtype;
  int world;
  size_t bytes, count;
  double time_us, algbw, busbw;
  int64_t wrong;
  size_t node_piece = 0;  // hier allreduce: each node's part ran in shared memory, pieces of this size
  std::vector<double> round_us{};  // --rounds > 1: each round's time (time_us is their median)
  std::vector<int> round_pos{};   // and the case's place in each round's (shuffled) order
  // The transport: --streams asked (auto: the k it chose, streams_auto set), the streams in use
  // (1 unless the ranks span sites), auto's measured cross-site round trip, the smallest striped
  // message, the pair sockets' congestion control. Baselines: one, the system's.
  int streams = 1, streams_used = 1;
  bool streams_auto = false;
  double cross_site_rtt_us = 0;
  size_t stripe_min_bytes = 0;
  size_t eager_max_bytes = 0;
  std::string congestion_control = "system";
};

// nccl-tests' bus bandwidth factor of `op` over n ranks.
double busFactor(const std::string& op, int n);

void printRowHeader();
void printRow(const CollectiveRow& r);
// All rows to `path` (through a temporary file renamed into place); ConfigError when it cannot.
void writeRowsJson(const std::string& path, const std::vector<CollectiveRow>& rows);

}  // namespace lowcomm::cli
