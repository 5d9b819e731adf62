// Factories of the built-in codecs (one file each, or one per family), used by the registry.
#pragma once

#include <memory>

#include "lowcomm/compress/codec.h"

namespace lowcomm::compress {

std::unique_ptr<Codec> makeFp16Codec();
std::unique_ptr<Codec> makeBf16Codec();
std::unique_ptr<Codec> makeInt8Codec(const CodecParams& p);
std::unique_ptr<Codec> makeQsgdCodec(const CodecParams& p);
std::unique_ptr<Codec> makeTernGradCodec(const CodecParams& p);
std::unique_ptr<Codec> makeSignCodec();         // ±1 per value (signSGD, majority vote in two phases)
std::unique_ptr<Codec> makeScaledSignCodec();   // mean|x| · sign(x) (EF-signSGD)
std::unique_ptr<Codec> makeOneBitCodec();       // sign bit + mean of positives / of negatives (1-bit SGD)
std::unique_ptr<Codec> makeTopKCodec(const CodecParams& p);      // exact top-k by magnitude
std::unique_ptr<Codec> makeRandomKCodec(const CodecParams& p);   // shared-seed indices: summable
std::unique_ptr<Codec> makeThresholdCodec(const CodecParams& p); // |x| > threshold
std::unique_ptr<Codec> makeDgcTopKCodec(const CodecParams& p);   // sampled threshold (approximate top-k)
std::unique_ptr<Codec> makeSparseLoCoCodec(const CodecParams& p); // chunked top-k, 2-bit values
std::unique_ptr<Codec> makeDemoCodec(const CodecParams& p);       // chunked DCT, top-k coefficients (DeMo)

}  // namespace lowcomm::compress
