// `lowcomm simulate replay` (one training timeline on a simulated platform) and `lowcomm
// simulate validate` (every cluster row of a bench/e2e output directory, predicted against
// measured).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "cli_util.h"
#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/replay.h"
#include "lowcomm/train/config.h"
#include "simulate_commands.h"

namespace lowcomm::cli {

namespace fs = std::filesystem;

namespace {

// The calibration file for a setting: `--calibration` values are FILE (every setting) or
// SETTING=FILE; the last match wins. Empty: none.
std::string calibrationFor(const std::string& setting, const std::vector<std::string>& values) {
  std::string file;
  for (const auto& v : values) {
    const auto eq = v.find('=');
    if (eq == std::string::npos) file = v;
    else if (v.substr(0, eq) == setting) file = v.substr(eq + 1);
  }
  return file;
}

// Where the links come from: `--calibration` values and whether the links are plain (no tbf).
struct Links {
  std::vector<std::string> calibration;
  bool plain = false;
  int streams = 0;  // sites: TCP streams per pair across the WAN; 0: the run's comm.streams (1 without a run)
};

// The setting's nodes, processes and rate on the calibrated (or default) links, shaped as
// tools/cluster shapes them (burst and queue) unless `links.plain`.
sim::PlatformSpec platformFor(const std::string& setting, const Links& links) {
  const auto& calibrations = links.calibration;
  const auto parsed = sim::parseSetting(setting);
  const std::string calibration = calibrationFor(setting, calibrations);
  sim::PlatformSpec p = calibration.empty() ? sim::PlatformSpec{} : sim::loadCalibration(calibration);
  useSetting(p, parsed);
  if (links.plain) p.link_burst_bytes = p.link_queue_s = 0;
  p.streams = std::max(1, links.streams);
  sim::validate(p);
  return p;
}

double meanOf(const std::vector<uint64_t>& v) {
  return v.empty() ? 0.0 : static_cast<double>(std::accumulate(v.begin(), v.end(), uint64_t{0})) / v.size();
}

// What a node's link carries besides the payload it sends: a share per payload byte (headers
// of the data's packets, acknowledgements of what it receives) and bytes per message (Gloo's
// preamble and its two rendezvous notices, each a packet of its own, and their acknowledgements).
// The defaults are the least-squares fit to the eight 4x1@1gbit rows of docs/benchmarks/simulator.md's
// validation run (kernel counters against the replay's inter-node payload and messages).
//
// Across sites the share is the packets' own, not a fit: a lossy WAN stream is slow, and Linux
// sizes a TCP packet (TSO/GSO autosizing, tcp_tso_autosize) to about 1 ms of its pacing rate
// (1.2 x its rate in congestion avoidance), at least 2 segments, at most 64 KiB; so each packet of
// `gso` segments carries header_bytes (Ethernet 14, IP 20, TCP 20 + 12 of timestamps) that the
// node's interface counts, a lost segment is sent again (the loss share of the data), and the
// receiver acknowledges every ack_segments segments (delayed ACKs) with a header-only packet.
// On 2s2x1@1gbit/100mbit,50ms,0.1% the nodes sending across counted 1.8-2.0 segments per packet,
// their receivers one ACK per ~3.4 segments (fewer than delayed ACKs send: the kernel merges ACKs
// of segments that arrive together); ack_segments stays RFC 1122's 2, within 0.3 % of those bytes.
struct WireModel {
  double per_byte = 0.00202;
  double per_message = 693;
  double header_bytes = 66;
  double ack_segments = 2;
  // Segments per packet of one stream across the WAN of `p` (its striped streams share the WAN).
  static double gsoSegments(const sim::PlatformSpec& p) {
    const double wan = p.wan_Bps * p.wan_factor / std::max(1, p.streams);
    const double cap = p.streamCapBps();
    const double rate = cap > 0 ? std::min(cap, wan) : wan;
    return std::clamp(std::floor(1.2 * rate * 1e-3 / p.mss_bytes), 2.0, std::floor(65536 / p.mss_bytes));
  }
  // Wire bytes of a rank that sent `payload` to other nodes, `site_payload` of it to other sites
  // (and, on average over ranks, received as much from them), in `messages` messages.
  double wire(const sim::PlatformSpec& p, double payload, double site_payload, double messages) const {
    const double lan = (payload - site_payload) * (1 + per_byte) + messages * per_message;
    if (!(site_payload > 0)) return lan;
    const double data = site_payload * (1 + p.wan_loss) * (1 + header_bytes / (gsoSegments(p) * p.mss_bytes));
    const double acks = site_payload * header_bytes / (ack_segments * p.mss_bytes);
    return lan + data + acks;
  }
};

void writeJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  writeFileAtomically(path, j.dump(1) + "\n");
}

void addReplayOptions(CLI::App& app, sim::ReplayOptions& o, Links& links) {
  app.add_option("--first-step", o.first_step, "the first step replayed (0-based)")->capture_default_str();
  app.add_option("--steps", o.steps, "how many steps (0 = all)")->capture_default_str();
  app.add_option("--calibration", links.calibration,
                 "a `simulate calibrate` output (link rate factor, latency, hosts): FILE for every setting or "
                 "SETTING=FILE; repeatable");
  app.add_flag("--plain-links", links.plain,
               "links without the emulated cluster's tbf burst and queue (a real cluster's NICs)");
  app.add_option("--streams", links.streams,
                 "settings of sites: TCP streams per pair across the WAN (comm.streams); 0: validate takes each "
                 "run's own (its run/config.toml), replay 1")
      ->capture_default_str();
}

}  // namespace

