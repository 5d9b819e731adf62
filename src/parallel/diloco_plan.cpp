// Streaming DiLoCo's plan (contract in diloco_plan.h).
#include "diloco_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

namespace {

// Largest parameters first to the least-loaded member of the group.
void assignCarriers(const std::vector<int64_t>& numels, const std::vector<int>& fragment, int group_size,
                    std::vector<int>& carrier) {
  std::vector<int> order = fragment;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(group_size), 0);
  for (int p : order) {
    const int m = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    carrier[p] = m;
    load[m] += numels[p];
  }
}

}  // namespace

DilocoPlan planFragments(const std::vector<int64_t>& numels, int fragments, int group_size) {
  const int n = static_cast<int>(numels.size());
  if (fragments < 1 || fragments > n)
    throw ConfigError("diloco.fragments = " + std::to_string(fragments) + ": the model has " + std::to_string(n) +
                      " parameter tensors, so 1.." + std::to_string(n) + " fragments");
  LC_ENFORCE(group_size >= 1, "a replica group needs a member");
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  DilocoPlan plan;
  plan.fragments.resize(static_cast<size_t>(fragments));
  plan.carrier.assign(static_cast<size_t>(n), 0);
  int64_t running = 0;
  int f = 0;
  for (int p = 0; p < n; ++p) {
    plan.fragments[f].push_back(p);
    running += numels[p];
    const bool reached = static_cast<double>(running) * fragments >= static_cast<double>(total) * (f + 1);
    const bool must_cut = n - 1 - p == fragments - 1 - f;  // one parameter left per later fragment
    if (f + 1 < fragments && (reached || must_cut)) ++f;
  }
  for (const auto& fr : plan.fragments) assignCarriers(numels, fr, group_size, plan.carrier);
  return plan;
}

int64_t fragmentOffset(int f, int fragments, int64_t period) { return static_cast<int64_t>(f) * period / fragments; }

bool fragmentDue(int64_t steps_done, int f, int fragments, int64_t period) {
  const int64_t off = fragmentOffset(f, fragments, period);
  return steps_done >= 1 && steps_done >= off && (steps_done - off) % period == 0;
}

}  // namespace lowcomm::parallel
