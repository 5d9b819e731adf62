// libFuzzer target for one codec's decoder (LC_FUZZ_CODEC names it at compile time).
//
// Input: u16 n (values, ≤ 4096), u8 mode, then a payload. Mode bit 0: decode the raw payload,
// which must either succeed or throw lowcomm::DataError (anything else, a crash or a sanitizer
// report, is a bug). Mode bit 1: read the rest as floats (non-finite ones zeroed), encode them
// and decode the result, which must succeed and stay finite.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compress/codecs.h"
#include "lowcomm/base/error.h"

#ifndef LC_FUZZ_CODEC
#error "compile with -DLC_FUZZ_CODEC=\"name\""
#endif

namespace {

const lowcomm::compress::Codec& codec() {
  static const auto c = [] {
    lowcomm::compress::CodecParams p;
    p.ratio = 0.05;
    p.block = 16;
    p.chunk = 64;  // sparseloco, demo: many chunks, a short last one
    return lowcomm::compress::makeCodec(LC_FUZZ_CODEC, p);
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  uint16_t n16;
  std::memcpy(&n16, data, 2);
  const size_t n = n16 % 4097;
  const uint8_t mode = data[2];
  const uint8_t* payload = data + 3;
  const size_t bytes = size - 3;
  lowcomm::compress::EncodeCtx ctx;
  ctx.step = mode >> 2;
  std::vector<float> out(n, 1.0f);
  if (mode & 1) {
    try {
      codec().decode(payload, bytes, n, out.data(), 0.5f, (mode & 2) != 0, ctx);
    } catch (const lowcomm::DataError&) {
    }
    return 0;
  }
  std::vector<float> x(bytes / 4);
  if (!x.empty()) std::memcpy(x.data(), payload, 4 * x.size());
  for (auto& v : x)
    if (!std::isfinite(v) || std::fabs(v) > 1e30f) v = 0.0f;
  std::vector<uint8_t> enc(codec().maxBytes(x.size()));
  const size_t len = codec().encode(x.data(), x.size(), enc.data(), ctx);
  if (len > enc.size()) __builtin_trap();
  std::vector<float> back(x.size());
  codec().decode(enc.data(), len, x.size(), back.data(), 1.0f, false, ctx);  // must not throw
  return 0;
}
