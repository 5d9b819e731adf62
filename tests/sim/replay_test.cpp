// Replaying a timeline: real communicators (ranks as threads, Gloo on loopback) record their
// collectives, the replay reruns them on a simulated star with the same per-rank bytes and
// messages as the traffic meter counted; a hand-written DDP step replays as compute + the
// bucket's allreduce, with the bucket overlapping backward when it was ready early; bad
// timelines are errors naming the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/replay.h"
#include "timeline_fixture.h"

using namespace lowcomm;
using namespace lowcomm::sim;
using namespace lowcomm::sim::fixture;

namespace {

PlatformSpec star(int nodes, double gbit) {
  PlatformSpec p;
  p.nodes = nodes;
  p.ppn = 1;
  p.link_Bps = gbit * 1e9 / 8;
  p.reduce_Bps = 1e15;
  p.notice_bytes = 0;
  return p;
}

// Real communicators (ranks as threads, no shared memory) with a trace each run `body` (given
// the rank's trace), which
// resets the meter once its splits are made; what each rank's meter counted afterwards.
struct MeteredRun {
  std::vector<Trace> traces;
  std::vector<uint64_t> sent, messages;
};

MeteredRun runTraced(int n, const std::function<void(comm::Communicator&, int, Trace&)>& body,
                      comm::ShmMode shm = comm::ShmMode::off, int group_size = 0) {
  comm::CommOptions opts;
  opts.shm = shm;
  opts.group_size = group_size;
  auto comms = test::makeComms(n, opts);
  MeteredRun run{std::vector<Trace>(n), std::vector<uint64_t>(n), std::vector<uint64_t>(n)};
  test::onRanks(n, [&](int r) {
    auto& c = *comms[r];
    c.setTrace(&run.traces[r]);
    body(c, r, run.traces[r]);
    const auto snap = c.meter().snapshot();
    run.sent[r] = snap.total.bytes_sent;
    run.messages[r] = snap.total.messages_sent;
    c.setTrace(nullptr);
  });
  return run;
}

// The time of one message of `bytes` between two ranks on `p` (a broadcast of 2 ranks).
double oneMessage(const PlatformSpec& p, uint64_t bytes) {
  CollectiveSpec one;
  one.op = "broadcast";
  one.bytes = bytes;
  return simulateCollective(p, one).time_s;
}

// Every rank's recorded trace written as one timeline at `path`, read back as programs.
std::vector<RankProgram> readTraces(const std::string& path, const std::vector<Trace>& traces) {
  nlohmann::json ev = nlohmann::json::array();
  for (size_t r = 0; r < traces.size(); ++r)
    for (const auto& e : traces[r].events())
      ev.push_back(event(static_cast<int>(r), e.lane, e.name, e.cat, e.start_us, e.dur_us, e.args));
  writeTrace(path, ev);
  return readTimeline(path, {});
}

}  // namespace

TEST(SimReplay, ReadsADdpStepIntoComputeLaunchWaitAndBucketCalls) {
  const auto path = tempPath("ddp_read");
  writeTrace(path, ddpSteps(2, 4 << 20, 20.0));
  const auto progs = readTimeline(path, {});
  ASSERT_EQ(progs.size(), 2u);
  const auto& p = progs[0];
  ASSERT_EQ(p.measured_step_s.size(), 2u);
  EXPECT_NEAR(p.measured_step_s[0], 0.038, 1e-9);  // 10 + 20 + 3 (the bucket, ready at the end) + 5 ms
  ASSERT_EQ(p.buckets.size(), 2u);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].op, "allreduce");
  EXPECT_EQ(p.calls[0].bytes, 4u << 20);
  // bucket: 0.1 ms before the call, the call, 0.1 ms after it
  ASSERT_EQ(p.buckets[0].size(), 3u);
  EXPECT_EQ(p.buckets[0][1].kind, ReplayItem::call);
  EXPECT_NEAR(p.buckets[0][0].seconds + p.buckets[0][2].seconds, 0.0002, 1e-9);
  // main: begin, sleep 30 ms, launch, wait, sleep 5 ms, end, sleep 0.5 ms, begin, ...
  std::vector<ReplayItem::Kind> kinds;
  double slept = 0;
  for (const auto& it : p.main) {
    if (it.kind == ReplayItem::sleep) slept += it.seconds;
    else kinds.push_back(it.kind);
  }
  const std::vector<ReplayItem::Kind> expect = {ReplayItem::step_begin,   ReplayItem::launch, ReplayItem::wait_buckets,
                                                ReplayItem::step_end,     ReplayItem::step_begin, ReplayItem::launch,
                                                ReplayItem::wait_buckets, ReplayItem::step_end};
  EXPECT_EQ(kinds, expect);
  EXPECT_NEAR(slept, 2 * 0.035 + 0.0005, 1e-9);  // compute and the gap between the steps, not the waits
  std::remove(path.c_str());
}

