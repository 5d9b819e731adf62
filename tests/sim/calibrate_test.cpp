// Calibration recovers known link parameters from rows simulated with them, reads `bench
// collectives --json` files (skipping what it cannot replay, naming what is wrong), and its saved
// platform loads back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "timeline_fixture.h"
#include "train/temp_dir.h"

using namespace lowcomm;
using namespace lowcomm::sim;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST(SimCalibrate, RecoversTheLinksItWasMeasuredOn) {
  PlatformSpec truth = parseSetting("4x1@1gbit");
  truth.bandwidth_factor = 0.9;
  truth.link_latency_s = 80e-6;
  std::vector<MeasuredRow> rows;
  for (const auto& [op, algo, bytes] : std::vector<std::tuple<std::string, std::string, size_t>>{
           {"allreduce", "ring", 4u << 20}, {"allreduce", "ring", 16u << 20}, {"allgather", "ring", 8u << 20},
           {"broadcast", "tree", 4u << 20}, {"allreduce", "hd", 4096}, {"allreduce", "ring", 65536}}) {
    MeasuredRow r{op, algo, bytes, 0};
    r.time_s = simulateCollective(truth, specFor(r, truth, 1 << 20)).time_s;
    rows.push_back(r);
  }
  const auto c = calibrate(parseSetting("4x1@1gbit"), rows, 1 << 20);
  EXPECT_NEAR(c.platform.bandwidth_factor, 0.9, 0.01);
  EXPECT_NEAR(c.platform.link_latency_s, 80e-6, 8e-6);
  EXPECT_LT(c.max_abs_error, 0.02);
  ASSERT_EQ(c.rows.size(), rows.size());
}

// hier rows whose node part ran in shared memory fit the node memory's rate; the links come
// from the other rows alone (a wrong node rate cannot bend them).
TEST(SimCalibrate, RecoversTheNodeMemoryFromHierRowsInSharedMemory) {
  PlatformSpec truth = parseSetting("2x2@1gbit");
  truth.bandwidth_factor = 0.9;
  truth.node_memory_Bps = 1e9;  // slow enough to show beside the pipelined ring (this machine: 0.9 GB/s)
  std::vector<MeasuredRow> rows;
  for (const auto& [algo, bytes, piece] : std::vector<std::tuple<std::string, size_t, size_t>>{
           {"ring", 4u << 20, 0}, {"ring", 16u << 20, 0}, {"hier", 16u << 20, 0},
           {"hier", 4u << 20, 256u << 10}, {"hier", 16u << 20, 256u << 10}, {"hier", 64u << 20, 256u << 10}}) {
    MeasuredRow r{"allreduce", algo, bytes, 0, piece};
    r.time_s = simulateCollective(truth, specFor(r, truth, 1 << 20)).time_s;
    rows.push_back(r);
  }
  // The node rows depend on the rate: twice as fast memory makes them faster, TCP rows not.
  PlatformSpec fast = truth;
  fast.node_memory_Bps = 2e9;
  EXPECT_LT(simulateCollective(fast, specFor(rows[4], fast, 1 << 20)).time_s, rows[4].time_s * 0.99);
  EXPECT_DOUBLE_EQ(simulateCollective(fast, specFor(rows[2], fast, 1 << 20)).time_s, rows[2].time_s);
  const auto c = calibrate(parseSetting("2x2@1gbit"), rows, 1 << 20);
  EXPECT_NEAR(c.platform.bandwidth_factor, 0.9, 0.01);
  EXPECT_NEAR(c.platform.node_memory_Bps / 1e9, 1.0, 0.05);
  EXPECT_TRUE(c.node_memory_fitted);
  EXPECT_LT(c.max_abs_error, 0.01);
  // Copies fast enough for the pipelining to hide them behind the leaders' ring (6 GB/s): twice
  // the rate simulates the rows within 1 %, so they only bound it and the start's stays.
  PlatformSpec hidden = truth;
  hidden.node_memory_Bps = 6e9;
  std::vector<MeasuredRow> hidden_rows = rows;
  for (auto& r : hidden_rows) r.time_s = simulateCollective(hidden, specFor(r, hidden, 1 << 20)).time_s;
  const auto bound = calibrate(parseSetting("2x2@1gbit"), hidden_rows, 1 << 20);
  EXPECT_FALSE(bound.node_memory_fitted);
  EXPECT_DOUBLE_EQ(bound.platform.node_memory_Bps, parseSetting("2x2@1gbit").node_memory_Bps);
  // Node rows alone: no links to fit first, so the rate is not fitted either.
  const std::vector<MeasuredRow> only_node(rows.begin() + 3, rows.end());
  EXPECT_FALSE(calibrate(parseSetting("2x2@1gbit"), only_node, 1 << 20).node_memory_fitted);

  // Node rows faster than even free copies allow: no rate explains them, the start's stays.
  PlatformSpec free_copies = truth;
  free_copies.node_memory_Bps = 1e13;
  for (auto& r : rows)
    if (r.node_piece > 0) r.time_s = 0.9 * simulateCollective(free_copies, specFor(r, truth, 1 << 20)).time_s;
  PlatformSpec start = parseSetting("2x2@1gbit");
  start.node_memory_Bps = 3e9;
  const auto kept = calibrate(start, rows, 1 << 20);
  EXPECT_FALSE(kept.node_memory_fitted);
  EXPECT_DOUBLE_EQ(kept.platform.node_memory_Bps, 3e9);
  EXPECT_NEAR(kept.platform.bandwidth_factor, 0.9, 0.01);
}

