// The drivers of the stochastic quantisers (private to lowcomm_codec): per block its scale, then
// the kernel. Payload layouts, the RNG and the error contracts are described in codec_quant.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowcomm/compress/codec.h"

namespace lowcomm::compress {

constexpr size_t blockCount(size_t n, size_t block) { return (n + block - 1) / block; }

// qsgd with s levels (Nibble: s <= 7, two levels per byte): writes 4·nb + the packed levels.
// DataError on non-finite input.
template <bool Nibble>
void qsgdEncode(const float* x, size_t n, size_t block, int32_t s, const EncodeCtx& ctx, uint8_t* out);

// Decodes (Acc: adds to out) the blocks of a qsgd payload whose size and scales were checked;
// returns nonzero if a level is outside [-s, s].
template <bool Nibble, bool Acc>
uint32_t qsgdDecodeBlocks(const uint8_t* p, size_t n, size_t block, int32_t s, float scale, float* out);

// terngrad: writes 4·nb + two bit planes. DataError on non-finite input.
void ternEncode(const float* x, size_t n, size_t block, const EncodeCtx& ctx, uint8_t* out);

// Decodes (Acc: adds to out) a terngrad payload whose size, scales and planes were checked.
template <bool Acc>
void ternDecodeBlocks(const uint8_t* p, size_t n, size_t block, float scale, float* out);

}  // namespace lowcomm::compress