TEST(SimReplay, AStepIsComputeThenTheExposedAllreduce) {
  const uint64_t bytes = 4 << 20;
  CollectiveSpec s;
  s.bytes = bytes;
  const auto p = star(2, 1.0);
  const double allreduce_s = simulateCollective(p, s).time_s;
  const auto path = tempPath("ddp_step");
  // Ready at the end of backward: nothing overlaps.
  writeTrace(path, ddpSteps(2, bytes, 20.0));
  auto r = replay(p, readTimeline(path, {}));
  EXPECT_EQ(r.steps, 2);
  EXPECT_NEAR(r.predicted_step_s, 0.035 + 0.0002 + allreduce_s, 1e-6);
  // Ready 5 ms into backward: 15 ms of the allreduce hide behind backward.
  writeTrace(path, ddpSteps(2, bytes, 5.0));
  r = replay(p, readTimeline(path, {}));
  EXPECT_NEAR(r.predicted_step_s, 0.035 + std::max(0.0, 0.0002 + allreduce_s - 0.015), 1e-6);
  EXPECT_GT(allreduce_s, 0.015);  // so the overlap shows
  // Bytes: the ring's 2(n-1)/n of the buffer per step.
  EXPECT_EQ(r.bytes_sent[0], 2 * bytes);
  EXPECT_EQ(r.inter_node_sent[1], 2 * bytes);
  std::remove(path.c_str());
}

// Real communicators with a trace each: the replay's bytes and messages per rank equal what the
// traffic meter counted, for the calls of the world and of a split.
TEST(SimReplay, ReplayedBytesEqualTheMeteredBytesOfARealRun) {
  const int n = 4;
  const auto run = runTraced(n, [&](comm::Communicator& c, int r, Trace& trace) {
    auto half = c.split(r % 2, r);  // {0, 2} and {1, 3}: ranks differ from the root's
    auto pair = c.split(r / 2, r);  // {0, 1}: the root's first ranks, still not all of them
    c.meter().reset();
    for (int step = 0; step < 3; ++step) {
      TraceScope span(&trace, "ddp", "phase", 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::vector<float> g(300000, 1.0f);
      c.allreduce(g.data(), g.size(), comm::DType::f32, comm::ReduceOp::sum);
      half->allreduce(g.data(), 1000, comm::DType::f32, comm::ReduceOp::sum);
      pair->allgather(g.data(), g.data() + 2000, 1000, comm::DType::f32);
      std::vector<size_t> counts = {10, 200, 3000, 40};
      std::vector<char> mine(counts[r]), all(3250);
      c.allgatherv(mine.data(), counts[r], all.data(), counts, comm::DType::u8);
      c.broadcast(g.data(), 5000, comm::DType::f32, 1);
    }
  });
  const auto path = tempPath("real");
  const auto progs = readTraces(path, run.traces);
  ASSERT_EQ(progs[0].calls.size(), 15u);
  EXPECT_EQ(progs[2].calls[1].ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(progs[1].calls[2].ranks, (std::vector<int>{0, 1}));
  const auto r = replay(star(n, 1.0), progs);
  EXPECT_EQ(r.calls, 60u);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(r.bytes_sent[k], run.sent[k]) << "rank " << k;
    EXPECT_EQ(r.messages_sent[k], run.messages[k]) << "rank " << k;
  }
  std::remove(path.c_str());
}

// A hierarchical allreduce whose groups share a host runs each group's part in shared memory; its
// timeline event says so (node_piece), and the replay runs the same node-memory algorithm with
// the meter's bytes and messages per rank.
TEST(SimReplay, HierarchicalCallsInSharedMemoryReplayWithTheMeteredBytes) {
  const int n = 4;
  const auto run = runTraced(
      n,
      [&](comm::Communicator& c, int, Trace& trace) {
        for (int step = 0; step < 2; ++step) {
          TraceScope span(&trace, "ddp", "phase", 2);
          std::vector<float> g(300001, 1.0f);
          c.allreduce(g.data(), g.size(), comm::DType::f32, comm::ReduceOp::sum, comm::Algo::hierarchical);
          c.allreduce(g.data(), 999, comm::DType::f32, comm::ReduceOp::sum, comm::Algo::hierarchical);
        }
      },
      comm::ShmMode::automatic, 2);
  const auto path = tempPath("real_node");
  const auto progs = readTraces(path, run.traces);
  ASSERT_EQ(progs[0].calls.size(), 4u);
  EXPECT_EQ(progs[0].calls[0].node_piece, comm::CommOptions{}.shm_piece_bytes);
  auto p = star(2, 1.0);
  p.ppn = 2;  // the groups are the nodes
  const auto r = replay(p, progs);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(r.bytes_sent[k], run.sent[k]) << "rank " << k;
    EXPECT_EQ(r.messages_sent[k], run.messages[k]) << "rank " << k;
  }
  std::remove(path.c_str());
}

