// Calibration recovers known link parameters from rows simulated with them, reads `bench
// collectives --json` files (skipping what it cannot replay, naming what is wrong), and its saved
// platform loads back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
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

TEST(SimCalibrate, ReadsBenchCollectivesRowsAndNamesBadFiles) {
  test::TempDir d;
  const auto good = (d.path / "bc.json").string();
  write(good, R"([{"op":"allreduce","algo":"ring","backend":"lowcomm","world":4,"bytes":4194304,"time_us":52632.7},
                  {"op":"allreduce","algo":"gloo","backend":"c10d-gloo","world":4,"bytes":4194304,"time_us":52635.1},
                  {"op":"allreduce","algo":"auto","backend":"lowcomm","world":4,"bytes":4194304,"time_us":52000},
                  {"op":"broadcast","algo":"tree","backend":"lowcomm","world":4,"bytes":4194304,"time_us":70219.7}])");
  const auto rows = readMeasured(good);
  ASSERT_EQ(rows.size(), 2u);  // the c10d row and the `auto` row are skipped
  EXPECT_EQ(rows[1].op, "broadcast");
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
  const std::vector<MeasuredRow> rows = {{"allreduce", "ring", 1u << 20, 0.2}};
  const auto c = evaluate(p, rows, 1 << 20);
  const auto path = (d.path / "cal.json").string();
  saveCalibration(path, "2x2@100mbit", c);
  const auto q = loadCalibration(path);
  EXPECT_EQ(q.nodes, 2);
  EXPECT_EQ(q.ppn, 2);
  EXPECT_DOUBLE_EQ(q.bandwidth_factor, 0.93);
  EXPECT_DOUBLE_EQ(q.link_latency_s, 42e-6);
  write(path, R"({"nodes": 2})");
  EXPECT_THROW(loadCalibration(path), ConfigError);
}