// A DDP timeline whose allreduces ran hier in shared memory: the node memory's rate that made its
// steps is what the fit finds (the measured steps set to a replay at 0.5 GB/s).
TEST(SimCalibrate, FitsTheNodeMemoryToATimeline) {
  const auto path = fixture::tempPath("node_memory");
  fixture::writeTrace(path, fixture::ddpSteps(4, 1u << 20, 15));
  auto programs = readTimeline(path, {});
  for (auto& p : programs)
    for (auto& c : p.calls)
      if (c.op == "allreduce") c.algo = comm::Algo::hierarchical, c.group_size = 2, c.node_piece = 256 << 10;
  PlatformSpec truth = parseSetting("2x2@1gbit");
  truth.node_memory_Bps = 0.5e9;
  const auto r = replay(truth, programs);
  for (size_t i = 0; i < programs.size(); ++i)
    std::fill(programs[i].measured_step_s.begin(), programs[i].measured_step_s.end(), r.predicted_step_by_rank[i]);
  const auto fit = fitNodeMemory(parseSetting("2x2@1gbit"), {programs});
  EXPECT_NEAR(fit.platform.node_memory_Bps / 0.5e9, 1.0, 0.03);
  ASSERT_EQ(fit.predicted_step_s.size(), 1u);
  EXPECT_NEAR(fit.predicted_step_s[0] / fit.measured_step_s[0], 1.0, 1e-3);
  EXPECT_DOUBLE_EQ(fit.platform.message_overhead_s, 0);  // the other host values stay
  EXPECT_TRUE(fit.pinned);
  for (auto& p : programs)
    for (auto& c : p.calls) c.node_piece = 0;
  EXPECT_THROW(fitNodeMemory(parseSetting("2x2@1gbit"), {programs}), ConfigError);  // nothing in shared memory
  std::remove(path.c_str());
}

// The links' achieved rate fitted to a DDP run whose steps were made at 0.9 x the 100 Mbit/s
// links (the rows' 0.8 x to start from): the rate that made them; a run no rate explains (steps
// faster than links at 1.2 x allow) and one whose communication hides behind compute keep the
// start's.
TEST(SimCalibrate, FitsTheLinkRateToATrainingRun) {
  const auto path = fixture::tempPath("link_rate");
  fixture::writeTrace(path, fixture::ddpSteps(4, 4u << 20, 15));
  auto programs = readTimeline(path, {});
  PlatformSpec truth = parseSetting("4x1@100mbit");
  truth.bandwidth_factor = 0.9;
  truth.message_overhead_s = 1e-4;
  const auto r = replay(truth, programs);
  for (size_t i = 0; i < programs.size(); ++i)
    std::fill(programs[i].measured_step_s.begin(), programs[i].measured_step_s.end(), r.predicted_step_by_rank[i]);
  PlatformSpec start = parseSetting("4x1@100mbit");
  start.bandwidth_factor = 0.8;
  start.message_overhead_s = 1e-4;
  const auto fit = fitLinkRate(start, {programs});
  EXPECT_NEAR(fit.platform.bandwidth_factor, 0.9, 0.005);
  EXPECT_TRUE(fit.pinned);
  EXPECT_DOUBLE_EQ(fit.platform.message_overhead_s, 1e-4);  // the other values stay
  ASSERT_EQ(fit.predicted_step_s.size(), 1u);
  EXPECT_NEAR(fit.predicted_step_s[0] / fit.measured_step_s[0], 1.0, 0.01);
  for (auto& p : programs)  // steps in a tenth of the time: no link rate makes them
    for (auto& m : p.measured_step_s) m *= 0.1;
  const auto kept = fitLinkRate(start, {programs});
  EXPECT_FALSE(kept.pinned);
  EXPECT_DOUBLE_EQ(kept.platform.bandwidth_factor, 0.8);
  // A run whose 4 KiB bucket hides in the backward pass: every rate replays its steps alike, so the
  // run does not pin one.
  fixture::writeTrace(path, fixture::ddpSteps(4, 4u << 10, 15));
  auto hidden = readTimeline(path, {});
  const auto h = replay(truth, hidden);
  for (size_t i = 0; i < hidden.size(); ++i)
    std::fill(hidden[i].measured_step_s.begin(), hidden[i].measured_step_s.end(), h.predicted_step_by_rank[i]);
  const auto flat = fitLinkRate(start, {hidden});
  EXPECT_FALSE(flat.pinned);
  EXPECT_DOUBLE_EQ(flat.platform.bandwidth_factor, 0.8);
  std::remove(path.c_str());
}