// Point-to-point calls (a pipeline's sends, receives, exchanges and posted requests) over a
// split: recorded with root ranks, replayed with the meter's bytes and messages per rank.
TEST(SimReplay, PointToPointCallsReplayWithTheMeteredBytes) {
  const int n = 4;
  const auto run = runTraced(n, [&](comm::Communicator& c, int r, Trace& trace) {
    auto pp = c.split(r % 2, r);  // {0, 2} and {1, 3}: stage 0 and stage 1 of two pipelines
    const int stage = pp->rank();
    c.meter().reset();
    for (int step = 0; step < 3; ++step) {
      TraceScope span(&trace, "pp", "phase", 2);
      std::vector<float> act(50000 + 1000 * (r % 2), 1.0f), grad(act.size());  // per pipeline
      const size_t bytes = act.size() * 4;
      if (stage == 0) {
        pp->send(act.data(), bytes, 1);
        pp->exchange({{1, act.data(), bytes}}, {{1, grad.data(), bytes}}, 1);
        auto req = pp->isend(act.data(), bytes, 1, 2);
        pp->recv(grad.data(), bytes, 1, 2);
        req->wait();
      } else {
        pp->recv(act.data(), bytes, 0);
        pp->exchange({{0, grad.data(), bytes}}, {{0, act.data(), bytes}}, 1);
        auto req = pp->irecv(act.data(), bytes, 0, 2);
        pp->send(grad.data(), bytes, 0, 2);
        req->wait();
      }
      c.allreduce(act.data(), 1000, comm::DType::f32, comm::ReduceOp::sum);
    }
  });
  const auto path = tempPath("p2p");
  const auto progs = readTraces(path, run.traces);
  ASSERT_EQ(progs[0].calls.size(), 18u);  // 6 per step: send, exchange, isend, recv, wait, allreduce
  const auto& c0 = progs[0].calls;
  EXPECT_EQ(c0[0].op, "send");
  ASSERT_EQ(c0[0].sends.size(), 1u);
  EXPECT_EQ(c0[0].sends[0], (std::pair<int, uint64_t>{2, 200000}));  // rank 2: stage 1 of pipeline 0
  EXPECT_EQ(c0[1].op, "exchange");
  EXPECT_EQ(c0[1].recvs[0], (std::pair<int, uint64_t>{2, 200000}));
  EXPECT_EQ(progs[1].calls[0].sends[0], (std::pair<int, uint64_t>{3, 204000}));
  EXPECT_EQ(c0[1].tag, 1u);
  EXPECT_EQ(c0[2].op, "isend");
  EXPECT_FALSE(c0[2].req.empty());
  EXPECT_EQ(c0[4].op, "wait");
  EXPECT_EQ(c0[4].req, c0[2].req);
  EXPECT_EQ(progs[3].calls[0].recvs[0].first, 1);
  const auto r = replay(star(n, 1.0), progs);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(r.bytes_sent[k], run.sent[k]) << "rank " << k;
    EXPECT_EQ(r.messages_sent[k], run.messages[k]) << "rank " << k;
  }
  std::remove(path.c_str());
}

