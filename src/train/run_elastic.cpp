// TrainingRun under --elastic (docs/elastic.md): a replacement's join, the heal after a
// membership change, the state the members agree on, and the shards of empty slots.
#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "resume_check.h"
#include "training_run.h"
#include "transfer_state.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/fnv.h"

namespace lowcomm::train {

namespace {

constexpr uint32_t kStateTag = 0x51a7e;  // the state transfer's point-to-point messages

// One row per member of the allgather that decides who needs the state.
struct StateRow {
  int64_t step;        // optimizer steps done; -1: a replacement that has none yet
  int64_t hash;        // of the member's transfer bytes
  int64_t bytes;       // their size
  int64_t elapsed_us;  // the member's training time so far (not hashed: the clocks differ)
};

}  // namespace

bool healable(const Error& e) {
  return dynamic_cast<const AbortedError*>(&e) || dynamic_cast<const PeerError*>(&e) ||
         dynamic_cast<const TimeoutError*>(&e);
}

void TrainingRun::checkElasticScope() {
  if (cfg_.strategy.name != "ddp" || cfg_.strategy.zero != 0 || cfg_.parallel.tp != 1 || cfg_.parallel.pp != 1)
    throw ConfigError("--elastic: only strategy.name = \"ddp\" with strategy.zero = 0 and parallel.tp = parallel.pp = 1 "
                      "is supported so far (got strategy.name = \"" + cfg_.strategy.name + "\")");
  if (opts_.resume) throw ConfigError("--elastic with --resume is not supported yet: the live members hold the state");
  kills_ = parseKills(cfg_.fault.kill);
}

// Everything the members of one epoch train on together (transfer_state.h): model, optimizer,
// step and data position, the same bytes on every member at the same state.
std::string TrainingRun::transferState() {
  TrainState st;
  st.step = step_;
  st.position = loader_->position();
  st.config_hash = state_.config_hash;
  st.schedule_hash = state_.schedule_hash;
  return packState(*model_, *optimizer_, st);
}

void TrainingRun::loadTransferred(const std::string& bytes, const std::string& from) {
  const TrainState st = unpackState(bytes, from, *model_, *optimizer_);
  if (st.config_hash != state_.config_hash)
    throw ConfigError("--elastic: the state from " + from + " was trained with another model, data, batch or seed");
  step_ = st.step;
  loader_->seek(st.position);
}

// Collective over world_: the members agree on one state. The newest step wins (a step is only
// applied after its allreduce returned on this member, so a member that completed the step in
// flight holds a valid state of the job; one that did not holds the step before it). Donors are
// the members at the newest step with the lowest such member's hash; every other member takes
// that state, in one chunk from each donor at once, and checks its hash before loading it.
void TrainingRun::syncState() {
  killIfDue("heal");
  const std::string mine = transferState();
  const bool have = state_.step >= 0;
  StateRow row{have ? step_ : -1, static_cast<int64_t>(fnv1a(mine.data(), mine.size()) >> 1),
               static_cast<int64_t>(mine.size()), have ? static_cast<int64_t>(since(t_start_) * 1e6) : 0};
  std::vector<StateRow> rows(n_);
  world_->allgather(&row, rows.data(), 4, comm::DType::i64);
  int ref = -1;
  for (int r = 0; r < n_; ++r)
    if (rows[r].step >= 0 && (ref < 0 || rows[r].step > rows[ref].step)) ref = r;
  if (ref < 0) throw Error("--elastic: no member of epoch " + std::to_string(epoch_) + " holds a training state");
  std::vector<int> donors, needers;
  for (int r = 0; r < n_; ++r) {
    const bool same = rows[r].step == rows[ref].step && rows[r].hash == rows[ref].hash && rows[r].bytes == rows[ref].bytes;
    (same ? donors : needers).push_back(r);
  }
  if (needers.empty()) return;
  const auto size = static_cast<size_t>(rows[ref].bytes);
  const size_t k = donors.size();
  auto chunk = [&](size_t j) {  // donor j's part: [begin, end)
    return std::pair<size_t, size_t>{size * j / k, size * (j + 1) / k};
  };
  const auto di = std::find(donors.begin(), donors.end(), rank_);
  if (di != donors.end()) {
    const auto [b, e] = chunk(static_cast<size_t>(di - donors.begin()));
    std::vector<comm::Communicator::P2P> sends;
    for (int n : needers) sends.push_back({n, const_cast<char*>(mine.data()) + b, e - b});
    world_->exchange(sends, {}, kStateTag);
    return;
  }
  std::string got(size, '\0');
  std::vector<comm::Communicator::P2P> recvs;
  for (size_t j = 0; j < k; ++j) {
    const auto [b, e] = chunk(j);
    recvs.push_back({donors[j], got.data() + b, e - b});
  }
  world_->exchange({}, recvs, kStateTag);
  const auto h = static_cast<int64_t>(fnv1a(got.data(), got.size()) >> 1);
  const std::string from = "slots " + [&] {
    std::string s;
    for (int d : donors) s += (s.empty() ? "" : ",") + std::to_string(members_[d]);
    return s;
  }() + " (epoch " + std::to_string(epoch_) + ")";
  if (h != rows[ref].hash)
    throw DataError("--elastic: the state received from " + from + " does not hash to the donors' (" +
                    std::to_string(size) + " bytes)");
  loadTransferred(got, from);
  state_.elapsed_s = static_cast<double>(rows[ref].elapsed_us) / 1e6;  // a replacement's clock starts there
  if (!heals_.empty()) heals_.back().bytes += static_cast<int64_t>(size);
}

// The shards of the slots missing from this epoch, dealt to the members in turn (the i-th empty
// slot to member i mod m), each with a loader at this member's position.
void TrainingRun::adoptShards() {
  adopted_.clear();
  std::vector<int> empty;
  for (int s = 0; s < slots_; ++s)
    if (!std::binary_search(members_.begin(), members_.end(), s)) empty.push_back(s);
  for (size_t i = 0; i < empty.size(); ++i) {
    if (static_cast<int>(i % members_.size()) != rank_) continue;
    auto l = std::make_unique<data::BatchLoader>(train_, empty[i], slots_, cfg_.data.batch_size, cfg_.seed, augmentation());
    l->seek(loader_->position());
    adopted_[empty[i]] = std::move(l);
  }
}

void TrainingRun::useEpoch(const ElasticEpoch& e) {
  if (world_) std::tie(sent_before_, recv_before_) = bytes();  // counters stay cumulative over epochs
  world_ = e.world;
  rank_ = world_->rank();
  n_ = world_->size();
  epoch_ = e.number;
  members_ = e.members;
  if (trace_.enabled()) world_->setTrace(&trace_);
  grid_ = parallel::makeGrid(world_, 1, 1, cfg_.parallel.order);
  strategy_.reset();  // its communicators belong to the old epoch; rebuilt once the state agrees
  // metrics.jsonl is written by the epoch's rank 0, appending to what earlier ones wrote.
  if (rank_ == 0 && !jsonl_) jsonl_ = std::make_unique<JsonlWriter>((out_dir_ / "metrics.jsonl").string(), true);
  if (rank_ != 0) jsonl_.reset();
}

// Joins the first epoch after `after` with at least min_replicas members and agrees on the state
// with them; again while the epoch moves on under it (a member left or joined meanwhile).
void TrainingRun::joinAndAgree(int64_t after) {
  for (;;) {
    const ElasticEpoch e = elastic_->join(after);
    after = e.number;
    if (static_cast<int64_t>(e.members.size()) < cfg_.elastic.min_replicas) continue;  // wait for more
    heals_.push_back({e.number, e.why, 0, 0, 0});
    try {
      useEpoch(e);
      syncState();
      makeStrategy(/*broadcast_initial=*/false);  // DataParallel checks that every member agrees
      adoptShards();  // at the agreed position
      return;
    } catch (const Error& ex) {
      if (!healable(ex)) throw;
      heals_.pop_back();
    }
  }
}

// The first epoch's strategy (its splits wait in the store for every member): a member that
// dies meanwhile is healed around like one that dies in a step.
void TrainingRun::startElastic() {
  try {
    killIfDue("setup");
    makeStrategy(/*broadcast_initial=*/true);
  } catch (const Error& e) {
    if (!healable(e)) throw;
    std::fprintf(stderr, "lowcomm train: slot %d: setup interrupted (%s); waiting for the next membership epoch\n", slot_,
                 e.what());
    heal(e.what());
  }
}

void TrainingRun::joinAsReplacement() {
  const auto t0 = Clock::now();
  state_.config_hash = resumeHash(cfg_, slots_);
  state_.schedule_hash = resumeScheduleHash(cfg_);
  state_.step = -1;  // nothing yet: the members' state is taken
  loader_->startEpoch(0);
  elastic_->announceReady();
  joinAndAgree(0);
  elastic_->joined();
  state_.step = step_;
  state_.position = loader_->position();
  // Not openMetrics(): that would start metrics.jsonl and `latest` afresh (useEpoch opened the
  // file for appending when this replacement is the epoch's rank 0).
  last_lr_ = schedule_->at(step_);
  t_start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state_.elapsed_s));
  heals_.back().seconds = since(t0);
  heals_.back().step = step_;
  if (jsonl_)
    jsonl_->write(withBytes({{"type", "membership"}, {"epoch", epoch_}, {"why", heals_.back().why},
                             {"members", members_}, {"joined_slot", slot_}, {"heal_s", heals_.back().seconds},
                             {"step", step_}}));
}

