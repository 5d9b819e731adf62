// The combine paths and the codec compressor, ranks as threads over real Gloo pairs: every
// codec's distributed result equals a host-side simulation of compress → combine → decompress,
// identical on every rank, for world sizes 1..7.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "comm/harness.h"
#include "compress/compressors.h"
#include "compress/payload.h"
#include "compress/reduce_paths.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::compress;

namespace {

// two_phase test codec: values rounded to multiples of 1/8 in int16; alignment 3 exercises
// uneven chunk boundaries.
class GridCodec : public Codec {
 public:
  std::string name() const override { return "grid"; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 2 * n; }
  size_t alignment() const override { return 3; }
  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    for (size_t i = 0; i < n; ++i) {
      const int16_t q = static_cast<int16_t>(std::lround(x[i] * 8));
      std::memcpy(out + 2 * i, &q, 2);
    }
    return 2 * n;
  }
  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool acc,
              const EncodeCtx&) const override {
    expectSize("grid", bytes, 2 * n);
    for (size_t i = 0; i < n; ++i) {
      int16_t q;
      std::memcpy(&q, p + 2 * i, 2);
      const float v = scale * (q / 8.0f);
      out[i] = acc ? out[i] + v : v;
    }
  }
};

// allgather test codec: keeps |x| >= 0.5 as (u32 index, f32 value) after a u32 count.
class BigOnlyCodec : public Codec {
 public:
  std::string name() const override { return "bigonly"; }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override { return 4 + 8 * n; }
  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    PayloadWriter w(out);
    w.put<uint32_t>(0);
    uint32_t k = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::fabs(x[i]) >= 0.5f) {
        w.put<uint32_t>(static_cast<uint32_t>(i));
        w.put<float>(x[i]);
        ++k;
      }
    std::memcpy(out, &k, 4);
    return w.size();
  }
  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool acc,
              const EncodeCtx&) const override {
    PayloadReader r(p, bytes, "bigonly");
    const uint32_t k = r.get<uint32_t>();
    if (!acc) std::fill(out, out + n, 0.0f);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = r.get<uint32_t>();
      const float v = r.get<float>();
      if (i >= n) r.fail("index out of range");
      out[i] += scale * v;
    }
    r.expectEnd();
  }
};

std::vector<float> input(int rank, size_t n, uint64_t salt = 0) {
  std::mt19937 gen(static_cast<unsigned>(1000 * rank + n + salt));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// What the combine path must produce, computed on the host in the same operation order.
std::vector<float> simulate(const Codec& c, const std::vector<std::vector<float>>& xs, EncodeCtx ctx) {
  const int W = static_cast<int>(xs.size());
  const size_t n = xs[0].size();
  std::vector<float> out(n, 0.0f);
  if (c.combine() == Combine::allgather) {
    for (int r = 0; r < W; ++r) {
      ctx.rank = r;
      std::vector<uint8_t> p(c.maxBytes(n));
      const size_t b = c.encode(xs[r].data(), n, p.data(), ctx);
      c.decode(p.data(), b, n, out.data(), 1.0f / W, true, ctx);
    }
    return out;
  }
  if (c.combine() == Combine::allreduce) {  // sum of decoded pre-divided payloads (f32 sums)
    for (int r = 0; r < W; ++r) {
      ctx.rank = r;
      std::vector<float> y(n);
      for (size_t i = 0; i < n; ++i) y[i] = xs[r][i] / W;
      std::vector<uint8_t> p(c.maxBytes(n));
      const size_t b = c.encode(y.data(), n, p.data(), ctx);
      c.decode(p.data(), b, n, out.data(), 1.0f, true, ctx);
    }
    return out;
  }
  const size_t align = c.alignment();
  for (int j = 0; j < W; ++j) {
    const auto [b, e] = chunkRange(n, W, align, j);
    const size_t len = e - b;
    std::vector<float> avg(len, 0.0f);
    for (int r = 0; r < W; ++r) {
      EncodeCtx k = ctx;
      k.rank = r;
      k.chunk = j;
      std::vector<uint8_t> p(c.maxBytes(len));
      c.encode(xs[r].data() + b, len, p.data(), k);
      c.decode(p.data(), p.size(), len, avg.data(), 1.0f / W, true, k);
    }
    EncodeCtx k = ctx;
    k.rank = j;
    k.chunk = W + j;
    std::vector<uint8_t> p(c.maxBytes(len));
    c.encode(avg.data(), len, p.data(), k);
    c.decode(p.data(), p.size(), len, out.data() + b, 1.0f, false, k);
  }
  return out;
}

// Runs the codec's combine path on `W` threads; checks ranks agree and match the simulation.
void checkPath(const Codec& c, int W, size_t n, double tol) {
  auto comms = test::makeComms(W);
  std::vector<std::vector<float>> xs(W), out(W);
  for (int r = 0; r < W; ++r) xs[r] = input(r, n);
  EncodeCtx base{7, 3, 2, 0, 0, W};
  test::onRanks(W, [&](int r) {
    out[r] = xs[r];
    PathScratch s;
    EncodeCtx ctx = base;
    ctx.rank = r;
    switch (c.combine()) {
      case Combine::allreduce: reduceSummable(*comms[r], c, out[r].data(), n, ctx, nullptr, 0, s); break;
      case Combine::two_phase: reduceTwoPhase(*comms[r], c, out[r].data(), n, ctx, nullptr, nullptr, 0, s); break;
      case Combine::allgather: reduceGather(*comms[r], c, out[r].data(), n, ctx, nullptr, 0, s); break;
    }
  });
  const auto want = simulate(c, xs, base);
  for (int r = 0; r < W; ++r) {
    ASSERT_EQ(0, std::memcmp(out[r].data(), out[0].data(), 4 * n)) << c.name() << ": rank " << r << " differs from rank 0";
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(out[r][i], want[i], tol * (1 + std::fabs(want[i]))) << c.name() << " W=" << W << " n=" << n << " i=" << i;
  }
}

}  // namespace