// A two-stage hand-over: stage 1 waits for stage 0's compute and the activation's transfer.
TEST(SimReplay, ARecvWaitsForTheSendersComputeAndTheTransfer) {
  const uint64_t bytes = 1 << 20;
  nlohmann::json ev = nlohmann::json::array();
  const std::string b = std::to_string(bytes);
  {  // one step: in a second one the gap between the recorded steps would shift the hand-over
    const double t = 1000;
    ev.push_back(event(0, 0, "forward", "compute", t, 10000));
    ev.push_back(event(0, 0, "send", "p2p", t + 10000, 100, {{"sends", "1:" + b}, {"recvs", ""}, {"tag", "0"}}));
    ev.push_back(event(0, 2, "pp", "phase", t, 10100));
    // As recorded, stage 1 waited 5 ms only; the replay decides how long.
    ev.push_back(event(1, 0, "recv", "p2p", t, 5000, {{"sends", ""}, {"recvs", "0:" + b}, {"tag", "0"}}));
    ev.push_back(event(1, 0, "forward", "compute", t + 5000, 10000));
    ev.push_back(event(1, 2, "pp", "phase", t, 15000));
  }
  const auto path = tempPath("p2p_step");
  writeTrace(path, ev);
  const auto p = star(2, 1.0);
  const double transfer_s = oneMessage(p, bytes);
  const auto r = replay(p, readTimeline(path, {}));
  ASSERT_EQ(r.predicted_step_by_rank.size(), 2u);
  EXPECT_NEAR(r.predicted_step_by_rank[0], 0.010 + transfer_s, 2e-4);
  EXPECT_NEAR(r.predicted_step_by_rank[1], 0.010 + transfer_s + 0.010, 2e-4);
  EXPECT_GT(transfer_s, 0.008);  // 1 MiB at 1 Gbit/s
  EXPECT_EQ(r.bytes_sent[0], bytes);
  EXPECT_EQ(r.bytes_sent[1], 0u);
  std::remove(path.c_str());
}

// On the emulated cluster's shaped links (PlatformSpec::link_burst_bytes), a message after an
// idle spell passes its link's burst at once; one right behind it finds the bucket empty.
TEST(SimReplay, AShapedLinkPassesItsBurstAfterAnIdleSpellOnly) {
  const uint64_t bytes = 1 << 20, burst = 256 << 10;
  const std::string b = std::to_string(bytes);
  nlohmann::json ev = nlohmann::json::array();
  const double t = 1000;
  ev.push_back(event(0, 0, "forward", "compute", t, 20000));  // 20 ms at 1 Gbit/s refill 2.5 MB
  ev.push_back(event(0, 0, "send", "p2p", t + 20000, 100, {{"sends", "1:" + b}, {"recvs", ""}, {"tag", "0"}}));
  ev.push_back(event(0, 0, "send", "p2p", t + 20100, 100, {{"sends", "1:" + b}, {"recvs", ""}, {"tag", "0"}}));
  ev.push_back(event(0, 2, "pp", "phase", t, 20200));
  ev.push_back(event(1, 0, "recv", "p2p", t, 5000, {{"sends", ""}, {"recvs", "0:" + b}, {"tag", "0"}}));
  ev.push_back(event(1, 0, "recv", "p2p", t + 5000, 5000, {{"sends", ""}, {"recvs", "0:" + b}, {"tag", "0"}}));
  ev.push_back(event(1, 2, "pp", "phase", t, 10000));
  const auto path = tempPath("p2p_burst");
  writeTrace(path, ev);
  const auto plain = star(2, 1.0);
  auto transfer = [&](uint64_t n) { return oneMessage(plain, n); };  // between the 2 nodes, plain links
  auto shaped = plain;
  shaped.link_burst_bytes = static_cast<double>(burst);
  const auto with = replay(shaped, readTimeline(path, {}));
  const auto without = replay(plain, readTimeline(path, {}));
  EXPECT_NEAR(without.predicted_step_by_rank[1], 0.020 + 2 * transfer(bytes), 2e-4);
  EXPECT_NEAR(with.predicted_step_by_rank[1], 0.020 + transfer(bytes - burst) + transfer(bytes), 2e-4);
  EXPECT_GT(transfer(bytes) - transfer(bytes - burst), 0.0019);  // 256 KiB at 1 Gbit/s: 2.1 ms
  EXPECT_EQ(with.bytes_sent[0], 2 * bytes);  // the burst is timing, not fewer bytes
  // tools/cluster's burst: 4 ms of traffic, at least 128 KiB; only the star is shaped.
  EXPECT_EQ(parseSetting("2x1@100mbit").link_burst_bytes, 131072.0);
  EXPECT_EQ(parseSetting("2x1@1gbit").link_burst_bytes, 500000.0);
  shaped.topology = "fat-tree";
  EXPECT_THROW(validate(shaped), ConfigError);
  std::remove(path.c_str());
}

