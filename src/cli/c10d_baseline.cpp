#include "c10d_baseline.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "lowcomm/base/error.h"

namespace lowcomm::cli {

struct C10dGloo::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

namespace {

// Our rendezvous store as the c10d::Store that ProcessGroupGloo needs (set, get, add, check, wait).
class StoreAdapter : public c10d::Store {
 public:
  StoreAdapter(std::shared_ptr<net::Store> s, std::chrono::milliseconds timeout) : Store(timeout), s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override { s_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return s_->get(key, timeout_); }
  int64_t add(const std::string& key, int64_t value) override { return s_->add(key, value); }
  bool deleteKey(const std::string& key) override {
    throw Error("c10d baseline: deleteKey('" + key + "') is not supported by the rendezvous store");
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys)
      if (!s_->check(k)) return false;
    return true;
  }
  int64_t getNumKeys() override { throw Error("c10d baseline: getNumKeys is not supported by the rendezvous store"); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) s_->get(k, timeout);
  }

 private:
  std::shared_ptr<net::Store> s_;
};

}  // namespace

C10dGloo::C10dGloo(std::shared_ptr<net::Store> store, int rank, int size, const std::string& iface,
                   const std::string& address, int timeout_s)
    : impl_(std::make_unique<Impl>()) {
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(timeout_s));
  if (!iface.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
  else if (!address.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  else opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto adapter = c10::make_intrusive<StoreAdapter>(std::move(store), std::chrono::seconds(timeout_s));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("c10d-baseline", adapter);
  impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
}

C10dGloo::~C10dGloo() = default;

bool C10dGloo::supports(const std::string& op) {
  return op == "allreduce" || op == "allgather" || op == "broadcast" || op == "alltoall";
}

void C10dGloo::run(const std::string& op, float* in, float* out, size_t count, int size) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const auto n = static_cast<int64_t>(count);
  if (op == "allreduce") {
    std::vector<at::Tensor> t{torch::from_blob(in, {n}, f32)};
    impl_->pg->allreduce(t)->wait();
  } else if (op == "broadcast") {
    std::vector<at::Tensor> t{torch::from_blob(in, {n}, f32)};
    impl_->pg->broadcast(t)->wait();
  } else if (op == "allgather") {
    std::vector<at::Tensor> input{torch::from_blob(in, {n}, f32)};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < size; ++r) output[0].push_back(torch::from_blob(out + r * count, {n}, f32));
    impl_->pg->allgather(output, input)->wait();
  } else if (op == "alltoall") {
    auto i = torch::from_blob(in, {n * size}, f32);
    auto o = torch::from_blob(out, {n * size}, f32);
    std::vector<int64_t> split;  // empty: equal splits
    impl_->pg->alltoall_base(o, i, split, split)->wait();
  } else {
    throw ConfigError("c10d-gloo baseline: op '" + op + "' is not supported by ProcessGroupGloo");
  }
}

void C10dGloo::barrier() { impl_->pg->barrier()->wait(); }

}  // namespace lowcomm::cli
