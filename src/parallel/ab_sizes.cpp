// AbTraining's size accounting: the layers' shapes and ranks over all stages, and the
// compression the factorised model achieves.
#include <sstream>
#include <string>
#include <vector>

#include "lowcomm/parallel/ab_training.h"

namespace lowcomm::parallel {

// Each stage's rows as "name rows cols rank" lines, concatenated in stage order.
void AbTraining::gatherLayers() {
  std::string mine;
  const auto& layers = lowrank_.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    mine += layers[i].name + " " + std::to_string(layers[i].rows) + " " + std::to_string(layers[i].cols) + " " +
            std::to_string(i < last_ranks_.size() ? last_ranks_[i] : 0) + "\n";
  std::string all = mine;
  if (const auto& stages = parts_.stages; stages && stages->size() > 1) {
    std::vector<int64_t> sizes(stages->size());
    int64_t n = static_cast<int64_t>(mine.size());
    stages->allgather(&n, sizes.data(), 1, comm::DType::i64);
    std::vector<size_t> counts(sizes.begin(), sizes.end());
    size_t total = 0;
    for (auto c : counts) total += c;
    all.assign(total, '\0');
    stages->allgatherv(mine.data(), mine.size(), all.data(), counts, comm::DType::u8);
  }
  model_layers_.clear();
  std::istringstream in(all);
  AbLayerRow row;
  while (in >> row.name >> row.rows >> row.cols >> row.rank) model_layers_.push_back(row);
}

// Whole-model counts: a replicated parameter counts 1/T on each of the T tensor-parallel ranks,
// a layer's full-rank extra (whole-layer shape) 1/T too; then summed over tensor ranks and stages.
void AbTraining::measureSizes() {
  const double t = parts_.tensor ? parts_.tensor->size() : 1;
  auto share = [&](const std::string& name) { return t > 1 && parts_.split && !parts_.split(name) ? 1.0 / t : 1.0; };
  double n[3] = {0, 0, 0};  // parameters now, what full rank would add, the factorisable layers' biases
  for (const auto& p : lowrank_.model().named_parameters()) n[0] += static_cast<double>(p.value().numel()) * share(p.key());
  const auto& layers = lowrank_.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (l.rank > 0) n[1] += static_cast<double>(l.rows * l.cols - l.rank * (l.rows + l.cols)) / t;
    n[2] += static_cast<double>(lowrank_.biasNumel(i)) * share(l.name + ".bias");
  }
  for (auto* c : {parts_.tensor.get(), parts_.stages.get()})
    if (c && c->size() > 1) c->allreduce(n, 3, comm::DType::f64, comm::ReduceOp::sum);
  compression_ = n[0] / (n[0] + n[1]);
  reference_ = n[0] / (n[0] + n[1] - n[2]);
}

}  // namespace lowcomm::parallel