// On the emulated cluster's links (PlatformSpec::link_queue_s) a receiver's notice waits in its
// link's FIFO queue behind the data that link is sending, at most the queue's length.
TEST(SimReplay, ANoticeWaitsBehindTheDataItsLinkIsSending) {
  const uint64_t bytes = 1 << 20;
  const std::string b = std::to_string(bytes);
  nlohmann::json ev = nlohmann::json::array();
  const double t = 1000;
  ev.push_back(event(0, 0, "exchange", "p2p", t, 100, {{"sends", "1:" + b}, {"recvs", "1:" + b}, {"tag", "0"}}));
  ev.push_back(event(0, 2, "pp", "phase", t, 100));
  // Rank 1's own message is on its way out when it posts the receive of rank 0's.
  ev.push_back(event(1, 0, "isend", "p2p", t, 10, {{"sends", "0:" + b}, {"recvs", ""}, {"tag", "0"}, {"req", "r1"}}));
  ev.push_back(event(1, 0, "forward", "compute", t + 10, 1000));
  ev.push_back(event(1, 0, "recv", "p2p", t + 1010, 100, {{"sends", ""}, {"recvs", "0:" + b}, {"tag", "0"}}));
  ev.push_back(event(1, 0, "wait", "p2p", t + 1110, 10, {{"req", "r1"}}));
  ev.push_back(event(1, 2, "pp", "phase", t, 1120));
  const auto path = tempPath("p2p_queue");
  writeTrace(path, ev);
  auto plain = star(2, 1.0);
  plain.notice_bytes = 114;
  const double transfer = oneMessage(plain, bytes);  // 8.4 ms at 1 Gbit/s (a notice, the data)
  const double without = replay(plain, readTimeline(path, {})).predicted_step_by_rank[1];
  auto queued = plain;
  queued.link_queue_s = 0.05;  // longer than the message: the notice waits for all of it
  const double behind = replay(queued, readTimeline(path, {})).predicted_step_by_rank[1];
  queued.link_queue_s = 0.002;  // a short queue holds 2 ms of it
  const double capped = replay(queued, readTimeline(path, {})).predicted_step_by_rank[1];
  EXPECT_NEAR(without, 0.00101 + transfer, 3e-4);
  EXPECT_NEAR(behind, 2 * transfer, 3e-4);
  EXPECT_NEAR(capped, 0.00101 + 0.002 + transfer, 3e-4);
  std::remove(path.c_str());
}

// A rank that sends (its receiver's notice already in) and posts a receive in the same instant:
// its host writes the message first, so the receive's notice waits behind all of it.
TEST(SimReplay, ANoticePostedRightAfterItsRanksSendWaitsBehindIt) {
  const uint64_t bytes = 1 << 20;
  const std::string b = std::to_string(bytes);
  nlohmann::json ev = nlohmann::json::array();
  const double t = 1000;
  ev.push_back(event(0, 0, "exchange", "p2p", t, 100, {{"sends", "1:" + b}, {"recvs", "1:" + b}, {"tag", "0"}}));
  ev.push_back(event(0, 2, "pp", "phase", t, 100));
  ev.push_back(event(1, 0, "forward", "compute", t, 1000));  // rank 0's notice is in meanwhile
  ev.push_back(event(1, 0, "isend", "p2p", t + 1000, 0, {{"sends", "0:" + b}, {"recvs", ""}, {"tag", "0"}, {"req", "r1"}}));
  ev.push_back(event(1, 0, "recv", "p2p", t + 1000, 100, {{"sends", ""}, {"recvs", "0:" + b}, {"tag", "0"}}));
  ev.push_back(event(1, 0, "wait", "p2p", t + 1100, 10, {{"req", "r1"}}));
  ev.push_back(event(1, 2, "pp", "phase", t, 1110));
  const auto path = tempPath("p2p_same_instant");
  writeTrace(path, ev);
  auto p = star(2, 1.0);
  p.notice_bytes = 114;
  const double transfer = oneMessage(p, bytes);
  const double without = replay(p, readTimeline(path, {})).predicted_step_by_rank[1];
  p.link_queue_s = 0.05;
  const double behind = replay(p, readTimeline(path, {})).predicted_step_by_rank[1];
  EXPECT_NEAR(without, 0.001 + transfer, 3e-4);
  EXPECT_NEAR(behind, 0.001 + 2 * transfer, 3e-4);
  std::remove(path.c_str());
}

