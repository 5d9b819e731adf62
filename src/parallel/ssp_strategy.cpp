// `strategy.name = "ssp"` (contract in ssp.h; the server shard in ssp_server.h).
#include <algorithm>
#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ssp.h"
#include "comm_thread.h"
#include "flat_state.h"
#include "ssp_server.h"
#include "timed_comm.h"

namespace lowcomm::parallel {

void validateSspOptions(const SspOptions& o) { sspSection().validate(o); }

namespace {

using Clock = std::chrono::steady_clock;

class SspStrategy : public Strategy {
 public:
  SspStrategy(const StrategyContext& ctx, const SspOptions& o)
      : model_(ctx.model), o_(o), trace_(ctx.trace), state_(*ctx.model) {
    validateSspOptions(o_);
    world_ = ctx.world->split(0, ctx.world->rank());
    n_ = world_->size();
    rank_ = world_->rank();
    broadcastModel(*world_, *model_);
    auto [worker, server] = world_->splitRoles();
    worker_ = worker;
    worker_->setPhase("push");
    // A server waits for pushes with no deadline: between two pushes may lie a whole evaluation
    // or checkpoint. Stuck peers are the workers' to detect (their exchanges and waits time out).
    auto idle = server->options();
    idle.timeout = std::chrono::hours(24 * 30);
    server->setOptions(idle);
    server_ = std::make_shared<SspServer>(server, n_, o_.staleness, overlap() ? 1 : 0);
    const int64_t total = state_.numel();
    for (int k = 0; k <= n_; ++k) offset_.push_back(total * k / n_);
    pulled_ = torch::zeros({total}, torch::kFloat32);
    now_ = torch::zeros({total}, torch::kFloat32);
    for (int k = 0; k < n_; ++k) {
      send_.push_back(torch::zeros({kSspHeaderFloats + length(k)}, torch::kFloat32));
      recv_.push_back(torch::zeros({kSspHeaderFloats + length(k)}, torch::kFloat32));
      fence_recv_.push_back(torch::zeros({kSspHeaderFloats}, torch::kFloat32));
    }
  }
  ~SspStrategy() override {
    if (server_->running()) server_->detach();  // after a failure: its receive fails or times out
  }

  std::string beginStep(int64_t step) override {
    ensureStarted(step);
    return "ssp";
  }
  std::vector<nlohmann::json> takeEvents() override { return std::exchange(events_, {}); }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool) override {}
  void afterBackward() override {}

  void afterOptimizerStep(int64_t step) override {
    clock_ = step + 1;
    timed("push", [&] {
      if (overlap()) {
        finishTrip();  // the previous push's answer, merged under this step's own update
        state_.pack(now_);
        now_.sub_(pulled_);  // this step's update (pulled_ is the reference pushes are relative to)
        stage(SspKind::push, now_);
        state_.pack(pulled_);  // later updates are relative to the weights now
        trip_.submit([this] { exchange(recv_); });
        inflight_ = true;
        return;
      }
      state_.pack(now_);
      now_.sub_(pulled_);
      stage(SspKind::push, now_);
      exchange(recv_);
      countStaleness(takeShards(/*keep_local=*/false));
    });
  }

