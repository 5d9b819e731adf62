// Two ranks in two sites as bare Links (no Communicator) over real loopback pairs: for the tests of
// the comm layer's private transport (eager messages, lanes).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "comm/link.h"
#include "comm/mesh.h"
#include "lowcomm/net/store.h"

namespace lowcomm::test {

// Rank r's Link at index r, each with `streams` connected meshes, the other rank cross-site.
inline std::vector<std::unique_ptr<comm::Link>> twoSiteLinks(const std::string& prefix, int streams = 1) {
  auto store = std::make_shared<net::MemoryStore>();
  net::TransportOptions t;
  t.address = "127.0.0.1";
  auto dev = net::makeDevice(t);
  const auto timeout = std::chrono::seconds(10);
  std::vector<std::unique_ptr<comm::Link>> links(2);
  onRanks(2, [&](int r) {
    links[r] = comm::connectLink(store, prefix, r, 2, dev, "", timeout);
    for (int j = 1; j < streams; ++j)
      links[r]->addStream(comm::connectLink(store, prefix + "/s" + std::to_string(j), r, 2, dev, "", timeout)->sharedContext());
    links[r]->setCrossSite({r == 1, r == 0});
  });
  return links;
}

}  // namespace lowcomm::test