// A message's host time (PlatformSpec::message_overhead_s) runs from its post, so it overlaps
// the connection's earlier transfer: two messages posted together cost one host time, not two.
TEST(SimReplay, AMessagesHostTimeOverlapsTheTransferBeforeIt) {
  const uint64_t bytes = 1 << 20;  // 8.4 ms at 1 Gbit/s, longer than the host time
  const std::string b = std::to_string(bytes);
  nlohmann::json ev = nlohmann::json::array();
  const double t = 1000;
  ev.push_back(event(0, 0, "send", "p2p", t, 100, {{"sends", "1:" + b + ",1:" + b}, {"recvs", ""}, {"tag", "0"}}));
  ev.push_back(event(0, 2, "pp", "phase", t, 100));
  ev.push_back(event(1, 0, "recv", "p2p", t, 100, {{"sends", ""}, {"recvs", "0:" + b + ",0:" + b}, {"tag", "0"}}));
  ev.push_back(event(1, 2, "pp", "phase", t, 100));
  const auto path = tempPath("p2p_overhead");
  writeTrace(path, ev);
  auto p = star(2, 1.0);
  const double plain = replay(p, readTimeline(path, {})).predicted_step_by_rank[1];
  p.message_overhead_s = 0.003;
  const double host = replay(p, readTimeline(path, {})).predicted_step_by_rank[1];
  EXPECT_GT(plain, 0.016);  // two transfers
  EXPECT_NEAR(host, plain + 0.003, 2e-4);
  std::remove(path.c_str());
}

// Messages of different tags (also tags 16 apart) and of different communicators between the
// same two ranks are matched apart, whatever order the receiver takes them in.
TEST(SimReplay, TagsAndCommunicatorsKeepTheirMessagesApart) {
  auto p2p = [](int rank, double ts, const std::string& name, const std::string& comm, int tag, const std::string& sends,
                const std::string& recvs, const std::string& req = "") {
    nlohmann::json a = {{"sends", sends}, {"recvs", recvs}, {"tag", std::to_string(tag)}, {"comm", comm}};
    if (!req.empty()) a["req"] = req;
    return event(rank, 0, name, "p2p", ts, 10, a);
  };
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back(p2p(0, 1000, "isend", "a", 1, "1:100", "", "r1"));
  ev.push_back(p2p(0, 1100, "isend", "a", 17, "1:200", "", "r2"));
  ev.push_back(p2p(0, 1200, "isend", "b", 1, "1:300", "", "r3"));
  ev.push_back(p2p(0, 1300, "wait", "", 0, "", "", "r1"));
  ev.push_back(p2p(0, 1400, "wait", "", 0, "", "", "r2"));
  ev.push_back(p2p(0, 1500, "wait", "", 0, "", "", "r3"));
  ev.push_back(event(0, 2, "pp", "phase", 1000, 600));
  ev.push_back(p2p(1, 1000, "recv", "b", 1, "", "0:300"));
  ev.push_back(p2p(1, 1100, "recv", "a", 17, "", "0:200"));
  ev.push_back(p2p(1, 1200, "recv", "a", 1, "", "0:100"));
  ev.push_back(event(1, 2, "pp", "phase", 1000, 300));
  const auto path = tempPath("p2p_tags");
  writeTrace(path, ev);
  const auto r = replay(star(2, 1.0), readTimeline(path, {}));
  EXPECT_EQ(r.bytes_sent[0], 600u);
  EXPECT_EQ(r.messages_sent[0], 3u);
  // The same request id posted twice without a wait: an error, not a lost request.
  ev[1]["args"]["req"] = "r1";
  writeTrace(path, ev);
  EXPECT_THROW(replay(star(2, 1.0), readTimeline(path, {})), Error);
  // A message on the communication thread outside a bucket cannot be placed: an error.
  ev = ddpSteps(2, 1024, 20.0);
  ev.push_back(event(1, 1, "send", "p2p", 1500, 10, {{"sends", "0:8"}, {"tag", "0"}}));
  writeTrace(path, ev);
  EXPECT_THROW(readTimeline(path, {}), ConfigError);
  std::remove(path.c_str());
}