// The time per message fitted to several runs at once: the value that made both runs' steps when
// one did, else the least squares of their errors, which lies between each run's own value.
TEST(SimCalibrate, FitsTheTimePerMessageToSeveralRuns) {
  const auto path = fixture::tempPath("message_overhead");
  auto runWith = [&](uint64_t bytes, double h) {  // a DDP run whose steps were made with h per message
    fixture::writeTrace(path, fixture::ddpSteps(4, bytes, 15));
    auto programs = readTimeline(path, {});
    PlatformSpec truth = parseSetting("4x1@1gbit");
    truth.message_overhead_s = h;
    const auto r = replay(truth, programs);
    for (size_t i = 0; i < programs.size(); ++i)
      std::fill(programs[i].measured_step_s.begin(), programs[i].measured_step_s.end(), r.predicted_step_by_rank[i]);
    return programs;
  };
  const PlatformSpec start = parseSetting("4x1@1gbit");
  const auto same = fitMessageOverhead(start, {runWith(64 << 10, 1e-3), runWith(1 << 20, 1e-3)});
  EXPECT_NEAR(same.platform.message_overhead_s, 1e-3, 2e-5);
  ASSERT_EQ(same.predicted_step_s.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(same.predicted_step_s[i] / same.measured_step_s[i], 1.0, 1e-3);

  const auto apart = fitMessageOverhead(start, {runWith(64 << 10, 0.5e-3), runWith(64 << 10, 1.5e-3)});
  ASSERT_EQ(apart.predicted_step_s.size(), 2u);
  EXPECT_GT(apart.platform.message_overhead_s, 0.6e-3);
  EXPECT_LT(apart.platform.message_overhead_s, 1.4e-3);
  EXPECT_GT(apart.predicted_step_s[0], apart.measured_step_s[0]);  // one run slower than replayed, one faster
  EXPECT_LT(apart.predicted_step_s[1], apart.measured_step_s[1]);
  // The same programs twice: least squares of the log errors puts the step at their geometric mean
  // (an absolute-error loss would be flat between them).
  EXPECT_DOUBLE_EQ(apart.predicted_step_s[0], apart.predicted_step_s[1]);
  EXPECT_NEAR(apart.predicted_step_s[0] / std::sqrt(apart.measured_step_s[0] * apart.measured_step_s[1]), 1.0, 5e-3);
  EXPECT_THROW(fitMessageOverhead(start, {}), ConfigError);
  auto idle = runWith(64 << 10, 1e-3);
  for (auto& p : idle) std::fill(p.measured_step_s.begin(), p.measured_step_s.end(), 0.0);
  EXPECT_THROW(fitMessageOverhead(start, {runWith(64 << 10, 1e-3), idle}), ConfigError);  // nothing measured
  std::remove(path.c_str());
}

// A host time per call of one kind fitted to a training run whose steps were made with 2 ms per
// ring allreduce: that value, the other host values kept; a kind the run never calls, or a key
// that is not op/algo, is an error.
TEST(SimCalibrate, FitsAHostTimePerCallOfOneKindToATrainingRun) {
  const auto path = fixture::tempPath("call_overhead");
  fixture::writeTrace(path, fixture::ddpSteps(4, 4u << 20, 15));
  auto programs = readTimeline(path, {});
  std::remove(path.c_str());
  PlatformSpec truth = parseSetting("4x1@1gbit");
  truth.message_overhead_s = 1e-4;
  truth.call_overhead_s = {{"allreduce/ring", 2e-3}};
  const auto r = replay(truth, programs);
  for (size_t i = 0; i < programs.size(); ++i)
    std::fill(programs[i].measured_step_s.begin(), programs[i].measured_step_s.end(), r.predicted_step_by_rank[i]);
  PlatformSpec start = parseSetting("4x1@1gbit");
  start.message_overhead_s = 1e-4;
  const auto fit = fitCallOverhead(start, {programs}, "allreduce/ring");
  EXPECT_NEAR(fit.platform.call_overhead_s.at("allreduce/ring"), 2e-3, 2e-5);
  EXPECT_DOUBLE_EQ(fit.platform.message_overhead_s, 1e-4);
  ASSERT_EQ(fit.predicted_step_s.size(), 1u);
  EXPECT_NEAR(fit.predicted_step_s[0] / fit.measured_step_s[0], 1.0, 1e-3);
  EXPECT_TRUE(fit.pinned);
  EXPECT_THROW(fitCallOverhead(start, {programs}, "allgatherv/ring"), ConfigError);  // never called
  EXPECT_THROW(fitCallOverhead(start, {programs}, "allreduce"), ConfigError);
  EXPECT_THROW(fitCallOverhead(start, {}, "allreduce/ring"), ConfigError);
  // A 4 KiB bucket whose call hides in the backward pass: every value replays its steps alike, so
  // the run does not pin one and the start's (none) stays.
  fixture::writeTrace(path, fixture::ddpSteps(4, 4u << 10, 5));
  auto hidden = readTimeline(path, {});
  std::remove(path.c_str());
  const auto h = replay(truth, hidden);
  for (size_t i = 0; i < hidden.size(); ++i)
    std::fill(hidden[i].measured_step_s.begin(), hidden[i].measured_step_s.end(), h.predicted_step_by_rank[i]);
  const auto flat = fitCallOverhead(start, {hidden}, "allreduce/ring");
  EXPECT_FALSE(flat.pinned);
  EXPECT_EQ(flat.platform.call_overhead_s.count("allreduce/ring"), 0u);
}

// A host time per call delays exactly the calls of its op and algorithm.
TEST(SimCalibrate, CallOverheadsAddTheirTimeToTheirCallsOnly) {
  PlatformSpec p = parseSetting("4x1@1gbit");
  const MeasuredRow ring{"allreduce", "ring", 65536, 0}, hd{"allreduce", "hd", 65536, 0}, ag{"allgather", "ring", 65536, 0};
  EXPECT_EQ(callKey(specFor(ring, p, 1 << 20)), "allreduce/ring");
  EXPECT_EQ(callKey(specFor(ag, p, 1 << 20)), "allgatherv/ring");
  auto time = [&](const MeasuredRow& r) { return simulateCollective(p, specFor(r, p, 1 << 20)).time_s; };
  const double t_ring = time(ring), t_hd = time(hd), t_ag = time(ag);
  p.call_overhead_s = {{"allreduce/ring", 2e-3}, {"allgatherv/ring", 1e-3}};
  EXPECT_NEAR(time(ring) - t_ring, 2e-3, 1e-6);
  EXPECT_NEAR(time(ag) - t_ag, 1e-3, 1e-6);
  EXPECT_DOUBLE_EQ(time(hd), t_hd);
}

// Rows with a per-call floor that no link latency explains (halving-doubling, with a third of
// the ring's steps, 3 ms dearer per call against the ring's 1 ms, as measured on 4 processes on
// 2 cores): the plain fit cannot match both, the per-call fit recovers the floors and the links.
TEST(SimCalibrate, FitsAHostTimePerCallForEachAlgorithm) {
  PlatformSpec truth = parseSetting("4x1@1gbit");
  truth.bandwidth_factor = 0.9;
  truth.call_overhead_s = {{"allreduce/ring", 1e-3}, {"allreduce/hd", 3e-3}};
  std::vector<MeasuredRow> rows;
  for (const char* algo : {"ring", "hd"})
    for (size_t bytes : {size_t{4096}, size_t{65536}, size_t{256} << 10, size_t{4} << 20, size_t{16} << 20}) {
      MeasuredRow r{"allreduce", algo, bytes, 0};
      r.time_s = simulateCollective(truth, specFor(r, truth, 1 << 20)).time_s;
      rows.push_back(r);
    }
  const auto start = parseSetting("4x1@1gbit");
  const auto c = calibrate(start, rows, 1 << 20, true);
  EXPECT_NEAR(c.platform.bandwidth_factor, 0.9, 0.01);
  EXPECT_DOUBLE_EQ(c.platform.link_latency_s, start.link_latency_s);
  ASSERT_EQ(c.platform.call_overhead_s.size(), 2u);
  EXPECT_NEAR(c.platform.call_overhead_s.at("allreduce/ring"), 1e-3, 1e-4);
  EXPECT_NEAR(c.platform.call_overhead_s.at("allreduce/hd"), 3e-3, 1e-4);
  EXPECT_LT(c.max_abs_error, 0.03);
  const auto plain = calibrate(start, rows, 1 << 20);
  EXPECT_TRUE(plain.platform.call_overhead_s.empty());
  EXPECT_GT(plain.max_abs_error, 3 * c.max_abs_error) << plain.max_abs_error << " vs " << c.max_abs_error;
}

TEST(SimCalibrate, ReadsBenchCollectivesRowsAndNamesBadFiles) {
  test::TempDir d;
  const auto good = (d.path / "bc.json").string();
  write(good, R"([{"op":"allreduce","algo":"ring","backend":"lowcomm","world":4,"bytes":4194304,"time_us":52632.7},
                  {"op":"allreduce","algo":"gloo","backend":"c10d-gloo","world":4,"bytes":4194304,"time_us":52635.1},
                  {"op":"allreduce","algo":"auto","backend":"lowcomm","world":4,"bytes":4194304,"time_us":52000},
                  {"op":"broadcast","algo":"tree","backend":"lowcomm","world":4,"bytes":4194304,"time_us":70219.7},
                  {"op":"allreduce","algo":"hier","backend":"lowcomm","world":4,"bytes":4194304,"time_us":40000,
                   "node_piece":262144}])");
  const auto rows = readMeasured(good);
  ASSERT_EQ(rows.size(), 3u);  // the c10d row and the `auto` row are skipped
  EXPECT_EQ(rows[1].op, "broadcast");
  EXPECT_EQ(rows[1].node_piece, 0u);  // no field: over TCP
  EXPECT_EQ(rows[2].node_piece, 262144u);
  EXPECT_EQ(specFor(rows[2], parseSetting("2x2@1gbit"), 1 << 20).node_piece, 262144u);
  EXPECT_NEAR(rows[0].time_s, 0.0526327, 1e-9);
  const auto bad = (d.path / "bad.json").string();
  write(bad, R"({"op": 1})");
  EXPECT_THROW(readMeasured(bad), ConfigError);
  write(bad, R"([{"op":"allreduce","algo":"ring","backend":"lowcomm","bytes":4}])");
  try {
    readMeasured(bad);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("time_us"), std::string::npos) << e.what();
  }
  EXPECT_THROW(readMeasured((d.path / "missing.json").string()), ConfigError);
}

