// Fitting helpers shared by the calibration's parts (private to the sim layer): calibrate.cpp
// (measured rows), calibrate_wan.cpp (the WAN of a setting of sites), calibrate_runs.cpp
// (training runs' timelines).
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "lowcomm/sim/calibrate.h"

namespace lowcomm::sim {

// Minimum of f on [lo, hi] (unimodal), golden-section search.
inline double goldenMin(const std::function<double(double)>& f, double lo, double hi, int iters) {
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi, c = b - g * (b - a), d = a + g * (b - a);
  double fc = f(c), fd = f(d);
  for (int i = 0; i < iters; ++i) {
    if (fc < fd) {
      b = d, d = c, fd = fc, c = b - g * (b - a), fc = f(c);
    } else {
      a = c, c = d, fc = fd, d = a + g * (b - a), fd = f(d);
    }
  }
  return (a + b) / 2;
}

// Whether the data pin a value x fitted in [lo, hi] (loss_at: the fit's loss at a value, a mean
// squared log error): only away from both ends (by `margin`) and where x - d and x + d both raise
// the loss by kPinLoss (as a 1 % error on every row or run would). Else the data only bound it:
// e.g. copies that the pipelined hier hides behind the leaders' ring leave every faster rate as
// good as the fit.
inline constexpr double kPinLoss = 1e-4;
inline bool pinnedAt(double x, double lo, double hi, double margin, double d, const std::function<double(double)>& loss_at) {
  if (!(x > lo + margin && x < hi - margin)) return false;
  return std::min(loss_at(x - d), loss_at(x + d)) > loss_at(x) + kPinLoss;
}
// The node memory's rate is fitted in log10 of bytes per second over kNodeMemoryLog10 and pinned
// when half and twice the rate fit worse; the links' factor over kLinkFactorRange, pinned when
// 0.1 less and more fit worse (lowcomm/sim/calibrate.h).
inline constexpr double kNodeLo = kNodeMemoryLog10.lo, kNodeHi = kNodeMemoryLog10.hi, kNodeMargin = 0.05;
inline bool nodeRatePinned(double lg, const std::function<double(double)>& loss_at) {
  return pinnedAt(lg, kNodeLo, kNodeHi, kNodeMargin, std::log10(2.0), loss_at);
}
inline constexpr double kLinkLo = kLinkFactorRange.lo, kLinkHi = kLinkFactorRange.hi, kLinkMargin = 0.01, kLinkStep = 0.1;
static_assert(kLinkLo - kLinkStep > 0 && kLinkHi + kLinkStep <= 1.5, "factors a platform accepts (platform.cpp)");

// Mean squared log error of the rows selected by `use`, each simulated on rowPlatform(p, row).
double loss(const PlatformSpec& p, const std::vector<MeasuredRow>& rows, size_t seg,
            const std::function<bool(const MeasuredRow&)>& use);
// The x in [lo, hi] whose p.*field = value(x) simulates the rows selected by `use` best (golden
// section on loss, 18 steps); p's other values stay.
double fitRows(const PlatformSpec& p, double PlatformSpec::*field, double lo, double hi, double (*value)(double),
               const std::vector<MeasuredRow>& rows, size_t seg, const std::function<bool(const MeasuredRow&)>& use);
inline double same(double x) { return x; }
inline double tenTo(double lg) { return std::pow(10.0, lg); }

}  // namespace lowcomm::sim
