// A stray connection to a pair's listening port (a port scan, a stranger on the host) must not
// break the pair: the mesh connects again on fresh ports (src/comm/mesh.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/store.h"

using namespace lowcomm;

namespace {
// Forwards to a MemoryStore; when a rank publishes its Gloo pair addresses for the first try, a
// stranger connects to every loopback port in them before any peer can (and, if asked, sends
// garbage): every pair of the first try is taken.
class StrayStore : public net::Store {
 public:
  explicit StrayStore(bool garbage) : garbage_(garbage) {}
  ~StrayStore() override {
    for (int fd : strays_) ::close(fd);
  }
  void set(const std::string& key, const net::Bytes& value) override {
    // "/gloo/<rank>" holds a rank's pair addresses ("/gloo/rank_<r>" a 2-byte host id); keys of
    // the first try have no "/try" in them.
    if (key.find("/gloo/") != std::string::npos && key.find("/try") == std::string::npos &&
        value.size() >= sizeof(sockaddr_storage)) {
      std::lock_guard<std::mutex> lock(mu_);
      hijack(value);
    }
    inner_.set(key, value);
  }
  net::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override { return inner_.get(key, timeout); }
  bool check(const std::string& key) override { return inner_.check(key); }
  int64_t add(const std::string& key, int64_t delta) override { return inner_.add(key, delta); }
  int strays() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(strays_.size());
  }

 private:
  // Gloo's pair addresses are sockaddr_storage values: find every 127.0.0.1 sockaddr_in in them.
  void hijack(const net::Bytes& v) {
    for (size_t i = 0; i + 8 <= v.size(); ++i) {
      if (!(v[i] == AF_INET && v[i + 1] == 0 && v[i + 4] == 127 && v[i + 5] == 0 && v[i + 6] == 0 && v[i + 7] == 1))
        continue;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      std::memcpy(&a.sin_port, &v[i + 2], 2);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(fd);
        continue;
      }
      if (garbage_) {
        const std::vector<uint8_t> junk(256, 0xab);
        (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      }
      strays_.push_back(fd);
    }
  }
  net::MemoryStore inner_;
  bool garbage_;
  std::mutex mu_;
  std::vector<int> strays_;
};

// Every rank connects (with the job token) and runs an allreduce and a split; returns the errors.
std::vector<std::string> connectWithStrays(int n, const std::shared_ptr<StrayStore>& store) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        comm::CommOptions o;
        o.timeout = std::chrono::seconds(60);
        o.connect_timeout = std::chrono::seconds(5);  // bounds a broken try's pair waits (mesh.h)
        o.auth_token = "job-token-stray-test";
        net::TransportOptions t;
        t.address = "127.0.0.1";
        auto c = comm::Communicator::create(store, r, n, o, t);
        float x = 1.0f;
        c->allreduce(&x, 1, comm::DType::f32, comm::ReduceOp::sum);
        if (x != static_cast<float>(n)) throw Error("allreduce gave " + std::to_string(x));
        auto half = c->split(r % 2, r);
        float y = 1.0f;
        half->allreduce(&y, 1, comm::DType::f32, comm::ReduceOp::sum);
        if (y != static_cast<float>(half->size())) throw Error("split allreduce gave " + std::to_string(y));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace

TEST(Mesh, SilentStrayConnectionsToPairPortsDoNotBreakThePairs) {
  auto store = std::make_shared<StrayStore>(/*garbage=*/false);
  const auto errors = connectWithStrays(3, store);
  EXPECT_GE(store->strays(), 1) << "the test found no pair port to connect to";
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(Mesh, StrayConnectionsSendingGarbageDoNotBreakThePairs) {
  auto store = std::make_shared<StrayStore>(/*garbage=*/true);
  const auto errors = connectWithStrays(4, store);
  EXPECT_GE(store->strays(), 1) << "the test found no pair port to connect to";
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}
