// `lowcomm simulate predict`: a measured training run's step on a larger simulated cluster, for
// one or several node counts (a sweep), on a star, two-level fat-tree, 2-D torus or rails, or on
// a setting of sites (a star per site, the sites joined by WAN uplinks).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/predict.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "simulate_commands.h"

namespace lowcomm::cli {

namespace fs = std::filesystem;

namespace {

std::vector<int> parseNodes(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < 1) throw std::invalid_argument(item);
      out.push_back(n);
    } catch (const std::exception&) {
      throw ConfigError("--nodes: '" + item + "' is not a positive node count (expected a list such as 4,16,64)");
    }
  }
  if (out.empty()) throw ConfigError("--nodes: empty list");
  return out;
}

// Samples per rank and step from the run's config.toml next to the timeline (0: unknown).
double samplesPerRank(const std::string& timeline) {
  const fs::path cfg = fs::path(timeline).parent_path() / "config.toml";
  if (!fs::exists(cfg)) return 0;
  const auto c = train::loadConfig(cfg.string());
  return static_cast<double>(c.data.batch_size * c.strategy.accumulation);
}

double mean(const std::vector<uint64_t>& v) {
  return v.empty() ? 0.0 : static_cast<double>(std::accumulate(v.begin(), v.end(), uint64_t{0})) / v.size();
}

}  // namespace

