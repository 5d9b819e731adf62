// `lowcomm simulate collectives`: the comm layer's algorithms on a simulated cluster (SimGrid),
// one row per (op, algo, size) in `bench collectives`' format with backend "simgrid".
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "bench_options.h"
#include "cli_util.h"
#include "commands.h"
#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/collectives.h"
#include "simulate_commands.h"

namespace lowcomm::cli {

namespace {

// A fit's range as "lo-hi unit", the values scaled (e.g. 1e3: seconds shown in ms).
std::string rangeText(const sim::FitRange& r, double scale, const std::string& unit) {
  std::ostringstream o;
  o << r.lo * scale << "-" << r.hi * scale << unit;
  return o.str();
}

std::string nodeMemoryRange() {
  return rangeText({std::pow(10.0, sim::kNodeMemoryLog10.lo), std::pow(10.0, sim::kNodeMemoryLog10.hi)}, 1e-9, " GB/s");
}

double busFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// nccl-tests' sizes: allgather/reduce_scatter/alltoall count the whole buffer; the simulator
// needs it to split evenly over the ranks.
size_t roundedBytes(const std::string& op, size_t bytes, size_t es, int n) {
  const bool per_block = op == "allgather" || op == "reduce_scatter" || op == "alltoall";
  const size_t unit = es * (per_block ? static_cast<size_t>(n) : 1);
  return std::max(unit, bytes / unit * unit);
}

int simulateCollectives(int argc, char** argv) {
  sim::PlatformSpec p;
  std::string setting = "4x1@1gbit", sizes = "4B:256MiB", ops = "allreduce", algos = "ring,hd", dtype = "f32", json,
              calibration;
  double latency_us = p.link_latency_s * 1e6, reduce_gbps = p.reduce_Bps / 1e9, loopback_gbps = p.loopback_Bps / 1e9,
         node_memory_gbps = p.node_memory_Bps / 1e9;
  size_t segment = comm::CommOptions{}.segment_bytes, shm_piece = comm::CommOptions{}.shm_piece_bytes;
  std::string shm = "auto";
  int group_size = 0;
  std::string topology = "star";
  CLI::App app{"Simulate collectives on a modelled cluster (SimGrid): the same algorithm code as the communicator"};
  app.add_option("--setting", setting, "NODESxPROCS@RATE, as bench/e2e: 4x1@100mbit, 2x2@1gbit")->capture_default_str();
  app.add_option("--sizes", sizes, "LO:HI (powers of two) or a list, e.g. 4B:256MiB or 4B,64MiB")->capture_default_str();
  app.add_option("--ops", ops, "allreduce,allgather,broadcast,reduce_scatter,alltoall,barrier")->capture_default_str();
  auto listed = [](const std::string& op) {  // from the algorithm table
    std::string out;
    for (const auto& a : sim::simulatedAlgorithms(op)) out += (out.empty() ? "" : ",") + a;
    return out;
  };
  app.add_option("--algos", algos,
                 "allreduce algorithms: " + listed("allreduce") +
                     ", and ina (in-network aggregation: the star's switch sums; a node's ranks sum in its memory "
                     "first); broadcast: " + listed("broadcast") + " (none listed: tree); allgather: " +
                     listed("allgather") + " (none listed: ring)")
      ->capture_default_str();
  app.add_option("--topology", topology,
                 "star (the emulated cluster's), or rail (rail-optimised: a NIC per rank on rail switch = local rank)")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "element type")->capture_default_str();
  app.add_option("--segment", segment, "pipelining segment of ring/tree algorithms, bytes")->capture_default_str();
  app.add_option("--group-size", group_size, "ranks per group for hier, rails and sites (0 = processes per node; sites: per site)")->capture_default_str();
  app.add_option("--latency-us", latency_us, "latency of each link (a route between hosts crosses two)")
      ->capture_default_str();
  app.add_option("--bandwidth-factor", p.bandwidth_factor, "achieved / nominal link rate")->capture_default_str();
  app.add_option("--reduce-gbps", reduce_gbps, "a core's reduction and copy speed, GB/s")->capture_default_str();
  app.add_option("--loopback-gbps", loopback_gbps, "bandwidth between ranks of one node, GB/s")->capture_default_str();
  app.add_option("--node-memory-gbps", node_memory_gbps,
                 "a rank's copy and sum speed in its node's shared memory (hier), GB/s")->capture_default_str();
  app.add_option("--shm", shm, "hier allreduce: each node's part in shared memory (auto, as the communicator) or over TCP (off)")
      ->capture_default_str();
  app.add_option("--shm-piece", shm_piece, "hier in shared memory: the segment's piece, bytes")->capture_default_str();
  app.add_option("--cores", p.cores, "cores per node")->capture_default_str();
  app.add_option("--streams", p.streams, "sites: TCP streams per pair across the WAN (comm.streams)")->capture_default_str();
  app.add_option("--stripe-min", p.stripe_min_bytes, "sites: smallest message striped over the streams, bytes")
      ->capture_default_str();
  app.add_option("--eager-max", p.eager_max_bytes,
                 "sites: largest message sent between sites without waiting for the receiver's notice, bytes "
                 "(comm.eager_max_bytes; 0 = off)")
      ->capture_default_str();
  app.add_option("--json", json, "write all rows to this JSON file");
  app.add_option("--calibration", calibration,
                 "a `simulate calibrate` output: its bandwidth factor, latency and host values replace the options");
  if (!parseArgs(app, argc, argv)) return 0;
  const auto parsed = sim::parseSetting(setting);
  if (!calibration.empty()) {
    const int streams = p.streams;
    const uint64_t stripe_min = p.stripe_min_bytes, eager_max = p.eager_max_bytes;
    p = sim::loadCalibration(calibration);
    p.streams = streams, p.stripe_min_bytes = stripe_min, p.eager_max_bytes = eager_max;
    latency_us = p.link_latency_s * 1e6;
  } else {
    p.link_latency_s = latency_us * 1e-6;
    p.reduce_Bps = reduce_gbps * 1e9;
    p.loopback_Bps = loopback_gbps * 1e9;
    p.node_memory_Bps = node_memory_gbps * 1e9;
  }
  if (shm != "auto" && shm != "off") throw ConfigError("--shm '" + shm + "': expected auto or off");
  useSetting(p, parsed);
  if (topology != "star" && topology != "rail")
    throw ConfigError("--topology '" + topology + "': simulate collectives runs on star or rail (fat-tree and torus: "
                      "simulate predict)");
  p.topology = topology;
  if (topology != "star") p.link_burst_bytes = p.link_queue_s = 0;  // the emulated cluster's tbf shapes a star
  sim::validate(p);
  const auto dt = comm::parseDType(dtype);
  const size_t es = comm::dtypeSize(dt);
  const int n = p.world();
  nlohmann::json rows = nlohmann::json::array();
  std::printf("# %s: %d nodes x %d processes, %s, %.0f Mbit/s per link, %.0f us per link\n", setting.c_str(), p.nodes,
              p.ppn, topology.c_str(), p.link_Bps * 8 / 1e6, latency_us);
  std::printf("#%11s %15s %9s %12s %9s %9s %14s\n", "size (B)", "op", "algo", "time_us", "algbw", "busbw",
              "inter-node B");
  for (const auto& op : splitList(ops)) {
    auto op_algos = std::vector<std::string>{sim::simulatedAlgorithms(op)[0]};
    if (op == "allreduce" || op == "broadcast" || op == "allgather") {  // --algos' entries for this op
      const auto mine = algosFor(op, splitList(algos));
      if (!mine.empty() || op == "allreduce") op_algos = mine;
    }
    for (const auto& algo : op_algos) {
      for (size_t requested : parseSizes(sizes)) {
        sim::CollectiveSpec s;
        s.op = op;
        const bool ina = op == "allreduce" && algo == "ina";
        s.algo = (op == "allreduce" && !ina) || op == "broadcast" || op == "allgather" ? comm::parseAlgo(algo)
                                                                                       : comm::Algo::ring;
        s.bytes = op == "barrier" ? 0 : roundedBytes(op, requested, es, n);
        s.dtype = dt;
        s.segment_bytes = segment;
        s.group_size = group_size;
        if (op == "allreduce" && s.algo == comm::Algo::hierarchical && shm == "auto") s.node_piece = shm_piece;
        sim::PlatformSpec run = p;
        run.in_network_aggregation = ina;
        const auto r = sim::simulateCollective(run, s);
        const double us = r.time_s * 1e6;
        const double algbw = us > 0 ? static_cast<double>(s.bytes) / r.time_s / 1e9 : 0;
        const double busbw = algbw * busFactor(op, n);
        std::printf("%12zu %15s %9s %12.1f %9.3f %9.3f %14llu\n", s.bytes, op.c_str(), algo.c_str(), us, algbw, busbw,
                    static_cast<unsigned long long>(r.inter_node_bytes));
        std::fflush(stdout);
        rows.push_back({{"op", op}, {"algo", algo}, {"backend", "simgrid"}, {"world", n}, {"dtype", comm::dtypeName(dt)},
                        {"bytes", s.bytes}, {"time_us", us}, {"algbw_GBps", algbw}, {"busbw_GBps", busbw},
                        {"wrong", 0}, {"setting", setting}, {"topology", topology}, {"inter_node_bytes", r.inter_node_bytes},
                        {"bytes_sent", r.bytes_sent}, {"node_piece", r.node_piece}});
        if (op == "barrier") break;
      }
    }
  }
  if (!json.empty()) {
    writeFileAtomically(json, rows.dump(1) + "\n");
  }
  return 0;
}

void printCalibration(const sim::Calibration& c) {
  std::printf("#%11s %15s %9s %14s %14s %8s\n", "size (B)", "op", "algo", "measured_us", "simulated_us", "error");
  for (const auto& r : c.rows)
    std::printf("%12zu %15s %9s %14.1f %14.1f %7.1f%%\n", r.measured.bytes, r.measured.op.c_str(),
                (r.measured.algo + (r.measured.node_piece ? "+shm" : "")).c_str(),
                r.measured.time_s * 1e6, r.simulated_s * 1e6, r.error * 100);
  std::printf("# mean |error| %.1f %%, max %.1f %%\n", c.mean_abs_error * 100, c.max_abs_error * 100);
}

// Fits the links' achieved rate and latency to `bench collectives --cluster` rows of one setting,
// then host values (and, with --link-timeline, the links' rate) to training runs' timelines.
int simulateCalibrate(int argc, char** argv) {
  std::string setting, out, base;
  std::vector<std::string> measured, timelines, node_timelines, link_timelines, call_timelines, stream_timelines;
  size_t segment = comm::CommOptions{}.segment_bytes;
  sim::PlatformSpec p;
  bool fit = true, call_overheads = false;
  int steps = 100;
  CLI::App app{"Fit the simulated links to measured collectives (bench collectives --cluster ... --json FILE), "
               "then the links' rate in training, the host's time per message and the node memory's rate to training "
               "runs' timelines"};
  app.add_option("--setting", setting, "the setting the rows were measured on, NODESxPROCS@RATE or sites")->required();
  app.add_option("--measured", measured,
                 "bench collectives --json output; repeatable, and for a setting of sites SETTING=FILE gives rows "
                 "measured at another loss (fits the WAN: its rate and round trip without loss, one stream's rate "
                 "under loss)");
  app.add_option("--timeline", timelines,
                 "a lowcomm train --timeline of a run on this setting: fits the time per message (after the links); "
                 "repeatable: one value for every run (least squares of their errors)");
  app.add_option("--node-timeline", node_timelines,
                 "a lowcomm train --timeline whose hier allreduces ran in shared memory (node_piece): fits the node "
                 "memory's rate in training (after the time per message); repeatable as --timeline");
  app.add_option("--link-timeline", link_timelines,
                 "a lowcomm train --timeline: fits the links' achieved rate to its steps (after the rows, before "
                 "--timeline), for links that carry training's traffic faster than the bulk rows; repeatable");
  app.add_option("--stream-timeline", stream_timelines,
                 "a lowcomm train --timeline of a run on this setting of sites, replayed with the run's own striping "
                 "(its summary and run/config.toml beside it): fits one stream's rate under loss (stream_c), or for a "
                 "run on BBR the WAN's rate in training (wan_factor), to its steps (after --link-timeline, before "
                 "--timeline); repeatable");
  app.add_option("--call-timeline", call_timelines,
                 "OP/ALGO=TIMELINE, e.g. allgatherv/ring=T: fits a host time per call of that kind to the run's steps "
                 "(last, after the node memory); repeatable, one value per kind");
  app.add_option("--timeline-steps", steps, "steps of the timeline replayed per trial")->capture_default_str();
  app.add_option("--calibration", base, "start from this calibration instead of fitting --measured rows (with the timeline fits)");
  app.add_option("--segment", segment, "the --segment the rows were measured with, bytes")->capture_default_str();
  app.add_option("--cores", p.cores, "cores per node")->capture_default_str();
  app.add_option("--out", out, "write the fitted platform here (JSON; simulate collectives --calibration)");
  app.add_flag("!--no-fit", fit, "only compare (validation of the current values)");
  app.add_flag("--call-overheads", call_overheads,
               "keep the links' latency and fit a host time per call for each op and algorithm to the rows below "
               "1 MiB instead (a per-call floor no link explains)");
  if (!parseArgs(app, argc, argv)) return 0;
  const auto parsed = sim::parseSetting(setting);
  useSetting(p, parsed);
  if (measured.empty() && timelines.empty() && node_timelines.empty() && link_timelines.empty() &&
      call_timelines.empty() && stream_timelines.empty())
    throw ConfigError("simulate calibrate: give --measured, --timeline, --node-timeline, --link-timeline, "
                      "--stream-timeline, --call-timeline or several");
  std::map<std::string, std::vector<std::string>> call_runs;  // by call kind, in the order first named
  std::vector<std::string> call_kinds;
  for (const auto& kv : call_timelines) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
      throw ConfigError("simulate calibrate: --call-timeline '" + kv + "' is not OP/ALGO=TIMELINE");
    const std::string kind = kv.substr(0, eq);
    if (!call_runs.count(kind)) call_kinds.push_back(kind);
    call_runs[kind].push_back(kv.substr(eq + 1));
  }
  if (call_overheads && !fit) throw ConfigError("simulate calibrate: --call-overheads fits; it does not go with --no-fit");
  if (!base.empty() && !measured.empty())
    throw ConfigError("simulate calibrate: --calibration replaces fitting --measured rows; give one of them");
  sim::Calibration c;
  c.platform = p;
  if (!base.empty()) {
    c.platform = sim::loadCalibration(base);
    useSetting(c.platform, p);
  }
  if (!measured.empty()) {
    const auto rows = readMeasuredFiles(setting, measured);
    if (p.sites > 1 && call_overheads) throw ConfigError("simulate calibrate: --call-overheads is not fitted across sites");
    c = !fit ? sim::evaluate(p, rows, segment)
             : p.sites > 1 ? sim::calibrateWan(p, rows, segment) : sim::calibrate(p, rows, segment, call_overheads);
    if (p.sites > 1) printWanCalibration(setting, c);
    std::printf("# %s: bandwidth factor %.4f (links at %.1f Mbit/s), latency %.1f us per link (%zu rows)\n",
                setting.c_str(), c.platform.bandwidth_factor,
                c.platform.link_Bps * c.platform.bandwidth_factor * 8 / 1e6, c.platform.link_latency_s * 1e6,
                rows.size());
    for (const auto& [key, h] : c.platform.call_overhead_s) std::printf("# host time per call %s: %.1f us\n", key.c_str(), h * 1e6);
    if (std::any_of(rows.begin(), rows.end(), [](const sim::MeasuredRow& r) { return r.node_piece > 0; })) {
      const std::string kept = c.node_memory_fitted || !fit
                                   ? ""
                                   : " (kept: no TCP rows of >= 1 MiB to fit the links first, or the rows of >= 1 MiB "
                                     "do not pin a rate in " + nodeMemoryRange() + ")";
      std::printf("# node memory (hier in shared memory): %.2f GB/s per rank%s\n", c.platform.node_memory_Bps / 1e9,
                  kept.c_str());
    }
    printCalibration(c);
  }
  // A host value fitted to the timelines' measured steps: `fit` on them, then `what` it found.
  auto fitTimelines = [&](const std::vector<std::string>& paths, auto fit, auto what) {
    sim::TrainingRuns runs;
    for (const auto& path : paths) {
      runs.push_back(sim::readTimeline(path, {0, steps}));
      if (static_cast<int>(runs.back().size()) != c.platform.world())
        throw ConfigError("simulate calibrate: '" + path + "' has " + std::to_string(runs.back().size()) +
                          " ranks, the setting " + setting + " " + std::to_string(c.platform.world()));
      for (const auto& prog : runs.back())
        for (double d : prog.measured_step_s)
          if (!(d > 0)) throw ConfigError("simulate calibrate: '" + path + "' has a step span of no duration");
    }
    const auto f = fit(c.platform, runs);
    c.platform = f.platform;
    std::printf("# %s: %s, from %zu run%s (%s)\n", setting.c_str(), what(f).c_str(), paths.size(),
                paths.size() == 1 ? "" : "s", steps > 0 ? ("up to " + std::to_string(steps) + " steps each").c_str() : "every step");
    for (size_t i = 0; i < paths.size(); ++i)
      std::printf("#   %s: replayed %.2f ms per step against %.2f ms measured (%+.1f %%)\n", paths[i].c_str(),
                  f.predicted_step_s[i] * 1e3, f.measured_step_s[i] * 1e3,
                  (f.predicted_step_s[i] / f.measured_step_s[i] - 1) * 100);
  };
  if (!link_timelines.empty())
    fitTimelines(link_timelines, sim::fitLinkRate, [](const sim::OverheadFit& f) {
      std::ostringstream o;
      o << "links at " << std::fixed << std::setprecision(4) << f.platform.bandwidth_factor << " x their rate in training"
        << (f.pinned ? "" : " (kept: the runs do not pin a factor in " + rangeText(sim::kLinkFactorRange, 1, "") + ")");
      return o.str();
    });
  if (!stream_timelines.empty()) {
    // Replayed with the runs' own striping (the first run's config and summary next to its
    // timeline), as `simulate validate` replays them; the calibration keeps none of it.
    const sim::PlatformSpec before = c.platform;
    const bool bbr = useRunStreams(c.platform, std::filesystem::path(stream_timelines.front()).parent_path().string());
    if (bbr) {
      fitTimelines(stream_timelines, sim::fitWanRate, [](const sim::OverheadFit& f) {
        std::ostringstream o;
        o << "the WAN at " << std::fixed << std::setprecision(4) << f.platform.wan_factor
          << " x its rate in training (the run's sockets on BBR: no loss bound per stream)"
          << (f.pinned ? "" : " (kept: the runs do not pin a factor in " + rangeText(sim::kLinkFactorRange, 1, "") + ")");
        return o.str();
      });
      c.platform.stream_c = before.stream_c;
    } else {
      fitTimelines(stream_timelines, sim::fitStreamRate, [](const sim::OverheadFit& f) {
        std::ostringstream o;
        o << "one stream under loss at MSS/RTT x " << std::fixed << std::setprecision(3) << f.platform.stream_c
          << " / p^" << f.platform.loss_exponent << " (" << std::setprecision(2) << f.platform.streamCapBps() * 8 / 1e6
          << " Mbit/s at " << f.platform.wan_loss * 100 << " %)"
          << (f.pinned ? "" : " (kept: the runs do not pin it in " + rangeText(sim::kStreamCRange, 1, "") + ")");
        return o.str();
      });
    }
    c.platform.streams = before.streams;
    c.platform.stripe_min_bytes = before.stripe_min_bytes;
    c.platform.eager_max_bytes = before.eager_max_bytes;
  }
  if (!timelines.empty())
    fitTimelines(timelines, sim::fitMessageOverhead, [](const sim::OverheadFit& f) {
      std::ostringstream o;
      o << std::fixed << std::setprecision(1) << f.platform.message_overhead_s * 1e6 << " us per message at the sender";
      return o.str();
    });
  if (!node_timelines.empty())
    fitTimelines(node_timelines, sim::fitNodeMemory, [](const sim::OverheadFit& f) {
      std::ostringstream o;
      o << "node memory at " << std::fixed << std::setprecision(2) << f.platform.node_memory_Bps / 1e9
        << " GB/s per rank in training" << (f.pinned ? "" : " (kept: the runs do not pin a rate in " + nodeMemoryRange() + ")");
      return o.str();
    });
  for (const auto& kind : call_kinds)
    fitTimelines(call_runs[kind], [&](const sim::PlatformSpec& start, const sim::TrainingRuns& runs) {
      return sim::fitCallOverhead(start, runs, kind);
    }, [&](const sim::OverheadFit& f) {
      std::ostringstream o;
      const auto it = f.platform.call_overhead_s.find(kind);
      o << std::fixed << std::setprecision(1) << (it == f.platform.call_overhead_s.end() ? 0.0 : it->second) * 1e6
        << " us per " << kind << " call"
        << (f.pinned ? "" : " (kept: the runs do not pin a time in " + rangeText(sim::kCallOverheadRange, 1e3, " ms") +
                                "; their calls hide behind other work)");
      return o.str();
    });
  if (!out.empty()) sim::saveCalibration(out, setting, c);
  return 0;
}

}  // namespace

int cmdSimulate(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << "usage: lowcomm simulate collectives|calibrate|replay|validate|predict|tune [options]   (see --help)\n";
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "collectives")) return simulateCollectives(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "calibrate")) return simulateCalibrate(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "replay")) return simulateReplay(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "validate")) return simulateValidate(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "predict")) return simulatePredict(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "tune")) return simulateTune(argc - 1, argv + 1);
  throw ConfigError(std::string("unknown simulation '") + argv[1] +
                    "' (expected: collectives, calibrate, replay, validate, predict, tune)");
}

}  // namespace lowcomm::cli
