// PowerSGD (Vogels, Karimireddy, Jaggi 2019), following PyTorch's powerSGD_hook: one power
// iteration per step with error feedback, warm-started Q and batched uncompressed tensors.
//
// Per bucket and call, after the first `start_step` calls (plain f32 allreduce-average):
//   1. every segment that is not a compressed matrix is packed and averaged in one allreduce;
//   2. M = grad + residual; P = M Q for every matrix, all P's summed in one allreduce;
//   3. each P is orthonormalised (same input on every rank -> same output);
//   4. Q = M^T P for every matrix, all Q's averaged in one allreduce;
//   5. grad := P Q^T, residual := M - P Q^T; with warm start Q is kept for the next step.
// Which segments are matrices depends only on shapes, names and config, so every rank issues the
// same collectives in the same order. Arithmetic is f32 through ATen (BLAS matmuls) over views of
// the bucket and of our buffers; the orthonormalisation is a portable double-precision loop.
//
// Uncompressed segments carry no residual: they are averaged exactly. (PyTorch also feeds back
// `local - average` for them; that sums to zero over the ranks and changes no average.)
//
// State keys, per bucket b (segment index s within the bucket):
//   powersgd.<b>.step          int64[1]  calls made for the bucket
//   powersgd.<b>.layout        int64[4k] (s, m, n, r) per compressed matrix (once planned)
//   powersgd.<b>.q.<s>         f32[n*r]  warm-start Q (only with warm_start)
//   powersgd.<b>.residual.<s>  f32[m*n]  error feedback
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compressors.h"
#include "powersgd_math.h"
#include "lowcomm/base/error.h"

namespace lowcomm::compress {
namespace {

using Clock = std::chrono::steady_clock;
using comm::DType;
using comm::ReduceOp;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using powersgd::drawNormal;
using powersgd::mixSeed;
using powersgd::orthonormalise;

at::Tensor view(float* p, int64_t rows, int64_t cols) {
  return at::from_blob(p, {rows, cols}, at::TensorOptions().dtype(at::kFloat));
}

// A compressed segment: data[offset, offset + m*n) viewed row-major as m x n, rank r.
struct Matrix {
  int seg;
  size_t offset;
  int64_t m, n, r;
  size_t p_off, q_off;  // in the packed P and Q buffers
};

struct Range {
  size_t offset, count;
};

struct Plan {
  std::vector<Matrix> mats;
  std::vector<Range> flat;  // averaged uncompressed, in bucket order, adjacent ranges merged
  size_t flat_numel = 0, p_numel = 0, q_numel = 0;
  std::vector<int64_t> layout;  // (seg, m, n, r) per matrix: what saved state must match
};

struct BucketState {
  int64_t step = 0;
  bool planned = false;
  size_t numel = 0;
  std::vector<Segment> segments;  // the layout the plan was made for
  Plan plan;
  std::map<int, std::vector<float>> q, residual;  // by segment index
  // Set by load(): state not yet checked against a plan, and the layout it was saved for.
  bool pending = false;
  std::optional<std::vector<int64_t>> loaded_layout;
};

bool sameLayout(const BucketState& st, const BucketView& b) {
  if (st.numel != b.numel || st.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < b.segments.size(); ++i) {
    const Segment &x = st.segments[i], &y = b.segments[i];
    if (x.name != y.name || x.shape != y.shape || x.offset != y.offset || x.numel != y.numel) return false;
  }
  return true;
}

std::string keyPrefix(int bucket) { return "powersgd." + std::to_string(bucket) + "."; }

// Sizes of loaded Q/residual blobs against a layout; DataError naming the offending key.
void checkAgainstLayout(int bucket, const BucketState& st, const std::vector<int64_t>& layout) {
  std::map<int, std::pair<size_t, size_t>> want;  // seg -> (q size, residual size)
  for (size_t i = 0; i + 3 < layout.size(); i += 4)
    want[int(layout[i])] = {size_t(layout[i + 2] * layout[i + 3]), size_t(layout[i + 1] * layout[i + 2])};
  auto check = [&](const std::map<int, std::vector<float>>& blobs, const char* what, bool is_q) {
    for (const auto& [seg, v] : blobs) {
      const std::string key = keyPrefix(bucket) + what + "." + std::to_string(seg);
      auto it = want.find(seg);
      if (it == want.end())
        throw DataError("compressor state '" + key + "' names segment " + std::to_string(seg) +
                        ", which is not a compressed matrix of bucket " + std::to_string(bucket));
      const size_t n = is_q ? it->second.first : it->second.second;
      if (v.size() != n)
        throw DataError("compressor state '" + key + "' has " + std::to_string(v.size()) + " values, expected " +
                        std::to_string(n));
    }
  };
  check(st.q, "q", true);
  check(st.residual, "residual", false);
}

class PowerSgdCompressor : public Compressor {
 public:
  explicit PowerSgdCompressor(const CompressConfig& cfg) : cfg_(cfg) {
    if (cfg.rank < 1) throw ConfigError("compress.rank must be >= 1, got " + std::to_string(cfg.rank));
    if (cfg.start_step < 0)
      throw ConfigError("compress.start_step must be >= 0, got " + std::to_string(cfg.start_step));
    if (!(cfg.min_compression >= 0) || !std::isfinite(cfg.min_compression))
      throw ConfigError("compress.min_compression must be a finite number >= 0, got " +
                        std::to_string(cfg.min_compression));
  }

