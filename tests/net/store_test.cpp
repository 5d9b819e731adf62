#include <gtest/gtest.h>

#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/store.h"

using namespace lowcomm;
using namespace lowcomm::net;
using namespace std::chrono;

TEST(MemoryStore, GetWaitsForSetFromAnotherThread) {
  MemoryStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(50));
    s.set("k", toBytes("v"));
  });
  EXPECT_EQ(toString(s.get("k", seconds(5))), "v");
  t.join();
}

TEST(MemoryStore, GetTimesOutNamingTheKey) {
  MemoryStore s;
  try {
    s.get("missing-key", milliseconds(30));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing-key"), std::string::npos);
  }
}

TEST(MemoryStore, AddAndCheck) {
  MemoryStore s;
  EXPECT_FALSE(s.check("n"));
  EXPECT_EQ(s.add("n", 3), 3);
  EXPECT_EQ(s.add("n", -1), 2);
  EXPECT_TRUE(s.check("n"));
}

TEST(PrefixStore, NamespacesKeys) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore a(base, "a"), b(base, "b");
  a.set("k", toBytes("1"));
  EXPECT_TRUE(a.check("k"));
  EXPECT_FALSE(b.check("k"));
  EXPECT_TRUE(base->check("a/k"));
}
