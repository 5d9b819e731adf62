// Magnitude selection on plain float buffers (exact top-k, sampled DGC top-k, "at least a
// magnitude" scans) and the sparse payload format, shared by the sparse codecs (topk, dgc_topk,
// threshold, randomk) and `lowcomm bench compress`.
//
// Order used everywhere: the magnitude key of a value is its IEEE-754 bit pattern with the sign
// cleared (magnitudeKey). For non-negative floats the bit pattern is monotonic in the value, so
// key order is |x| order; -0 and +0 are equal; ±inf is above every finite value and every NaN is
// above ±inf (NaNs among themselves by payload bits). A NaN is therefore always selected first:
// a sparse codec never hides a NaN gradient (its decoder then rejects the payload on every rank).
// Equal keys are broken by lower index. Results are index lists in strictly increasing order,
// so a payload built from them is a deterministic function of the input.
//
// Indices are uint32_t: n must be < 2^32 (lowcomm::Error otherwise). Functions are thread-safe
// (no shared state) and allocate their own scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lowcomm::compress {

inline uint32_t magnitudeKey(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u & 0x7fffffffu;
}

// Exact top-k by magnitude: writes to idx_out (capacity >= min(k, n)) the increasing indices of
// the min(k, n) values of largest magnitude key, ties by lower index; returns min(k, n).
// Cost for n >= 2^18: a 2^16-value sample, one streaming pass and an nth_element over ~1.2k
// gathered candidates (25M values, k = 1%: ~23 ms on one core, torch::topk(abs(x)) takes ~0.8 s).
// When the sample misjudges, and for smaller n, a radix select on the key decides: one histogram
// pass plus one gather pass, up to four passes for huge runs of equal magnitudes. The result is
// exact on both paths; only the cost depends on the distribution.
size_t selectTopK(const float* x, size_t n, size_t k, uint32_t* idx_out);

// Indices i (increasing) with magnitudeKey(x[i]) >= min_key. Writes at most cap indices and
// returns their count; if more than cap qualify it stops early and returns cap + 1 (idx_out then
// holds cap valid entries). `min_key` above 0x7fffffff selects nothing. Keep |x| > t (finite
// t >= 0) with min_key = magnitudeKey(t) + 1.
size_t selectAtLeast(const float* x, size_t n, uint32_t min_key, uint32_t* idx_out, size_t cap);

// Approximate top-k (Deep Gradient Compression). The threshold is the key of rank round(k·s/n)
// in a sample of s = max(ceil(sample_ratio·n), min(n, 1024)) keys drawn with replacement by a
// counter RNG keyed by `seed` (so the result is a function of x, k, sample_ratio and seed); every
// value with a key >= threshold is kept. When that keeps more than 1.3k (the sample
// underestimated), the kept set is tightened to its exact top k; when it keeps fewer than
// ceil(k/2), or more than min(n, 2k) (ties at the threshold), selectTopK decides instead. So for
// k' = min(k, n) the returned count c is k', or ceil(k'/2) <= c <= k' + floor(3k'/10); every kept
// magnitude is >= every dropped one. idx_out needs capacity approxTopKCapacity(n, k) (scratch for
// the kept set before tightening). sample_ratio must be in (0, 1] (lowcomm::Error otherwise).
size_t selectTopKApprox(const float* x, size_t n, size_t k, double sample_ratio, uint64_t seed, uint32_t* idx_out);
inline size_t approxTopKCapacity(size_t n, size_t k) { return 2 * k < n ? 2 * k : n; }

// Counter-based RNG (splitmix64 finaliser): a pure function of (key, counter), so ranks that
// share a key draw the same stream with no state to carry across steps.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t counterRandom(uint64_t key, uint64_t counter) {
  return mix64(key + (counter + 1) * 0x9e3779b97f4a7c15ull);
}
// Uniform in [0, m) by multiply-shift; the bias (< m / 2^64) is negligible for m < 2^32.
inline uint64_t uniformBelow(uint64_t r, uint64_t m) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * m) >> 64);
}

// Values kept for a fraction: 0 for n = 0, else max(1, ceil(ratio·n)) capped at n, where a
// product within 1e-9 (relative) of an integer counts as that integer (0.07·100 keeps 7, not 8).
size_t keepCount(double ratio, size_t n);

// Sparse payload of topk, dgc_topk and threshold (little-endian, 8 + 8·c bytes):
//   u8 tag (per codec), u8 0, u16 0, u32 c, u32 index[c] strictly increasing and < n,
//   f32 value[c] finite.
// writeSparsePayload stores x[idx[j]] for the c given indices and returns the payload size.
// decodeSparsePayload validates the whole payload before it touches out (on DataError, out is
// unchanged): tag and reserved bytes, c <= n, size exactly 8 + 8·c, every index < n and greater
// than the previous one, every value finite. Then out[index] = scale·value (zeros elsewhere), or
// with accumulate out[index] += scale·value.
constexpr size_t kSparseHeaderBytes = 8;
inline size_t sparsePayloadBytes(size_t count) { return kSparseHeaderBytes + 8 * count; }
size_t writeSparsePayload(uint8_t tag, const float* x, const uint32_t* idx, size_t count, uint8_t* out);
void decodeSparsePayload(const char* codec, uint8_t tag, const uint8_t* payload, size_t bytes, size_t n, float* out,
                         float scale, bool accumulate);

}  // namespace lowcomm::compress
