// The training state the members of an elastic epoch hold in common (docs/elastic.md), as bytes
// that are equal on every member holding equal state (private to lowcomm_train): what a member
// behind receives in chunks from several donors at once, and what their hash compares. Torch's
// archive cannot serve: it files optimizer state under each process's tensor addresses.
//
// Layout: an int64 header {magic, version, step, epoch, batch, config_hash, schedule_hash,
// parameters P, then per parameter {moments M (0: no state), step count}}, then the raw bytes of
// every parameter, every buffer, and every parameter's M moment tensors, in module order.
// Not in it: what is a rank's own (error-feedback memories, RNG, byte counters, clocks).
#pragma once

#include <torch/torch.h>

#include <string>

#include "lowcomm/train/checkpoint.h"

namespace lowcomm::train {

std::string packState(torch::nn::Module& model, torch::optim::Optimizer& opt, const TrainState& st);
// Loads the state into the model and optimizer and returns its TrainState (step, position,
// hashes). DataError naming `from` when the bytes are not such a state of this model.
TrainState unpackState(const std::string& bytes, const std::string& from, torch::nn::Module& model,
                       torch::optim::Optimizer& opt);

}  // namespace lowcomm::train
