#include "elastic_membership.h"

namespace lowcomm::cli {

namespace {

class WorkerMembership final : public train::ElasticMembership {
 public:
  explicit WorkerMembership(runtime::Worker& w) : w_(w) {}
  int slot() const override { return w_.membership->env().slot; }
  int slots() const override { return w_.membership->env().slots; }
  bool joining() const override { return w_.membership->env().joining(); }
  int incarnation() const override { return w_.membership->env().incarnation; }
  train::ElasticEpoch initial() override { return current(); }
  void announceReady() override { w_.membership->announceReady(); }
  void joined() override { w_.membership->joined(); }
  train::ElasticEpoch join(int64_t after) override {
    runtime::joinNextEpoch(w_, after, w_.comm_options.rendezvousTimeout());
    return current();
  }

 private:
  train::ElasticEpoch current() const { return {w_.epoch.number, w_.epoch.members, w_.epoch.why, w_.comm}; }
  runtime::Worker& w_;
};

}  // namespace

std::shared_ptr<train::ElasticMembership> makeWorkerMembership(runtime::Worker& w) {
  return std::make_shared<WorkerMembership>(w);
}

}  // namespace lowcomm::cli
