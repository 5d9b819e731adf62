// `lowcomm simulate tune`: the allreduce selector fed by the calibrated cost model. Simulates
// every candidate algorithm at every size on a (calibrated) setting and writes the fastest per
// size as a tuning file (comm::TunedTable) that `train` (comm.tuning), `bench collectives
// --tuning` and the c10d backend (LOWCOMM_TUNING) follow instead of the fixed size table.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "bench_options.h"
#include "cli_util.h"
#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/tune.h"
#include "simulate_commands.h"

namespace lowcomm::cli {

namespace {

void writeTable(const std::string& path, const std::string& text) {
  writeFileAtomically(path, text);
}

}  // namespace

int simulateTune(int argc, char** argv) {
  std::string setting, calibration, sizes = "4B:256MiB", algos = "ring,hd,hier,rails", out;
  size_t segment = comm::CommOptions{}.segment_bytes;
  double margin = 0.15;
  CLI::App app{"Choose the allreduce algorithm per size from the calibrated simulation and write a tuning file"};
  app.add_option("--calibration", calibration, "a `simulate calibrate` output (its setting, links and hosts)");
  app.add_option("--setting", setting,
                 "NODESxPROCS@RATE: without --calibration the uncalibrated defaults; with it, replaces its shape and rate");
  app.add_option("--sizes", sizes, "LO:HI (powers of two) or a list")->capture_default_str();
  app.add_option("--algos", algos, "candidates: ring,hd,hier,rails,ordered (hier, rails: only with several "
                                   "processes per node)")->capture_default_str();
  app.add_option("--segment", segment, "pipelining segment, bytes (as the communicator's)")->capture_default_str();
  app.add_option("--margin", margin,
                 "keep the fixed table's choice unless another is predicted this much faster (fraction)")
      ->capture_default_str();
  app.add_option("--out", out, "write the tuning file here")->required();
  if (!parseArgs(app, argc, argv)) return 0;
  if (calibration.empty() && setting.empty()) throw ConfigError("simulate tune: give --calibration, --setting or both");
  sim::PlatformSpec p;
  if (!calibration.empty()) p = sim::loadCalibration(calibration);
  if (!setting.empty()) {
    const auto parsed = sim::parseSetting(setting);
    useSetting(p, parsed);
  } else {
    const double mbit = std::round(p.link_Bps * 8 / 1e6);  // the calibration's setting, as written
    char rate[48];
    if (std::fmod(mbit, 1000) == 0) std::snprintf(rate, sizeof rate, "%.0fgbit", mbit / 1000);
    else std::snprintf(rate, sizeof rate, "%.0fmbit", mbit);
    setting = std::to_string(p.nodes) + "x" + std::to_string(p.ppn) + "@" + rate;
  }
  std::vector<comm::Algo> asked;
  for (const auto& a : splitList(algos)) asked.push_back(comm::parseAlgo(a));
  const auto r = sim::tune(p, parseSizes(sizes), asked, segment, margin);
  std::printf("# simulate tune: %s (%s), %d ranks in groups of %d, margin %.2f; simulated time per algorithm (us)\n",
              setting.c_str(), calibration.empty() ? "uncalibrated" : calibration.c_str(), p.world(), p.ppn, margin);
  std::printf("#%11s", "size (B)");
  for (auto a : r.candidates) std::printf(" %10s", comm::algoName(a));
  std::printf(" %8s %8s %8s\n", "fastest", "fixed", "chosen");
  for (const auto& row : r.rows) {
    std::printf("%12zu", row.bytes);
    for (double t : row.time_s) std::printf(" %10.1f", t * 1e6);
    std::printf(" %8s %8s %8s\n", comm::algoName(row.fastest), comm::algoName(row.fixed), comm::algoName(row.best));
  }
  for (const auto& rule : r.table.rules())
    std::printf("# rule: %s up to %s\n", comm::algoName(rule.algo),
                rule.max_bytes == SIZE_MAX ? "any size" : (std::to_string(rule.max_bytes) + " B").c_str());
  if (p.sites > 1) std::printf("# no rules: across sites the communicator runs sites before any table\n");
  writeTable(out, r.table.json(setting));
  std::printf("# wrote %s\n", out.c_str());
  return 0;
}

}  // namespace lowcomm::cli
