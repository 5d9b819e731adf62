// Rank 0 SIGKILLed at each stage of the shared-memory setup (real processes, real rendezvous
// store): the other ranks fail within the timeout instead of hanging, and no segment survives
// (nothing in /dev/shm, the published /proc name no longer opens).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "comm/shm_domain.h"
#include "lowcomm/base/error.h"
#include "lowcomm/net/rdzv_store.h"

using namespace lowcomm;
using namespace std::chrono_literals;

namespace {
const std::string kToken = "shm-domain-kill-test-token";
constexpr int kRanks = 3;

enum class Stage { created, published, voting, mapped };
enum Exit { kOk = 0, kPeer0 = 10, kTimeout = 11, kConfig = 12, kOther = 13 };

std::set<std::string> devShm() {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) out.insert(e.path().filename().string());
  return out;
}

// Forwards to the rendezvous client; rank 0's copy dies around the publication of the name.
struct DyingStore : net::Store {
  DyingStore(net::Store& s, bool die_before, bool die_after) : s(s), before(die_before), after(die_after) {}
  void set(const std::string& key, const net::Bytes& v) override {
    if (before) ::raise(SIGKILL);
    s.set(key, v);
    if (after) ::raise(SIGKILL);
  }
  net::Bytes get(const std::string& key, std::chrono::milliseconds t) override { return s.get(key, t); }
  bool check(const std::string& key) override { return s.check(key); }
  int64_t add(const std::string& key, int64_t d) override { return s.add(key, d); }
  net::Store& s;
  bool before, after;
};

// What a survivor caught, on stderr (shown when the test fails), and its exit code.
int report(int r, const char* what, int code) {
  std::fprintf(stderr, "rank %d exits %d: %s\n", r, code, what);
  return code;
}

// One rank's process: set up the domain, then (stage `mapped`) wait for everyone's first arrival.
[[noreturn]] void rank(int r, int port, Stage stage) {
  try {
    net::RdzvClient client("127.0.0.1", port, kToken, 5s);
    DyingStore store(client, r == 0 && stage == Stage::created, r == 0 && stage == Stage::published);
    auto vote = [&](bool mine) {
      if (r == 0 && stage == Stage::voting) ::raise(SIGKILL);
      client.set("vote/" + std::to_string(r), net::toBytes(mine ? "1" : "0"));
      bool all = true;
      for (int j = 0; j < kRanks; ++j) all &= net::toString(client.get("vote/" + std::to_string(j), 2s)) == "1";
      return all;
    };
    auto domain = comm::ShmDomain::create(store, "t", r, kRanks, 4096, 2s, vote);
    if (r == 0 && stage == Stage::mapped) ::raise(SIGKILL);
    domain->arrive(domain->nextEpoch());
    domain->waitArrived(1, std::chrono::steady_clock::now() + 10s, "test");
    ::_exit(kOk);
  } catch (const PeerError& e) {
    ::_exit(report(r, e.what(), e.rank() == 0 ? kPeer0 : kOther));
  } catch (const TimeoutError& e) {
    ::_exit(report(r, e.what(), kTimeout));
  } catch (const ConfigError& e) {
    ::_exit(report(r, e.what(), kConfig));
  } catch (const std::exception& e) {
    ::_exit(report(r, e.what(), kOther));
  } catch (...) {
    ::_exit(report(r, "a non-standard exception", kOther));
  }
}

class ShmSetupKill : public ::testing::TestWithParam<Stage> {};

TEST_P(ShmSetupKill, SurvivorsFailInTimeAndNothingRemains) {
  const Stage stage = GetParam();
  const auto before = devShm();
  net::RdzvServer server("127.0.0.1", 0, kToken);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t p = ::fork();
    ASSERT_GE(p, 0);
    if (p == 0) rank(r, server.port(), stage);
    pids.push_back(p);
  }
  std::vector<int> status(kRanks);
  for (int r = 0; r < kRanks; ++r) ::waitpid(pids[r], &status[r], 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "a survivor waited past the timeouts";
  EXPECT_TRUE(WIFSIGNALED(status[0]) && WTERMSIG(status[0]) == SIGKILL) << "rank 0 was to be killed";
  for (int r = 1; r < kRanks; ++r) {
    ASSERT_TRUE(WIFEXITED(status[r])) << "rank " << r << " did not exit normally";
    const int code = WEXITSTATUS(status[r]);
    EXPECT_NE(code, kOk) << "rank " << r << " went on without rank 0";
    EXPECT_NE(code, kOther) << "rank " << r << ": unexpected error kind";
    if (stage == Stage::mapped) {
      EXPECT_EQ(code, kPeer0) << "rank " << r << ": rank 0 not named as the dead peer";
    }
  }
  EXPECT_EQ(devShm(), before) << "a segment appeared in /dev/shm";
  net::RdzvClient client("127.0.0.1", server.port(), kToken, 5s);
  if (stage != Stage::created) {
    const std::string name = net::toString(client.get("t/shm/name", 1s));
    ASSERT_FALSE(name.empty());
    EXPECT_THROW(net::ShmSegment::open(name, 4096), ConfigError) << name << " still opens";
  } else {
    EXPECT_FALSE(client.check("t/shm/name")) << "rank 0 died before publishing";
  }
}

std::string stageName(const ::testing::TestParamInfo<Stage>& info) {
  static const char* names[] = {"Created", "Published", "Voting", "Mapped"};
  return names[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Stages, ShmSetupKill,
                         ::testing::Values(Stage::created, Stage::published, Stage::voting, Stage::mapped), stageName);
}  // namespace
