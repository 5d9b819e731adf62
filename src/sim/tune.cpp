#include "lowcomm/sim/tune.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/sim/collectives.h"

namespace lowcomm::sim {

namespace {

std::vector<comm::Algo> candidatesFor(const PlatformSpec& p, const std::vector<comm::Algo>& algos) {
  std::vector<comm::Algo> out;
  for (comm::Algo a : algos) {
    if (!comm::networkAllreduce(a))
      throw ConfigError(std::string("simulate tune: '") + comm::algoName(a) + "' is not a network allreduce (" +
                        comm::networkAllreduceNames() + ")");
    if (!comm::shapeFits(a, p.world(), defaultGroupSize(p, a))) continue;
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  if (out.empty()) throw ConfigError("simulate tune: no candidate algorithm runs on this platform's shape");
  // With host times per allreduce calibrated, a candidate without one would compete for free.
  const bool per_call = std::any_of(p.call_overhead_s.begin(), p.call_overhead_s.end(),
                                    [](const auto& kv) { return kv.first.rfind("allreduce/", 0) == 0; });
  for (comm::Algo a : out)
    if (per_call && !p.call_overhead_s.count(std::string("allreduce/") + comm::algoName(a)))
      throw ConfigError(std::string("simulate tune: the calibration has host times per call (call_overhead_s) but none "
                                    "for allreduce/") +
                        comm::algoName(a) +
                        " (a candidate, or the fixed table's choice): calibrate --call-overheads with rows of "
                        "every candidate algorithm");
  return out;
}

}  // namespace

TuneResult tune(const PlatformSpec& p, std::vector<size_t> sizes, const std::vector<comm::Algo>& algos,
                size_t segment_bytes, double margin) {
  validate(p);
  if (!(margin >= 0)) throw ConfigError("simulate tune: --margin must be >= 0");
  if (sizes.empty()) throw ConfigError("simulate tune: no sizes");
  for (auto& s : sizes) s = std::max<size_t>(4, s / 4 * 4);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  TuneResult out;
  std::vector<comm::Algo> asked = algos;
  const int site_block = siteBlock(p, p.world());
  for (size_t bytes : sizes)  // always simulated
    asked.push_back(comm::autoAllreduce(bytes, p.world(), p.ppn, site_block));
  out.candidates = candidatesFor(p, asked);
  for (size_t bytes : sizes) {
    TuneRow row;
    row.bytes = bytes;
    for (comm::Algo a : out.candidates) {
      CollectiveSpec s;
      s.op = "allreduce";
      s.algo = a;
      s.bytes = bytes;
      s.segment_bytes = segment_bytes;
      s.group_size = defaultGroupSize(p, a);
      row.time_s.push_back(simulateCollective(p, s).time_s);
    }
    const size_t k = std::min_element(row.time_s.begin(), row.time_s.end()) - row.time_s.begin();
    row.fastest = out.candidates[k];
    row.fixed = comm::autoAllreduce(bytes, p.world(), p.ppn, site_block);
    const size_t f = std::find(out.candidates.begin(), out.candidates.end(), row.fixed) - out.candidates.begin();
    row.best = row.time_s[f] <= row.time_s[k] * (1 + margin) ? row.fixed : row.fastest;
    out.rows.push_back(row);
  }
  std::vector<comm::TunedRule> rules;
  for (size_t i = 0; site_block == 0 && i < out.rows.size(); ++i) {  // across sites: no rules (tune.h)
    const bool last = i + 1 == out.rows.size();
    if (!last && out.rows[i + 1].best == out.rows[i].best) continue;
    comm::TunedRule r;
    r.world = p.world();
    r.group_size = p.ppn;
    r.algo = out.rows[i].best;
    r.max_bytes = last ? SIZE_MAX
                       : static_cast<size_t>(std::sqrt(static_cast<double>(out.rows[i].bytes) *
                                                       static_cast<double>(out.rows[i + 1].bytes)));
    rules.push_back(r);
  }
  out.table = comm::TunedTable::fromRules(std::move(rules), "simulate tune");
  return out;
}

}  // namespace lowcomm::sim
