// `strategy.name = "ddp"`: plain data parallelism, or ZeRO stage 1/2 with strategy.zero. Its
// knobs are the common [strategy] and [compress] sections, so its own section is empty.
#include "lowcomm/parallel/strategy_spec.h"
#include "lowcomm/parallel/zero.h"

namespace lowcomm::parallel {

namespace {
struct NoOptions {};
}  // namespace

StrategySpec ddpSpec() {
  StrategySpec s;
  s.name = "ddp";
  s.doc = "data parallelism: bucketed gradient allreduce overlapped with backward, any codec, ZeRO-1/2";
  s.options = optionsSection(schema::Section<NoOptions>("ddp"));
  s.make = [](const StrategyContext& ctx, const std::any&, const StrategyRun& run) {
    return run.zero_stage ? makeZeroStrategy(ctx, run.zero_stage) : makeDdpStrategy(ctx);
  };
  s.resume_key = [](const std::any&, int zero_stage) { return zero_stage ? std::string("zero") : std::string(); };
  s.accepts_zero = true;
  return s;
}

}  // namespace lowcomm::parallel
