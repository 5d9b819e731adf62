#include "c10d_backend.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "lowcomm/base/error.h"
#include "lowcomm/c10d/process_group.h"

namespace lowcomm::cli {

struct C10dBackend::Impl {
  std::string kind;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
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
    throw Error("c10d backend: deleteKey('" + key + "') is not supported by the rendezvous store");
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys)
      if (!s_->check(k)) return false;
    return true;
  }
  int64_t getNumKeys() override { throw Error("c10d backend: getNumKeys is not supported by the rendezvous store"); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) s_->get(k, timeout);
  }

 private:
  std::shared_ptr<net::Store> s_;
};

}  // namespace

C10dBackend::C10dBackend(const std::string& kind, std::shared_ptr<net::Store> store, int rank, int size,
                         const std::string& iface, const std::string& address, int timeout_s)
    : impl_(std::make_unique<Impl>()) {
  impl_->kind = kind;
  const std::chrono::seconds timeout(timeout_s);
  auto adapter = c10::make_intrusive<StoreAdapter>(std::move(store), timeout);
  if (kind == "lowcomm") {
    // Binds like our Communicator: the interface comes from GLOO_SOCKET_IFNAME (set by
    // `lowcomm launch --cluster`), else the hostname's address.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("c10d-lowcomm", adapter);
    impl_->pg = torchdist::ProcessGroupLowcomm::create(prefixed, rank, size, timeout);
    return;
  }
  if (kind != "gloo") throw ConfigError("c10d backend '" + kind + "': expected gloo or lowcomm");
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!iface.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
  else if (!address.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  else opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("c10d-baseline", adapter);
  impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
}

C10dBackend::~C10dBackend() = default;

bool C10dBackend::supports(const std::string& op) const {
  return op == "allreduce" || op == "allgather" || op == "broadcast" || op == "alltoall" ||
         (op == "reduce_scatter" && impl_->kind == "lowcomm");
}

void C10dBackend::run(const std::string& op, float* in, float* out, size_t count, int size) {
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
  } else if (op == "reduce_scatter" && impl_->kind == "lowcomm") {
    auto i = torch::from_blob(in, {n * size}, f32);
    auto o = torch::from_blob(out, {n}, f32);
    impl_->pg->_reduce_scatter_base(o, i)->wait();
  } else {
    throw ConfigError("c10d backend " + impl_->kind + ": op '" + op + "' is not benchmarked");
  }
}

void C10dBackend::barrier() { impl_->pg->barrier()->wait(); }

}  // namespace lowcomm::cli
