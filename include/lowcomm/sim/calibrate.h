// Fitting the simulated platform to measured collectives (`lowcomm simulate calibrate`): the
// rows of `lowcomm bench collectives --cluster ... --json` on one setting give the links'
// achieved rate (bandwidth_factor) and per-link latency that make the simulation match them.
#pragma once

#include <string>
#include <vector>

#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/platform.h"
#include "lowcomm/sim/replay.h"

namespace lowcomm::sim {

// One measured collective call: `bench collectives` JSON row (backend "lowcomm").
struct MeasuredRow {
  std::string op, algo;
  size_t bytes = 0;
  double time_s = 0;
  size_t node_piece = 0;  // hier allreduce whose node part ran in shared memory: its piece size
  // Settings of sites: the WAN's loss the row ran at (< 0: the platform's) and its streams per
  // pair across sites (the row's "streams"; 0: the platform's).
  double wan_loss = -1;
  int streams = 0;
};

// The platform a row ran on: p with the row's WAN loss and streams.
PlatformSpec rowPlatform(const PlatformSpec& p, const MeasuredRow& row);

struct CalibrationRow {
  MeasuredRow measured;
  double simulated_s = 0;
  double error = 0;  // (simulated − measured) / measured
};

struct Calibration {
  PlatformSpec platform;  // the fitted values in bandwidth_factor and link_latency_s
  std::vector<CalibrationRow> rows;
  double mean_abs_error = 0, max_abs_error = 0;
  bool node_memory_fitted = false;  // node_memory_Bps came from the rows (else: the start's)
};

// Reads a `bench collectives --json` file: the rows of backend "lowcomm" (c10d rows are skipped).
// Throws ConfigError naming the file for anything that is not such a file.
std::vector<MeasuredRow> readMeasured(const std::string& path);

// The spec the simulator runs for a measured row (same op, algorithm and bytes).
CollectiveSpec specFor(const MeasuredRow& row, const PlatformSpec& p, size_t segment_bytes);

// Fits bandwidth_factor (to the rows of at least 1 MiB that ran over TCP only), node_memory_Bps
// (to the rows of at least 1 MiB of hier in shared memory, when there are such TCP rows too and
// the rows pin it: inside 0.11–89 GB/s, half and twice the rate fitting worse; else start's
// stays) and
// link_latency_s (to the smaller ones) by minimising the mean squared relative error, starting
// from `start`. With `call_overheads`,
// the latency stays start's (the links' own) and the smaller rows fit a host time per call for
// each op and algorithm instead (PlatformSpec::call_overhead_s: >= 0, least squares on the
// relative error); the bandwidth is then refitted with those overheads in place.
Calibration calibrate(const PlatformSpec& start, const std::vector<MeasuredRow>& rows, size_t segment_bytes,
                      bool call_overheads = false);

// A setting of sites (start.sites > 1): fits the WAN to the rows, each simulated on
// rowPlatform(start, row). Over two rounds: wan_factor to the rows of at least 1 MiB without loss
// (kLinkFactorRange), wan_rtt_extra_s to the smaller rows without loss (within +-wan_rtt_s / 2),
// stream_c to the rows of at least 1 MiB with loss (kStreamCRange; with rows at two losses or
// more also loss_exponent, from stream_c fitted per loss). A value no row pins stays start's. The
// LAN's values stay start's.
Calibration calibrateWan(const PlatformSpec& start, const std::vector<MeasuredRow>& rows, size_t segment_bytes);

// Simulates every row on `p` and reports the errors (no fitting): validation.
Calibration evaluate(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t segment_bytes);

// The fitted platform as JSON ({setting fields, bandwidth_factor, link_latency_s, rows, errors})
// and back; load throws ConfigError naming the file and key.
void saveCalibration(const std::string& path, const std::string& setting, const Calibration& c);
PlatformSpec loadCalibration(const std::string& path);

// The ranges the fits search (and what a "kept: not pinned" message names).
struct FitRange {
  double lo, hi;
};
inline constexpr FitRange kLinkFactorRange{0.3, 1.2};     // bandwidth_factor
inline constexpr FitRange kNodeMemoryLog10{8.0, 11.0};    // log10 of node_memory_Bps (0.1–100 GB/s)
inline constexpr FitRange kCallOverheadRange{0.0, 5e-3};  // call_overhead_s entries, seconds
inline constexpr FitRange kStreamCRange{0.3, 8.0};        // stream_c (calibrateWan)

// Training runs to fit a host value to: each run's rank programs (readTimeline).
using TrainingRuns = std::vector<std::vector<RankProgram>>;

// Fits PlatformSpec::message_overhead_s (the host's time per message) so that replaying training
// runs' timelines on `start` predicts their measured mean step times: the value with the least mean
// of squared log errors log(predicted / measured) over the runs (one run: its own error, 0 where a
// value reaches it), golden section over [0, 5 ms]. The other values of `start` stay. ConfigError
// if `runs` is empty or a run has no measured step time.
struct OverheadFit {
  PlatformSpec platform;
  std::vector<double> measured_step_s, predicted_step_s;  // per run, replayed on `platform`
  bool pinned = true;  // false: the runs do not pin the value (at a bound, or flat) and start's stayed
};
OverheadFit fitMessageOverhead(const PlatformSpec& start, const TrainingRuns& runs);
// The same for PlatformSpec::node_memory_Bps (in log of the rate over 0.1–100 GB/s; a fit within
// 0.05 decades of an end, or one that half or twice the rate fits about as well, keeps start's
// value, pinned = false), from runs whose hier allreduces
// ran in shared memory (ConfigError if none did): the node's copies at what training leaves of the
// caches and cores.
OverheadFit fitNodeMemory(const PlatformSpec& start, const TrainingRuns& runs);
// The same for PlatformSpec::bandwidth_factor (0.3–1.2; pinned = false at a bound or where 0.1
// less and more fit about as well, start's value stays): the links' achieved rate under a training run's traffic, where bulk `bench collectives`
// rows of many MiB lose more to TCP on the shaped links than training's bursts of segments do.
OverheadFit fitLinkRate(const PlatformSpec& start, const TrainingRuns& runs);
// The same for PlatformSpec::call_overhead_s[key] ("op/algo", e.g. "allgatherv/ring"; 0–5 ms): a
// host time per call of that kind that the time per message does not explain (4 processes on 2
// cores: a sparse codec's allgathers cost more per message than PowerSGD's allreduces). Kept only
// where 1 ms less and more fit worse by kPinLoss (else pinned = false and start's entry, or none,
// stays: calls hidden behind compute). ConfigError if no run has a call of that kind, the key is
// not "op/algo", or a run has no measured step time.
OverheadFit fitCallOverhead(const PlatformSpec& start, const TrainingRuns& runs, const std::string& key);
// The same for PlatformSpec::stream_c (in its log over kStreamCRange; pinned = false where 10 %
// less and more fit about as well, or at a bound) from runs on a lossy WAN (`start` has sites and
// wan_loss > 0, else ConfigError): one TCP stream's long-run rate under random loss, which a
// training run measures over hundreds of losses where `bench collectives` rows of a few MiB see a
// handful (at 0.1 % loss the rows disagree by -36 to +66 %). loss_exponent stays, so the bound
// moves by the same factor at every loss.
OverheadFit fitStreamRate(const PlatformSpec& start, const TrainingRuns& runs);
// The same for PlatformSpec::wan_factor (0.3–1.2, pinned as fitLinkRate) from runs on a WAN
// (`start` has sites, else ConfigError) whose streams no loss bound caps (their sockets ran BBR):
// the WAN's achieved rate under training's traffic (each step's messages start from an idle
// connection), which the bulk `bench collectives` rows do not see.
OverheadFit fitWanRate(const PlatformSpec& start, const TrainingRuns& runs);

}  // namespace lowcomm::sim
