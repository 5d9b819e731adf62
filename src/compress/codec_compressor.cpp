// Codec + memory over one bucket: compressible segments are packed and go through the codec's
// combine path; the rest go through one f32 allreduce.
#include <chrono>

#include "compressors.h"
#include "reduce_paths.h"

namespace lowcomm::compress {

bool compressible(const CompressConfig& cfg, const Segment& s) {
  if (cfg.skip_1d && s.shape.size() <= 1) return false;
  if (static_cast<int64_t>(s.numel) < cfg.min_numel) return false;
  for (const auto& prefix : cfg.exclude)
    if (s.name.compare(0, prefix.size(), prefix) == 0) return false;
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

class CodecCompressor : public Compressor {
 public:
  CodecCompressor(const CompressConfig& cfg, const std::string& codec, const std::string& memory)
      : cfg_(cfg), label_(cfg.codec), codec_(makeCodec(codec, params(cfg, memory))),
        mem_(makeMemory(memory, cfg.memory_params)) {
    // The owner's re-encoding in two-phase codecs loses information too; under error feedback
    // it keeps its own residual (the "server" error of 1-bit Adam / 1-bit SGD).
    if (codec_->combine() == Combine::two_phase && (memory == "residual" || memory == "dgc"))
      server_ = makeMemory("residual", cfg.memory_params);
  }

  std::string name() const override { return label_; }

  void reduce(comm::Communicator& comm, BucketView& b) override {
    const int64_t step = steps_[b.index]++;
    split(b);
    const auto t0 = Clock::now();
    pack(b);
    double codec_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!raw_.empty()) comm.allreduce(raw_.data(), raw_.size(), comm::DType::f32, comm::ReduceOp::avg);
    size_t payload = 0;
    if (!comp_.empty()) {
      const auto c0 = Clock::now();
      mem_->compensate(b.index, comp_.data(), comp_.size());
      codec_s += std::chrono::duration<double>(Clock::now() - c0).count();
      EncodeCtx ctx{cfg_.seed, step, b.index, 0, comm.rank(), comm.size()};
      const auto p0 = Clock::now();
      scratch_.comm_s = 0;
      payload = run(comm, ctx, b.index);
      codec_s += std::chrono::duration<double>(Clock::now() - p0).count() - scratch_.comm_s;
    }
    const auto u0 = Clock::now();
    unpack(b);
    codec_s += std::chrono::duration<double>(Clock::now() - u0).count();
    stats_.raw_bytes += static_cast<int64_t>(4 * b.numel);
    stats_.payload_bytes += static_cast<int64_t>(payload + 4 * raw_.size());
    stats_.buckets += 1;
    stats_.codec_s += codec_s;
  }

  void save(StateMap& s) const override {
    std::vector<int64_t> steps;
    for (const auto& [k, v] : steps_) {
      steps.push_back(k);
      steps.push_back(v);
    }
    putState(s, "steps", steps);
    mem_->save(s, "mem.");
    if (server_) server_->save(s, "server.");
  }

  void load(const StateMap& s) override {
    std::vector<int64_t> steps;
    steps_.clear();
    if (getState(s, "steps", steps)) {
      if (steps.size() % 2) throw DataError("compressor state 'steps' has an odd number of values");
      for (size_t i = 0; i < steps.size(); i += 2) steps_[static_cast<int>(steps[i])] = steps[i + 1];
    }
    mem_->load(s, "mem.");
    if (server_) server_->load(s, "server.");
  }

 private:
  static CodecParams params(const CompressConfig& cfg, const std::string& memory) {
    CodecParams p = cfg.codec_params;
    p.unbiased = memory == "none";  // random-k: scaling by n/k under error feedback only adds variance
    return p;
  }

  size_t run(comm::Communicator& comm, EncodeCtx ctx, int key) {
    float* x = comp_.data();
    const size_t n = comp_.size();
    switch (codec_->combine()) {
      case Combine::allreduce: return reduceSummable(comm, *codec_, x, n, ctx, mem_.get(), key, scratch_);
      case Combine::two_phase:
        return reduceTwoPhase(comm, *codec_, x, n, ctx, mem_.get(), server_.get(), key, scratch_);
      case Combine::allgather: return reduceGather(comm, *codec_, x, n, ctx, mem_.get(), key, scratch_);
    }
    return 0;
  }

  void split(const BucketView& b) {
    comp_segs_.clear();
    raw_segs_.clear();
    size_t nc = 0, nr = 0;
    for (size_t i = 0; i < b.segments.size(); ++i) {
      if (compressible(cfg_, b.segments[i])) {
        comp_segs_.push_back(i);
        nc += b.segments[i].numel;
      } else {
        raw_segs_.push_back(i);
        nr += b.segments[i].numel;
      }
    }
    comp_.resize(nc);
    raw_.resize(nr);
  }

  void pack(const BucketView& b) {
    size_t o = 0;
    for (size_t i : comp_segs_) {
      const auto& s = b.segments[i];
      std::copy(b.data + s.offset, b.data + s.offset + s.numel, comp_.data() + o);
      o += s.numel;
    }
    o = 0;
    for (size_t i : raw_segs_) {
      const auto& s = b.segments[i];
      std::copy(b.data + s.offset, b.data + s.offset + s.numel, raw_.data() + o);
      o += s.numel;
    }
  }

  void unpack(BucketView& b) const {
    size_t o = 0;
    for (size_t i : comp_segs_) {
      const auto& s = b.segments[i];
      std::copy(comp_.data() + o, comp_.data() + o + s.numel, b.data + s.offset);
      o += s.numel;
    }
    o = 0;
    for (size_t i : raw_segs_) {
      const auto& s = b.segments[i];
      std::copy(raw_.data() + o, raw_.data() + o + s.numel, b.data + s.offset);
      o += s.numel;
    }
  }

  CompressConfig cfg_;
  std::string label_;
  std::unique_ptr<Codec> codec_;
  std::unique_ptr<Memory> mem_, server_;
  std::map<int, int64_t> steps_;
  std::vector<size_t> comp_segs_, raw_segs_;
  std::vector<float> comp_, raw_;
  PathScratch scratch_;
};

// Plain f32 allreduce-average: the uncompressed baseline (and the auto policy's "raw" choice).
class RawCompressor : public Compressor {
 public:
  std::string name() const override { return "none"; }
  void reduce(comm::Communicator& comm, BucketView& b) override {
    comm.allreduce(b.data, b.numel, comm::DType::f32, comm::ReduceOp::avg);
    stats_.raw_bytes += static_cast<int64_t>(4 * b.numel);
    stats_.payload_bytes += static_cast<int64_t>(4 * b.numel);
    stats_.buckets += 1;
  }
};

}  // namespace

std::unique_ptr<Compressor> makeCodecCompressor(const CompressConfig& cfg, const std::string& codec,
                                                const std::string& memory) {
  if (codec == "none") return std::make_unique<RawCompressor>();
  return std::make_unique<CodecCompressor>(cfg, codec, memory);
}

}  // namespace lowcomm::compress