int simulatePredict(int argc, char** argv) {
  std::string timeline, nodes = "4", rate = "25gbit", calibration, json, setting;
  sim::PlatformSpec base;
  base.topology = "fat-tree";
  double latency_us = 2, batch = 0;
  sim::ReplayOptions ro{1, 3};
  sim::PredictOptions po;
  sim::CoarseOptions coarse{128};
  CLI::App app{"Predict a measured training run's step on a larger simulated cluster"};
  app.add_option("--timeline", timeline, "Chrome trace written by lowcomm train --timeline (any world size)")->required();
  app.add_option("--topology", base.topology, "star, fat-tree, torus or rail (rail-optimised: a NIC per rank on rail switch = local rank)")->capture_default_str();
  app.add_option("--nodes", nodes, "node counts to simulate, e.g. 4,16,64 (a sweep)")->capture_default_str();
  app.add_option("--setting", setting,
                 "sites instead of --topology: SsNxP@LAN/WAN,RTT[,LOSS%] (e.g. 2s2x1@1gbit/100mbit,50ms,0.1%) gives the "
                 "sites, the LAN, the WAN and --ppn; --nodes counts the nodes of all sites (multiples of S)");
  app.add_option("--streams", base.streams, "with --setting: TCP streams per pair across the WAN (comm.streams)")
      ->capture_default_str();
  app.add_option("--ppn", base.ppn, "ranks per node")->capture_default_str();
  app.add_option("--rate", rate, "every link's rate, e.g. 25gbit, 100gbit")->capture_default_str();
  app.add_option("--latency-us", latency_us, "latency of each link (a route crosses 2 on a star, up to 4 on a fat-tree)")
      ->capture_default_str();
  app.add_option("--leaf-size", base.leaf_size, "fat-tree: nodes per leaf switch")->capture_default_str();
  app.add_option("--oversubscription", base.oversubscription, "fat-tree: a leaf's node links over its uplinks")
      ->capture_default_str();
  app.add_option("--shm-piece", po.node_piece,
                 "hier allreduce: each node's part in shared memory in pieces of this many bytes, as the communicator "
                 "with comm.shm = auto (0: over TCP, comm.shm = off)")
      ->capture_default_str();
  std::string allreduces, allgathers;  // from the algorithm table
  for (const auto& a : sim::simulatedAlgorithms("allreduce")) allreduces += ", " + a;
  for (const auto& a : sim::simulatedAlgorithms("allgather")) allgathers += a + ", ";
  app.add_option("--algo", po.algo,
                 "allreduce algorithm: auto, recorded" + allreduces + " (allgather: " + allgathers +
                     "or recorded as named, else automatic)")
      ->capture_default_str();
  app.add_flag("--ina", base.in_network_aggregation,
               "in-network aggregation: the switches sum every allreduce over several nodes (star: SwitchML-like; fat-tree: leaves and spines, ATP-like; a node's ranks sum in its memory first where they are contiguous)");
  app.add_option("--groups", po.groups,
                 "sub-group calls (AB-training, DiLoCo): fixed (groups keep their size), proportional (as many groups) or "
                 "site (the platform's sites are the blocks: DiLoCo's scope = site)")
      ->capture_default_str();
  app.add_option("--compute-speedup", po.compute_speedup,
                 "divide the measured compute and codec time by this (e.g. faster hardware than the recording's)")
      ->capture_default_str();
  app.add_option("--coarse-ring", coarse.max_ring,
                 "rings over more ranks (hier in node memory and rails: more nodes) than this run on a sample of them, "
                 "scaled (0: every rank, exact)")
      ->capture_default_str();
  app.add_option("--first-step", ro.first_step, "the first measured step used (0-based)")->capture_default_str();
  app.add_option("--steps", ro.steps, "how many measured steps")->capture_default_str();
  app.add_option("--calibration", calibration,
                 "a `simulate calibrate` output: its host values (reduction speed, cores, loopback, node memory, per-message "
                 "overhead); the links are the options'");
  app.add_option("--batch", batch, "samples per rank and step (default: from config.toml next to the timeline)");
  app.add_option("--json", json, "write the rows here");
  if (!parseArgs(app, argc, argv)) return 0;
  if (!setting.empty()) {  // the setting's network; the options' hosts (below) and streams
    const int streams = base.streams;
    base = sim::parseSetting(setting);
    if (base.sites < 2)
      throw ConfigError("simulate predict: --setting '" + setting + "' has no sites (use --topology and --rate)");
    base.streams = streams;
    rate = setting;
  } else {
    base.link_Bps = sim::parseRate(rate) / 8;
    base.link_latency_s = latency_us * 1e-6;
  }
  if (!calibration.empty()) {
    const auto cal = sim::loadCalibration(calibration);
    base.reduce_Bps = cal.reduce_Bps, base.cores = cal.cores, base.loopback_Bps = cal.loopback_Bps;
    base.node_memory_Bps = cal.node_memory_Bps;
    base.message_overhead_s = cal.message_overhead_s, base.notice_bytes = cal.notice_bytes;
  }
  if (batch <= 0) batch = samplesPerRank(timeline);
  const auto recorded = sim::readTimeline(timeline, ro);
  auto work = sim::stepWork(recorded[0]);
  work.compute_s /= po.compute_speedup, work.codec_s /= po.compute_speedup;
  std::printf("# %s: rank 0 of %zu, %zu steps from step %d; %s, %s links, %.1f us per link, algo %s, compute / %g\n",
              timeline.c_str(), recorded.size(), recorded[0].measured_step_s.size(), ro.first_step,
              base.topology.c_str(), rate.c_str(), latency_us,
              base.in_network_aggregation ? "ina (the switch sums)" : po.algo.c_str(), po.compute_speedup);
  const bool sites = base.sites > 1;
  std::printf("# %6s %6s %10s %12s %10s %10s %12s %10s %12s %12s %8s\n", "nodes", "ranks", "step ms", "samples/s",
              "compute", "codec", "exposed comm", "sent MB", "inter-node", sites ? "inter-site" : "cross-leaf", "sim s");
  nlohmann::json rows = nlohmann::json::array();
  for (int n : parseNodes(nodes)) {
    sim::PlatformSpec p = base;
    p.nodes = n;
    const auto programs = sim::extrapolate(recorded[0], static_cast<int>(recorded.size()), p, po);
    const auto r = sim::replay(p, programs, coarse);
    const double step_s = r.predicted_cycle_s;  // with what runs between the step spans
    const double samples = batch > 0 ? batch * r.ranks / step_s : 0;
    const double exposed = std::max(0.0, step_s - work.compute_s);
    const double steps = std::max(1, r.steps);
    rows.push_back({{"topology", p.topology}, {"nodes", n}, {"ppn", p.ppn}, {"ranks", r.ranks}, {"rate", rate},
                    {"oversubscription", p.topology == "fat-tree" ? p.oversubscription : 1}, {"compute_speedup", po.compute_speedup},
                    {"ina", p.in_network_aggregation},
                    {"predicted_step_s", step_s}, {"samples_per_s", samples},
                    {"compute_s", work.compute_s}, {"codec_s", work.codec_s}, {"exposed_comm_s", exposed},
                    {"compute_utilisation", step_s > 0 ? std::min(1.0, work.compute_s / step_s) : 0.0},
                    {"unsupported_calls", r.unsupported_calls},
                    {"bytes_sent_per_rank", mean(r.bytes_sent) / steps},
                    {"inter_node_bytes_per_rank", mean(r.inter_node_sent) / steps},
                    {"cross_leaf_bytes_per_rank", mean(r.inter_leaf_sent) / steps},
                    {"sites", p.sites}, {"inter_site_bytes_per_rank", mean(r.inter_site_sent) / steps},
                    {"simulation_s", r.wall_s},
                    {"coarse_calls", r.coarse_calls}, {"calls", r.calls}});
    const auto& row = rows.back();
    std::printf("  %6d %6d %10.2f %12.0f %10.2f %10.2f %12.2f %10.2f %12.2f %12.2f %8.1f\n", n, r.ranks,
                step_s * 1e3, samples, work.compute_s * 1e3, work.codec_s * 1e3, exposed * 1e3,
                row["bytes_sent_per_rank"].get<double>() / 1e6, row["inter_node_bytes_per_rank"].get<double>() / 1e6,
                row[sites ? "inter_site_bytes_per_rank" : "cross_leaf_bytes_per_rank"].get<double>() / 1e6, r.wall_s);
    std::fflush(stdout);
  }
  if (!json.empty()) train::writeFileAtomically(json, rows.dump(1) + "\n");
  return 0;
}

}  // namespace lowcomm::cli
