// Every connected pair proves the job token before any collective (CommOptions::auth_token).
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/store.h"

using namespace lowcomm;

namespace {
// Creates a communicator per rank thread with that rank's token; returns each rank's error.
std::vector<std::string> connectWithTokens(const std::vector<std::string>& tokens, bool split_too = false) {
  const int n = static_cast<int>(tokens.size());
  auto store = std::make_shared<net::MemoryStore>();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        comm::CommOptions o;
        o.timeout = std::chrono::seconds(20);
        o.auth_token = tokens[r];
        net::TransportOptions t;
        t.address = "127.0.0.1";
        auto c = comm::Communicator::create(store, r, n, o, t);
        float x = 1.0f;
        c->allreduce(&x, 1, comm::DType::f32, comm::ReduceOp::sum);
        if (x != static_cast<float>(n)) throw Error("allreduce gave " + std::to_string(x));
        if (split_too) {
          auto half = c->split(r % 2, r);
          float y = 1.0f;
          half->allreduce(&y, 1, comm::DType::f32, comm::ReduceOp::sum);
        }
      } catch (const AuthError& e) {
        errors[r] = std::string("AuthError: ") + e.what();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace

TEST(PairAuth, SameTokenConnectsAndSplits) {
  const auto errors = connectWithTokens({"job-token-123456", "job-token-123456", "job-token-123456", "job-token-123456"},
                                        /*split_too=*/true);
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// Rank 2 connected (it learned the addresses) but holds another token: its peers refuse it by
// name, and it cannot verify them either; nobody runs a collective with it.
TEST(PairAuth, APeerWithoutTheTokenIsNamed) {
  const auto errors = connectWithTokens({"job-token-123456", "job-token-123456", "intruder-token-99"});
  for (int r : {0, 1}) {
    EXPECT_NE(errors[r].find("AuthError: rank " + std::to_string(r) + ": the process connected as rank 2 could not prove"),
              std::string::npos)
        << errors[r];
  }
  EXPECT_NE(errors[2].find("AuthError: rank 2: the process connected as rank 0"), std::string::npos) << errors[2];
}
