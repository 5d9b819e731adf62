#include "lowcomm/sim/calibrate.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/sim/collectives.h"
#include "fit.h"

namespace lowcomm::sim {

namespace {

// Rows of the ops the calibration fits (a barrier moves no bytes) whose algorithm the simulator
// runs as itself (the algorithm table).
bool simulated(const std::string& op, const std::string& algo) {
  if (op == "barrier" || op == "allgatherv" || !comm::opNamed(op)) return false;
  const auto algos = simulatedAlgorithms(op);
  return std::find(algos.begin(), algos.end(), algo) != algos.end();
}

}  // namespace

double loss(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t seg,
            const std::function<bool(const MeasuredRow&)>& use) {
  double sum = 0;
  int k = 0;
  for (const auto& r : rows) {
    if (!use(r)) continue;
    const double t = simulateCollective(rowPlatform(p, r), specFor(r, p, seg)).time_s;
    const double e = std::log(t / r.time_s);
    sum += e * e;
    ++k;
  }
  return k ? sum / k : 0;
}

double fitRows(const PlatformSpec& p, double PlatformSpec::*field, double lo, double hi, double (*value)(double),
               const std::vector<MeasuredRow>& rows, size_t seg, const std::function<bool(const MeasuredRow&)>& use) {
  return goldenMin(
      [&](double x) {
        PlatformSpec q = p;
        q.*field = value(x);
        return loss(q, rows, seg, use);
      },
      lo, hi, 18);
}

namespace {

// Simulated times of the rows selected by `use` (0 for the others).
std::vector<double> simulateRows(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t seg,
                                 const std::function<bool(const MeasuredRow&)>& use) {
  std::vector<double> t(rows.size(), 0);
  for (size_t i = 0; i < rows.size(); ++i)
    if (use(rows[i])) t[i] = simulateCollective(rowPlatform(p, rows[i]), specFor(rows[i], p, seg)).time_s;
  return t;
}

// Per "op/algo" of the selected rows: the host time per call h >= 0 that, added to each row's
// simulated time `sim` (without any), minimises the squared relative error (closed form).
std::map<std::string, double> fitCallOverheads(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t seg,
                                               const std::function<bool(const MeasuredRow&)>& use,
                                               const std::vector<double>& sim) {
  std::map<std::string, std::pair<double, double>> acc;  // sum (m - s) / m^2, sum 1 / m^2
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!use(rows[i])) continue;
    const double m = rows[i].time_s;
    auto& a = acc[callKey(specFor(rows[i], p, seg))];
    a.first += (m - sim[i]) / (m * m);
    a.second += 1 / (m * m);
  }
  std::map<std::string, double> h;
  for (const auto& [key, a] : acc) h[key] = std::max(0.0, a.first / a.second);
  return h;
}

}  // namespace

std::vector<MeasuredRow> readMeasured(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read measured collectives '" + path + "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw ConfigError("'" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_array()) throw ConfigError("'" + path + "' is not a `bench collectives --json` file (expected an array of rows)");
  std::vector<MeasuredRow> out;
  for (const auto& row : j) {
    for (const char* key : {"op", "algo", "backend", "bytes", "time_us"})
      if (!row.contains(key)) throw ConfigError("'" + path + "': a row has no '" + key + "'");
    if (row["backend"] != "lowcomm" || !simulated(row["op"], row["algo"])) continue;
    // Files written before `node_piece` existed: hier over TCP (which they measured).
    const size_t piece = row.contains("node_piece") ? row["node_piece"].get<size_t>() : 0;
    out.push_back({row["op"], row["algo"], row["bytes"].get<size_t>(), row["time_us"].get<double>() * 1e-6, piece});
    if (row.contains("streams")) out.back().streams = row["streams"].get<int>();
  }
  if (out.empty())
    throw ConfigError("'" + path + "' has no rows the simulator can replay (backend lowcomm; ring, hd, hier, ordered, tree "
                      "or pairwise; `auto` and `shm` rows are skipped)");
  return out;
}

PlatformSpec rowPlatform(const PlatformSpec& p, const MeasuredRow& row) {
  PlatformSpec q = p;
  if (row.wan_loss >= 0) q.wan_loss = row.wan_loss;
  if (row.streams > 0) q.streams = row.streams;
  return q;
}

