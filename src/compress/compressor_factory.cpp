#include <map>

#include "compressors.h"
#include "lowcomm/base/error.h"

namespace lowcomm::compress {
namespace {

struct Entry {
  std::string codec;   // codec kernel (codec.h registry); empty for compressors of their own
  std::string memory;  // default memory
};

// Config name → codec kernel and default memory. signum is sign with a momentum memory, DGC is
// a sampled-threshold top-k with momentum correction, EF-signSGD and 1-bit SGD carry residuals.
const std::map<std::string, Entry>& table() {
  static const std::map<std::string, Entry> t = {
      {"none", {"none", "none"}},          {"fp16", {"fp16", "none"}},
      {"bf16", {"bf16", "none"}},          {"int8", {"int8", "none"}},
      {"qsgd", {"qsgd", "none"}},          {"terngrad", {"terngrad", "none"}},
      {"signsgd", {"sign", "none"}},       {"signum", {"sign", "momentum"}},
      {"efsignsgd", {"scaled_sign", "residual"}}, {"onebit", {"onebit", "residual"}},
      {"topk", {"topk", "residual"}},      {"randomk", {"randomk", "residual"}},
      {"threshold", {"threshold", "residual"}}, {"dgc", {"dgc_topk", "dgc"}},
      {"sparseloco", {"sparseloco", "residual"}}, {"demo", {"demo", "residual"}},
      {"powersgd", {"", "residual"}},      {"auto", {"", "default"}},
  };
  return t;
}

}  // namespace

std::vector<std::string> compressorNames() {
  std::vector<std::string> names;
  for (const auto& [n, e] : table()) names.push_back(n);
  return names;
}

std::string defaultMemory(const std::string& codec) {
  auto it = table().find(codec);
  return it == table().end() ? "none" : it->second.memory;
}

std::unique_ptr<Compressor> makeCompressor(const CompressConfig& cfg) {
  auto it = table().find(cfg.codec);
  if (it == table().end()) {
    std::string known;
    for (const auto& n : compressorNames()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("unknown compress.codec '" + cfg.codec + "' (known: " + known + ")");
  }
  if (cfg.min_numel < 0) throw ConfigError("compress.min_numel must be >= 0");
  if (cfg.codec == "auto") return makeAutoCompressor(cfg);
  if (cfg.codec == "powersgd") {
    if (cfg.memory != "default" && cfg.memory != "residual")
      throw ConfigError("compress.memory = '" + cfg.memory + "' is not supported by powersgd (it always uses residual)");
    return makePowerSgdCompressor(cfg);
  }
  const std::string memory = cfg.memory == "default" ? it->second.memory : cfg.memory;
  return makeCodecCompressor(cfg, it->second.codec, memory);
}

}  // namespace lowcomm::compress
