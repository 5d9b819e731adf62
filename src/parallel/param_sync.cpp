// Start-of-training consistency: same parameter names and shapes everywhere, then rank 0's
// values broadcast unless every rank's already hash the same; and buffer averaging (BatchNorm statistics) before evaluation.
#include <cstring>
#include <sstream>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ddp.h"

namespace lowcomm::parallel {

namespace {

std::vector<std::string> describe(torch::nn::Module& model) {
  std::vector<std::string> lines;
  for (const auto& p : model.named_parameters()) {
    std::ostringstream os;
    os << p.key() << " " << p.value().sizes();
    lines.push_back(os.str());
  }
  return lines;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

void broadcastTensor(comm::Communicator& comm, torch::Tensor t) {
  LC_ENFORCE(t.is_contiguous(), "broadcast of a non-contiguous tensor");
  const auto st = t.scalar_type();
  if (st == torch::kFloat32) comm.broadcast(t.data_ptr(), t.numel(), comm::DType::f32, 0);
  else if (st == torch::kFloat64) comm.broadcast(t.data_ptr(), t.numel(), comm::DType::f64, 0);
  else if (st == torch::kInt64) comm.broadcast(t.data_ptr(), t.numel(), comm::DType::i64, 0);
  else if (st == torch::kInt32) comm.broadcast(t.data_ptr(), t.numel(), comm::DType::i32, 0);
  else comm.broadcast(t.data_ptr(), t.numel() * t.element_size(), comm::DType::u8, 0);
}

// FNV-1a over the parameter names and shapes: equal on ranks that built the same architecture.
uint64_t shapeHash(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (char c : joined(describe(model))) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// A 64-bit hash of every parameter's and buffer's bytes, in order (8 bytes a round).
uint64_t valueHash(torch::nn::Module& model) {
  uint64_t h = 0x84222325cbf29ce4ull;
  auto mix = [&h](uint64_t w) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  };
  auto add = [&](const torch::Tensor& t0) {
    const auto t = t0.contiguous();
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    for (; i < n; ++i) mix(p[i]);
    mix(n);
  };
  for (const auto& p : model.parameters()) add(p.detach());
  for (const auto& b : model.buffers()) add(b);
  return h;
}

[[noreturn]] void reportMismatch(comm::Communicator& comm, torch::nn::Module& model) {
  // Find the first difference against rank 0's description.
  const std::string mine = joined(describe(model));
  uint64_t len = mine.size();
  comm.broadcast(&len, 1, comm::DType::i64, 0);
  std::string ref(len, '\0');
  if (comm.rank() == 0) ref = mine;
  comm.broadcast(ref.data(), len, comm::DType::u8, 0);
  const auto a = splitLines(ref), b = describe(model);
  std::string what = "parameter lists differ across ranks";
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "<none>", y = i < b.size() ? b[i] : "<none>";
    if (x != y) {
      what = "first differing parameter #" + std::to_string(i) + ": rank 0 has '" + x + "', rank " +
             std::to_string(comm.rank()) + " has '" + y + "'";
      break;
    }
  }
  if (a == b) what = "rank " + std::to_string(comm.rank()) + " matches rank 0, but another rank differs";
  throw ConfigError("model mismatch across ranks: " + what);
}

// One allgather of (shape hash, value hash) per rank; ConfigError on differing shapes. Returns
// whether every rank's values hash as rank 0's.
bool gatherHashes(comm::Communicator& comm, torch::nn::Module& model, bool values) {
  const uint64_t mine[2] = {shapeHash(model), values ? valueHash(model) : 0};
  std::vector<uint64_t> all(2 * static_cast<size_t>(comm.size()));
  comm.allgather(mine, all.data(), 2, comm::DType::i64);
  bool same_shape = true, same_values = true;
  for (int r = 0; r < comm.size(); ++r) {
    same_shape = same_shape && all[2 * r] == all[0];
    same_values = same_values && all[2 * r + 1] == all[1];
  }
  if (!same_shape) reportMismatch(comm, model);
  return same_values;
}

}  // namespace

void checkModel(comm::Communicator& comm, torch::nn::Module& model) { gatherHashes(comm, model, false); }

void broadcastModel(comm::Communicator& comm, torch::nn::Module& model) {
  // Ranks that built the model from the same seed hold the same values already: across a WAN the
  // broadcast of a whole model would then be most of a short run's bytes for nothing.
  if (gatherHashes(comm, model, true)) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) broadcastTensor(comm, p.data());
  for (auto& b : model.buffers()) broadcastTensor(comm, b);
}

void reduceTensors(comm::Communicator& comm, const std::vector<torch::Tensor>& ts, comm::ReduceOp op) {
  if (ts.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& t : ts) {
    LC_ENFORCE(t.scalar_type() == torch::kFloat32, "reduceTensors: float32 tensors only");
    flat.push_back(t.reshape({-1}));
  }
  auto buf = torch::cat(flat).contiguous();
  comm.allreduce(buf.data_ptr<float>(), buf.numel(), comm::DType::f32, op);
  torch::NoGradGuard no_grad;
  int64_t off = 0;
  for (const auto& t : ts) {
    t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

void DataParallel::averageBuffers() {
  torch::NoGradGuard no_grad;
  for (auto& b : model_->buffers()) {
    if (b.scalar_type() == torch::kFloat32)
      comm_->allreduce(b.data_ptr(), b.numel(), comm::DType::f32, comm::ReduceOp::avg);
    else if (b.scalar_type() == torch::kFloat64)
      comm_->allreduce(b.data_ptr(), b.numel(), comm::DType::f64, comm::ReduceOp::avg);
  }
}

}  // namespace lowcomm::parallel
