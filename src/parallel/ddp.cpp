#include "lowcomm/parallel/ddp.h"

#include <torch/csrc/autograd/function_hook.h>

#include <optional>

#include "comm_thread.h"
#include "phase_scope.h"
#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

struct DataParallel::Param {
  std::string name;
  torch::Tensor tensor;
};

namespace {

// Runs after AccumulateGrad has written this backward's gradient into .grad.
struct ReadyHook : torch::autograd::FunctionPostHook {
  explicit ReadyHook(std::function<void()> fn) : fn(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn();
    return outputs;
  }
  std::function<void()> fn;
};

double seconds(Trace::Clock::time_point a, Trace::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void AllreduceHook::run(comm::Communicator& comm, GradBucket& bucket) {
  comm.allreduce(bucket.flat.data_ptr<float>(), bucket.flat.numel(), comm::DType::f32, comm::ReduceOp::avg);
}

DataParallel::DataParallel(std::shared_ptr<comm::Communicator> world, std::shared_ptr<torch::nn::Module> model,
                           DdpOptions opts, std::shared_ptr<BucketHook> hook, Trace* trace)
    : model_(std::move(model)), opts_(std::move(opts)), hook_(hook ? std::move(hook) : std::make_shared<AllreduceHook>()),
      trace_(trace) {
  LC_ENFORCE(world && model_, "DataParallel needs a communicator and a model");
  if (opts_.bucket_bytes < 4) throw ConfigError("bucket size must be at least 4 bytes");
  LC_ENFORCE(opts_.pad_to >= 1, "DataParallel: pad_to must be positive");
  if (opts_.broadcast_initial) broadcastModel(*world, *model_);
  else checkModel(*world, *model_);
  comm_ = opts_.split_comm ? world->split(0, world->rank()) : world;
  if (opts_.split_comm || !opts_.label_own_calls) comm_->setPhase(opts_.phase);
  auto local = [&](const std::string& name) {
    for (const auto& suffix : opts_.local_suffixes)
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    return false;
  };
  for (const auto& p : model_->named_parameters())
    if (p.value().requires_grad() && !local(p.key())) {
      if (p.value().scalar_type() != torch::kFloat32)
        throw ConfigError("DataParallel: parameter '" + p.key() + "' is not float32");
      params_.push_back(Param{p.key(), p.value()});
    }
  buildBuckets();
  installHooks();
  thread_ = std::make_unique<CommThread>();
}

DataParallel::~DataParallel() {
  try {
    if (thread_) thread_->wait();
  } catch (...) {
    // Destruction after a failed step: the error was reported by finish().
  }
  // A later DataParallel over the same parameters (local SGD's phases, AB-training, a heal under
  // --elastic) must not find this one's hooks there, calling into freed memory.
  for (size_t i = 0; i < hook_keys_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

std::vector<torch::Tensor> DataParallel::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_) out.push_back(p.tensor);
  return out;
}

int64_t DataParallel::bufferBytes() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if (b.flat.defined()) n += b.flat.numel() * 4;
  return n;
}

void DataParallel::buildBuckets() {
  const int n = static_cast<int>(params_.size());
  bucket_of_.assign(n, -1);
  GradBucket cur;
  int64_t elems = 0;
  auto close = [&] {
    if (cur.params.empty()) return;
    cur.index = static_cast<int>(buckets_.size());
    cur.offsets.push_back(elems);
    const int64_t padded = (elems + opts_.pad_to - 1) / opts_.pad_to * opts_.pad_to;
    if (!opts_.release_grads) cur.flat = torch::zeros({padded}, torch::kFloat32);
    bucket_elems_.push_back(padded);
    buckets_.push_back(std::move(cur));
    cur = GradBucket{};
    elems = 0;
  };
  for (int i = n - 1; i >= 0; --i) {  // reverse registration order: gradients arrive roughly so
    const int64_t numel = params_[i].tensor.numel();
    if (!cur.params.empty() && static_cast<size_t>((elems + numel) * 4) > opts_.bucket_bytes) close();
    bucket_of_[i] = static_cast<int>(buckets_.size());
    cur.params.push_back(i);
    cur.offsets.push_back(elems);
    cur.names.push_back(params_[i].name);
    cur.shapes.push_back(params_[i].tensor.sizes().vec());
    elems += numel;
  }
  close();
  pending_.assign(buckets_.size(), 0);
  ready_.assign(n, false);
  resetStep();
}

void DataParallel::installHooks() {
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    LC_ENFORCE(acc, "no gradient accumulator for parameter ", params_[i].name);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>([this, i] { onGradReady(i); })));
    accumulators_.push_back(std::move(acc));
  }
}

