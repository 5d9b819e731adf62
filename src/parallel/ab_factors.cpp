// AbTraining's factor sharing: with ab.svd_split each layer's factors come from one rank, and
// every rank checks that all ranks hold the same factors after an SVD.
#include <vector>

#include "phase_scope.h"
#include "lowcomm/parallel/ab_training.h"

namespace lowcomm::parallel {

// svd_split: layer i's factors come from rank i % world, in one broadcast per layer (A then B).
void AbTraining::shareFactors() {
  PhaseScope ps(*world_, "svd");
  torch::NoGradGuard no_grad;
  const int n = world_->size();
  for (size_t i = 0; i < lowrank_.layers().size(); ++i) {
    auto a = lowrank_.factorA(i).detach(), b = lowrank_.factorB(i).detach();
    auto buf = torch::cat({a.reshape({-1}), b.reshape({-1})});
    world_->broadcast(buf.data_ptr<float>(), buf.numel(), comm::DType::f32, static_cast<int>(i % n));
    a.copy_(buf.narrow(0, 0, a.numel()).view(a.sizes()));
    b.copy_(buf.narrow(0, a.numel(), b.numel()).view(b.sizes()));
  }
  lowrank_.refreshWeights();
}

// Every rank computed its SVD from the same weights; LAPACK is deterministic for equal inputs
// and thread counts, but a cheap checksum guards against a rank that differs (different BLAS
// threading): if any layer's factors disagree, rank 0's factors are broadcast.
void AbTraining::checkFactorsAgree() {
  PhaseScope ps(*world_, "svd");
  const size_t n = lowrank_.layers().size();
  std::vector<double> lo(2 * n), hi;
  for (size_t i = 0; i < n; ++i) {
    lo[2 * i] = lowrank_.factorA(i).detach().sum().item<double>();
    lo[2 * i + 1] = lowrank_.factorB(i).detach().sum().item<double>();
  }
  hi = lo;
  world_->allreduce(lo.data(), lo.size(), comm::DType::f64, comm::ReduceOp::min);
  world_->allreduce(hi.data(), hi.size(), comm::DType::f64, comm::ReduceOp::max);
  if (lo == hi) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i)
    for (auto t : {lowrank_.factorA(i).detach(), lowrank_.factorB(i).detach()})
      world_->broadcast(t.data_ptr<float>(), t.numel(), comm::DType::f32, 0);
}

}  // namespace lowcomm::parallel
