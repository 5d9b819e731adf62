#include "comm/harness.h"

#include <exception>
#include <mutex>
#include <thread>

#include "lowcomm/net/store.h"

namespace lowcomm::test {

void onRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

std::vector<CommPtr> makeComms(int n, const comm::CommOptions& opts) {
  return makeComms(n, [&](int) { return opts; });
}

std::vector<CommPtr> makeComms(int n, const std::function<comm::CommOptions(int)>& optsOf) {
  auto store = std::make_shared<net::MemoryStore>();
  std::vector<CommPtr> comms(n);
  net::TransportOptions t;
  t.address = "127.0.0.1";
  onRanks(n, [&](int r) { comms[r] = comm::Communicator::create(store, r, n, optsOf(r), t); });
  return comms;
}

}  // namespace lowcomm::test