  void beforeEval() override {}
  nlohmann::json evalFields() const override { return {{"staleness", staleness_}}; }
  bool finish(int64_t step) override {
    ensureStarted(step);
    if (finished_) return false;
    timed("final-pull", [&] {
      finishTrip();
      waitForAll();
      stage(SspKind::final, now_);
      exchange(recv_);
      takeShards(/*keep_local=*/false);
      server_->join();
    });
    finished_ = true;
    events_.push_back({{"type", "ssp"}, {"event", "final-pull"}, {"step", step}});
    return true;
  }

  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    return [this](torch::serialize::OutputArchive& ar) {
      ensureStarted(clock_);
      if (!finished_) timed("fence", [&] {
          finishTrip();
          waitForAll();
          stage(SspKind::fence, now_);
          exchange(fence_recv_);
          ++fences_;
        });
      const auto snap = server_->snapshot();
      ar.write("shard", snap.shard);
      ar.write("clocks", torch::tensor(snap.clocks, torch::kInt64));
      ar.write("stats", torch::tensor({staleness_, staleness_max_, staleness_sum_, pulls_, fences_}, torch::kInt64));
    };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) {
      torch::Tensor shard, clocks, stats;  // one tensor per key: read() re-points it at the stored storage
      ar.read("shard", shard);
      ar.read("clocks", clocks);
      ar.read("stats", stats);
      if (shard.numel() != length(rank_) || clocks.numel() != n_)
        throw ConfigError("ssp: the checkpoint's server shard (" + std::to_string(shard.numel()) + " values, " +
                          std::to_string(clocks.numel()) + " clocks) does not fit this model and world (" +
                          std::to_string(length(rank_)) + " values, " + std::to_string(n_) + " workers)");
      const auto c = clocks.contiguous();
      std::vector<int64_t> cs(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + n_);
      server_->load(shard, cs);
      clock_ = cs[rank_];
      const auto s = stats.contiguous();
      const int64_t* v = s.data_ptr<int64_t>();
      staleness_ = v[0];
      staleness_max_ = v[1];
      staleness_sum_ = v[2];
      pulls_ = v[3];
      fences_ = v[4];
      loaded_ = true;
    };
  }

  // With staleness 0 every pull hands all workers the same shards; otherwise only the end does.
  comm::Communicator* replicas() override {
    return o_.staleness == 0 || finished_ || pulls_ == 0 ? world_.get() : nullptr;
  }
  DdpStats stats() const override { return DdpStats{comm_s_, comm_s_, pulls_}; }
  int64_t bufferBytes() const override {
    int64_t b = 2 * pulled_.numel() * 4;  // the pulled weights and the update
    for (int k = 0; k < n_; ++k) b += (send_[k].numel() + recv_[k].numel()) * 4;
    return b + server_->bufferBytes();
  }
  nlohmann::json stepFields() const override { return {{"staleness", staleness_}, {"clock", clock_}}; }
  nlohmann::json summary() const override {
    return {{"staleness_bound", o_.staleness},
            {"staleness_max", staleness_max_},
            {"staleness_mean", pulls_ ? static_cast<double>(staleness_sum_) / static_cast<double>(pulls_) : 0.0},
            {"pulls", pulls_},
            {"fences", fences_},
            {"shard_values", length(rank_)}};
  }

 private:
  int64_t length(int k) const { return offset_[k + 1] - offset_[k]; }
  torch::Tensor shard(const torch::Tensor& flat, int k) const { return flat.narrow(0, offset_[k], length(k)); }

  // The server starts at the first step (after a resume loaded its shard) from this rank's
  // weights, which every rank shares then.
  void ensureStarted(int64_t step) {
    if (server_->running() || finished_) return;
    torch::NoGradGuard no_grad;
    state_.pack(pulled_);
    if (!loaded_) {
      server_->load(shard(pulled_, rank_), std::vector<int64_t>(n_, step));
      clock_ = step;
    }
    server_->start();
  }

  // Before a fence or the final pull: until every rank has pushed as many steps as this one (this
  // rank's server sees every push). A rank that stops making progress for comm.timeout_s is an
  // error naming it; a slow one that keeps pushing is waited for, however long it takes.
  void waitForAll() {
    const auto timeout = worker_->options().timeout;
    auto deadline = Clock::now() + timeout;
    for (int64_t last = -1;;) {
      server_->rethrowFailure();
      const auto c = server_->clocks();
      const int64_t low = *std::min_element(c.begin(), c.end());
      if (low >= clock_) return;
      if (low > last) {
        last = low;
        deadline = Clock::now() + timeout;
      }
      if (Clock::now() > deadline)
        throw TimeoutError("ssp (rank " + std::to_string(rank_) + "): no rank behind step " + std::to_string(clock_) +
                           " pushed a step for " + std::to_string(timeout.count()) + " ms (dead or stuck?)" +
                           slowestNote());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Push `update` (its payload unused for a fence or final) with this kind and clock to every server.
  void stage(SspKind kind, const torch::Tensor& update) {
    for (int k = 0; k < n_; ++k) {
      writeSspHeader(send_[k], kind, clock_);
      send_[k].narrow(0, kSspHeaderFloats, length(k)).copy_(shard(update, k));
    }
  }

  // Sends the staged messages to every server and receives every answer (on this thread or the
  // trip thread). Errors name which rank's worker or server failed.
  void exchange(std::vector<torch::Tensor>& answers) {
    server_->rethrowFailure();
    std::vector<comm::Communicator::P2P> sends, recvs;
    for (int k = 0; k < n_; ++k) {
      sends.push_back({n_ + k, send_[k].data_ptr(), static_cast<size_t>(send_[k].numel()) * 4});
      recvs.push_back({n_ + k, answers[k].data_ptr(), static_cast<size_t>(answers[k].numel()) * 4});
    }
    try {
      worker_->exchange(sends, recvs, kSspTag);
    } catch (const TimeoutError& e) {  // more telling than this rank's server failing too
      throw TimeoutError(roleNote(e.what()) + slowestNote() + serverNote());
    } catch (const PeerError& e) {
      throw PeerError(e.rank() >= n_ ? e.rank() - n_ : e.rank(), roleNote(e.what()) + serverNote());
    }
  }

  // With a bound of at least 1 (or none) the push and pull of step t run while step t + 1
  // computes; the servers then answer one step earlier (ssp_server.h: lag).
  bool overlap() const { return o_.overlap && o_.staleness != 0; }

  // Waits for the push in flight and merges its answer: weights = pulled + what this rank did
  // since it pushed.
  void finishTrip() {
    if (!inflight_) return;
    inflight_ = false;
    trip_.wait();
    countStaleness(takeShards(/*keep_local=*/true));
  }

  // "rank 5" of the worker/server communicator becomes "rank 5 (rank 1's server)" (n = 4).
  std::string roleNote(const std::string& what) const {
    static const std::regex peer("rank (\\d+)");
    std::string out;
    auto last = what.cbegin();
    for (std::sregex_iterator it(what.begin(), what.end(), peer), end; it != end; ++it) {
      out.append(last, what.cbegin() + it->position() + it->length());
      const int r = std::stoi((*it)[1]);
      if (r >= n_ && r < 2 * n_) out += " (rank " + std::to_string(r - n_) + "'s server)";
      last = what.cbegin() + it->position() + it->length();
    }
    out.append(last, what.cend());
    return "ssp (rank " + std::to_string(rank_) + "): " + out;
  }

  std::string serverNote() const {
    try {
      server_->rethrowFailure();
    } catch (const std::exception& e) {
      return "; this rank's server failed first: " + roleNote(e.what());
    }
    return "";
  }

  // Who the servers wait for, as this rank's server sees it.
  std::string slowestNote() const {
    const auto c = server_->clocks();
    const int64_t low = *std::min_element(c.begin(), c.end());
    std::string all, slow;
    for (int q = 0; q < n_; ++q) {
      all += (q ? ", " : "") + std::to_string(c[q]);
      if (c[q] == low) slow += (slow.empty() ? "" : ", ") + std::to_string(q);
    }
    return "; steps pushed by each rank, as rank " + std::to_string(rank_) + "'s server saw them: [" + all +
           "]: waiting for rank(s) " + slow;
  }

  // The answers into the weights; keep_local: plus this rank's own change since its push
  // (weights − pulled_). pulled_ becomes the answers. Returns the slowest clock they report.
  int64_t takeShards(bool keep_local) {
    int64_t slow = clock_;
    for (int k = 0; k < n_; ++k) slow = std::min(slow, readSspHeader(recv_[k]).second);
    if (keep_local) {
      state_.pack(now_);
      now_.sub_(pulled_);
    }
    for (int k = 0; k < n_; ++k) shard(pulled_, k).copy_(recv_[k].narrow(0, kSspHeaderFloats, length(k)));
    if (keep_local) now_.add_(pulled_);
    state_.unpack(keep_local ? now_ : pulled_);
    return slow;
  }

  // The staleness a pull's answers showed (steps pushed minus the slowest clock).
  void countStaleness(int64_t slow) {
    const int64_t stale = clock_ - slow;
    staleness_ = stale;
    staleness_max_ = std::max(staleness_max_, stale);
    staleness_sum_ += stale;
    ++pulls_;
  }

  // The trip thread reads the worker's traffic phase, so the push in flight is finished before a
  // fence or the final pull changes it (a push leaves it as it is: "push").
  template <class F>
  void timed(const char* phase, F&& f) {
    CommTimer timer(trace_, phase, comm_s_);
    torch::NoGradGuard no_grad;
    finishTrip();
    PhaseGuard guard(*worker_, phase);
    f();
  }


  std::shared_ptr<nn::Model> model_;
  SspOptions o_;
  Trace* trace_;
  std::shared_ptr<comm::Communicator> world_, worker_;
  std::shared_ptr<SspServer> server_;
  int n_ = 1, rank_ = 0;
  FlatState state_;
  std::vector<int64_t> offset_;       // shard k: [offset_[k], offset_[k + 1])
  torch::Tensor pulled_, now_;
  std::vector<torch::Tensor> send_, recv_, fence_recv_;
  CommThread trip_;  // the push and pull in flight while the next step computes
  bool inflight_ = false;
  bool loaded_ = false, finished_ = false;
  int64_t clock_ = 0, staleness_ = 0, staleness_max_ = 0, staleness_sum_ = 0, pulls_ = 0, fences_ = 0;
  double comm_s_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace

std::unique_ptr<Strategy> makeSspStrategy(const StrategyContext& ctx, const SspOptions& o) {
  return std::make_unique<SspStrategy>(ctx, o);
}

}  // namespace lowcomm::parallel
