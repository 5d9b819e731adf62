// Compressors: what the data-parallel strategy runs on each gradient bucket (through
// parallel::CompressHook). A compressor = codec + memory (CodecCompressor), PowerSGD, or the
// `auto` policy choosing between raw allreduce and candidates per bucket.
//
// Contract:
// - reduce() is collective over `comm`: every rank calls it for the same buckets in the same
//   order with the same segment layout; on return b.data holds (an approximation of) the average
//   over the ranks, identical on every rank.
// - Segments that are 1-D (skip_1d), smaller than min_numel or whose name starts with a prefix in
//   `exclude` go uncompressed, through one f32 allreduce per bucket.
// - Per-bucket state (residuals, factors, step counters) is keyed by bucket index and saved with
//   save()/load(); a run resumed from a checkpoint continues bit-identically.
// - stats() counts, on this rank, raw bytes (4 per gradient value) against payload bytes (what the
//   codec produced for this rank, plus uncompressed segments) since construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/base/schema.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/compress/codec.h"
#include "lowcomm/compress/memory.h"
#include "lowcomm/compress/state.h"

namespace lowcomm::compress {

struct Segment {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in values from BucketView::data
  size_t numel = 0;
};

struct BucketView {
  int index = 0;
  float* data = nullptr;
  size_t numel = 0;
  std::vector<Segment> segments;  // cover data[0..numel) in order
};

struct CompressStats {
  int64_t raw_bytes = 0;
  int64_t payload_bytes = 0;
  int64_t buckets = 0;      // reduce() calls
  double codec_s = 0;       // encode + decode + memory time on this rank
  double ratio() const { return payload_bytes > 0 ? double(raw_bytes) / double(payload_bytes) : 1.0; }
};

struct CompressConfig {
  std::string codec = "none";     // none fp16 bf16 int8 qsgd terngrad signsgd signum efsignsgd onebit
                                  // topk randomk threshold dgc powersgd auto
  std::string memory = "default";  // default (per codec) | none | residual | dgc | momentum
  CodecParams codec_params;
  MemoryParams memory_params;
  uint64_t seed = 0;
  bool skip_1d = true;
  int64_t min_numel = 0;
  std::vector<std::string> exclude;  // segment-name prefixes kept uncompressed
  // powersgd
  int64_t rank = 4;
  int64_t start_step = 10;         // plain allreduce for the first N steps of each bucket
  double min_compression = 2.0;    // matrices compressing less than this go uncompressed
  bool warm_start = true;
  // auto
  std::vector<std::string> auto_candidates = {"bf16", "topk"};
  int64_t auto_trial_steps = 3;    // timed steps per candidate and bucket before deciding
  int64_t auto_recheck_every = 0;  // re-run the trials every N steps of a bucket (0 = never)
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;
  virtual void reduce(comm::Communicator& comm, BucketView& b) = 0;
  virtual CompressStats stats() const { return stats_; }
  virtual void save(StateMap& s) const {}
  virtual void load(const StateMap& s) {}
  // Human-readable decisions (the auto policy's per-bucket choice and its measurements).
  virtual std::vector<std::string> decisions() const { return {}; }

 protected:
  CompressStats stats_;
};

// The default memory name for a codec name ("residual" for topk, ...).
std::string defaultMemory(const std::string& codec);
// ConfigError naming `compress.<key>` for unknown names or values out of range.
std::unique_ptr<Compressor> makeCompressor(const CompressConfig& cfg);
std::vector<std::string> compressorNames();
// The [compress] config section's keys, declared once beside the codecs (src/compress/compress_keys.cpp):
// the compressor's own, the codecs' parameters and the memories'.
schema::Section<CompressConfig> compressSection();
schema::Section<CodecParams> codecParamsSection();
schema::Section<MemoryParams> memoryParamsSection();
// compress.memory's values: "default" (the codec's own choice) and every memory.
std::vector<std::string> memoryNames();

}  // namespace lowcomm::compress
