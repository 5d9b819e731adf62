#include <algorithm>
#include <cmath>
#include <functional>

#include "fit.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/sim/calibrate.h"

namespace lowcomm::sim {

namespace {

void requireRuns(const TrainingRuns& runs) {
  if (runs.empty()) throw ConfigError("simulate calibrate: no training run to fit a host value to");
}

// The replay of every run on p: per run, the measured and the predicted mean step.
void replayRuns(const PlatformSpec& p, const TrainingRuns& runs, std::vector<double>& measured,
                std::vector<double>& predicted) {
  measured.clear(), predicted.clear();
  for (const auto& programs : runs) {
    const auto r = replay(p, programs);
    measured.push_back(r.measured_step_s), predicted.push_back(r.predicted_step_s);
  }
}

// Whether any rank of any run makes a call that `pred` holds for.
bool anyCall(const TrainingRuns& runs, const std::function<bool(const CallSpec&)>& pred) {
  for (const auto& programs : runs)
    for (const auto& prog : programs)
      if (std::any_of(prog.calls.begin(), prog.calls.end(), pred)) return true;
  return false;
}

// ConfigError unless every run (replayed into `fit`) has a measured step time.
void requireMeasured(const OverheadFit& fit) {
  for (size_t i = 0; i < fit.measured_step_s.size(); ++i)
    if (!(fit.measured_step_s[i] > 0) || !std::isfinite(fit.measured_step_s[i]))
      throw ConfigError("simulate calibrate: training run " + std::to_string(i + 1) +
                        " has no measured step time (its step spans last 0): nothing to fit to");
}

// A host time per call is fitted over kCallOverheadRange and pinned when 1 ms less and more fit worse.
constexpr double kCallHi = kCallOverheadRange.hi, kCallStep = 1e-3;

// The mean over the runs of the squared log errors of their predicted mean steps on p.
double runsLoss(const PlatformSpec& p, const TrainingRuns& runs) {
  std::vector<double> m, pr;
  replayRuns(p, runs, m, pr);
  double sum = 0;
  for (size_t i = 0; i < m.size(); ++i) sum += std::pow(std::log(pr[i] / m[i]), 2);
  return m.empty() ? 0 : sum / static_cast<double>(m.size());
}

// Puts a fitted x into a platform (e.g. message_overhead_s = x, node_memory_Bps = 10^x).
using Setter = std::function<void(PlatformSpec&, double)>;

// The x in [lo, hi] whose platform (start with set(x)) replays the runs' measured mean step times
// best (golden section on runsLoss); start's other values stay. Kept only where the runs pin it
// (pinnedAt with `margin` and `d`; d = 0: always kept); else start's value back (pinned = false).
// The runs are replayed on the result.
OverheadFit fitHostValue(const PlatformSpec& start, const TrainingRuns& runs, const Setter& set, double lo, double hi,
                         double margin = 0, double d = 0) {
  OverheadFit fit;
  fit.platform = start;
  replayRuns(start, runs, fit.measured_step_s, fit.predicted_step_s);
  requireMeasured(fit);
  auto err = [&](double x) {
    PlatformSpec q = start;
    set(q, x);
    return runsLoss(q, runs);
  };
  const double x = goldenMin(err, lo, hi, 14);
  if (d == 0 || pinnedAt(x, lo, hi, margin, d, err)) {
    set(fit.platform, x);
  } else {
    fit.pinned = false;
  }
  replayRuns(fit.platform, runs, fit.measured_step_s, fit.predicted_step_s);
  return fit;
}

}  // namespace

OverheadFit fitCallOverhead(const PlatformSpec& start, const TrainingRuns& runs, const std::string& key) {
  requireRuns(runs);
  const auto slash = key.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.size())
    throw ConfigError("simulate calibrate: call kind '" + key + "' is not op/algo (e.g. allgatherv/ring)");
  if (!anyCall(runs, [&](const CallSpec& c) { return c.op + "/" + comm::algoName(c.algo) == key; })) throw ConfigError("simulate calibrate: no " + key + " call in the runs: nothing to fit its host time to");
  // Pinned where 1 ms less and more fit worse (calls hidden behind compute leave the loss flat);
  // below 0 (pinnedAt looks 1 ms below a fit under 1 ms) is none.
  return fitHostValue(start, runs, [&](PlatformSpec& p, double x) { p.call_overhead_s[key] = std::max(0.0, x); },
                      kCallOverheadRange.lo, kCallHi, 0.0, kCallStep);
}

OverheadFit fitMessageOverhead(const PlatformSpec& start, const TrainingRuns& runs) {
  requireRuns(runs);
  return fitHostValue(start, runs, [](PlatformSpec& p, double x) { p.message_overhead_s = x; }, 0.0, 5e-3);
}

OverheadFit fitLinkRate(const PlatformSpec& start, const TrainingRuns& runs) {
  requireRuns(runs);
  return fitHostValue(start, runs, [](PlatformSpec& p, double x) { p.bandwidth_factor = x; }, kLinkLo, kLinkHi,
                      kLinkMargin, kLinkStep);
}

OverheadFit fitStreamRate(const PlatformSpec& start, const TrainingRuns& runs) {
  requireRuns(runs);
  if (!(start.streamCapBps() > 0))
    throw ConfigError("simulate calibrate: a stream's rate under loss is fitted on a setting of sites with loss "
                      "(SsNxP@LAN/WAN,RTTms,LOSS%)");
  return fitHostValue(start, runs, [](PlatformSpec& p, double lg) { p.stream_c = std::exp(lg); },
                      std::log(kStreamCRange.lo), std::log(kStreamCRange.hi), 0.01, std::log(1.1));
}

OverheadFit fitWanRate(const PlatformSpec& start, const TrainingRuns& runs) {
  requireRuns(runs);
  if (start.sites < 2)
    throw ConfigError("simulate calibrate: the WAN's rate in training is fitted on a setting of sites "
                      "(SsNxP@LAN/WAN,RTTms[,LOSS%])");
  return fitHostValue(start, runs, [](PlatformSpec& p, double x) { p.wan_factor = x; }, kLinkLo, kLinkHi,
                      kLinkMargin, kLinkStep);
}

OverheadFit fitNodeMemory(const PlatformSpec& start, const TrainingRuns& runs) {
  requireRuns(runs);
  if (!anyCall(runs, [](const CallSpec& c) { return c.node_piece > 0; }))
    throw ConfigError("simulate calibrate: no hier allreduce of the --node-timeline runs ran in shared memory (no "
                      "node_piece on their calls): nothing to fit the node memory to");
  return fitHostValue(start, runs, [](PlatformSpec& p, double lg) { p.node_memory_Bps = tenTo(lg); }, kNodeLo, kNodeHi,
                      kNodeMargin, std::log10(2.0));
}

}  // namespace lowcomm::sim
