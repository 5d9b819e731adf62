#include "report.h"

#include <sys/resource.h>

#include "lowcomm/parallel/optim_state.h"

namespace lowcomm::train {

// This rank's codec accounting: raw gradient bytes against encoded bytes, codec time, and the
// auto policy's decisions. A strategy that rebuilds its DDP (AB-training) builds one compressor
// per rebuild: their counts are summed.
nlohmann::json compressionJson(const std::vector<std::shared_ptr<compress::Compressor>>& all, const TrainConfig& cfg) {
  if (all.empty()) return {{"codec", "none"}};
  const compress::Compressor* c = all.back().get();
  compress::CompressStats s;
  for (const auto& x : all) {
    const auto t = x->stats();
    s.raw_bytes += t.raw_bytes, s.payload_bytes += t.payload_bytes, s.buckets += t.buckets, s.codec_s += t.codec_s;
  }
  return {{"codec", c->name()},
          {"memory", cfg.compress.memory == "default" ? compress::defaultMemory(cfg.compress.codec) : cfg.compress.memory},
          {"raw_bytes", s.raw_bytes}, {"payload_bytes", s.payload_bytes}, {"ratio", s.ratio()},
          {"codec_s", s.codec_s}, {"decisions", c->decisions()}};
}

// The process's peak resident set (getrusage reports KiB on Linux).
int64_t peakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// What this rank holds at the end of training, and the largest peak resident set over the ranks
// (collective: every rank calls it).
nlohmann::json memoryJson(comm::Communicator& world, nn::Model& model, torch::optim::Optimizer& opt,
                          const parallel::Strategy& strategy, int64_t activation_bytes) {
  auto bytes = [](const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; };
  int64_t params = 0, grads = 0, state = 0;
  for (const auto& p : model.parameters()) params += bytes(p), grads += bytes(p.grad());
  for (const auto& t : parallel::momentTensors(opt)) state += bytes(t);
  double peaks[2] = {static_cast<double>(peakRssBytes()), static_cast<double>(activation_bytes)};
  world.allreduce(peaks, 2, comm::DType::f64, comm::ReduceOp::max);
  return {{"parameter_bytes", params}, {"gradient_bytes", grads}, {"optimizer_state_bytes", state},
          {"strategy_buffer_bytes", strategy.bufferBytes()},
          {"model_state_bytes", params + grads + state + strategy.bufferBytes()},
          {"peak_activation_bytes", activation_bytes}, {"peak_activation_bytes_max_rank", static_cast<int64_t>(peaks[1])},
          {"peak_rss_bytes_max_rank", static_cast<int64_t>(peaks[0])}};
}


}  // namespace lowcomm::train