int simulateReplay(int argc, char** argv) {
  std::string timeline, setting, json;
  Links links;
  sim::ReplayOptions o;
  CLI::App app{"Replay a training run's timeline (lowcomm train --timeline) on a simulated cluster"};
  app.add_option("--timeline", timeline, "Chrome trace written by lowcomm train --timeline")->required();
  app.add_option("--setting", setting, "NODESxPROCS@RATE, e.g. 4x1@1gbit")->required();
  addReplayOptions(app, o, links);
  app.add_option("--json", json, "write the result here");
  if (!parseArgs(app, argc, argv)) return 0;
  const auto p = platformFor(setting, links);
  const auto programs = sim::readTimeline(timeline, o);
  const auto r = sim::replay(p, programs);
  std::printf("# %s, %d steps from step %d: %llu calls replayed%s\n", setting.c_str(), r.steps, o.first_step,
              static_cast<unsigned long long>(r.calls),
              r.unsupported_calls ? (", " + std::to_string(r.unsupported_calls) + " not (outside a bucket)").c_str() : "");
  std::printf("# %4s %14s %15s %8s %14s %14s %10s\n", "rank", "measured ms", "predicted ms", "error", "sent MB",
              "inter-node MB", "messages");
  for (int k = 0; k < r.ranks; ++k)
    std::printf("%6d %14.2f %15.2f %7.1f%% %14.2f %14.2f %10llu\n", k, r.measured_step_by_rank[k] * 1e3,
                r.predicted_step_by_rank[k] * 1e3,
                100 * (r.predicted_step_by_rank[k] - r.measured_step_by_rank[k]) / r.measured_step_by_rank[k],
                r.bytes_sent[k] / 1e6, r.inter_node_sent[k] / 1e6, static_cast<unsigned long long>(r.messages_sent[k]));
  std::printf("# step: measured %.2f ms, predicted %.2f ms (%+.1f %%)\n", r.measured_step_s * 1e3,
              r.predicted_step_s * 1e3, 100 * (r.predicted_step_s - r.measured_step_s) / r.measured_step_s);
  writeJson(json, {{"setting", setting}, {"steps", r.steps}, {"first_step", o.first_step},
                   {"measured_step_s", r.measured_step_s}, {"predicted_step_s", r.predicted_step_s},
                   {"measured_step_s_by_rank", r.measured_step_by_rank},
                   {"predicted_step_s_by_rank", r.predicted_step_by_rank}, {"bytes_sent", r.bytes_sent},
                   {"inter_node_sent", r.inter_node_sent}, {"messages_sent", r.messages_sent}, {"calls", r.calls},
                   {"unsupported_calls", r.unsupported_calls}});
  return 0;
}

namespace {

nlohmann::json readJsonFile(const fs::path& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read '" + path.string() + "'");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("'" + path.string() + "' is not JSON: " + e.what());
  }
}

}  // namespace

// A stream_c whose bound exceeds any WAN rate here (BBR: no bound from loss).
constexpr double kNoLossBound = 1e6;

