// A tuned allreduce choice: rules that replace the automatic size table (selector.h) for the
// communicator shapes they name. `lowcomm simulate tune` writes them from a calibrated
// simulation of the cluster (every algorithm at every size, the fastest kept); the communicator
// reads them (CommOptions::tuned, config key comm.tuning, LOWCOMM_TUNING for the c10d backend).
//
// File: JSON {"setting": "...", "rules": [{"world": 4, "group_size": 2, "max_bytes": 16384,
// "algo": "hd"}, ..., {"world": 4, "group_size": 2, "algo": "rails"}]}: per (world, group_size),
// rules in increasing max_bytes, the last one without max_bytes (every larger size). Algorithms:
// ring, hd, hier, rails, ordered.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

struct TunedRule {
  int world = 0;
  int group_size = 1;  // ranks per node (1: one per node)
  size_t max_bytes = 0;  // SIZE_MAX: no bound
  Algo algo = Algo::ring;
};

class TunedTable {
 public:
  // Reads and checks a file (ConfigError naming the file and the rule: unknown algorithm, an
  // algorithm that cannot run the shape, sizes not increasing, a shape without its unbounded rule).
  static TunedTable load(const std::string& path);
  // Checks rules given in code the same way (`where` names their source in errors).
  static TunedTable fromRules(std::vector<TunedRule> rules, const std::string& where);
  // The algorithm for `bytes` on a communicator of `world` ranks in groups of `group_size`
  // (<= 1: one rank per node), or Algo::automatic when no rule names that shape.
  Algo choose(size_t bytes, int world, int group_size) const;
  const std::vector<TunedRule>& rules() const { return rules_; }
  // The file's JSON text (rules sorted by shape and size), as load() reads it.
  std::string json(const std::string& setting) const;

 private:
  std::vector<TunedRule> rules_;
};

}  // namespace lowcomm::comm
