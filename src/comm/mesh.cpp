#include "mesh.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/transport.h"
#include "congestion.h"
#include "pair_auth.h"

namespace lowcomm::comm {

namespace {
// One try: the pairs, connected and authenticated, or the error that stopped them.
std::unique_ptr<Link> tryOnce(const std::shared_ptr<net::Store>& store, const std::string& prefix, int rank, int size,
                              const std::shared_ptr<gloo::transport::Device>& device, const std::string& token,
                              std::chrono::milliseconds timeout, std::exception_ptr& error) {
  try {
    auto link = std::make_unique<Link>(net::connectMesh(store, prefix, rank, size, device, timeout), device);
    if (!token.empty()) authenticatePairs(*link, token, std::min(timeout, kPairAuthTime));
    return link;
  } catch (const Error&) {
    error = std::current_exception();
  } catch (const std::exception& e) {  // Gloo's own exceptions from a pair a stranger took
    error = std::make_exception_ptr(PeerError(-1, std::string("connecting pairs: ") + e.what()));
  }
  return nullptr;
}

std::string messageOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "unknown error";
}
}  // namespace

std::unique_ptr<Link> connectLink(const std::shared_ptr<net::Store>& store, const std::string& prefix, int rank,
                                  int size, const std::shared_ptr<gloo::transport::Device>& device,
                                  const std::string& token, std::chrono::milliseconds timeout,
                                  const std::string& congestion) {
  // A try lasts at most: the others' arrival, one broken pair's connect wait, the token handshake.
  const auto voteWait = timeout + std::min(timeout, net::kPairConnectTime) + std::min(timeout, kPairAuthTime);
  // Arrival first, outside the tries: a rank that never comes is a TimeoutError naming it (as
  // before), not a vote that never comes.
  store->set(prefix + "/arrived/" + std::to_string(rank), net::toBytes("1"));
  net::waitForRanks(*store, prefix, size, timeout);
  for (int attempt = 0;; ++attempt) {
    const std::string p = attempt == 0 ? prefix : prefix + "/try" + std::to_string(attempt);
    std::exception_ptr error;
    auto link = tryOnce(store, p, rank, size, device, token, timeout, error);
    const std::string mine = error ? messageOf(error) : "";
    store->set(p + "/vote/" + std::to_string(rank), net::toBytes(error ? "no: " + mine : "yes"));
    int failed = -1;
    std::string why;
    for (int r = 0; r < size; ++r) {  // every vote, not just the first no: the next try starts together
      std::string vote;
      try {
        vote = net::toString(store->get(p + "/vote/" + std::to_string(r), voteWait));
      } catch (const TimeoutError&) {
        throw TimeoutError("rendezvous: rank " + std::to_string(r) + " did not report its connection attempt within " +
                           std::to_string(voteWait.count()) + " ms");
      }
      if (vote != "yes" && failed < 0) failed = r, why = vote.substr(std::min<size_t>(vote.size(), 4));
    }
    if (failed < 0) {
      setCongestionControl(*link, congestion, timeout);
      return link;
    }
    link.reset();
    if (attempt + 1 == kMeshTries) {
      if (error) std::rethrow_exception(error);
      throw PeerError(failed, "rendezvous: rank " + std::to_string(failed) + " could not connect its pairs: " + why);
    }
    std::cerr << "lowcomm: rank " << rank << ": connecting pairs failed (rank " << failed << ": " << why
              << "); trying again on fresh ports (" << attempt + 2 << " of " << kMeshTries << ")" << std::endl;
  }
}

void runAtOnce(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::exception_ptr> failed(n);
  {
    std::vector<std::thread> threads;
    for (size_t j = 0; j < n; ++j)
      threads.emplace_back([&, j] {
        try {
          fn(j);
        } catch (...) {
          failed[j] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
  }
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

std::vector<std::unique_ptr<Link>> connectLinks(const std::shared_ptr<net::Store>& store,
                                                const std::vector<std::string>& prefixes, int rank, int size,
                                                const std::shared_ptr<gloo::transport::Device>& device,
                                                const std::string& token, std::chrono::milliseconds timeout,
                                                const std::string& congestion) {
  std::vector<std::unique_ptr<Link>> links(prefixes.size());
  runAtOnce(prefixes.size(), [&](size_t j) {
    links[j] = connectLink(net::forkOrShare(store), prefixes[j], rank, size, device, token, timeout, congestion);
  });
  return links;
}

}  // namespace lowcomm::comm
