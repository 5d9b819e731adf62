// `lowcomm bench compress`: codec kernel speed against single-core memcpy measured in the same
// run, exact top-k against torch::topk on the same input, and PowerSGD's compression time as a
// fraction of a VGG16 training step's compute.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_util.h"
#include "lowcomm/base/error.h"
#include "lowcomm/compress/codec.h"
#include "lowcomm/compress/compressor.h"
#include "lowcomm/net/store.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/runtime/worker.h"

namespace lowcomm::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Best of `repeat` runs of f, in seconds (the machine is shared; the minimum is the least noisy).
template <typename F>
double best(int repeat, F&& f) {
  double b = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    f();
    b = std::min(b, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return b;
}

std::vector<float> gradientLike(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

nlohmann::json benchCodec(const std::string& name, const std::vector<float>& x, double memcpy_GBps, int repeat,
                          double ratio) {
  compress::CodecParams p;
  p.ratio = ratio;
  auto c = compress::makeCodec(name, p);
  const size_t n = x.size();
  std::vector<uint8_t> payload(c->maxBytes(n));
  std::vector<float> out(n);
  compress::EncodeCtx ctx;
  size_t bytes = 0;
  const double enc = best(repeat, [&] { bytes = c->encode(x.data(), n, payload.data(), ctx); });
  const double dec = best(repeat, [&] { c->decode(payload.data(), bytes, n, out.data(), 1.0f, false, ctx); });
  const double gb = 4.0 * static_cast<double>(n) / 1e9;
  nlohmann::json row = {{"kind", "codec"}, {"codec", name}, {"numel", n}, {"payload_bytes", bytes},
                        {"ratio", 4.0 * n / std::max<size_t>(bytes, 1)}, {"encode_s", enc}, {"decode_s", dec},
                        {"encode_GBps", gb / enc}, {"decode_GBps", gb / dec}, {"memcpy_GBps", memcpy_GBps},
                        {"encode_vs_memcpy", gb / enc / memcpy_GBps}, {"decode_vs_memcpy", gb / dec / memcpy_GBps}};
  std::printf("%-12s %8.1fx  encode %6.2f GB/s (%5.2f of memcpy)  decode %6.2f GB/s (%5.2f of memcpy)\n",
              name.c_str(), row["ratio"].get<double>(), gb / enc, gb / enc / memcpy_GBps, gb / dec,
              gb / dec / memcpy_GBps);
  return row;
}

// Exact top-k (the topk codec's encode: selection plus packing) against torch::topk of |x|.
nlohmann::json benchTopK(const std::vector<float>& x, double ratio, int repeat) {
  compress::CodecParams p;
  p.ratio = ratio;
  auto c = compress::makeCodec("topk", p);
  const size_t n = x.size();
  std::vector<uint8_t> payload(c->maxBytes(n));
  size_t bytes = 0;
  const double ours = best(repeat, [&] { bytes = c->encode(x.data(), n, payload.data(), {}); });
  auto t = torch::from_blob(const_cast<float*>(x.data()), {static_cast<int64_t>(n)}, torch::kFloat32);
  const int64_t k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n)));
  torch::Tensor idx;
  const double theirs = best(repeat, [&] { idx = std::get<1>(torch::topk(t.abs(), k)); });
  // Same selection: the k-th largest magnitude bounds both index sets.
  std::vector<float> dense(n, 0.0f);
  c->decode(payload.data(), bytes, n, dense.data(), 1.0f, false, {});
  auto idx_sorted = std::get<0>(idx.sort());
  int64_t agree = 0;
  auto* ip = idx_sorted.data_ptr<int64_t>();
  for (int64_t i = 0; i < k; ++i) agree += dense[static_cast<size_t>(ip[i])] != 0.0f;
  std::printf("top-k %.2f%% of %zu: lowcomm %.1f ms, torch::topk(abs) %.1f ms: %.1fx faster; %lld of %lld indices agree\n",
              100 * ratio, n, 1e3 * ours, 1e3 * theirs, theirs / ours, static_cast<long long>(agree),
              static_cast<long long>(k));
  return {{"kind", "topk"}, {"numel", n}, {"k", k}, {"lowcomm_s", ours}, {"torch_s", theirs},
          {"speedup", theirs / ours}, {"indices_agree", agree}};
}

