// The live-membership protocol's keys and encodings (lowcomm/net/membership.h), and what a store
// holding garbage there gets: a DataError naming the key, never a crash or a wrong member list.
#include <gtest/gtest.h>

#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/membership.h"
#include "lowcomm/net/rdzv_store.h"

using namespace lowcomm;
using namespace lowcomm::net;
using namespace std::chrono_literals;

TEST(Membership, MembersRoundTrip) {
  for (const std::vector<int>& m : {std::vector<int>{}, {0}, {0, 1, 3}, {7, 100, 4095}})
    EXPECT_EQ(membership::decodeMembers(membership::encodeMembers(m), 4096, "k"), m);
  EXPECT_EQ(membership::encodeMembers({0, 2, 5}), "0,2,5");
}

TEST(Membership, MalformedMembersAreADataErrorNamingTheKey) {
  for (const std::string bad : {"0,,1", "1,0", "0,0", "a", "-1", "0,", ",0", "4096", "99999999999999999999", "0 ,1", "1e3"}) {
    try {
      membership::decodeMembers(bad, 4096, "elastic/members/7");
      FAIL() << "'" << bad << "' was accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("elastic/members/7"), std::string::npos) << e.what();
    }
  }
}

TEST(Membership, PublishThenRead) {
  MemoryStore store;
  EXPECT_EQ(membership::currentEpoch(store), 0);
  Epoch e;
  e.number = 3;
  e.members = {0, 2, 3};
  e.why = "slot 1 left: killed by signal 9 (SIGKILL)";
  membership::publish(store, e);
  EXPECT_EQ(membership::currentEpoch(store), 3);
  const Epoch got = membership::readEpoch(store, 3, 4, 1s);
  EXPECT_EQ(got.members, e.members);
  EXPECT_EQ(got.why, e.why);
  EXPECT_EQ(got.rankOf(2), 1);
  EXPECT_EQ(got.rankOf(1), -1);
  EXPECT_EQ(got.rankOf(9), -1);
}

TEST(Membership, AGarbageEpochNumberIsADataError) {
  MemoryStore store;
  for (const std::string bad : {"", "x", "-3", "0", "1.5"}) {
    store.set(membership::epochKey(), toBytes(bad));
    EXPECT_THROW(membership::currentEpoch(store), DataError) << "'" << bad << "'";
  }
}

TEST(Membership, MembersOutsideTheSlotsAreADataError) {
  MemoryStore store;
  Epoch e;
  e.number = 1;
  e.members = {0, 5};
  membership::publish(store, e);
  EXPECT_THROW(membership::readEpoch(store, 1, 4, 1s), DataError);  // a 4-slot job has no slot 5
}

// A rendezvous of an epoch that moved on: the waiting get() ends within its 100 ms slice.
TEST(RdzvClientAbort, EndsAWaitingGetFromAnotherThread) {
  const std::string token = "0123456789abcdef-test-token";
  RdzvServer server("127.0.0.1", 0, token);
  RdzvClient client("127.0.0.1", server.port(), token, 5s);
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    client.abort("membership epoch 5: slot 2 left");
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    client.get("never-set", 30s);
    FAIL() << "get returned";
  } catch (const AbortedError& e) {
    EXPECT_NE(std::string(e.what()).find("slot 2 left"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  killer.join();
  EXPECT_THROW(client.set("k", toBytes("v")), AbortedError);  // and every later call
}

// A fork is another connection to the same keys; aborting the client aborts its forks too, also
// one waiting in a get on another thread (a stream mesh connecting while the epoch moves on).
TEST(RdzvClientAbort, ReachesTheClientsForks) {
  const std::string token = "0123456789abcdef-test-token";
  RdzvServer server("127.0.0.1", 0, token);
  auto client = std::make_shared<RdzvClient>("127.0.0.1", server.port(), token, 5s);
  auto prefixed = std::make_shared<PrefixStore>(client, "elastic/e4");
  const auto fork = prefixed->fork();
  ASSERT_NE(fork, nullptr);
  fork->set("k", toBytes("from the fork"));
  EXPECT_EQ(toString(client->get("elastic/e4/k", 1s)), "from the fork");
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    client->abort("membership epoch 5: slot 2 left");
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(fork->get("never-set", 30s), AbortedError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  killer.join();
  EXPECT_THROW(prefixed->fork(), AbortedError);  // an aborted client forks no more
  auto shared = std::make_shared<MemoryStore>();  // a store without connections shares itself
  EXPECT_EQ(forkOrShare(shared), shared);
}

// The streams `auto` chose in the job's first epoch travel with every later epoch, so that all
// its members connect alike; before any member chose, an epoch carries none.
TEST(Membership, AnEpochCarriesTheStreamsTheJobChose) {
  MemoryStore store;
  Epoch e;
  e.number = 1;
  e.members = {0, 1, 2, 3};
  membership::publish(store, e);
  EXPECT_EQ(membership::readEpoch(store, 1, 4, 1s).streams, 0);
  store.set(membership::chosenStreamsKey(), toBytes("16"));
  e.number = 2;
  membership::publish(store, e);
  EXPECT_EQ(membership::readEpoch(store, 2, 4, 1s).streams, 16);
  for (const std::string bad : {"", "0", "x", "-2", "99999"}) {
    store.set(membership::chosenStreamsKey(), toBytes(bad));
    e.number = 3;
    EXPECT_THROW(membership::publish(store, e), DataError) << "'" << bad << "'";
    store.set(membership::streamsKey(2), toBytes(bad));
    EXPECT_THROW(membership::readEpoch(store, 2, 4, 1s), DataError) << "'" << bad << "'";
  }
}
