// The launcher side of live membership (src/launch/elastic_host.h): the epochs it publishes as
// workers leave and join, and the stale heartbeats it reports.
#include <gtest/gtest.h>

#include <sstream>

#include "launch/elastic_host.h"
#include "lowcomm/net/membership.h"

using namespace lowcomm;
using namespace lowcomm::launch;
using namespace std::chrono_literals;

namespace {

struct Host {
  std::shared_ptr<net::MemoryStore> store = std::make_shared<net::MemoryStore>();
  std::ostringstream log;
  ElasticOptions opts;
  std::unique_ptr<ElasticHost> host;
  explicit Host(int slots) {
    opts.enabled = true;
    opts.heartbeat_timeout = 1000ms;
    host = std::make_unique<ElasticHost>(store, slots, opts, log);
  }
  net::Epoch now() { return net::membership::readEpoch(*store, net::membership::currentEpoch(*store), 64, 1s); }
};

}  // namespace

TEST(ElasticHost, LeavesAndJoinsAreEpochs) {
  Host h(4);
  h.host->start();
  EXPECT_EQ(h.now().number, 1);
  EXPECT_EQ(h.now().members, (std::vector<int>{0, 1, 2, 3}));
  h.host->left(2, "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(h.now().number, 2);
  EXPECT_EQ(h.now().members, (std::vector<int>{0, 1, 3}));
  EXPECT_NE(h.now().why.find("slot 2 left: was killed by signal 9"), std::string::npos) << h.now().why;
  h.host->left(2, "again");  // not a member: nothing new
  EXPECT_EQ(h.now().number, 2);

  h.host->replacing(2, 1);
  const auto t = ElasticHost::Clock::now();
  h.host->poll(t);
  EXPECT_EQ(h.now().number, 2);  // not ready yet
  h.store->set(net::membership::readyKey(2, 0), net::toBytes("0"));  // an older incarnation's key does not count
  h.host->poll(t);
  EXPECT_EQ(h.now().number, 2);
  h.store->set(net::membership::readyKey(2, 1), net::toBytes("1"));
  h.host->poll(t);
  EXPECT_EQ(h.now().number, 3);
  EXPECT_EQ(h.now().members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(h.now().why.find("slot 2 joined (incarnation 1)"), std::string::npos) << h.now().why;
  EXPECT_NE(h.log.str().find("membership epoch 3"), std::string::npos) << h.log.str();
}

TEST(ElasticHost, ASilentMemberIsStaleOnlyAfterItsTimeout) {
  Host h(2);
  h.host->start();
  const auto t0 = ElasticHost::Clock::now();
  EXPECT_TRUE(h.host->poll(t0).empty());  // nobody has beaten yet: not judged
  h.store->add(net::membership::heartbeatKey(0), 1);
  h.store->add(net::membership::heartbeatKey(1), 1);
  EXPECT_TRUE(h.host->poll(t0).empty());
  h.store->add(net::membership::heartbeatKey(0), 1);  // slot 0 beats on, slot 1 falls silent
  EXPECT_TRUE(h.host->poll(t0 + 500ms).empty());
  h.store->add(net::membership::heartbeatKey(0), 1);
  EXPECT_EQ(h.host->poll(t0 + 1500ms), std::vector<int>{1});
}
