// DiLoCo's outer exchanges (contract in diloco_outer.h).
#include "diloco_outer.h"

#include <algorithm>
#include <chrono>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ddp.h"
#include "timed_comm.h"

namespace lowcomm::parallel {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

OuterExchanges::OuterExchanges(const DilocoGroups& groups, const DilocoPlan& plan,
                               const std::vector<torch::Tensor>& params, const std::vector<std::string>& names,
                               std::shared_ptr<BucketHook> hook, Trace* trace)
    : groups_(groups), hook_(std::move(hook)), trace_(trace), frags_(plan.fragments.size()) {
  for (size_t f = 0; f < plan.fragments.size(); ++f) {
    auto& fr = frags_[f];
    fr.carried.index = static_cast<int>(f);
    int64_t full = 0, carried = 0;
    for (size_t k = 0; k < plan.fragments[f].size(); ++k) {
      const int p = plan.fragments[f][k];
      fr.offsets.push_back(full);
      fr.shapes.push_back(params[p].sizes().vec());
      full += params[p].numel();
      if (plan.carrier[p] != groups_.member) continue;
      fr.carried.params.push_back(p);
      fr.carried.offsets.push_back(carried);
      fr.carried.names.push_back(names[p]);
      fr.carried.shapes.push_back(params[p].sizes().vec());
      fr.carried_at.push_back(static_cast<int>(k));
      carried += params[p].numel();
    }
    fr.offsets.push_back(full);
    fr.carried.offsets.push_back(carried);
    fr.carried.flat = torch::zeros({carried}, torch::kFloat32);
    fr.full = torch::zeros({full}, torch::kFloat32);
  }
}

OuterExchanges::~OuterExchanges() { thread_.reset(); }

void OuterExchanges::launch(int f, const std::vector<torch::Tensor>& anchor, const std::vector<torch::Tensor>& params,
                            const std::vector<torch::Tensor>& buffers, bool background) {
  auto& fr = frags_[f];
  LC_ENFORCE(!fr.pending, "fragment ", f, " launched while its exchange is in flight");
  torch::NoGradGuard no_grad;
  for (size_t c = 0; c < fr.carried.params.size(); ++c) {
    const int p = fr.carried.params[c];
    fr.carried.flat.narrow(0, fr.carried.offsets[c], params[p].numel()).copy_((anchor[p] - params[p]).reshape({-1}));
  }
  fr.buffers.clear();
  if (f == 0)
    for (const auto& b : buffers) fr.buffers.push_back(b.detach().clone());
  fr.pending = true;
  fr.background = background;
  fr.launched_at = std::chrono::steady_clock::now();
  auto done = std::make_shared<std::promise<void>>();
  fr.done = done->get_future().share();
  // After a failure the exchanges queued behind it do not run (the communicator is unusable)
  // and report the same failure, so whichever the trainer waits for first names the cause.
  auto task = [this, &fr, done, background] {
    if (const auto failed = failure()) return done->set_exception(failed);
    try {
      exchange(fr, background ? 3 : 1);
      done->set_value();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        if (!failed_) failed_ = std::current_exception();
      }
      done->set_exception(std::current_exception());
    }
  };
  if (!background) {
    const auto t0 = std::chrono::steady_clock::now();
    task();
    addSeconds(wait_s_, since(t0));
    return;
  }
  if (!thread_) thread_ = std::make_unique<CommThread>(3);
  thread_->submit(std::move(task));
}

