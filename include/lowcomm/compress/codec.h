// Gradient codecs: turn n float values into a payload and back.
//
// Contract:
// - A codec is stateless between calls (state that outlives a step, such as error-feedback
//   residuals or momentum, lives in a Memory; PowerSGD is a Compressor of its own). Randomness
//   comes from EncodeCtx only, so a run is reproducible and resumes exactly.
// - combine() says how payloads of several ranks meet:
//     allreduce  the payload is a dense array of wireType() values that may be summed element-
//                wise; the bucket goes through one allreduce of the payload (fp16, bf16, randomk
//                with a shared seed). The payload never carries a header.
//     two_phase  fixed-size payload per element range (maxBytes(n) is exact), elementwise
//                meaning: ranks exchange encoded chunks (alltoall), each chunk owner decodes and
//                sums them, re-encodes the sum and allgathers it (int8, qsgd, terngrad, signs).
//     allgather  variable-size payload (sparse codecs); every rank decodes every payload.
// - decode() never trusts its input: a wrong size, an index out of range, a non-finite scale
//   or an unknown header is a DataError naming the codec; it never reads or writes out of bounds.
// - decode() writes (or with `accumulate` adds) scale × decoded value into out[0..n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/comm/dtype.h"

namespace lowcomm::compress {

// Everything an encode/decode may depend on besides the values. Ranks that must agree (shared
// random-k indices) use seed/step/bucket/chunk only; stochastic rounding also mixes in rank.
struct EncodeCtx {
  uint64_t seed = 0;
  int64_t step = 0;
  int bucket = 0;
  int chunk = 0;   // two_phase: which element range; phase 2 uses chunk + world
  int rank = 0;
  int world = 1;
};

enum class Combine { allreduce, two_phase, allgather };

struct CodecParams {
  double ratio = 0.01;        // topk, randomk, dgc: fraction of values kept
  int64_t levels = 16;        // qsgd: quantisation levels s (1..127)
  double threshold = 1e-3;    // threshold: keep |x| > threshold
  int64_t block = 256;        // int8, qsgd, terngrad: values per scale
  double sample_ratio = 0.01; // dgc: fraction sampled to estimate the top-k threshold
  bool unbiased = true;       // randomk: scale kept values by n/k (off under error feedback)
  int64_t chunk = 0;          // sparseloco, demo: values per chunk (top-k per chunk); 0 = the codec's
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string name() const = 0;
  virtual Combine combine() const = 0;
  // allreduce codecs: element type of the payload (summed by the communicator).
  virtual comm::DType wireType() const { return comm::DType::u8; }
  // Bytes of the payload for n values: an upper bound, exact for two_phase codecs.
  virtual size_t maxBytes(size_t n) const = 0;
  // two_phase: chunk boundaries are multiples of this many values (bit packing, blocks).
  virtual size_t alignment() const { return 1; }
  // Encodes x[0..n) into out (capacity maxBytes(n)); returns the payload size in bytes.
  virtual size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const = 0;
  virtual void decode(const uint8_t* payload, size_t bytes, size_t n, float* out, float scale, bool accumulate,
                      const EncodeCtx& ctx) const = 0;
};

// Codec by name: fp16 bf16 int8 qsgd terngrad sign scaled_sign onebit topk randomk threshold
// dgc_topk sparseloco. ConfigError for an unknown name or a parameter out of range.
std::unique_ptr<Codec> makeCodec(const std::string& name, const CodecParams& params);
std::vector<std::string> codecNames();

}  // namespace lowcomm::compress
