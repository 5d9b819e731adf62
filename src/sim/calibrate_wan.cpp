#include <algorithm>
#include <cmath>

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
    if (any(lossy)) {
      const double x = fitRows(p, &PlatformSpec::stream_c, kStreamCRange.lo, kStreamCRange.hi, same, rows,
                               segment_bytes, lossy);
      p.stream_c = pinnedOr(x, kStreamCRange.lo, kStreamCRange.hi, 0.1 * x, start.stream_c,
                            lossAt(&PlatformSpec::stream_c, lossy));
    }
  }
  return evaluate(p, rows, segment_bytes);
}

}  // namespace lowcomm::sim
