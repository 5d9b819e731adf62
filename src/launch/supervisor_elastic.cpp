// Supervisor with --elastic (lowcomm/launch/launcher.h: ElasticOptions; docs/elastic.md): a
// worker that dies is retired and replaced in its slot while the others train on.
#include <signal.h>

#include "recurs.h"
#include "supervisor.h"

namespace lowcomm::launch {

void Supervisor::setElasticStore(std::shared_ptr<net::Store> store) {
  elastic_ = std::make_unique<ElasticHost>(std::move(store), opts_.nproc, opts_.elastic, log_);
}

// The retired worker keeps its zombie (its group id stays ours) and gives up its pipes: what it
// wrote was drained when its exit was observed.
void Supervisor::retire(Worker& w) {
  flushPartial(w.out);
  flushPartial(w.err);
  w.out.fd.reset();
  w.err.fd.reset();
  retired_.push_back(std::move(w));
  const Worker& old = retired_.back();
  w = Worker{};
  w.rank = w.out.rank = w.err.rank = old.rank;
  w.incarnation = old.incarnation;
  w.err.is_err = true;
}

bool Supervisor::replaceOnExit(Worker& w, const std::string& what, int status, int signal) {
  if (stopping()) return false;
  const std::string who = "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ") " + what;
  if (finishing_) {  // the job is ending: nothing to replace, the others finish without it
    log_ << "lowcomm launch: " << who << " while the job finishes; not replacing it" << std::endl;
    elastic_->left(w.rank, what);
    retire(w);
    w.exited = true;
    return true;
  }
  if (const std::string why = whyItWouldRecur(LaunchReport{false, w.rank, what, status, signal}); !why.empty()) {
    log_ << "lowcomm launch: not replacing rank " << w.rank << ": " << why << std::endl;
    return false;
  }
  if (replacements_ >= opts_.elastic.max_replacements) {
    log_ << "lowcomm launch: not replacing rank " << w.rank << ": " << replacements_
         << " replacements already (--max-replacements)" << std::endl;
    return false;
  }
  log_ << "lowcomm launch: " << who << "; the others train on, a replacement starts in "
       << opts_.elastic.replace_after.count() << " ms" << std::endl;
  elastic_->left(w.rank, what);
  retire(w);
  replace_at_[w.rank] = Clock::now() + opts_.elastic.replace_after;
  return true;
}

// The first worker to finish ends the replacing: slots still waiting stay empty, replacements
// not yet members are stopped (the members finish without them).
void Supervisor::finishedOnExit(const Worker& w) {
  elastic_->finished(w.rank);
  if (finishing_) return;
  finishing_ = true;
  for (const auto& [slot, at] : replace_at_) workers_[slot].exited = true;
  replace_at_.clear();
  for (auto& other : workers_)
    if (other.pid > 0 && !other.exited && !elastic_->isMember(other.rank)) ::kill(-other.pid, SIGTERM);
}

void Supervisor::tickElastic() {
  const auto now = Clock::now();
  for (auto it = replace_at_.begin(); it != replace_at_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    const int slot = it->first, k = workers_[slot].incarnation + 1;
    it = replace_at_.erase(it);
    spawnSlot(slot, k);
    elastic_->replacing(slot, k);
    ++replacements_;
    log_ << "lowcomm launch: rank " << slot << " replaced (incarnation " << k << ", pid " << workers_[slot].pid << ")"
         << std::endl;
  }
  for (int slot : elastic_->poll(now)) {
    Worker& w = workers_[slot];
    if (w.pid <= 0 || w.exited) continue;
    log_ << "lowcomm launch: rank " << slot << " (pid " << w.pid << ") sent no heartbeat for "
         << opts_.elastic.heartbeat_timeout.count() << " ms; killing it" << std::endl;
    ::kill(-w.pid, SIGKILL);  // its exit is observed on the next tick, then it is replaced
  }
}

}  // namespace lowcomm::launch
