// `simulate calibrate` on a setting of sites: measured files by setting, the fitted WAN printed.
#include <cstdio>
#include <set>

#include "lowcomm/base/error.h"
#include "simulate_commands.h"

namespace lowcomm::cli {

std::vector<sim::MeasuredRow> readMeasuredFiles(const std::string& setting, const std::vector<std::string>& values) {
  const auto base = sim::parseSetting(setting);
  std::vector<sim::MeasuredRow> all;
  for (const auto& v : values) {
    const auto eq = v.rfind('=');
    std::string file = v;
    double loss = -1;
    if (eq != std::string::npos) {
      const std::string other = v.substr(0, eq);
      file = v.substr(eq + 1);
      const auto q = sim::parseSetting(other);
      if (q.sites < 2 || q.sites != base.sites || q.nodes != base.nodes || q.ppn != base.ppn ||
          q.link_Bps != base.link_Bps || q.wan_Bps != base.wan_Bps || q.wan_rtt_s != base.wan_rtt_s)
        throw ConfigError("simulate calibrate: --measured '" + v + "': a SETTING=FILE must be a setting of sites that "
                          "differs from --setting " + setting + " in its loss only");
      loss = q.wan_loss;
    }
    for (auto row : sim::readMeasured(file)) {
      row.wan_loss = loss;
      all.push_back(row);
    }
  }
  return all;
}

void printWanCalibration(const std::string& setting, const sim::Calibration& c) {
  const auto& p = c.platform;
  std::printf("# %s: WAN at %.4f x %.1f Mbit/s, round trip %.2f ms (%+.2f ms over the setting's), one stream under "
              "loss at MSS/RTT x %.3f / p^%.3f\n",
              setting.c_str(), p.wan_factor, p.wan_Bps * 8 / 1e6, p.wanRtt() * 1e3, p.wan_rtt_extra_s * 1e3, p.stream_c,
              p.loss_exponent);
  std::set<double> losses;
  for (const auto& r : c.rows)
    if (r.measured.wan_loss > 0 && losses.insert(r.measured.wan_loss).second)
      std::printf("#   loss %.2f %%: one stream at %.1f Mbit/s\n", r.measured.wan_loss * 100,
                  sim::rowPlatform(p, r.measured).streamCapBps() * 8 / 1e6);
}

}  // namespace lowcomm::cli
