// predict (lowcomm/sim/predict.h): a measured rank's program, rewritten for a larger world.
#include "lowcomm/sim/predict.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/comm/exchange.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/sim/collectives.h"

namespace lowcomm::sim {

namespace {

// The algorithm of `op` the simulator runs as itself named `algo` (the algorithm table), if any.
std::optional<comm::Algo> simulatedNamed(const std::string& op, const std::string& algo) {
  const auto algos = simulatedAlgorithms(op);
  if (std::find(algos.begin(), algos.end(), algo) == algos.end()) return std::nullopt;
  return comm::parseAlgo(algo);
}

comm::Algo allreduceAlgo(const CallSpec& c, int members, const PlatformSpec& p, const std::string& algo) {
  if (algo == "recorded") return c.algo;
  if (algo == "auto") return comm::autoAllreduce(c.bytes, members, p.ppn, siteBlock(p, members));
  if (const auto a = simulatedNamed("allreduce", algo)) return *a;
  std::string known;
  for (const auto& k : simulatedAlgorithms("allreduce")) known += ", " + k;
  throw ConfigError("simulate predict: --algo '" + algo + "': expected auto, recorded" + known);
}

// Allgather(v) under --algo: its simulated algorithms as asked and recorded as recorded, grouped
// by node as a forced one is; else the automatic choice (across sites: hierarchical by site).
comm::AllgatherChoice allgatherAlgo(const CallSpec& c, int members, const PlatformSpec& p, const std::string& algo) {
  if (algo == "recorded") return {c.algo, p.ppn};
  if (const auto a = simulatedNamed("allgather", algo)) return {*a, p.ppn};
  return comm::autoAllgather(members, p.ppn, siteBlock(p, members));
}

// The group a call of rank 0 ran over, at the new world: `size` ranks (0: the whole world),
// either the block of `size` contiguous ranks holding the caller (stride 1) or every `stride`-th
// rank from the caller's position in its block (DiLoCo's cross-site groups: one rank per site).
struct GroupShape {
  int size = 0, stride = 1;
  // Strided groups: the recorded block over the new one. A rank's part of what its block holds
  // (DiLoCo's carried share of a fragment, a grid's shard) shrinks as the block grows.
  double share = 1;
};

// `c` carrying `share` of its recorded bytes, in whole elements (at least one).
CallSpec scaled(CallSpec c, double share) {
  if (share == 1) return c;
  const uint64_t unit = comm::dtypeSize(c.dtype);
  auto scale = [&](uint64_t b) { return std::max(unit, static_cast<uint64_t>(b * share) / unit * unit); };
  c.bytes = scale(c.bytes);
  for (auto& b : c.rank_bytes) b = scale(b);
  return c;
}

// A recorded group must be rank 0's block 0 .. g-1 of equal contiguous blocks, or the ranks
// 0, s, 2s, .. of a stride s that splits the world evenly.
GroupShape groupShape(const CallSpec& c, int recorded_world, const PlatformSpec& p, const std::string& groups) {
  const int g = static_cast<int>(c.ranks.size());
  if (g == 0 || g == recorded_world) return {};
  auto refuse = [&](const std::string& why) -> GroupShape {
    throw ConfigError("simulate predict: the timeline has a " + c.op + " of a group of " + std::to_string(g) + " of its " +
                      std::to_string(recorded_world) + " ranks; " + why);
  };
  bool block = true, strided = g > 1 && c.ranks[0] == 0 && recorded_world % g == 0;
  const int s = recorded_world / std::max(g, 1);
  for (int i = 0; i < g; ++i) {
    block = block && c.ranks[i] == i;
    strided = strided && c.ranks[i] == i * s;
  }
  if (!block && !strided)
    return refuse("only groups of contiguous ranks (rank 0's first) or of every s-th rank from rank 0 are extrapolated");
  if (recorded_world % g != 0) return refuse("its groups do not split the world evenly");
  const int n = p.world();
  // Blocks of b ranks at the new world: a contiguous group is one, a strided one takes a rank of each.
  auto shape = [&](int b) -> GroupShape {
    return block ? GroupShape{b, 1, 1} : GroupShape{n / b, b, static_cast<double>(s) / b};
  };
  const int recorded_block = block ? g : s;
  if (groups == "fixed") {
    if (n % recorded_block != 0)
      return refuse("--groups fixed needs a world of a multiple of " + std::to_string(recorded_block) + " ranks");
    return shape(recorded_block);
  }
  if (groups == "proportional") {
    const int count = recorded_world / recorded_block;
    if (n % count != 0) return refuse("--groups proportional needs a world of a multiple of " + std::to_string(count) + " ranks");
    return shape(n / count);
  }
  if (groups == "site") {
    if (p.sites < 2) return refuse("--groups site needs a platform of sites (--setting SsNxP@...)");
    return shape(p.siteRanks());
  }
  throw ConfigError("simulate predict: --groups '" + groups + "': expected fixed, proportional or site");
}

// `c` at the new world, over the whole world or (members < world) over the caller's group, whose
// ranks extrapolate() fills in per rank.
CallSpec rescale(const CallSpec& c, int recorded_world, int members, const PlatformSpec& p, const PredictOptions& opts) {
  const std::string& algo = opts.algo;
  CallSpec out = c;
  out.ranks.clear();
  const auto n = static_cast<uint64_t>(members);
  const int recorded = c.ranks.empty() ? recorded_world : static_cast<int>(c.ranks.size());
  if (c.op == "allreduce") {
    out.algo = allreduceAlgo(c, members, p, algo);
    out.group_size = defaultGroupSize(p, out.algo);
    if (algo != "recorded" && out.algo == comm::Algo::hierarchical)
      out.node_piece = opts.node_piece == 0 ? 0 : (c.node_piece > 0 ? c.node_piece : opts.node_piece);
  } else if (c.op == "broadcast") {  // what the communicator would choose at the new size
    if (algo != "recorded") out.algo = comm::autoBroadcast(c.bytes, static_cast<int>(n), c.segment_bytes);
  } else if (c.op == "allgatherv") {
    const uint64_t total = c.rank_bytes.empty()
                               ? c.bytes
                               : std::accumulate(c.rank_bytes.begin(), c.rank_bytes.end(), uint64_t{0});
    const uint64_t share = total / static_cast<uint64_t>(recorded);
    out.rank_bytes.assign(n, share);
    out.bytes = share * n;
    const comm::AllgatherChoice how = allgatherAlgo(c, members, p, algo);
    out.algo = how.algo;
    out.group_size = how.group_size;
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
  const int n = platform.world();
  RankProgram p = rank0;
  std::vector<GroupShape> group(p.calls.size());  // per call: its group at the new world
  bool grouped = false;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    if (p.calls[i].p2p())
      throw ConfigError("simulate predict: the timeline has point-to-point calls (" + p.calls[i].op +
                        ": pipeline stages or gossip), which rank 0's program cannot stand for on other ranks; "
                        "`simulate replay` runs such a timeline at its own size");
    group[i] = groupShape(p.calls[i], recorded_world, platform, opts.groups);
    grouped = grouped || group[i].size > 0;
    p.calls[i] = rescale(scaled(p.calls[i], group[i].share), recorded_world, group[i].size > 0 ? group[i].size : n,
                         platform, opts);
  }
  auto faster = [&opts](std::vector<ReplayItem>& items) {
    for (auto& it : items)
      if (it.kind == ReplayItem::sleep) it.seconds /= opts.compute_speedup;
  };
  faster(p.main);
  for (auto& b : p.buckets) faster(b);
  for (auto& b : p.background) faster(b);
  std::vector<RankProgram> out(static_cast<size_t>(n), p);
  if (!grouped) return out;
  for (int r = 0; r < n; ++r)  // each rank's calls of a group name its own group
    for (size_t i = 0; i < group.size(); ++i) {
      const GroupShape& gs = group[i];
      if (gs.size == 0) continue;
      auto& ranks = out[r].calls[i].ranks;
      ranks.resize(gs.size);
      for (int k = 0; k < gs.size; ++k)
        ranks[k] = gs.stride == 1 ? r / gs.size * gs.size + k : r % gs.stride + k * gs.stride;
    }
  return out;
}

StepWork stepWork(const RankProgram& p) {
  StepWork w;
  bool started = false;
  double slept = 0;
  for (const auto& it : p.main) {  // from the first step's start to the last one's end
    if (it.kind == ReplayItem::step_begin) started = true;
    if (it.kind == ReplayItem::sleep && started) slept += it.seconds;
    if (it.kind == ReplayItem::step_end) w.compute_s = slept;
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
