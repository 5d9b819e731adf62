// Portable seeded randomness for the data layer (private).
//
// std::mt19937_64's output is fixed by the standard, but std::uniform_int_distribution is not,
// so bounded draws use rejection sampling here: shuffles and augmentations are then identical
// across runs, machines and standard libraries, which checkpoint/resume relies on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>

namespace lowcomm::data::detail {

// Stream tags so the sampler, augmentation and synthetic data never share a random stream.
enum : uint64_t { kTagSampler = 1, kTagAugment = 2, kTagSynthMeans = 3, kTagSynthSamples = 4 };

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Derives an independent seed from a base seed and a tuple (tag, epoch, rank, ...).
inline uint64_t mixSeed(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = splitmix64(seed);
  for (uint64_t p : parts) h = splitmix64(h ^ p);
  return h;
}

// Uniform in [0, n); n > 0. Unbiased by rejection.
inline uint64_t uniformBelow(std::mt19937_64& g, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = g();
  while (x >= limit);
  return x % n;
}

}  // namespace lowcomm::data::detail