void DataParallel::resetStep() {
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].params.size());
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  step_active_ = false;
}

void DataParallel::onGradReady(int i) {
  if (!sync_ || ready_[i]) return;
  step_active_ = true;
  ready_[i] = true;
  const int b = bucket_of_[i];
  GradBucket& bucket = buckets_[b];
  const auto pos = std::find(bucket.params.begin(), bucket.params.end(), i) - bucket.params.begin();
  if (!bucket.flat.defined()) bucket.flat = torch::zeros({bucket_elems_[b]}, torch::kFloat32);
  auto& grad = params_[i].tensor.mutable_grad();
  auto slot = bucket.flat.narrow(0, bucket.offsets[pos], params_[i].tensor.numel());
  if (grad.defined()) slot.copy_(grad.reshape({-1}));
  else slot.zero_();
  if (opts_.release_grads) grad.reset();
  if (--pending_[b] == 0 && opts_.overlap) launchReady(false);
}

// Buckets go to the communication thread strictly in index order, so every rank runs the same
// sequence of collectives whatever order its gradients became ready in.
void DataParallel::launchReady(bool force) {
  while (next_launch_ < static_cast<int>(buckets_.size()) && (force || pending_[next_launch_] == 0)) {
    GradBucket& bucket = buckets_[next_launch_];
    if (!bucket.flat.defined()) bucket.flat = torch::zeros({bucket_elems_[next_launch_]}, torch::kFloat32);
    if (pending_[next_launch_] > 0) {  // unused parameters this step: they contribute zeros
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const int p = bucket.params[k];
        if (ready_[p]) continue;
        ready_[p] = true;
        bucket.flat.narrow(0, bucket.offsets[k], params_[p].tensor.numel()).zero_();
      }
      pending_[next_launch_] = 0;
    }
    const auto ready = Trace::Clock::now();
    thread_->submit([this, &bucket, ready] {
      const auto t0 = Trace::Clock::now();
      {
        std::optional<PhaseScope> label;
        if (!opts_.split_comm && opts_.label_own_calls) label.emplace(*comm_, opts_.phase);
        hook_->run(*comm_, bucket);
      }
      if (opts_.release_grads) bucket.flat = torch::Tensor();
      const auto t1 = Trace::Clock::now();
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        stats_.comm_s += seconds(t0, t1);
      }
      if (trace_) trace_->complete("bucket " + std::to_string(bucket.index), "comm", 1, t0, t1,
                                   {{"bytes", std::to_string(bucket_elems_[bucket.index] * 4)}, {"hook", hook_->name()},
                                    {"queued_us", std::to_string(seconds(ready, t0) * 1e6)}});
    });
    ++next_launch_;
  }
}

void DataParallel::finish() {
  if (!sync_) return;
  launchReady(true);
  const auto t0 = Trace::Clock::now();
  try {
    thread_->wait();
  } catch (...) {
    resetStep();
    throw;
  }
  const auto t1 = Trace::Clock::now();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.wait_s += seconds(t0, t1);
    stats_.buckets += static_cast<int64_t>(buckets_.size());
  }
  if (trace_) trace_->complete("wait for gradients", "wait", 0, t0, t1);
  if (!opts_.grads_to_params) {
    resetStep();
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_)
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      auto& t = params_[bucket.params[k]].tensor;
      auto avg = bucket.flat.narrow(0, bucket.offsets[k], t.numel()).view(t.sizes());
      if (!t.grad().defined()) t.mutable_grad() = avg.clone();
      else t.mutable_grad().copy_(avg);
    }
  resetStep();
}

}  // namespace lowcomm::parallel