// Carried Δ through the hook across the groups; each member's share summed into the whole
// fragment inside the group (the other members' parts are zero, so the sum is exact).
void OuterExchanges::exchange(Fragment& fr, int lane) {
  const auto t0 = std::chrono::steady_clock::now();
  TraceScope span(trace_, "outer-sync", "comm", lane,
                  {{"fragment", std::to_string(fr.carried.index)},
                   {"queued_us", std::to_string(std::chrono::duration<double, std::micro>(t0 - fr.launched_at).count())}});
  // Exchanges run one at a time and only they send in phase "outer": the difference is this one's.
  auto outerSent = [this] {
    const auto s = groups_.cross->meter().snapshot();
    const auto it = s.by_phase.find("outer");
    return it == s.by_phase.end() ? uint64_t{0} : it->second.bytes_sent;
  };
  const uint64_t sent0 = outerSent();
  torch::NoGradGuard no_grad;
  if (fr.carried.flat.numel() > 0) {
    PhaseGuard phase(*groups_.cross, "outer");
    hook_->run(*groups_.cross, fr.carried);
  }
  if (groups_.group) fr.full.zero_();
  for (size_t c = 0; c < fr.carried_at.size(); ++c) {
    const int k = fr.carried_at[c];
    fr.full.narrow(0, fr.offsets[k], fr.offsets[k + 1] - fr.offsets[k])
        .copy_(fr.carried.flat.narrow(0, fr.carried.offsets[c], fr.carried.offsets[c + 1] - fr.carried.offsets[c]));
  }
  if (groups_.group) {
    PhaseGuard phase(*groups_.group, "outer");
    reduceTensors(*groups_.group, {fr.full}, comm::ReduceOp::sum);
  }
  if (!fr.buffers.empty()) {
    PhaseGuard phase(*groups_.cross, "outer");
    reduceTensors(*groups_.cross, fr.buffers, comm::ReduceOp::avg);
    if (groups_.group) {
      PhaseGuard group_phase(*groups_.group, "outer");
      reduceTensors(*groups_.group, fr.buffers, comm::ReduceOp::avg);
    }
  }
  const double ratio = hook_->compressionRatio();
  const auto sent = static_cast<int64_t>(outerSent() - sent0);
  std::lock_guard<std::mutex> lock(stats_mu_);
  comm_s_ += since(t0);
  ratio_ = ratio;
  peak_sync_bytes_ = std::max(peak_sync_bytes_, sent);
}

OuterExchanges::Landed OuterExchanges::land(int f) {
  auto& fr = frags_[f];
  LC_ENFORCE(fr.pending, "fragment ", f, " lands without an exchange in flight");
  {
    TraceScope span(trace_, "outer-wait", "comm", 0,
                    {{"fragment", std::to_string(f)}, {"background", fr.background ? "1" : "0"}});
    const auto t0 = std::chrono::steady_clock::now();
    fr.pending = false;
    fr.done.get();
    addSeconds(wait_s_, since(t0));
  }
  Landed out;
  for (size_t k = 0; k + 1 < fr.offsets.size(); ++k)
    out.delta.push_back(fr.full.narrow(0, fr.offsets[k], fr.offsets[k + 1] - fr.offsets[k]).view(fr.shapes[k]));
  out.buffers = fr.buffers;
  return out;
}

void OuterExchanges::drain() {
  for (auto& fr : frags_)
    if (fr.pending) {
      const auto t0 = std::chrono::steady_clock::now();
      fr.done.get();  // a failed exchange must never be saved as a result
      addSeconds(wait_s_, since(t0));
    }
}

torch::Tensor OuterExchanges::pendingFlat(int f) {
  auto& fr = frags_[f];
  LC_ENFORCE(fr.pending, "fragment ", f, " has no exchange in flight");
  fr.done.get();
  std::vector<torch::Tensor> parts = {fr.full};
  for (const auto& b : fr.buffers) parts.push_back(b.reshape({-1}));
  return torch::cat(parts);
}

void OuterExchanges::restorePending(int f, const torch::Tensor& flat, const std::vector<torch::Tensor>& buffer_shapes) {
  auto& fr = frags_[f];
  int64_t need = fr.full.numel();
  for (const auto& b : buffer_shapes) need += b.numel();
  if (flat.scalar_type() != torch::kFloat32 || flat.dim() != 1 || flat.numel() != need)
    throw DataError("DiLoCo checkpoint state: the exchange in flight of fragment " + std::to_string(f) + " has " +
                    std::to_string(flat.numel()) + " values, the model needs " + std::to_string(need));
  torch::NoGradGuard no_grad;
  fr.full.copy_(flat.narrow(0, 0, fr.full.numel()));
  fr.buffers.clear();
  int64_t off = fr.full.numel();
  for (const auto& b : buffer_shapes) {
    fr.buffers.push_back(flat.narrow(0, off, b.numel()).view(b.sizes()).clone());
    off += b.numel();
  }
  std::promise<void> ready;
  ready.set_value();
  fr.done = ready.get_future().share();
  fr.pending = true;
  fr.background = false;
}

double OuterExchanges::commSeconds() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return comm_s_;
}
double OuterExchanges::waitSeconds() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return wait_s_;
}
int64_t OuterExchanges::peakSyncBytes() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return peak_sync_bytes_;
}
double OuterExchanges::ratio() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return ratio_;
}
std::exception_ptr OuterExchanges::failure() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return failed_;
}
void OuterExchanges::addSeconds(double& what, double s) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  what += s;
}

}  // namespace lowcomm::parallel
