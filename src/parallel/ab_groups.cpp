#include "lowcomm/parallel/ab_groups.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ddp.h"

namespace lowcomm::parallel {

namespace {

// Contiguous blocks: `groups` groups, the leftover ranks one each to the first groups.
std::vector<int> blocks(int world, int groups) {
  std::vector<int> group_of;
  const int base = world / groups, extra = world % groups;
  for (int grp = 0; grp < groups; ++grp)
    for (int k = 0; k < base + (grp < extra ? 1 : 0); ++k) group_of.push_back(grp);
  return group_of;
}

// Per group: the sum of its members' losses and their count; `sum` empty when a loss is not finite
// and positive (e.g. a rank without a step since the last sync).
struct GroupLosses {
  std::vector<double> sum, count;
};
GroupLosses groupLosses(const AbGroups& groups, const std::vector<double>& rank_losses, const char* who) {
  const int n = static_cast<int>(rank_losses.size());
  LC_ENFORCE(static_cast<int>(groups.group_of.size()) == n, who, ": ", n, " losses for ", groups.group_of.size(),
             " ranks");
  GroupLosses out{std::vector<double>(groups.groups, 0.0), std::vector<double>(groups.groups, 0.0)};
  for (int r = 0; r < n; ++r) {
    if (!(std::isfinite(rank_losses[r]) && rank_losses[r] > 0)) return {{}, out.count};
    out.sum[groups.group_of[r]] += rank_losses[r];
    out.count[groups.group_of[r]] += 1;
  }
  return out;
}

}  // namespace

std::string groupSizeName(int group_size) {
  if (group_size == kGroupNode) return "node";
  if (group_size == kGroupWorld) return "world";
  return std::to_string(group_size);
}

AbGroups formGroups(int world, int rank, int group_size, bool all_b, const std::vector<int>& node_of) {
  LC_ENFORCE(world >= 1 && rank >= 0 && rank < world, "formGroups: rank ", rank, " of world ", world);
  if (group_size == 0 || (group_size < 0 && group_size != kGroupHalves && group_size != kGroupNode &&
                          group_size != kGroupWorld))
    throw ConfigError("ab.group_size: must be \"node\", \"world\", -1 (two halves) or >= 1, got " +
                      std::to_string(group_size));
  AbGroups g;
  const int halves = (world >= 2 && !all_b) ? 2 : 1;
  if (group_size == kGroupNode && !node_of.empty()) {
    LC_ENFORCE(static_cast<int>(node_of.size()) == world, "formGroups: node_of has ", node_of.size(), " entries");
    int next = 0;
    for (int r = 0; r < world; ++r) {
      LC_ENFORCE(node_of[r] >= 0 && node_of[r] <= next, "formGroups: nodes must be numbered by lowest rank");
      if (node_of[r] == next) ++next;
    }
    g.group_of = next >= 2 ? node_of : blocks(world, std::min(world, 2));
  } else if (group_size == kGroupNode) {
    g.group_of = blocks(world, std::min(world, 2));
  } else if (group_size == kGroupHalves) {
    g.group_of = blocks(world, halves);
  } else if (group_size == kGroupWorld) {
    g.group_of = blocks(world, 1);
  } else {
    g.group_of = blocks(world, std::max(1, world / group_size));
  }
  g.groups = *std::max_element(g.group_of.begin(), g.group_of.end()) + 1;
  g.a_groups = all_b ? 0 : g.groups / 2;
  for (int r = 0; r < world; ++r) g.a_rank.push_back(g.group_of[r] < g.a_groups);
  g.group = g.group_of[rank];
  g.trains_a = g.a_rank[rank];
  for (int r = 0; r < world; ++r)
    if (g.group_of[r] == g.group) g.members.push_back(r);
  return g;
}

AbGroups permuteGroups(const AbGroups& layout, const std::vector<int>& perm, int rank) {
  const int n = static_cast<int>(layout.group_of.size());
  LC_ENFORCE(static_cast<int>(perm.size()) == n && rank >= 0 && rank < n, "permuteGroups: ", perm.size(),
             " places for ", n, " ranks, rank ", rank);
  AbGroups g;
  g.groups = layout.groups;
  g.a_groups = layout.a_groups;
  g.group_of.assign(n, -1);
  g.a_rank.assign(n, false);
  for (int v = 0; v < n; ++v) {
    LC_ENFORCE(perm[v] >= 0 && perm[v] < n && g.group_of[perm[v]] < 0, "permuteGroups: not a permutation");
    g.group_of[perm[v]] = layout.group_of[v];
    g.a_rank[perm[v]] = layout.a_rank[v];
  }
  g.group = g.group_of[rank];
  g.trains_a = g.a_rank[rank];
  for (int r = 0; r < n; ++r)
    if (g.group_of[r] == g.group) g.members.push_back(r);
  return g;
}

std::vector<int> regroupPermutation(int world, uint64_t seed, int64_t epoch) {
  std::vector<int> perm(world);
  for (int i = 0; i < world; ++i) perm[i] = i;
  if (epoch == 0) return perm;
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  for (int i = world - 1; i > 0; --i) std::swap(perm[i], perm[gen() % static_cast<uint64_t>(i + 1)]);
  return perm;
}

namespace {
constexpr SyncMode kSyncModes[] = {SyncMode::full, SyncMode::with_stale, SyncMode::only_learned, SyncMode::only_b,
                                   SyncMode::only_smaller};
}  // namespace

SyncMode parseSyncMode(const std::string& name) {
  std::string valid;
  for (const auto m : kSyncModes) {
    if (name == syncModeName(m)) return m;
    valid += (valid.empty() ? "" : ", ") + std::string(syncModeName(m));
  }
  throw ConfigError("ab.sync_mode: unknown mode '" + name + "'; valid values: " + valid);
}

std::vector<std::string> syncModeNames() {
  std::vector<std::string> out;
  for (const auto m : kSyncModes) out.emplace_back(syncModeName(m));
  return out;
}

const char* syncModeName(SyncMode m) {
  switch (m) {
    case SyncMode::full: return "full";
    case SyncMode::with_stale: return "with-stale";
    case SyncMode::only_learned: return "only-learned";
    case SyncMode::only_b: return "only-b";
    case SyncMode::only_smaller: return "only-smaller";
  }
  return "?";
}

std::vector<double> inverseLossWeights(const AbGroups& groups, const std::vector<double>& rank_losses) {
  const GroupLosses gl = groupLosses(groups, rank_losses, "inverseLossWeights");
  if (gl.sum.empty()) return {};
  std::vector<double> inv(groups.groups, 0.0);
  double z = 0;
  for (int g = 0; g < groups.groups; ++g)
    if (gl.count[g] > 0) z += inv[g] = gl.count[g] / gl.sum[g];
  std::vector<double> w(rank_losses.size());
  for (size_t r = 0; r < w.size(); ++r) w[r] = inv[groups.group_of[r]] / z / gl.count[groups.group_of[r]];
  return w;
}

void abSync(comm::Communicator& world, nn::LowRankModel& model, const AbGroups& groups, SyncMode mode,
            const std::vector<double>& weights) {
  LC_ENFORCE(model.factorised(), "abSync: the model is not factorised");
  LC_ENFORCE(weights.empty() || static_cast<int>(weights.size()) == world.size(), "abSync: ", weights.size(),
             " weights for ", world.size(), " ranks");
  LC_ENFORCE(static_cast<int>(groups.a_rank.size()) == world.size(), "abSync: groups formed for ",
             groups.a_rank.size(), " ranks, world has ", world.size());
  torch::NoGradGuard no_grad;
  const size_t layers = model.layers().size();
  const int n = world.size();
  const int na = static_cast<int>(std::count(groups.a_rank.begin(), groups.a_rank.end(), true)), nb = n - na;
  // The mean over all ranks, in place: equal (avg) or weighted (each rank scales by its weight, then sum).
  const bool weighted = !weights.empty();
  const double mine = weighted ? weights[world.rank()] : 0.0;
  auto mean = [&](const std::vector<torch::Tensor>& ts) {
    if (!weighted) return reduceTensors(world, ts, comm::ReduceOp::avg);
    for (const auto& t : ts) t.mul_(mine);
    reduceTensors(world, ts, comm::ReduceOp::sum);
  };
  std::vector<torch::Tensor> full_w;
  if (mode == SyncMode::full) {
    // This process's part of each layer (matrix() would gather a tensor-parallel layer whole).
    for (size_t i = 0; i < layers; ++i) full_w.push_back(model.factorA(i).mm(model.factorB(i)).contiguous());
    mean(full_w);
  } else if (mode == SyncMode::only_learned) {
    // Sum of the trained copies (zeros from the others), divided by how many (or how much
    // weight) trained it.
    double wa = na, wb = nb, scale = 1.0;
    if (weighted) {
      wa = wb = 0;
      for (int r = 0; r < n; ++r) (groups.a_rank[r] ? wa : wb) += weights[r];
      scale = mine;
    }
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i) {
      if (na > 0) parts.push_back(groups.trains_a ? model.factorA(i).detach() * scale : torch::zeros_like(model.factorA(i)));
      if (nb > 0) parts.push_back(groups.trains_a ? torch::zeros_like(model.factorB(i)) : model.factorB(i).detach() * scale);
    }
    reduceTensors(world, parts, comm::ReduceOp::sum);
    size_t k = 0;
    for (size_t i = 0; i < layers; ++i) {
      if (na > 0) model.factorA(i).detach().copy_(parts[k++] / wa);
      if (nb > 0) model.factorB(i).detach().copy_(parts[k++] / wb);
    }
  } else if (mode == SyncMode::only_smaller) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i)
      parts.push_back(model.trainedOf(i) == nn::Factor::A ? model.factorA(i).detach() : model.factorB(i).detach());
    mean(parts);
  } else {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i) {
      if (mode == SyncMode::with_stale) parts.push_back(model.factorA(i).detach());
      parts.push_back(model.factorB(i).detach());
    }
    mean(parts);
  }
  model.merge();
  std::set<std::string> factorised;
  for (const auto& l : model.layers()) factorised.insert(l.name + ".weight");
  auto params = model.model().named_parameters();
  if (mode == SyncMode::full)
    for (size_t i = 0; i < layers; ++i)
      params[model.layers()[i].name + ".weight"].detach().copy_(full_w[i].view(model.layers()[i].shape));
  std::vector<torch::Tensor> others;
  for (const auto& p : params)
    if (!factorised.count(p.key())) others.push_back(p.value().detach());
  for (const auto& b : model.model().buffers())
    if (b.scalar_type() == torch::kFloat32) others.push_back(b);
  mean(others);
}

std::vector<double> groupLrMultipliers(double center, double spread, int groups) {
  LC_ENFORCE(groups >= 1 && center > 0 && spread >= 1, "groupLrMultipliers: groups ", groups, ", center ", center,
             ", spread ", spread);
  std::vector<double> m(groups, center);
  if (groups == 1) return m;
  const double half = (groups - 1) / 2.0;
  for (int g = 0; g < groups; ++g) m[g] = center * std::pow(spread, (g - half) / half);
  return m;
}

double exploreLrCenter(const AbGroups& groups, const std::vector<double>& rank_losses, double center, double spread) {
  const GroupLosses gl = groupLosses(groups, rank_losses, "exploreLrCenter");
  if (groups.groups < 2 || gl.sum.empty()) return center;
  int best = -1;
  for (int g = 0; g < groups.groups; ++g)
    if (gl.count[g] > 0 && (best < 0 || gl.sum[g] / gl.count[g] < gl.sum[best] / gl.count[best])) best = g;
  const double next = groupLrMultipliers(center, spread, groups.groups)[best];
  const double bound = std::pow(spread, 4.0);
  return std::clamp(next, 1.0 / bound, bound);
}

}  // namespace lowcomm::parallel