// PowerSGD on a VGG16's gradients (CIFAR-10 shapes, as in the paper's benchmark): time of the
// compression compute (excluding communication, one rank) against forward + backward.
nlohmann::json benchPowerSgd(int64_t rank, int64_t batch, int repeat) {
  torch::manual_seed(0);
  auto model = nn::makeModel({"vgg16", 3, 32, 10});
  auto x = torch::randn({batch, 3, 32, 32});
  auto y = torch::randint(0, 10, {batch});
  const double compute = best(repeat, [&] {
    model->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  });
  compress::CompressConfig cfg;
  cfg.codec = "powersgd";
  cfg.rank = rank;
  cfg.start_step = 0;
  auto ps = compress::makeCompressor(cfg);
  net::TransportOptions t;
  t.address = "127.0.0.1";
  auto world = comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, {}, t);
  // One bucket per parameter keeps shapes visible, as DDP buckets do.
  std::vector<torch::Tensor> grads;
  std::vector<compress::BucketView> views;
  for (const auto& p : model->named_parameters()) {
    grads.push_back(p.value().grad().clone().reshape({-1}));
    compress::BucketView v;
    v.index = static_cast<int>(views.size());
    v.numel = static_cast<size_t>(grads.back().numel());
    v.segments.push_back({p.key(), p.value().sizes().vec(), 0, v.numel});
    views.push_back(v);
  }
  double codec = 1e300;
  for (int r = 0; r < repeat + 1; ++r) {  // the first round draws Q; later rounds warm-start
    const double before = ps->stats().codec_s;
    for (size_t i = 0; i < views.size(); ++i) {
      auto g = grads[i].clone();
      views[i].data = g.data_ptr<float>();
      ps->reduce(*world, views[i]);
    }
    if (r > 0) codec = std::min(codec, ps->stats().codec_s - before);
  }
  const auto s = ps->stats();
  std::printf("powersgd rank %lld on vgg16 (%lld params, batch %lld): compression %.1f ms, compute %.1f ms: %.1f%% of "
              "the step's compute; ratio %.0fx\n",
              static_cast<long long>(rank), static_cast<long long>(nn::parameterCount(*model)),
              static_cast<long long>(batch), 1e3 * codec, 1e3 * compute, 100 * codec / compute, s.ratio());
  return {{"kind", "powersgd"}, {"model", "vgg16"}, {"rank", rank}, {"batch", batch}, {"codec_s", codec},
          {"compute_s", compute}, {"overhead_fraction", codec / compute}, {"ratio", s.ratio()}};
}

}  // namespace

int benchCompress(int argc, char** argv) {
  int64_t numel = 25'000'000, rank = 4, batch = 32;
  int repeat = 3;
  double ratio = 0.01;
  std::string json;
  std::vector<std::string> codecs = {"fp16", "bf16", "int8", "qsgd", "terngrad", "sign", "scaled_sign", "onebit",
                                     "randomk", "threshold", "dgc_topk", "topk"};
  bool no_topk = false, no_powersgd = false;
  CLI::App app{"Codec kernel speed vs memcpy, top-k vs torch::topk, PowerSGD overhead", "lowcomm bench compress"};
  app.add_option("--numel", numel, "values per codec call")->capture_default_str();
  app.add_option("--codecs", codecs, "codec kernels to time")->delimiter(',')->capture_default_str();
  app.add_option("--ratio", ratio, "kept fraction for sparse codecs")->capture_default_str();
  app.add_option("--repeat", repeat, "runs per measurement (best is reported)")->capture_default_str();
  app.add_option("--rank", rank, "PowerSGD rank")->capture_default_str();
  app.add_option("--batch", batch, "VGG16 batch for the PowerSGD compute reference")->capture_default_str();
  app.add_flag("--no-topk", no_topk, "skip the torch::topk comparison");
  app.add_flag("--no-powersgd", no_powersgd, "skip the PowerSGD measurement");
  app.add_option("--json", json, "write all rows here");
  if (!parseArgs(app, argc, argv)) return 0;
  if (numel < 1 || repeat < 1) throw ConfigError("bench compress: --numel and --repeat must be >= 1");
  runtime::pinTorchThreads(1);
  const auto x = gradientLike(static_cast<size_t>(numel), 1);
  std::vector<float> dst(x.size());
  const double mc = best(repeat, [&] { std::memcpy(dst.data(), x.data(), 4 * x.size()); });
  const double memcpy_GBps = 4.0 * static_cast<double>(x.size()) / 1e9 / mc;
  std::printf("memcpy (1 core): %.2f GB/s on %lld floats\n", memcpy_GBps, static_cast<long long>(numel));
  nlohmann::json rows = nlohmann::json::array();
  rows.push_back({{"kind", "memcpy"}, {"numel", numel}, {"GBps", memcpy_GBps}});
  for (const auto& c : codecs) rows.push_back(benchCodec(c, x, memcpy_GBps, repeat, ratio));
  if (!no_topk) rows.push_back(benchTopK(x, ratio, repeat));
  if (!no_powersgd) rows.push_back(benchPowerSgd(rank, batch, repeat));
  if (!json.empty()) std::ofstream(json) << rows.dump(1) << "\n";
  return 0;
}

}  // namespace lowcomm::cli