// After an abort: join the next epoch and agree on the state; again while the epoch moves on
// under the heal itself.
void TrainingRun::heal(const std::string& why) {
  const auto t0 = Clock::now();
  ++steps_aborted_;
  joinAndAgree(epoch_);
  heals_.back().seconds = since(t0);
  heals_.back().step = step_;
  if (rank_ == 0)
    std::fprintf(stderr, "lowcomm train: membership epoch %lld (%s): %d members, healed in %.2f s at step %lld (%s)\n",
                 static_cast<long long>(epoch_), heals_.back().why.c_str(), n_, heals_.back().seconds,
                 static_cast<long long>(step_), why.c_str());
  if (jsonl_)
    jsonl_->write(withBytes({{"type", "membership"}, {"epoch", epoch_}, {"why", heals_.back().why},
                             {"members", members_}, {"heal_s", heals_.back().seconds}, {"step", step_},
                             {"adopted", static_cast<int64_t>(adopted_.size())}}));
}

std::vector<KillPoint> parseKills(const std::string& spec) {
  std::vector<KillPoint> out;
  size_t at = 0;
  while (at < spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    at = comma + 1;
    KillPoint k;
    char where[16] = {0};
    long long step = -1;
    int used = 0;
    const bool inc = item.find('.') < item.find(':');
    const int got = inc ? std::sscanf(item.c_str(), "%d.%d:%15[a-z]%n:%lld%n", &k.slot, &k.incarnation, where, &used, &step, &used)
                        : std::sscanf(item.c_str(), "%d:%15[a-z]%n:%lld%n", &k.slot, where, &used, &step, &used);
    k.where = where;
    k.step = step;
    const bool where_ok = k.where == "step" || k.where == "collective" || k.where == "checkpoint" || k.where == "heal" ||
                          k.where == "setup";
    const int need = inc ? 3 : 2;
    if (got < need || static_cast<size_t>(used) != item.size() || !where_ok || k.slot < 0 || k.incarnation < 0 ||
        (k.where != "heal" && k.where != "setup" && k.step < 0))
      throw ConfigError("fault.kill: '" + item + "' is not SLOT[.INCARNATION]:WHERE[:STEP] with WHERE one of step, "
                        "collective, checkpoint, heal, setup (STEP needed but for heal and setup)");
    out.push_back(k);
  }
  return out;
}

