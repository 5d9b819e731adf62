#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "fit.h"
#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"

namespace lowcomm::sim {

namespace {

// The loss a row ran at on p (its own, else the platform's).
double lossOf(const PlatformSpec& p, const MeasuredRow& r) { return rowPlatform(p, r).wan_loss; }

// The value a fit found, if the rows pin it (moving it by `d` either way raises the loss), else `kept`.
double pinnedOr(double x, double lo, double hi, double d, double kept, const std::function<double(double)>& loss_at) {
  return pinnedAt(x, lo, hi, 0, d, loss_at) ? x : kept;
}

// stream_c to the `lossy` rows (loss_at: their loss at a value of it). Rows at two losses or more:
// stream_c per loss with the exponent at 0.5, then ln C_p = ln C + (0.5 - e) ln p by least
// squares gives the bound C / p^e across them.
void fitStreams(PlatformSpec& p, const PlatformSpec& start, const std::vector<MeasuredRow>& rows, size_t seg,
                const std::function<bool(const MeasuredRow&)>& lossy, const std::function<double(double)>& loss_at) {
  std::set<double> levels;
  for (const auto& r : rows)
    if (lossy(r)) levels.insert(lossOf(start, r));
  if (levels.size() < 2) {
    const double x = fitRows(p, &PlatformSpec::stream_c, kStreamCRange.lo, kStreamCRange.hi, same, rows, seg, lossy);
    p.stream_c = pinnedOr(x, kStreamCRange.lo, kStreamCRange.hi, 0.1 * x, start.stream_c, loss_at);
    return;
  }
  PlatformSpec q = p;
  q.loss_exponent = 0.5;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (double level : levels) {
    const auto at = [&](const MeasuredRow& r) { return lossy(r) && lossOf(start, r) == level; };
    const double x = std::log(level);
    const double y = std::log(fitRows(q, &PlatformSpec::stream_c, kStreamCRange.lo, kStreamCRange.hi, same, rows, seg, at));
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  p.loss_exponent = std::clamp(0.5 - slope, 0.1, 2.0);
  p.stream_c = std::exp((sy - slope * sx) / n);
}

}  // namespace

Calibration calibrateWan(const PlatformSpec& start, const std::vector<MeasuredRow>& rows, size_t segment_bytes) {
  LC_ENFORCE(start.sites > 1, "calibrateWan needs a setting of sites");
  PlatformSpec p = start;
  constexpr size_t kLarge = 1u << 20;
  const auto large0 = [&](const MeasuredRow& r) { return r.bytes >= kLarge && !(lossOf(start, r) > 0); };
  const auto small0 = [&](const MeasuredRow& r) { return r.bytes < kLarge && !(lossOf(start, r) > 0); };
  const auto lossy = [&](const MeasuredRow& r) { return r.bytes >= kLarge && lossOf(start, r) > 0; };
  auto any = [&rows](const auto& use) { return std::any_of(rows.begin(), rows.end(), use); };
  // The loss at a value of one field, the others p's.
  auto lossAt = [&](double PlatformSpec::*field, const std::function<bool(const MeasuredRow&)>& use) {
    return [&, field, use](double x) {
      PlatformSpec q = p;
      q.*field = x;
      return loss(q, rows, segment_bytes, use);
    };
  };
  const double half_rtt = start.wan_rtt_s / 2;
  for (int round = 0; round < 2; ++round) {
    if (any(large0)) {
      const double x = fitRows(p, &PlatformSpec::wan_factor, kLinkFactorRange.lo, kLinkFactorRange.hi, same, rows,
                               segment_bytes, large0);
      p.wan_factor = pinnedOr(x, kLinkFactorRange.lo, kLinkFactorRange.hi, 0.05, start.wan_factor,
                              lossAt(&PlatformSpec::wan_factor, large0));
    }
    if (any(small0)) {
      const double x = fitRows(p, &PlatformSpec::wan_rtt_extra_s, -half_rtt, half_rtt, same, rows, segment_bytes, small0);
      p.wan_rtt_extra_s = pinnedOr(x, -half_rtt, half_rtt, 0.1 * half_rtt, start.wan_rtt_extra_s,
                                   lossAt(&PlatformSpec::wan_rtt_extra_s, small0));
    }
    if (any(lossy)) fitStreams(p, start, rows, segment_bytes, lossy, lossAt(&PlatformSpec::stream_c, lossy));
  }
  return evaluate(p, rows, segment_bytes);
}

}  // namespace lowcomm::sim
