// Measures forward+backward time of one model (a program, not a test).
// Usage: nn_time_model [model=cnn] [batch=128] [threads=1] [channels=1] [size=28] [iters=20]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lowcomm/nn/models.h"

int main(int argc, char** argv) {
  auto arg = [&](int i, const char* def) { return std::string(argc > i ? argv[i] : def); };
  lowcomm::nn::ModelSpec spec;
  spec.name = arg(1, "cnn");
  const int batch = std::stoi(arg(2, "128"));
  const int threads = std::stoi(arg(3, "1"));
  spec.in_channels = std::stoi(arg(4, "1"));
  spec.image_size = std::stoi(arg(5, "28"));
  const int iters = std::stoi(arg(6, "20"));
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto model = lowcomm::nn::makeModel(spec);
  model->train();
  auto x = torch::randn({batch, spec.in_channels, spec.image_size, spec.image_size});
  auto y = torch::randint(0, spec.classes, {batch}, torch::kLong);
  auto step = [&] {
    model->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator, OpenBLAS threads
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::printf("{\"model\":\"%s\",\"params\":%lld,\"batch\":%d,\"threads\":%d,\"fwd_bwd_s\":%.5f,"
              "\"samples_per_s\":%.1f}\n",
              spec.name.c_str(), static_cast<long long>(lowcomm::nn::parameterCount(*model)), batch,
              threads, s, batch / s);
  return 0;
}