  std::string name() const override { return "powersgd"; }

  void reduce(comm::Communicator& comm, BucketView& b) override {
    const auto t0 = Clock::now();
    double comm_s = 0;
    auto allreduce = [&](float* p, size_t count, ReduceOp op) {
      if (count == 0) return;
      const auto t = Clock::now();
      comm.allreduce(p, count, DType::f32, op);
      comm_s += secondsSince(t);
    };
    LC_ENFORCE_GE(b.index, 0, "bucket index");
    BucketState& st = buckets_[b.index];
    stats_.raw_bytes += int64_t(4 * b.numel);
    stats_.buckets += 1;

    if (st.step < cfg_.start_step) {
      allreduce(b.data, b.numel, ReduceOp::avg);
      stats_.payload_bytes += int64_t(4 * b.numel);
      ++st.step;
      stats_.codec_s += std::max(0.0, secondsSince(t0) - comm_s);
      return;
    }
    ensurePlan(st, b);
    const Plan& plan = st.plan;

    // 1. Uncompressed part: one allreduce, in place when it is a single range.
    if (plan.flat.size() == 1) {
      allreduce(b.data + plan.flat[0].offset, plan.flat[0].count, ReduceOp::avg);
    } else if (!plan.flat.empty()) {
      flat_.resize(plan.flat_numel);
      size_t pos = 0;
      for (const Range& g : plan.flat) {
        std::memcpy(flat_.data() + pos, b.data + g.offset, g.count * sizeof(float));
        pos += g.count;
      }
      allreduce(flat_.data(), plan.flat_numel, ReduceOp::avg);
      pos = 0;
      for (const Range& g : plan.flat) {
        std::memcpy(b.data + g.offset, flat_.data() + pos, g.count * sizeof(float));
        pos += g.count;
      }
    }

    // 2. M = grad + residual (kept in the residual buffer), P = M Q.
    p_.resize(plan.p_numel);
    q_.resize(plan.q_numel);
    for (const Matrix& x : plan.mats) {
      std::vector<float>& res = st.residual[x.seg];
      if (res.empty()) res.assign(size_t(x.m * x.n), 0.0f);
      at::Tensor M = view(res.data(), x.m, x.n);
      M.add_(view(b.data + x.offset, x.m, x.n));
      std::vector<float>& q = st.q[x.seg];
      if (q.empty() || !cfg_.warm_start) {
        q.resize(size_t(x.n * x.r));
        uint64_t seed = mixSeed(mixSeed(mixSeed(cfg_.seed, uint64_t(b.index)), uint64_t(x.seg)), 0x505347ULL);
        if (!cfg_.warm_start) seed = mixSeed(seed, uint64_t(st.step));
        drawNormal(q.data(), q.size(), seed);
      }
      at::Tensor P = view(p_.data() + x.p_off, x.m, x.r);
      at::mm_out(P, M, view(q.data(), x.n, x.r));
    }
    allreduce(p_.data(), plan.p_numel, ReduceOp::sum);

    // 3.-4. Orthonormal P, Q = M^T P averaged.
    for (const Matrix& x : plan.mats) {
      orthonormalise(p_.data() + x.p_off, x.m, x.r, ws_);
      at::Tensor M = view(st.residual[x.seg].data(), x.m, x.n);
      at::Tensor Q = view(q_.data() + x.q_off, x.n, x.r);
      at::mm_out(Q, M.t(), view(p_.data() + x.p_off, x.m, x.r));
    }
    allreduce(q_.data(), plan.q_numel, ReduceOp::avg);

    // 5. Decompress, error feedback, warm start.
    for (const Matrix& x : plan.mats) {
      at::Tensor out = view(b.data + x.offset, x.m, x.n);
      at::mm_out(out, view(p_.data() + x.p_off, x.m, x.r), view(q_.data() + x.q_off, x.n, x.r).t());
      view(st.residual[x.seg].data(), x.m, x.n).sub_(out);
      if (cfg_.warm_start)
        std::memcpy(st.q[x.seg].data(), q_.data() + x.q_off, size_t(x.n * x.r) * sizeof(float));
    }
    if (!cfg_.warm_start) st.q.clear();

    stats_.payload_bytes += int64_t(4 * (plan.flat_numel + plan.p_numel + plan.q_numel));
    ++st.step;
    stats_.codec_s += std::max(0.0, secondsSince(t0) - comm_s);
  }