TEST(ChunkRange, CoversEveryValueOnceWithAlignedBoundaries) {
  for (size_t n : {0, 1, 5, 64, 1001})
    for (int W = 1; W <= 7; ++W)
      for (size_t align : {1, 3, 8}) {
        size_t next = 0;
        for (int j = 0; j < W; ++j) {
          const auto [b, e] = chunkRange(n, W, align, j);
          EXPECT_EQ(b, next);
          EXPECT_LE(b, e);
          if (e < n) {
            EXPECT_EQ(e % align, 0u);
          }
          next = e;
        }
        EXPECT_EQ(next, n);
      }
}

class PathWorld : public ::testing::TestWithParam<int> {};

TEST_P(PathWorld, TwoPhaseAndAllgatherMatchTheSimulation) {
  const int W = GetParam();
  for (size_t n : {1, 7, 1000}) {
    checkPath(GridCodec(), W, n, 0.0);
    checkPath(BigOnlyCodec(), W, n, 0.0);
  }
}

TEST_P(PathWorld, EveryRegisteredCodecMatchesCompressCombineDecompress) {
  const int W = GetParam();
  for (const auto& name : codecNames()) {
    CodecParams p;
    p.ratio = 0.1;
    auto c = makeCodec(name, p);
    // Summable 16-bit payloads are rounded after every partial sum inside the collective.
    const double tol = c->combine() != Combine::allreduce ? 0.0 : c->wireType() == comm::DType::f32 ? 1e-5 : 2e-2;
    checkPath(*c, W, 1031, tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, PathWorld, ::testing::Range(1, 8));

TEST(CodecCompressor, UncompressedSegmentsAreAveragedExactly) {
  const int W = 3;
  auto comms = test::makeComms(W);
  CompressConfig cfg;
  cfg.exclude = {"head"};
  std::vector<std::vector<float>> data(W);
  test::onRanks(W, [&](int r) {
    auto c = makeCodecCompressor(cfg, "fp16", "none");
    data[r] = input(r, 4 + 60 + 10);
    BucketView b{0, data[r].data(), data[r].size(), {{"bias", {4}, 0, 4}, {"w", {6, 10}, 4, 60}, {"head.w", {10}, 64, 10}}};
    for (size_t i = 0; i < 4; ++i) b.data[i] = static_cast<float>(r + i);   // exact in f32
    c->reduce(*comms[r], b);
    EXPECT_EQ(c->stats().raw_bytes, 4 * 74);
    EXPECT_EQ(c->stats().payload_bytes, 2 * 60 + 4 * 14);
  });
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(data[0][i], 1.0f + i);  // mean of r + i over r = 0, 1, 2
  for (int r = 1; r < W; ++r) EXPECT_EQ(data[r], data[0]);
}

TEST(CodecCompressor, ErrorFeedbackInvariantThroughTheCompressor) {
  auto comms = test::makeComms(1);
  CompressConfig cfg;
  cfg.codec_params.ratio = 0.1;
  auto c = makeCodecCompressor(cfg, "topk", "residual");
  std::vector<float> old_e(100, 0.0f);
  for (int step = 0; step < 3; ++step) {
    const auto g = input(0, 100, step);
    auto x = g;
    BucketView b{5, x.data(), 100, {{"w", {10, 10}, 0, 100}}};
    c->reduce(*comms[0], b);
    StateMap s;
    c->save(s);
    std::vector<float> e;
    ASSERT_TRUE(getState(s, "mem.e.5", e));
    int sent = 0;
    for (size_t i = 0; i < 100; ++i) {
      EXPECT_NEAR(x[i] + e[i], g[i] + old_e[i], 1e-6);  // world 1: the average is what was sent
      sent += x[i] != 0.0f;
    }
    EXPECT_EQ(sent, 10);
    old_e = e;
  }
}

TEST(CodecCompressor, SaveLoadContinuesBitIdentically) {
  const int W = 2;
  auto comms = test::makeComms(W);
  CompressConfig cfg;
  cfg.codec_params.ratio = 0.05;
  std::vector<std::vector<float>> a(W), b(W);
  test::onRanks(W, [&](int r) {
    auto c1 = makeCodecCompressor(cfg, "topk", "residual");
    auto run = [&](Compressor& c, int step) {
      auto x = input(r, 500, step);
      BucketView v{0, x.data(), 500, {{"w", {50, 10}, 0, 500}}};
      c.reduce(*comms[r], v);
      return x;
    };
    run(*c1, 0);
    run(*c1, 1);
    StateMap s;
    c1->save(s);
    auto c2 = makeCodecCompressor(cfg, "topk", "residual");
    c2->load(s);
    a[r] = run(*c1, 2);
    b[r] = run(*c2, 2);
  });
  for (int r = 0; r < W; ++r) EXPECT_EQ(a[r], b[r]);
}

TEST(CodecCompressor, TwoPhaseResidualsOnWorkerAndOwner) {
  const int W = 3;
  auto comms = test::makeComms(W);
  CompressConfig cfg;
  test::onRanks(W, [&](int r) {
    auto c = makeCodecCompressor(cfg, "onebit", "residual");
    auto x = input(r, 300);
    BucketView v{1, x.data(), 300, {{"w", {30, 10}, 0, 300}}};
    c->reduce(*comms[r], v);
    StateMap s;
    c->save(s);
    std::vector<float> e, server;
    EXPECT_TRUE(getState(s, "mem.e.1", e));
    EXPECT_EQ(e.size(), 300u);
    EXPECT_TRUE(getState(s, "server.e.1", server));
    const auto [b, e_end] = chunkRange(300, W, makeCodec("onebit", {})->alignment(), r);
    EXPECT_EQ(server.size(), e_end - b);  // the owner's residual covers its chunk
  });
}

// What goes over the wire: two-phase codecs send (W−1) chunk payloads in each phase, sparse
// ones their payload to each of the W−1 others (ring allgather) plus the sizes.
TEST(CodecCompressor, WireBytesMatchThePathsCost) {
  for (int W : {2, 4}) {
    auto comms = test::makeComms(W);
    CompressConfig cfg;
    const size_t n = 1 << 16;
    std::vector<uint64_t> sent(W), slot(W);
    test::onRanks(W, [&](int r) {
      auto c = makeCodecCompressor(cfg, "int8", "none");
      auto x = input(r, n);
      BucketView b{0, x.data(), n, {{"w", {256, 256}, 0, n}}};
      const auto before = comms[r]->meter().snapshot().total.bytes_sent;
      c->reduce(*comms[r], b);
      sent[r] = comms[r]->meter().snapshot().total.bytes_sent - before;
      auto codec = makeCodec("int8", {});
      const auto [b0, e0] = chunkRange(n, W, codec->alignment(), 0);
      slot[r] = codec->maxBytes(e0 - b0);
    });
    for (int r = 0; r < W; ++r) EXPECT_EQ(sent[r], 2 * (W - 1) * slot[r]) << "W=" << W << " rank " << r;
  }
}
