#include "lowcomm/parallel/ab_groups.h"

#include <algorithm>
#include <set>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

// Averages (or sums) float32 tensors over `comm` in one allreduce, in place.
void reduceInPlace(comm::Communicator& comm, const std::vector<torch::Tensor>& ts, comm::ReduceOp op) {
  if (ts.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  auto buf = torch::cat(flat).contiguous();
  comm.allreduce(buf.data_ptr<float>(), buf.numel(), comm::DType::f32, op);
  int64_t off = 0;
  for (const auto& t : ts) {
    t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

}  // namespace

namespace {

// Contiguous blocks: `groups` groups, the leftover ranks one each to the first groups.
std::vector<int> blocks(int world, int groups) {
  std::vector<int> group_of;
  const int base = world / groups, extra = world % groups;
  for (int grp = 0; grp < groups; ++grp)
    for (int k = 0; k < base + (grp < extra ? 1 : 0); ++k) group_of.push_back(grp);
  return group_of;
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

SyncMode parseSyncMode(const std::string& name) {
  if (name == "full") return SyncMode::full;
  if (name == "with-stale") return SyncMode::with_stale;
  if (name == "only-learned") return SyncMode::only_learned;
  if (name == "only-b") return SyncMode::only_b;
  if (name == "only-smaller") return SyncMode::only_smaller;
  throw ConfigError("ab.sync_mode: unknown mode '" + name +
                    "'; valid values: full, with-stale, only-learned, only-b, only-smaller");
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

void abSync(comm::Communicator& world, nn::LowRankModel& model, const AbGroups& groups, SyncMode mode) {
  LC_ENFORCE(model.factorised(), "abSync: the model is not factorised");
  LC_ENFORCE(static_cast<int>(groups.a_rank.size()) == world.size(), "abSync: groups formed for ",
             groups.a_rank.size(), " ranks, world has ", world.size());
  torch::NoGradGuard no_grad;
  const size_t layers = model.layers().size();
  const int n = world.size();
  const int na = static_cast<int>(std::count(groups.a_rank.begin(), groups.a_rank.end(), true)), nb = n - na;
  std::vector<torch::Tensor> full_w;
  if (mode == SyncMode::full) {
    for (size_t i = 0; i < layers; ++i) full_w.push_back(model.matrix(i).contiguous());
    reduceInPlace(world, full_w, comm::ReduceOp::avg);
  } else if (mode == SyncMode::only_learned) {
    // Sum of the trained copies (zeros from the others), divided by how many trained it.
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i) {
      if (na > 0) parts.push_back(groups.trains_a ? model.factorA(i).detach().clone() : torch::zeros_like(model.factorA(i)));
      if (nb > 0) parts.push_back(groups.trains_a ? torch::zeros_like(model.factorB(i)) : model.factorB(i).detach().clone());
    }
    reduceInPlace(world, parts, comm::ReduceOp::sum);
    size_t k = 0;
    for (size_t i = 0; i < layers; ++i) {
      if (na > 0) model.factorA(i).detach().copy_(parts[k++] / na);
      if (nb > 0) model.factorB(i).detach().copy_(parts[k++] / nb);
    }
  } else if (mode == SyncMode::only_smaller) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i)
      parts.push_back(model.trainedOf(i) == nn::Factor::A ? model.factorA(i).detach() : model.factorB(i).detach());
    reduceInPlace(world, parts, comm::ReduceOp::avg);
  } else {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < layers; ++i) {
      if (mode == SyncMode::with_stale) parts.push_back(model.factorA(i).detach());
      parts.push_back(model.factorB(i).detach());
    }
    reduceInPlace(world, parts, comm::ReduceOp::avg);
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
  reduceInPlace(world, others, comm::ReduceOp::avg);
}

}  // namespace lowcomm::parallel
