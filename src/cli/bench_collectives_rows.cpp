#include "bench_collectives_rows.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"

namespace lowcomm::cli {

double busFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // allgather, reduce_scatter, alltoall
}

void printRowHeader() {
  std::printf("#%11s %12s %6s %15s %9s %11s %12s %9s %9s %7s\n", "size", "count", "type", "op", "algo", "backend",
              "time_us", "algbw", "busbw", "#wrong");
  std::printf("#%11s %12s %6s %15s %9s %11s %12s %9s %9s %7s\n", "(B)", "(elems)", "", "", "", "", "", "(GB/s)",
              "(GB/s)", "");
}

void printRow(const CollectiveRow& r) {
  std::printf("%12zu %12zu %6s %15s %9s %11s %12.1f %9.3f %9.3f %7lld\n", r.bytes, r.count, r.dtype.c_str(),
              r.op.c_str(), r.algo.c_str(), r.backend.c_str(), r.time_us, r.algbw, r.busbw,
              static_cast<long long>(r.wrong));
  std::fflush(stdout);
}

void writeRowsJson(const std::string& path, const std::vector<CollectiveRow>& rows) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows) {
    arr.push_back({{"op", r.op}, {"algo", r.algo}, {"backend", r.backend}, {"world", r.world}, {"dtype", r.dtype},
                   {"bytes", r.bytes}, {"time_us", r.time_us}, {"algbw_GBps", r.algbw}, {"busbw_GBps", r.busbw},
                   {"wrong", r.wrong}, {"node_piece", r.node_piece}});
    arr.back()["streams"] = r.streams;
    arr.back()["streams_used"] = r.streams_used;
    arr.back()["streams_auto"] = r.streams_auto;
    arr.back()["cross_site_rtt_us"] = r.cross_site_rtt_us;
    arr.back()["stripe_min_bytes"] = r.stripe_min_bytes;
    arr.back()["eager_max_bytes"] = r.eager_max_bytes;
    arr.back()["congestion_control"] = r.congestion_control;
    if (r.round_us.size() > 1) arr.back()["round_time_us"] = r.round_us, arr.back()["round_position"] = r.round_pos;
  }
  writeFileAtomically(path, arr.dump(1) + "\n");
}

}  // namespace lowcomm::cli
