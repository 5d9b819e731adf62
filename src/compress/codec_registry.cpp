#include <functional>
#include <map>

#include "codecs.h"
#include "lowcomm/base/error.h"

namespace lowcomm::compress {
namespace {

using Factory = std::function<std::unique_ptr<Codec>(const CodecParams&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"fp16", [](const CodecParams&) { return makeFp16Codec(); }},
      {"bf16", [](const CodecParams&) { return makeBf16Codec(); }},
      {"int8", makeInt8Codec},
      {"qsgd", makeQsgdCodec},
      {"terngrad", makeTernGradCodec},
      {"sign", [](const CodecParams&) { return makeSignCodec(); }},
      {"scaled_sign", [](const CodecParams&) { return makeScaledSignCodec(); }},
      {"onebit", [](const CodecParams&) { return makeOneBitCodec(); }},
      {"topk", makeTopKCodec},
      {"randomk", makeRandomKCodec},
      {"threshold", makeThresholdCodec},
      {"dgc_topk", makeDgcTopKCodec},
      {"sparseloco", makeSparseLoCoCodec},
      {"demo", makeDemoCodec},
  };
  return r;
}

}  // namespace

std::unique_ptr<Codec> makeCodec(const std::string& name, const CodecParams& params) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : codecNames()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("unknown codec '" + name + "' (known: " + known + ")");
  }
  return it->second(params);
}

std::vector<std::string> codecNames() {
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

}  // namespace lowcomm::compress