CollectiveSpec specFor(const MeasuredRow& row, const PlatformSpec& p, size_t segment_bytes) {
  CollectiveSpec s;
  s.op = row.op;
  s.algo = row.op == "allreduce" || row.op == "broadcast" || row.op == "allgather" ? comm::parseAlgo(row.algo)
                                                                                   : comm::Algo::ring;
  const size_t unit = (row.op == "allgather" || row.op == "reduce_scatter" || row.op == "alltoall")
                          ? 4 * static_cast<size_t>(p.world())
                          : 4;
  s.bytes = std::max(unit, row.bytes / unit * unit);
  s.segment_bytes = segment_bytes;
  s.node_piece = row.node_piece;
  return s;
}

Calibration evaluate(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t segment_bytes) {
  Calibration c;
  c.platform = p;
  double sum = 0;
  for (const auto& r : rows) {
    CalibrationRow out{r, simulateCollective(rowPlatform(p, r), specFor(r, p, segment_bytes)).time_s, 0};
    out.error = (out.simulated_s - r.time_s) / r.time_s;
    sum += std::abs(out.error);
    c.max_abs_error = std::max(c.max_abs_error, std::abs(out.error));
    c.rows.push_back(out);
  }
  c.mean_abs_error = rows.empty() ? 0 : sum / static_cast<double>(rows.size());
  return c;
}

Calibration calibrate(const PlatformSpec& start, const std::vector<MeasuredRow>& rows, size_t segment_bytes,
                      bool call_overheads) {
  PlatformSpec p = start;
  if (call_overheads) p.call_overhead_s.clear();
  const auto large = [](const MeasuredRow& r) { return r.bytes >= (1u << 20) && r.node_piece == 0; };
  const auto node = [](const MeasuredRow& r) { return r.bytes >= (1u << 20) && r.node_piece > 0; };
  const auto small = [](const MeasuredRow& r) { return r.bytes < (1u << 20); };
  const bool any_large = std::any_of(rows.begin(), rows.end(), large);
  const bool any_node = std::any_of(rows.begin(), rows.end(), node);
  const bool any_small = std::any_of(rows.begin(), rows.end(), small);
  bool node_fitted = false;
  for (int round = 0; round < 2; ++round) {
    if (any_large)
      p.bandwidth_factor = fitRows(p, &PlatformSpec::bandwidth_factor, kLinkLo, kLinkHi, same, rows, segment_bytes, large);
    if (any_node && any_large) {  // the links from the TCP rows first
      const double lg = fitRows(p, &PlatformSpec::node_memory_Bps, kNodeLo, kNodeHi, tenTo, rows, segment_bytes, node);
      // Rows that do not pin it (e.g. faster than the simulation even with free copies, or
      // copies hidden by the pipelining): start's stays.
      node_fitted = nodeRatePinned(lg, [&](double x) {
        PlatformSpec q = p;
        q.node_memory_Bps = tenTo(x);
        return loss(q, rows, segment_bytes, node);
      });
      p.node_memory_Bps = node_fitted ? tenTo(lg) : start.node_memory_Bps;
    }
    if (any_small && !call_overheads)
      p.link_latency_s = fitRows(p, &PlatformSpec::link_latency_s, 0.0, 2e-3, same, rows, segment_bytes, small);
    if (any_small && call_overheads) {  // the latency stays; each algorithm's time per call fits
      PlatformSpec q = p;
      q.call_overhead_s.clear();
      p.call_overhead_s = fitCallOverheads(q, rows, segment_bytes, small, simulateRows(q, rows, segment_bytes, small));
    }
  }
  Calibration c = evaluate(p, rows, segment_bytes);
  c.node_memory_fitted = node_fitted;
  return c;
}