// The fault.kill test knob: this worker ends here as if its machine died.
void TrainingRun::killIfDue(const char* where) const {
  if (!elastic_) return;
  bool due = false;
  for (const auto& k : kills_)
    due = due || (k.slot == slot_ && k.incarnation == elastic_->incarnation() && k.where == where &&
                  (k.where == "heal" || k.where == "setup" || k.step == step_));
  if (!due) return;
  std::fprintf(stderr, "lowcomm train: fault.kill: slot %d kills itself (%s) at step %lld\n", slot_, where,
               static_cast<long long>(step_));
  std::fflush(stderr);
  if (opts_.kill) opts_.kill();
  else ::raise(SIGKILL);
}

nlohmann::json TrainingRun::elasticJson(double wall) const {
  nlohmann::json heals = nlohmann::json::array();
  double heal_s = 0;
  for (const auto& h : heals_) {
    heals.push_back({{"epoch", h.epoch}, {"why", h.why}, {"seconds", h.seconds}, {"bytes", h.bytes}, {"step", h.step}});
    heal_s += h.seconds;
  }
  std::vector<double> dt = full_step_s_;
  double efficiency = 0;
  if (!dt.empty() && wall > 0) {
    std::nth_element(dt.begin(), dt.begin() + static_cast<std::ptrdiff_t>(dt.size() / 2), dt.end());
    efficiency = static_cast<double>(step_) / (wall / dt[dt.size() / 2]);
  }
  return {{"epoch", epoch_}, {"members", members_}, {"rank", rank_}, {"heals", heals}, {"heal_s", heal_s},
          {"steps_aborted", steps_aborted_}, {"step_efficiency", efficiency},
          {"full_membership_step_s", dt.empty() ? 0.0 : dt[dt.size() / 2]}};
}

}  // namespace lowcomm::train
