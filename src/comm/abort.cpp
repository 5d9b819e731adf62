#include "abort.h"

#include <algorithm>
#include <utility>

#include "lowcomm/base/error.h"

namespace lowcomm::comm {

// why_ is written once, before the flag is set (release), and read only after seeing it set.
std::string AbortState::why() const { return aborted() ? why_ : std::string(); }

void AbortState::trigger(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!flag_.load(std::memory_order_relaxed)) {
    why_ = why.empty() ? std::string("aborted") : why;
    flag_.store(true, std::memory_order_release);
  }
  for (Abortable* a : live_) a->abort();
}

void AbortState::raise(const std::string& op) const {
  throw AbortedError(op + ": aborted: " + why());
}

void AbortState::add(Abortable* a) {
  std::lock_guard<std::mutex> lk(mu_);
  live_.push_back(a);
}

void AbortState::remove(Abortable* a) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = std::find(live_.begin(), live_.end(), a);
  if (it != live_.end()) live_.erase(it);
}

AbortState::Registration::Registration(AbortState* s, Abortable* a) : state_(s), item_(a) {
  if (state_) state_->add(item_);
}
AbortState::Registration::~Registration() {
  if (state_) state_->remove(item_);
}
AbortState::Registration::Registration(Registration&& o) noexcept
    : state_(std::exchange(o.state_, nullptr)), item_(std::exchange(o.item_, nullptr)) {}
AbortState::Registration& AbortState::Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    if (state_) state_->remove(item_);
    state_ = std::exchange(o.state_, nullptr);
    item_ = std::exchange(o.item_, nullptr);
  }
  return *this;
}

}  // namespace lowcomm::comm