bool useRunStreams(sim::PlatformSpec& p, const std::string& run_dir) {
  const fs::path run(run_dir), config = run / "run" / "config.toml";
  if (!fs::exists(config)) return false;
  const auto c = train::loadConfig(config.string());
  if (c.comm.streams != comm::kAutoStreams) p.streams = static_cast<int>(c.comm.streams);
  if (fs::exists(run / "summary.json")) {
    const auto s = readJsonFile(run / "summary.json");
    if (s.contains("streams") && s["streams"].contains("per_cross_site_pair"))
      p.streams = s["streams"]["per_cross_site_pair"].get<int>();
  }
  p.stripe_min_bytes = static_cast<uint64_t>(c.comm.stripe_min_bytes);
  p.eager_max_bytes = static_cast<uint64_t>(c.comm.eager_max_bytes);
  if (c.comm.congestion_control != "bbr") return false;
  p.stream_c = kNoLossBound;
  return true;
}

namespace {

// One bench/e2e row replayed: predicted against measured, or why it was not.
nlohmann::json validateRow(const fs::path& dir, const nlohmann::json& row, const sim::ReplayOptions& o,
                           const Links& links, const WireModel& wm) {
  const std::string setting = row.at("setting"), strategy = row.at("strategy");
  nlohmann::json out = {{"setting", setting}, {"strategy", strategy}};
  // bench/e2e names a run's directory after its setting with every '/' as '-' (settings of sites).
  std::string setting_dir = setting;
  std::replace(setting_dir.begin(), setting_dir.end(), '/', '-');
  const fs::path timeline = dir / setting_dir / strategy / "timeline.json";
  auto skip = [&out](const char* why) {
    out["skipped"] = why;
    return out;
  };
  if (setting.rfind("local", 0) == 0) return skip("no cluster (shared memory is not simulated)");
  if (!fs::exists(timeline)) return skip("no timeline.json (rerun this bench/e2e row)");
  auto p = platformFor(setting, links);
  if (links.streams == 0) useRunStreams(p, (dir / setting_dir / strategy).string());
  auto programs = sim::readTimeline(timeline.string(), o);
  // The whole run (its bytes are compared unscaled): its meter and wire counters include the
  // timeline's own gather.
  if (o.first_step == 0 && o.steps == 0) sim::appendTimelineGather(programs, timeline.string());
  const auto r = sim::replay(p, programs);
  const double scale = static_cast<double>(row.at("steps").get<int>()) / std::max(1, r.steps);
  const double payload = meanOf(r.bytes_sent) * scale;
  double inter = 0, site = 0, msgs = 0;
  for (int k = 0; k < r.ranks; ++k) {
    inter += static_cast<double>(r.inter_node_sent[k]);
    site += static_cast<double>(r.inter_site_sent[k]);
    msgs += static_cast<double>(r.messages_sent[k]) * r.inter_node_sent[k] / std::max<uint64_t>(1, r.bytes_sent[k]);
  }
  const double wire = wm.wire(p, inter / r.ranks * scale, site / r.ranks * scale, msgs / r.ranks * scale);
  out.update({{"predicted_step_s", r.predicted_step_s}, {"measured_step_s", r.measured_step_s},
              {"step_error", (r.predicted_step_s - r.measured_step_s) / r.measured_step_s},
              {"predicted_payload_bytes", payload}, {"measured_payload_bytes", row.value("payload_bytes_per_rank", 0.0)},
              {"predicted_inter_node_payload_bytes", inter / r.ranks * scale},
              {"predicted_inter_node_messages", msgs / r.ranks * scale}, {"steps_replayed", r.steps},
              {"unsupported_calls", r.unsupported_calls}});
  if (p.sites > 1) {
    out["streams"] = p.streams;
    out["stream_cap_Bps"] = p.streamCapBps();
    const double site0 = static_cast<double>(r.inter_site_sent.at(0)) * scale;
    out["predicted_inter_site_payload_bytes_rank0"] = site0;
    if (row.contains("inter_site_payload_bytes_rank0") && row["inter_site_payload_bytes_rank0"].is_number()) {
      const double measured = row["inter_site_payload_bytes_rank0"];
      out.update({{"measured_inter_site_payload_bytes_rank0", measured},
                  {"inter_site_bytes_error", measured > 0 ? (site0 - measured) / measured : 0.0}});
    }
  }
  if (row.contains("wire_bytes_per_rank") && row["wire_bytes_per_rank"].is_number()) {
    const double measured = row["wire_bytes_per_rank"];
    out.update({{"predicted_bytes", wire}, {"measured_bytes", measured}, {"bytes_error", (wire - measured) / measured}});
  }
  return out;
}

// bench/e2e's settings and strategies that validate runs when given no directory: every setting
// of the end-to-end table, each strategy the replay covers, 300 steps (a third of the table's).
constexpr const char* kShortSettings =
    "4x1@1gbit:ddp+bf16+topk+powersgd+auto+ab+local_sgd4+zero1,4x1@100mbit:ddp+bf16+topk+powersgd+ab,"
    "2x2@1gbit:ddp+topk+powersgd+ab";

// Runs the shortened bench/e2e (next to this binary's build directory) into `out`; it keeps runs
// that are already there.
void runShortE2e(const std::string& out, const std::string& settings) {
  const fs::path exe = fs::canonical("/proc/self/exe");
  const fs::path script = exe.parent_path().parent_path() / "bench" / "e2e";
  if (!fs::exists(script))
    throw ConfigError("simulate validate: no E2E_DIR given, and no bench/e2e next to " + exe.string() +
                      " to make one");
  std::vector<std::string> args = {"/usr/bin/python3", script.string(), out, "--settings", settings,
                                   "--set", "data.batch_size=32", "--set", "schedule.epochs=2",
                                   "--set", "schedule.max_steps=300", "--set", "logging.eval_every=100",
                                   "--prefix", "val", "--lowcomm", exe.string()};
  std::string cmd;
  for (const auto& a : args) cmd += "'" + a + "' ";
  std::printf("# running the shortened bench/e2e (needs root for the cluster):\n#   %s\n", cmd.c_str());
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) throw Error("simulate validate: bench/e2e failed (status " + std::to_string(rc) + ")");
}

}  // namespace

