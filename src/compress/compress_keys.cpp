// The [compress] section's keys: the compressor's, the codecs' parameters and the memories'.
#include <algorithm>

#include "lowcomm/compress/compressor.h"

namespace lowcomm::compress {

namespace {
constexpr int64_t kIntMax = 2147483647;

// The candidates `auto` may choose: every compressor but itself and the plain allreduce.
std::vector<std::string> autoCandidateNames() {
  auto names = compressorNames();
  names.erase(std::remove_if(names.begin(), names.end(), [](const std::string& n) { return n == "auto" || n == "none"; }),
              names.end());
  return names;
}
}  // namespace

std::vector<std::string> memoryNames() { return {"default", "none", "residual", "dgc", "momentum"}; }

schema::Section<CompressConfig> compressSection() {
  using O = CompressConfig;
  using schema::Range;
  schema::Section<O> s("compress", "gradient compression of the data-parallel strategy (docs/compression.md)");
  s.choice("codec", &O::codec, compressorNames(), "the codec; none = plain allreduce")
      .choice("memory", &O::memory, memoryNames(), "error feedback; default = the codec's usual one")
      .flag("skip_1d", &O::skip_1d, "1-D tensors (biases, norms) go uncompressed")
      .integer("min_numel", &O::min_numel, 0, kIntMax, "tensors smaller than this go uncompressed")
      .list("exclude", &O::exclude, {}, "parameter-name prefixes kept uncompressed")
      .integer("rank", &O::rank, 1, 1 << 16, "powersgd: the rank of the factors")
      .integer("start_step", &O::start_step, 0, kIntMax, "powersgd: plain allreduce for the first N steps of each bucket")
      .number("min_compression", &O::min_compression, Range::atLeast(1),
              "powersgd: matrices compressing less than this go uncompressed")
      .flag("warm_start", &O::warm_start, "powersgd: reuse the previous step's Q")
      .list("auto_candidates", &O::auto_candidates, autoCandidateNames(), "auto: the codecs tried against raw allreduce")
      .integer("auto_trial_steps", &O::auto_trial_steps, 1, 1 << 20, "auto: timed steps per candidate and bucket")
      .integer("auto_recheck_every", &O::auto_recheck_every, 0, kIntMax,
               "auto: re-run the trials every N steps of a bucket (0 = never)");
  return s;
}

schema::Section<CodecParams> codecParamsSection() {
  using O = CodecParams;
  using schema::Range;
  schema::Section<O> s("compress");
  s.number("ratio", &O::ratio, Range::openClosed(0, 1), "topk, randomk, dgc, sparseloco, demo: fraction of values kept (per chunk for the last two)")
      .integer("levels", &O::levels, 1, 127, "qsgd: quantisation levels")
      .number("threshold", &O::threshold, Range::above(0), "threshold: keep |x| > threshold")
      .integer("block", &O::block, 8, 1 << 30, "int8, qsgd, terngrad: values per scale")
      .number("sample_ratio", &O::sample_ratio, Range::openClosed(0, 1),
              "dgc: fraction sampled to estimate the top-k threshold")
      .integer("chunk", &O::chunk, 0, 1 << 24,
               "sparseloco, demo: values per chunk, each keeping ratio of its values (0 = sparseloco 4096, demo 64)");
  return s;
}

schema::Section<MemoryParams> memoryParamsSection() {
  using O = MemoryParams;
  using schema::Range;
  schema::Section<O> s("compress");
  s.number("momentum", &O::momentum, Range::halfOpen(0, 1), "dgc, momentum memories: the momentum")
      .number("clip", &O::clip, Range::atLeast(0), "dgc: local gradient L2 clip per bucket; 0 = off")
      .number("decay", &O::decay, Range::openClosed(0, 1),
              "residual memory: the residual decays by this before each use (SparseLoCo's beta)");
  return s;
}

}  // namespace lowcomm::compress
