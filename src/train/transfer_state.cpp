#include "transfer_state.h"

#include <cstring>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/optim_state.h"

namespace lowcomm::train {

namespace {

constexpr int64_t kMagic = 0x4c43535441544531;  // "LCSTATE1"
constexpr int64_t kVersion = 1;
constexpr size_t kFixed = 8;  // header words before the per-parameter ones

std::vector<torch::Tensor> parametersOf(torch::nn::Module& m) { return m.parameters(); }

template <typename F>
void forEachTensor(torch::nn::Module& model, torch::optim::Optimizer& opt, F&& f) {
  for (auto& p : model.parameters()) f(p);
  for (auto& b : model.buffers()) f(b);
  for (auto& p : model.parameters()) {
    const auto it = opt.state().find(parallel::stateKey(p));
    if (it == opt.state().end()) continue;
    for (auto& t : parallel::stateMoments(*it->second)) f(t);
  }
}

size_t bytesOf(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

}  // namespace

std::string packState(torch::nn::Module& model, torch::optim::Optimizer& opt, const TrainState& st) {
  const auto params = parametersOf(model);
  std::vector<int64_t> head = {kMagic, kVersion, st.step, st.position.epoch, st.position.batch,
                               static_cast<int64_t>(st.config_hash), static_cast<int64_t>(st.schedule_hash),
                               static_cast<int64_t>(params.size())};
  for (const auto& p : params) {
    const auto it = opt.state().find(parallel::stateKey(p));
    if (it == opt.state().end()) {
      head.insert(head.end(), {0, 0});
      continue;
    }
    head.push_back(static_cast<int64_t>(parallel::stateMoments(*it->second).size()));
    head.push_back(parallel::stateStep(*it->second));
  }
  size_t body = 0;
  forEachTensor(model, opt, [&](const torch::Tensor& t) { body += bytesOf(t); });
  std::string out(head.size() * 8 + body, '\0');
  std::memcpy(out.data(), head.data(), head.size() * 8);
  size_t at = head.size() * 8;
  forEachTensor(model, opt, [&](const torch::Tensor& t) {
    const torch::Tensor c = t.contiguous();
    std::memcpy(out.data() + at, c.data_ptr(), bytesOf(c));
    at += bytesOf(c);
  });
  return out;
}

TrainState unpackState(const std::string& bytes, const std::string& from, torch::nn::Module& model,
                       torch::optim::Optimizer& opt) {
  auto bad = [&](const std::string& why) { return DataError("the training state from " + from + " " + why); };
  const auto params = parametersOf(model);
  const size_t words = kFixed + 2 * params.size();
  if (bytes.size() < words * 8) throw bad("is truncated (" + std::to_string(bytes.size()) + " bytes)");
  std::vector<int64_t> head(words);
  std::memcpy(head.data(), bytes.data(), words * 8);
  if (head[0] != kMagic || head[1] != kVersion) throw bad("is not a lowcomm training state");
  if (head[7] != static_cast<int64_t>(params.size()))
    throw bad("has " + std::to_string(head[7]) + " parameters, this model " + std::to_string(params.size()));
  TrainState st;
  st.step = head[2];
  st.position.epoch = head[3];
  st.position.batch = head[4];
  st.config_hash = static_cast<uint64_t>(head[5]);
  st.schedule_hash = static_cast<uint64_t>(head[6]);
  // The optimizer's state takes the sender's shape: moments where it had them, none elsewhere.
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t moments = head[kFixed + 2 * i];
    const std::string key = parallel::stateKey(params[i]);
    if (moments < 0 || moments > 3) throw bad("names " + std::to_string(moments) + " optimizer moments");
    if (moments == 0) {
      opt.state().erase(key);
      continue;
    }
    auto fresh = parallel::freshState(opt, params[i], static_cast<int>(moments));
    parallel::setStateStep(*fresh, head[kFixed + 2 * i + 1]);
    opt.state()[key] = std::move(fresh);
  }
  size_t need = words * 8;
  forEachTensor(model, opt, [&](const torch::Tensor& t) { need += bytesOf(t); });
  if (need != bytes.size())
    throw bad("holds " + std::to_string(bytes.size()) + " bytes; this model and optimizer need " + std::to_string(need));
  size_t at = words * 8;
  torch::NoGradGuard no_grad;
  forEachTensor(model, opt, [&](torch::Tensor& t) {
    LC_ENFORCE(t.is_contiguous(), "a state tensor is not contiguous");
    std::memcpy(t.data_ptr(), bytes.data() + at, bytesOf(t));
    at += bytesOf(t);
  });
  return st;
}

}  // namespace lowcomm::train
