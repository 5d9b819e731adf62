// Factories of the compressors other than codec + memory, used by makeCompressor.
#pragma once

#include <memory>

#include "lowcomm/compress/compressor.h"

namespace lowcomm::compress {

// Codec + memory over the three combine paths (reduce_paths.h).
std::unique_ptr<Compressor> makeCodecCompressor(const CompressConfig& cfg, const std::string& codec,
                                                const std::string& memory);
// PowerSGD (Vogels et al. 2019) with error feedback, warm start and batched small tensors.
std::unique_ptr<Compressor> makePowerSgdCompressor(const CompressConfig& cfg);
// Per bucket: raw allreduce or the fastest candidate, by measured time (max over ranks).
std::unique_ptr<Compressor> makeAutoCompressor(const CompressConfig& cfg);

// Which segments of a bucket are compressed (the rest go through one f32 allreduce).
bool compressible(const CompressConfig& cfg, const Segment& s);

}  // namespace lowcomm::compress
