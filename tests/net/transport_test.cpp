#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/net/transport.h"

using namespace lowcomm;
using namespace lowcomm::net;
using namespace std::chrono;

TEST(Rendezvous, MissingRanksAreListed) {
  MemoryStore s;
  s.set("job/arrived/0", toBytes("1"));
  s.set("job/arrived/2", toBytes("1"));
  try {
    waitForRanks(s, "job", 5, milliseconds(100));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing ranks: 1, 3, 4"), std::string::npos) << e.what();
  }
  for (int r : {1, 3, 4}) s.set("job/arrived/" + std::to_string(r), toBytes("1"));
  waitForRanks(s, "job", 5, milliseconds(100));
}

TEST(Transport, UnknownInterfaceIsAConfigError) {
  TransportOptions o;
  o.iface = "nosuchif0";
  EXPECT_THROW(makeDevice(o), ConfigError);
}

TEST(Transport, LoopbackAddressWorks) {
  TransportOptions o;
  o.address = "127.0.0.1";
  EXPECT_NE(makeDevice(o), nullptr);
}