void saveCalibration(const std::string& path, const std::string& setting, const Calibration& c) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : c.rows)
    rows.push_back({{"op", r.measured.op}, {"algo", r.measured.algo}, {"bytes", r.measured.bytes},
                    {"node_piece", r.measured.node_piece}, {"wan_loss", rowPlatform(c.platform, r.measured).wan_loss},
                    {"streams", rowPlatform(c.platform, r.measured).streams}, {"measured_s", r.measured.time_s},
                    {"simulated_s", r.simulated_s}, {"error", r.error}});
  nlohmann::json j = {{"setting", setting},
                            {"nodes", c.platform.nodes},
                            {"ppn", c.platform.ppn},
                            {"link_Bps", c.platform.link_Bps},
                            {"bandwidth_factor", c.platform.bandwidth_factor},
                            {"link_latency_s", c.platform.link_latency_s},
                            {"loopback_Bps", c.platform.loopback_Bps},
                            {"reduce_Bps", c.platform.reduce_Bps},
                            {"node_memory_Bps", c.platform.node_memory_Bps},
                            {"cores", c.platform.cores},
                            {"notice_bytes", c.platform.notice_bytes},
                            {"message_overhead_s", c.platform.message_overhead_s},
                            {"link_burst_bytes", c.platform.link_burst_bytes},
                            {"link_queue_s", c.platform.link_queue_s},
                            {"call_overhead_s", c.platform.call_overhead_s},
                            {"mean_abs_error", c.mean_abs_error},
                            {"max_abs_error", c.max_abs_error},
                            {"rows", rows}};
  if (c.platform.sites > 1)
    j.update({{"sites", c.platform.sites}, {"wan_Bps", c.platform.wan_Bps}, {"wan_factor", c.platform.wan_factor},
              {"wan_rtt_s", c.platform.wan_rtt_s}, {"wan_rtt_extra_s", c.platform.wan_rtt_extra_s},
              {"wan_loss", c.platform.wan_loss}, {"stream_c", c.platform.stream_c}, {"mss_bytes", c.platform.mss_bytes},
              {"loss_exponent", c.platform.loss_exponent}});
  writeFileAtomically(path, j.dump(1) + "\n");
}

PlatformSpec loadCalibration(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read calibration '" + path + "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw ConfigError("calibration '" + path + "' is not JSON: " + e.what());
  }
  PlatformSpec p;
  auto num = [&](const char* key, double& out) {
    if (!j.contains(key) || !j[key].is_number()) throw ConfigError("calibration '" + path + "': no number '" + key + "'");
    out = j[key].get<double>();
  };
  double nodes = 0, ppn = 0, cores = 0;
  num("nodes", nodes);
  num("ppn", ppn);
  num("cores", cores);
  num("link_Bps", p.link_Bps);
  num("bandwidth_factor", p.bandwidth_factor);
  num("link_latency_s", p.link_latency_s);
  num("loopback_Bps", p.loopback_Bps);
  num("reduce_Bps", p.reduce_Bps);
  // Files written before these existed: the defaults.
  if (j.contains("notice_bytes")) num("notice_bytes", p.notice_bytes);
  p.node_memory_Bps = p.reduce_Bps;  // what the node's copies ran at before it existed
  if (j.contains("node_memory_Bps")) num("node_memory_Bps", p.node_memory_Bps);
  if (j.contains("message_overhead_s")) num("message_overhead_s", p.message_overhead_s);
  if (j.contains("link_burst_bytes")) num("link_burst_bytes", p.link_burst_bytes);
  if (j.contains("link_queue_s")) num("link_queue_s", p.link_queue_s);
  if (j.contains("call_overhead_s")) {
    if (!j["call_overhead_s"].is_object())
      throw ConfigError("calibration '" + path + "': 'call_overhead_s' is not an object of \"op/algo\": seconds");
    for (const auto& [key, v] : j["call_overhead_s"].items()) {
      if (!v.is_number() || v.get<double>() < 0)
        throw ConfigError("calibration '" + path + "': call_overhead_s '" + key + "' is not a time >= 0 (seconds)");
      p.call_overhead_s[key] = v.get<double>();
    }
  }
  double sites = 1;
  if (j.contains("sites")) {  // a setting of sites (files without it: one site)
    num("sites", sites);
    for (auto [key, field] : {std::pair{"wan_Bps", &PlatformSpec::wan_Bps}, {"wan_factor", &PlatformSpec::wan_factor},
                              {"wan_rtt_s", &PlatformSpec::wan_rtt_s}, {"wan_rtt_extra_s", &PlatformSpec::wan_rtt_extra_s},
                              {"wan_loss", &PlatformSpec::wan_loss}, {"stream_c", &PlatformSpec::stream_c},
                              {"mss_bytes", &PlatformSpec::mss_bytes}})
      num(key, p.*field);
    if (j.contains("loss_exponent")) num("loss_exponent", p.loss_exponent);
  }
  p.sites = static_cast<int>(sites);
  p.nodes = static_cast<int>(nodes);
  p.ppn = static_cast<int>(ppn);
  p.cores = static_cast<int>(cores);
  validate(p);
  return p;
}

}  // namespace lowcomm::sim
