// Ranks as threads: one Communicator per thread over a shared MemoryStore (real Gloo TCP pairs on
// 127.0.0.1), each running fn(rank, world).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/store.h"

namespace lowcomm::test {

// Each rank's error message ("" = none); a MismatchError's starts with "MismatchError: ".
// `sites`: the site each rank declares (CommOptions::site), as if on machines of their own: no
// shared memory, so bytes between sites travel (and are counted) as TCP; empty = none.
inline std::vector<std::string> onRankThreads(
    int n, const std::function<void(int, std::shared_ptr<comm::Communicator>)>& fn, int timeout_s = 60,
    const std::vector<int>& sites = {}) {
  auto store = std::make_shared<net::MemoryStore>();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        net::TransportOptions t;
        t.address = "127.0.0.1";
        comm::CommOptions co;
        co.timeout = std::chrono::seconds(timeout_s);
        if (!sites.empty()) co.site = sites[r], co.shm = comm::ShmMode::off;
        fn(r, comm::Communicator::create(store, r, n, co, t));
      } catch (const MismatchError& e) {
        errors[r] = std::string("MismatchError: ") + e.what();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace lowcomm::test