int simulateValidate(int argc, char** argv) {
  std::string dir, json;
  Links links;
  sim::ReplayOptions o;
  WireModel wm;
  CLI::App app{"Predict every cluster row of a bench/e2e output directory from its timeline and compare"};
  std::string out = "runs/validate", settings = kShortSettings;
  app.add_option("dir", dir, "bench/e2e OUT_DIR (its runs must have timeline.json); none: run a shortened bench/e2e");
  app.add_option("--out", out, "without a directory: where the shortened bench/e2e writes")->capture_default_str();
  app.add_option("--settings", settings, "without a directory: bench/e2e --settings")->capture_default_str();
  addReplayOptions(app, o, links);
  app.add_option("--wire-per-byte", wm.per_byte, "wire bytes per payload byte besides the payload (headers, acks)")
      ->capture_default_str();
  app.add_option("--wire-per-message", wm.per_message, "wire bytes per message besides its payload")
      ->capture_default_str();
  app.add_option("--json", json, "write the rows here");
  if (!parseArgs(app, argc, argv)) return 0;
  if (dir.empty()) {
    runShortE2e(out, settings);
    dir = out;
  }
  const auto e2e = readJsonFile(fs::path(dir) / "e2e.json");
  if (!e2e.contains("rows") || !e2e["rows"].is_array())
    throw ConfigError("'" + (fs::path(dir) / "e2e.json").string() + "' has no rows (not a bench/e2e output)");
  nlohmann::json rows = nlohmann::json::array();
  std::printf("# %-14s %-16s %11s %11s %7s %11s %11s %7s\n", "setting", "strategy", "step ms", "predicted", "error",
              "wire MB", "predicted", "error");
  for (const auto& row : e2e["rows"]) {
    nlohmann::json v;
    try {
      v = validateRow(dir, row, o, links, wm);
    } catch (const Error& e) {  // one row's timeline that cannot be replayed: say so, go on
      v = {{"setting", row.value("setting", "?")}, {"strategy", row.value("strategy", "?")},
           {"skipped", std::string("failed: ") + e.what()}};
    }
    if (v.contains("skipped")) {
      std::printf("  %-14s %-16s skipped: %s\n", v["setting"].get<std::string>().c_str(),
                  v["strategy"].get<std::string>().c_str(), v["skipped"].get<std::string>().c_str());
    } else {
      const bool wire = v.contains("measured_bytes");
      std::printf("  %-14s %-16s %11.1f %11.1f %6.1f%% %11.1f %11.1f %6.1f%%\n", v["setting"].get<std::string>().c_str(),
                  v["strategy"].get<std::string>().c_str(), v["measured_step_s"].get<double>() * 1e3,
                  v["predicted_step_s"].get<double>() * 1e3, v["step_error"].get<double>() * 100,
                  wire ? v["measured_bytes"].get<double>() / 1e6 : 0.0, wire ? v["predicted_bytes"].get<double>() / 1e6 : 0.0,
                  wire ? v["bytes_error"].get<double>() * 100 : 0.0);
    }
    std::fflush(stdout);
    rows.push_back(std::move(v));
  }
  writeJson(json, rows);
  return 0;
}

}  // namespace lowcomm::cli