  void save(StateMap& s) const override {
    for (const auto& [index, st] : buckets_) {
      const std::string pre = keyPrefix(index);
      putState(s, pre + "step", std::vector<int64_t>{st.step});
      if (st.planned)
        putState(s, pre + "layout", st.plan.layout);
      else if (st.loaded_layout)
        putState(s, pre + "layout", *st.loaded_layout);
      for (const auto& [seg, v] : st.q) putState(s, pre + "q." + std::to_string(seg), v);
      for (const auto& [seg, v] : st.residual) putState(s, pre + "residual." + std::to_string(seg), v);
    }
  }

  // Replaces all state. Blob sizes are checked now against the saved layout (or the layout this
  // compressor already planned for the bucket), else at the bucket's next reduce().
  void load(const StateMap& s) override {
    const std::string root = "powersgd.";
    std::map<int, BucketState> loaded;
    for (auto it = s.lower_bound(root); it != s.end() && it->first.compare(0, root.size(), root) == 0; ++it) {
      const std::string& key = it->first;
      auto bad = [&]() { return DataError("compressor state '" + key + "' is not a PowerSGD state key"); };
      size_t pos = root.size(), end = pos;
      while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
      if (end == pos || end - pos > 9 || end >= key.size() || key[end] != '.') throw bad();
      const int bucket = std::stoi(key.substr(pos, end - pos));
      const std::string field = key.substr(end + 1);
      BucketState& st = loaded[bucket];
      if (field == "step") {
        std::vector<int64_t> v;
        getState(s, key, v);
        if (v.size() != 1 || v[0] < 0) throw DataError("compressor state '" + key + "' is not one step count >= 0");
        st.step = v[0];
      } else if (field == "layout") {
        getState(s, key, st.loaded_layout.emplace());
        if (st.loaded_layout->size() % 4 != 0)
          throw DataError("compressor state '" + key + "' is not a list of (segment, m, n, r)");
        for (int64_t v : *st.loaded_layout)
          if (v < 0 || v > (int64_t(1) << 40)) throw DataError("compressor state '" + key + "' holds " + std::to_string(v));
      } else {
        const size_t dot = field.find('.');
        const std::string kind = field.substr(0, dot);
        const std::string num = dot == std::string::npos ? "" : field.substr(dot + 1);
        if ((kind != "q" && kind != "residual") || num.empty() || num.size() > 9 ||
            !std::all_of(num.begin(), num.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
          throw bad();
        getState(s, key, (kind == "q" ? st.q : st.residual)[std::stoi(num)]);
      }
    }
    for (auto& [bucket, st] : loaded) {
      st.pending = true;
      if (!st.loaded_layout) {
        auto old = buckets_.find(bucket);
        if (old != buckets_.end() && old->second.planned) st.loaded_layout = old->second.plan.layout;
      }
      if (st.loaded_layout) checkAgainstLayout(bucket, st, *st.loaded_layout);
    }
    buckets_ = std::move(loaded);
  }

 private:
  // (Re)builds the plan when the bucket's layout is new or changed. State loaded for the bucket
  // must match the plan (DataError otherwise); runtime state of an older layout is dropped.
  void ensurePlan(BucketState& st, const BucketView& b) {
    if (st.planned && sameLayout(st, b)) return;
    const bool replanned = st.planned;
    st.plan = makePlan(b);
    st.numel = b.numel;
    st.segments = b.segments;
    st.planned = true;
    if (st.pending) {
      st.pending = false;
      if (st.loaded_layout && *st.loaded_layout != st.plan.layout)
        throw DataError("compressor state '" + keyPrefix(b.index) +
                        "layout' does not match bucket " + std::to_string(b.index) +
                        " (different model, bucketing or compress config)");
      checkAgainstLayout(b.index, st, st.plan.layout);
      st.loaded_layout.reset();
    } else if (replanned) {
      st.q.clear();
      st.residual.clear();
    }
  }

  Plan makePlan(const BucketView& b) const {
    Plan p;
    size_t covered = 0;   // end of the last compressed matrix
    size_t prev_end = 0;  // end of the previous segment
    auto addFlat = [&p](size_t offset, size_t count) {
      if (count == 0) return;
      if (!p.flat.empty() && p.flat.back().offset + p.flat.back().count == offset)
        p.flat.back().count += count;
      else
        p.flat.push_back({offset, count});
      p.flat_numel += count;
    };
    for (size_t i = 0; i < b.segments.size(); ++i) {
      const Segment& s = b.segments[i];
      LC_ENFORCE(s.offset >= prev_end && s.offset + s.numel <= b.numel, "bucket ", b.index, " segment ", i, " '",
                 s.name, "' at ", s.offset, "+", s.numel, " is out of order or outside ", b.numel, " values");
      prev_end = s.offset + s.numel;
      if (s.shape.size() < 2 || !compressible(cfg_, s)) continue;
      int64_t prod = 1;
      for (int64_t d : s.shape) prod *= d;
      LC_ENFORCE_EQ(size_t(prod), s.numel, "segment '", s.name, "' shape does not match its size");
      const int64_t m = s.shape[0];
      const int64_t n = m > 0 ? int64_t(s.numel) / m : 0;
      if (m == 0 || n == 0) continue;
      const int64_t r = std::min({cfg_.rank, m, n});
      if (double(m) * double(n) < cfg_.min_compression * double(r) * double(m + n)) continue;
      addFlat(covered, s.offset - covered);
      p.mats.push_back({int(i), s.offset, m, n, r, p.p_numel, p.q_numel});
      p.p_numel += size_t(m * r);
      p.q_numel += size_t(n * r);
      p.layout.insert(p.layout.end(), {int64_t(i), m, n, r});
      covered = s.offset + s.numel;
    }
    addFlat(covered, b.numel - covered);
    return p;
  }

  CompressConfig cfg_;
  std::map<int, BucketState> buckets_;
  std::vector<float> flat_, p_, q_;  // packed buffers, reused across calls
  std::vector<double> ws_;
};

}  // namespace

std::unique_ptr<Compressor> makePowerSgdCompressor(const CompressConfig& cfg) {
  return std::make_unique<PowerSgdCompressor>(cfg);
}

}  // namespace lowcomm::compress