// DDP's buckets run on a communicator of their own (a split of the world's), so a call of the
// compute thread while a bucket is in flight never shares its sequence numbers, whichever of the
// two each rank issues first. Here rank 0 broadcasts before its bucket starts, rank 1 after.
TEST(SimReplay, TheComputeThreadsCallsAndTheBucketsKeepTheirOwnSequence) {
  nlohmann::json ev = nlohmann::json::array();
  const nlohmann::json bcast = {{"bytes", "8"}, {"dtype", "u8"}, {"algo", "tree"}, {"root", "0"}};
  const nlohmann::json ring = {{"bytes", "4096"}, {"dtype", "f32"}, {"algo", "ring"}, {"segment", "1048576"}};
  for (int r = 0; r < 2; ++r) {
    const double t = 1000, bcast_at = r == 0 ? t + 10000 : t + 31000;  // rank 0: before backward
    const double backward = r == 0 ? t + 10100 : t + 10000, ready = backward + (r == 0 ? 19000 : 1000);
    ev.push_back(event(r, 0, "forward", "compute", t, 10000));
    ev.push_back(event(r, 0, "broadcast", "collective", bcast_at, 100, bcast));
    ev.push_back(event(r, 0, "backward", "compute", backward, 20000));
    ev.push_back(event(r, 1, "bucket 0", "comm", ready, 300, {{"queued_us", "0"}, {"bytes", "4096"}}));
    ev.push_back(event(r, 1, "allreduce", "collective", ready + 50, 200, ring));
    ev.push_back(event(r, 0, "wait for gradients", "wait", t + 31100, 100));
    ev.push_back(event(r, 2, "ddp", "phase", t, 31200));
  }
  const auto path = tempPath("ddp_two_threads");
  writeTrace(path, ev);
  const auto progs = readTimeline(path, {});
  ASSERT_EQ(progs[0].buckets.size(), 1u);
  const auto r = replay(star(2, 1.0), progs);
  EXPECT_EQ(r.steps, 1);
  EXPECT_EQ(r.bytes_sent[0], 8u + 4096u);
  std::remove(path.c_str());
}

TEST(SimReplay, BadTimelinesAreErrorsNamingTheFile) {
  const auto path = tempPath("bad");
  std::ofstream(path) << "{\"traceEvents\": 3}";
  EXPECT_THROW(readTimeline(path, {}), ConfigError);
  writeTrace(path, nlohmann::json::array({event(0, 0, "forward", "compute", 0, 10)}));
  try {
    readTimeline(path, {});
    FAIL() << "no step spans accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  auto ev = ddpSteps(2, 1024, 20.0);
  ev.push_back(event(1, 0, "ssp-push", "collective", 1000, 10));
  writeTrace(path, ev);
  EXPECT_THROW(readTimeline(path, {}), ConfigError);
  ev = ddpSteps(2, 1024, 20.0);
  ev.push_back(event(1, 0, "send", "p2p", 1000, 10, {{"sends", "0:x"}}));
  writeTrace(path, ev);
  EXPECT_THROW(readTimeline(path, {}), ConfigError);  // bytes not a number
  ev = ddpSteps(2, 1024, 20.0);
  ev.push_back(event(1, 0, "recv_any", "p2p", 1000, 10, {{"recvs", "0:8"}}));
  writeTrace(path, ev);
  EXPECT_THROW(readTimeline(path, {}), ConfigError);  // not simulated
  ev = ddpSteps(2, 1024, 20.0);
  ev.push_back(event(1, 0, "send", "p2p", 1000, 10, {{"sends", "7:8"}}));
  writeTrace(path, ev);
  EXPECT_THROW(replay(star(2, 1.0), readTimeline(path, {})), Error);  // rank 7 of 2
  writeTrace(path, ddpSteps(2, 1024, 20.0));
  EXPECT_THROW(replay(star(3, 1.0), readTimeline(path, {})), ConfigError);  // 2 ranks, 3 nodes
  EXPECT_THROW(readTimeline(path, {5, 1}), ConfigError);                      // past the 2 steps
  EXPECT_THROW(readTimeline("/nonexistent/timeline.json", {}), ConfigError);
  std::remove(path.c_str());
}
