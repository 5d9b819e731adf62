// Aborting a communicator from another thread (private to the comm layer).
//
// A membership change must end every wait of the communicators of one membership epoch at once,
// whichever thread waits and wherever (a Gloo buffer, a lane, an eager box, shared memory). One
// AbortState is shared by a communicator and every communicator split from it; each object that
// can block in a wait registers with it as an Abortable for its whole life.
//
// Contract:
// - trigger(why) may be called from any thread, any number of times; the first reason stays. It
//   sets aborted() (release) and then calls abort() on every registered Abortable, in
//   registration order, while holding the state's lock: an Abortable cannot be destroyed during
//   its abort().
// - Abortable::abort() is safe against its owner's concurrent use, wakes every wait in flight,
//   and leaves something that makes the next wait return at once (Gloo's abortWait* flags are
//   sticky until a wait consumes them). It must not call into the AbortState.
// - Whoever posts or waits checks aborted() once it holds the lock its abort() takes (or after a
//   woken wait): a post after trigger() fails, and one made just before is seen by abort().
// - What a woken wait throws is AbortedError with why(), never PeerError or TimeoutError, so the
//   caller can tell a membership change from a failure.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace lowcomm::comm {

class Abortable {
 public:
  virtual void abort() = 0;

 protected:
  virtual ~Abortable() = default;
};

class AbortState {
 public:
  AbortState() = default;
  AbortState(const AbortState&) = delete;
  AbortState& operator=(const AbortState&) = delete;

  bool aborted() const { return flag_.load(std::memory_order_acquire); }
  // The first trigger's reason ("" before any). Lock-free: callable under an Abortable's lock.
  std::string why() const;
  void trigger(const std::string& why);
  // AbortedError naming `op` and the reason.
  [[noreturn]] void raise(const std::string& op) const;
  void check(const std::string& op) const {
    if (aborted()) raise(op);
  }

  // Registered for its lifetime: removes `a` on destruction, waiting for a trigger() in progress.
  class Registration {
   public:
    Registration() = default;
    Registration(AbortState* s, Abortable* a);
    ~Registration();
    Registration(Registration&& o) noexcept;
    Registration& operator=(Registration&& o) noexcept;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    AbortState* state_ = nullptr;
    Abortable* item_ = nullptr;
  };

 private:
  void add(Abortable* a);
  void remove(Abortable* a);

  std::atomic<bool> flag_{false};
  std::mutex mu_;
  std::string why_;  // written once, before flag_
  std::vector<Abortable*> live_;
};

}  // namespace lowcomm::comm
