// predict (lowcomm/sim/predict.h): a measured rank's program, rewritten for a larger world.
#include "lowcomm/sim/predict.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/comm/exchange.h"
#include "lowcomm/comm/selector.h"

namespace lowcomm::sim {

namespace {

comm::Algo allreduceAlgo(const CallSpec& c, const PlatformSpec& p, const std::string& algo) {
  if (algo == "recorded") return c.algo;
  if (algo == "ring") return comm::Algo::ring;
  if (algo == "hd") return comm::Algo::halving_doubling;
  if (algo == "hier") return comm::Algo::hierarchical;
  if (algo == "auto") return comm::autoAllreduce(c.bytes, p.world(), p.ppn);
  throw ConfigError("simulate predict: --algo '" + algo + "': expected auto, recorded, ring, hd or hier");
}

CallSpec rescale(const CallSpec& c, int recorded_world, const PlatformSpec& p, const std::string& algo) {
  if (!c.ranks.empty() && static_cast<int>(c.ranks.size()) != recorded_world)
    throw ConfigError("simulate predict: the timeline has a " + c.op + " of a group of " + std::to_string(c.ranks.size()) +
                      " of its " + std::to_string(recorded_world) +
                      " ranks (AB-training's groups, a grid's axes, local SGD's nodes); only collectives over the whole "
                      "world are extrapolated");
  CallSpec out = c;
  out.ranks.clear();
  const auto n = static_cast<uint64_t>(p.world());
  if (c.op == "allreduce") {
    out.algo = allreduceAlgo(c, p, algo);
    out.group_size = p.ppn;
  } else if (c.op == "allgatherv") {
    const uint64_t total = c.rank_bytes.empty()
                               ? c.bytes
                               : std::accumulate(c.rank_bytes.begin(), c.rank_bytes.end(), uint64_t{0});
    const uint64_t share = total / static_cast<uint64_t>(recorded_world);
    out.rank_bytes.assign(n, share);
    out.bytes = share * n;
  } else if (c.op == "reduce_scatter" || c.op == "alltoall") {
    // Whole buffer kept; a rank's part must stay whole elements.
    const uint64_t unit = comm::dtypeSize(c.dtype) * n;
    out.bytes = (c.bytes + unit - 1) / unit * unit;
  }
  return out;
}

}  // namespace

std::vector<RankProgram> extrapolate(const RankProgram& rank0, int recorded_world, const PlatformSpec& platform,
                                     const PredictOptions& opts) {
  validate(platform);
  if (platform.world() > comm::kMaxRanks)
    throw ConfigError("simulate predict: " + std::to_string(platform.world()) + " ranks; the communicator supports at most " +
                      std::to_string(comm::kMaxRanks) + " (its message slot layout)");
  if (!(opts.compute_speedup > 0))
    throw ConfigError("simulate predict: --compute-speedup must be positive, got " + std::to_string(opts.compute_speedup));
  RankProgram p = rank0;
  for (auto& c : p.calls) c = rescale(c, recorded_world, platform, opts.algo);
  auto faster = [&opts](std::vector<ReplayItem>& items) {
    for (auto& it : items)
      if (it.kind == ReplayItem::sleep) it.seconds /= opts.compute_speedup;
  };
  faster(p.main);
  for (auto& b : p.buckets) faster(b);
  return std::vector<RankProgram>(static_cast<size_t>(platform.world()), p);
}

StepWork stepWork(const RankProgram& p) {
  StepWork w;
  bool in_step = false;
  for (const auto& it : p.main) {
    if (it.kind == ReplayItem::step_begin) in_step = true;
    if (it.kind == ReplayItem::step_end) in_step = false;
    if (it.kind == ReplayItem::sleep && in_step) w.compute_s += it.seconds;
  }
  for (const auto& b : p.buckets)
    for (const auto& it : b)
      if (it.kind == ReplayItem::sleep) w.codec_s += it.seconds;
  const double steps = std::max<size_t>(1, p.measured_step_s.size());
  w.compute_s /= steps;
  w.codec_s /= steps;
  return w;
}

}  // namespace lowcomm::sim