TEST(SimCalibrate, SavedPlatformLoadsBack) {
  test::TempDir d;
  PlatformSpec p = parseSetting("2x2@100mbit");
  p.bandwidth_factor = 0.93;
  p.link_latency_s = 42e-6;
  p.call_overhead_s = {{"allreduce/hier", 3.5e-3}};
  p.node_memory_Bps = 7.5e9;
  const std::vector<MeasuredRow> rows = {{"allreduce", "ring", 1u << 20, 0.2}};
  const auto c = evaluate(p, rows, 1 << 20);
  const auto path = (d.path / "cal.json").string();
  saveCalibration(path, "2x2@100mbit", c);
  const auto q = loadCalibration(path);
  EXPECT_EQ(q.nodes, 2);
  EXPECT_EQ(q.ppn, 2);
  EXPECT_DOUBLE_EQ(q.bandwidth_factor, 0.93);
  EXPECT_DOUBLE_EQ(q.link_latency_s, 42e-6);
  EXPECT_EQ(q.call_overhead_s, p.call_overhead_s);
  EXPECT_DOUBLE_EQ(q.node_memory_Bps, 7.5e9);
  {  // a file from before node_memory_Bps: the node's copies at its reduce_Bps, as then
    auto old = nlohmann::json::parse(std::ifstream(path));
    old.erase("node_memory_Bps");
    old["reduce_Bps"] = 3e9;
    write(path, old.dump());
    EXPECT_DOUBLE_EQ(loadCalibration(path).node_memory_Bps, 3e9);
  }
  EXPECT_DOUBLE_EQ(q.link_burst_bytes, 131072.0);  // tools/cluster's tbf at 100 Mbit/s
  EXPECT_DOUBLE_EQ(q.link_queue_s, kEmulatedQueueS);
  write(path, R"({"nodes": 2})");
  EXPECT_THROW(loadCalibration(path), ConfigError);
  saveCalibration(path, "2x2@100mbit", c);
  auto j = nlohmann::json::parse(std::ifstream(path));
  j["call_overhead_s"]["allreduce/ring"] = -1;
  write(path, j.dump());
  try {
    loadCalibration(path);
    ADD_FAILURE() << "a negative time per call was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce/ring"), std::string::npos) << e.what();
  }
}
