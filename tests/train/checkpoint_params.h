// The parameters stored in a checkpoint file (its "model" section, read into fresh tensors by
// the names of a model of the config's kind, 28x28x1 inputs, 10 classes; a gpt as configured), for comparing two runs
// bit for bit. Only the model section is read: the optimizer section's layout depends on the
// strategy (ZeRO stores a shard).
#pragma once

#include <string>
#include <vector>

#include "lowcomm/nn/models.h"
#include "lowcomm/train/config.h"

namespace lowcomm::test {

inline std::vector<torch::Tensor> checkpointParams(const std::string& file, const train::TrainConfig& c) {
  nn::ModelSpec spec{c.model.name, 1, 28, 10};
  if (c.model.name == "gpt") {
    spec.classes = static_cast<int>(c.model.vocab);
    spec.layers = static_cast<int>(c.model.layers);
    spec.dim = static_cast<int>(c.model.dim);
    spec.heads = static_cast<int>(c.model.heads);
    spec.seq_len = static_cast<int>(c.model.seq_len);
    spec.tied = c.model.tied;
  }
  auto model = nn::makeModel(spec);
  torch::serialize::InputArchive ar, m;
  ar.load_from(file);
  ar.read("model", m);
  std::vector<torch::Tensor> out;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor t;  // a fresh tensor per key: read() re-points it
    m.read(p.key(), t);
    out.push_back(t);
  }
  return out;
}

}  // namespace lowcomm::test
