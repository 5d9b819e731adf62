// AbTraining's checkpoint section: the phase, the structure of the factorised model and the
// stashed optimizer state.
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ab_training.h"

namespace lowcomm::parallel {

void AbTraining::saveState(torch::serialize::OutputArchive& ar) const {
  std::vector<int64_t> ranks;
  for (const auto& l : lowrank_.layers()) ranks.push_back(l.rank);
  const std::vector<int64_t> head = {static_cast<int64_t>(phase_), phase_start_, last_switch_,
                                     lowrank_.factorised() ? 1 : 0, lowrank_.trained() == nn::Factor::A ? 1 : 0,
                                     groups_.group, groups_.groups};
  ar.write("head", torch::tensor(head, torch::kInt64));
  ar.write("ranks", torch::tensor(ranks, torch::kInt64));
  ar.write("last_ranks", torch::tensor(last_ranks_, torch::kInt64));
  ar.write("last_compression", torch::tensor({last_compression_, last_reference_}, torch::kFloat64));
  std::vector<int64_t> counts;
  for (const char* k : {"warmup", "ab", "sync", "full-rank"})
    counts.push_back(steps_by_phase_.count(k) ? steps_by_phase_.at(k) : 0);
  ar.write("steps_by_phase", torch::tensor(counts, torch::kInt64));
  ar.write("sync_loss", torch::tensor({loss_sum_, static_cast<double>(loss_steps_)}, torch::kFloat64));
  ar.write("regroups", torch::tensor({regroups_}, torch::kInt64));
  ar.write("group_lr_center", torch::tensor({lr_center_}, torch::kFloat64));
  torch::serialize::OutputArchive os;
  opt_state_.save(os);
  ar.write("optimizer_stash", os);
}

void AbTraining::loadState(torch::serialize::InputArchive& ar) {
  auto read = [&](const char* key) {
    torch::Tensor t;
    if (!ar.try_read(key, t)) throw DataError(std::string("AB-training state has no '") + key + "'");
    return t;
  };
  const auto head = read("head");
  const auto ranks_t = read("ranks");
  if (head.numel() != 7 || ranks_t.numel() != static_cast<int64_t>(lowrank_.layers().size()))
    throw DataError("AB-training state does not match this model's low-rank layers");
  const auto h = head.accessor<int64_t, 1>();
  torch::Tensor regroups;  // absent in checkpoints from before regrouping
  const int64_t saved_regroups = ar.try_read("regroups", regroups) && regroups.numel() == 1 ? regroups.item<int64_t>() : 0;
  if (saved_regroups != regroups_) {
    regroups_ = saved_regroups;
    applyGroups();  // collective: every rank resumes from the same sync
  }
  if (h[5] != groups_.group || h[6] != groups_.groups)
    throw ConfigError("--resume: the checkpoint's AB groups differ from ab.group_size / ab.sync_mode now");
  std::vector<int64_t> ranks(ranks_t.data_ptr<int64_t>(), ranks_t.data_ptr<int64_t>() + ranks_t.numel());
  const auto lr_t = read("last_ranks");
  last_ranks_.assign(lr_t.data_ptr<int64_t>(), lr_t.data_ptr<int64_t>() + lr_t.numel());
  const auto lc = read("last_compression");
  last_compression_ = lc[0].item<double>();
  last_reference_ = lc.numel() > 1 ? lc[1].item<double>() : 1.0;
  const auto counts = read("steps_by_phase");
  const char* names[] = {"warmup", "ab", "sync", "full-rank"};
  steps_by_phase_.clear();
  for (int i = 0; i < 4 && i < counts.numel(); ++i)
    if (counts[i].item<int64_t>() > 0) steps_by_phase_[names[i]] = counts[i].item<int64_t>();
  torch::Tensor sync_loss;  // absent in checkpoints from before loss-weighted syncs
  loss_sum_ = 0, loss_steps_ = 0;
  if (ar.try_read("sync_loss", sync_loss) && sync_loss.numel() == 2) {
    loss_sum_ = sync_loss[0].item<double>();
    loss_steps_ = static_cast<int64_t>(sync_loss[1].item<double>());
  }
  torch::Tensor center;  // absent in checkpoints from before ab.group_lr
  lr_center_ = ar.try_read("group_lr_center", center) && center.numel() == 1 ? center.item<double>() : 1.0;
  retire();
  if (last_ranks_.size() == lowrank_.layers().size()) lowrank_.setLastRanks(last_ranks_);
  gatherLayers();
  // Zero placeholders of the right shapes: the checkpoint's model section fills in A and B.
  const std::vector<bool> no_svd(lowrank_.layers().size(), false);
  if (h[3] && mode_ == SyncMode::only_smaller) lowrank_.factorise(ranks, lowrank_.smallerFactors(), no_svd);
  else if (h[3])
    lowrank_.factorise(ranks, std::vector<nn::Factor>(ranks.size(), h[4] ? nn::Factor::A : nn::Factor::B), no_svd);
  else lowrank_.merge();
  torch::serialize::InputArchive stash;
  if (!ar.try_read("optimizer_stash", stash)) throw DataError("AB-training state has no optimizer stash");
  opt_state_.load(stash, opt_);
  opt_state_.rebind(opt_, trainable());
  rebuild(static_cast<AbPhase>(h[0]));
  measureSizes();
  phase_start_ = h[1];
  last_switch_ = h[2];
}

}  // namespace lowcomm::parallel
