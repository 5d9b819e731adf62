// Top-k selection on the 31-bit magnitude key (see topk_select.h for the contracts).
//
// Large inputs first try a sampled lower threshold: one pass gathers the ~1.2k keys above it and
// nth_element picks the k largest (selectTopKSampled). When the sample misjudges (ties, few
// non-zeros, adversarial layouts), or for smaller inputs, a radix select decides instead:
// levels split the key into bits [20,31), [9,20) and [0,9); a level histograms the keys sharing
// the prefix chosen so far and picks the bin holding the k-th largest key. As soon as that bin is
// small (<= gather_cap) one pass gathers every index at or above it: the ones above are selected,
// the bin's own are resolved by nth_element on their keys. Only a huge bin (many equal or
// near-equal magnitudes) costs more full passes. Both paths are exact.
#include "topk_select.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

#include "lowcomm/base/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lowcomm::compress {
namespace {

void checkSize(size_t n) {
  LC_ENFORCE(n <= 0xffffffffull, "top-k selection indexes with uint32: ", n, " values are too many");
}

void iotaIndices(uint32_t* out, size_t n) { std::iota(out, out + n, uint32_t{0}); }

// Magnitude key of x[i] (memcpy: no aliasing of float storage through an integer pointer).
__attribute__((always_inline)) inline uint32_t keyAt(const float* x, size_t i) {
  uint32_t u;
  std::memcpy(&u, x + i, 4);
  return u & 0x7fffffffu;
}

// Portable body of scanAtLeast over [begin, n); false if hit stopped it.
template <typename Hit>
bool scanScalar(const float* x, size_t begin, size_t n, uint32_t lo, Hit& hit) {
  for (size_t i = begin; i < n; ++i) {
    const uint32_t key = keyAt(x, i);
    if (key >= lo && !hit(i, key)) return false;
  }
  return true;
}

// Smallest and largest key among the keys with key >> shift == prefix, in one branch-free,
// vectorisable pass (keys are < 2^31, so signed min/max order them). Used on non-empty ranges.
__attribute__((always_inline)) inline void keyRangeBody(const float* x, size_t n, uint32_t prefix, int shift,
                                                        uint32_t& lo, uint32_t& hi) {
  int32_t mn = INT32_MAX, mx = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = keyAt(x, i);
    const int32_t in = -static_cast<int32_t>((key >> shift) == prefix);  // all ones if in range
    mn = std::min(mn, static_cast<int32_t>(key) | (~in & INT32_MAX));
    mx = std::max(mx, static_cast<int32_t>(key) & in);
  }
  lo = static_cast<uint32_t>(mn);
  hi = static_cast<uint32_t>(mx);
}
void keyRangeGeneric(const float* x, size_t n, uint32_t prefix, int shift, uint32_t& lo, uint32_t& hi) {
  keyRangeBody(x, n, prefix, shift, lo, hi);
}

#if defined(__x86_64__)
template <typename Hit>
__attribute__((target("avx2"))) void scanAvx2(const float* x, size_t n, uint32_t lo, Hit& hit) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(lo) - 1);  // key > lo - 1, signed
  const auto* v = reinterpret_cast<const __m256i*>(x);
  size_t i = 0;
  for (; i + 32 <= n; i += 32, v += 4) {
    const __m256i a = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(v), abs_mask), below);
    const __m256i b = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(v + 1), abs_mask), below);
    const __m256i c = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(v + 2), abs_mask), below);
    const __m256i d = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(v + 3), abs_mask), below);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
    if (_mm256_testz_si256(any, any)) continue;
    uint32_t m = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(a))) |
                 static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(b))) << 8 |
                 static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c))) << 16 |
                 static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(d))) << 24;
    for (; m != 0; m &= m - 1) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(m));
      if (!hit(j, keyAt(x, j))) return;
    }
  }
  scanScalar(x, i, n, lo, hit);
}
__attribute__((target("avx2"))) void keyRangeAvx2(const float* x, size_t n, uint32_t prefix, int shift, uint32_t& lo,
                                                  uint32_t& hi) {
  keyRangeBody(x, n, prefix, shift, lo, hi);
}
bool haveAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#else
template <typename Hit>
void scanAvx2(const float* x, size_t n, uint32_t lo, Hit& hit) {
  scanScalar(x, 0, n, lo, hit);
}
void keyRangeAvx2(const float* x, size_t n, uint32_t prefix, int shift, uint32_t& lo, uint32_t& hi) {
  keyRangeGeneric(x, n, prefix, shift, lo, hi);
}
bool haveAvx2() { return false; }
#endif

void keyRange(const float* x, size_t n, uint32_t prefix, int shift, uint32_t& lo, uint32_t& hi) {
  if (haveAvx2())
    keyRangeAvx2(x, n, prefix, shift, lo, hi);
  else
    keyRangeGeneric(x, n, prefix, shift, lo, hi);
}

// scanAtLeast(x, n, lo, hit) calls hit(i, key) for every i (increasing) with key(x[i]) >= lo
// until hit returns false. Requires lo <= 0x7fffffff. Hits are sparse in every use (top-k
// candidates), so the AVX2 kernel screens 32 values per compare-and-test and only walks the set
// bits of blocks that have a hit: the pass runs near memory bandwidth.
template <typename Hit>
void scanAtLeast(const float* x, size_t n, uint32_t lo, Hit&& hit) {
  if (haveAvx2())
    scanAvx2(x, n, lo, hit);
  else
    scanScalar(x, 0, n, lo, hit);
}

// Histograms count into kSub interleaved sub-histograms: consecutive values often share a bin
// (gradients concentrate in a few, equal values in one), and a single counter would serialise
// every increment on store-to-load forwarding. The sub-histogram stride is padded off a multiple
// of 4 KiB so their counters do not alias in the load/store disambiguation.
constexpr size_t kSub = 8;
constexpr size_t kTopBins = 2048;

template <typename Bin>
void histogramInterleaved(size_t n, uint32_t bins, Bin bin, uint32_t* hist) {
  const size_t stride = bins + 16;  // one spare bin (index `bins`) for keys outside the prefix
  std::unique_ptr<uint32_t[]> h(new uint32_t[kSub * stride]());
  size_t i = 0;
  for (; i + kSub <= n; i += kSub)
    for (size_t s = 0; s < kSub; ++s) ++h[s * stride + bin(i + s)];
  for (; i < n; ++i) ++h[bin(i)];
  for (uint32_t b = 0; b < bins; ++b) {
    uint32_t t = 0;
    for (size_t s = 0; s < kSub; ++s) t += h[s * stride + b];
    hist[b] = t;
  }
}

// Histogram of key >> 20 over all of x.
void histogramTop(const float* x, size_t n, uint32_t* hist) {
  histogramInterleaved(n, kTopBins, [x](size_t i) { return keyAt(x, i) >> 20; }, hist);
}

// Histogram of (key >> shift) & (bins - 1) over the keys whose key >> (shift + width) == prefix
// (branch-free: the others count into the spare bin).
void histogramWithin(const float* x, size_t n, uint32_t prefix, int shift, int width, uint32_t* hist) {
  const uint32_t bins = 1u << width;
  histogramInterleaved(n, bins, [=](size_t i) {
    const uint32_t key = keyAt(x, i);
    return (key >> (shift + width)) == prefix ? (key >> shift) & (bins - 1) : bins;
  }, hist);
}

// Final pass once the k-th largest key T is known: keys > T, plus the first `ties` keys == T;
// stops as soon as all k are found.
size_t selectWithTies(const float* x, size_t n, uint32_t t, size_t ties, size_t k, uint32_t* out) {
  size_t a = 0;
  scanAtLeast(x, n, t, [&](size_t i, uint32_t key) {
    if (key > t || ties > 0) {
      if (key == t) --ties;
      out[a++] = static_cast<uint32_t>(i);
    }
    return a < k;
  });
  return a;
}

// Keeps in place, in order, the `need` entries of cand[0..m) of largest key (keys[j] is the key
// of cand[j]; cand is increasing, so keeping the first of equal keys breaks ties by index).
void keepLargest(uint32_t* cand, const uint32_t* keys, size_t m, size_t need) {
  std::unique_ptr<uint32_t[]> order(new uint32_t[m]);
  std::copy(keys, keys + m, order.get());
  std::nth_element(order.get(), order.get() + (need - 1), order.get() + m, std::greater<uint32_t>());
  const uint32_t t = order[need - 1];
  size_t above = 0;
  for (size_t j = 0; j < m; ++j) above += keys[j] > t;
  size_t ties = need - above;
  size_t w = 0;
  for (size_t j = 0; j < m; ++j) {
    if (keys[j] > t || (keys[j] == t && ties > 0)) {
      if (keys[j] == t) --ties;
      cand[w++] = cand[j];
    }
  }
}

// Finishes a radix selection whose bin is small: every key with key >> shift > prefix is
// selected (`sure` of them); `need` more come from the `bin` keys with key >> shift == prefix.
size_t gatherAndFinish(const float* x, size_t n, uint32_t prefix, int shift, size_t sure, size_t need, size_t bin,
                       uint32_t* out) {
  std::unique_ptr<uint32_t[]> cand(new uint32_t[bin]);
  std::unique_ptr<uint32_t[]> keys(new uint32_t[bin]);
  size_t a = 0, c = 0;
  scanAtLeast(x, n, prefix << shift, [&](size_t i, uint32_t key) {
    if ((key >> shift) > prefix) {
      if (a == sure) return false;  // only if x changed under us; keeps writes in bounds
      out[a++] = static_cast<uint32_t>(i);
    } else {
      if (c == bin) return false;
      keys[c] = key;
      cand[c++] = static_cast<uint32_t>(i);
    }
    return true;
  });
  LC_ENFORCE(a == sure && c == bin, "top-k: input changed during selection");
  keepLargest(cand.get(), keys.get(), bin, need);
  // Merge the two increasing lists from the back so out[0..a) is never overwritten unread.
  size_t w = a + need, i = a, j = need;
  while (j > 0) {
    if (i > 0 && out[i - 1] > cand[j - 1])
      out[--w] = out[--i];
    else
      out[--w] = cand[--j];
  }
  return a + need;
}

// Fast path of selectTopK for large n: a lower threshold L from a random sample (the sample rank
// 4 standard deviations above the expected rank of the k-th largest), one pass gathering every
// key >= L, exact selection among those. Whatever L is, if at least k keys are >= L the k largest
// are among them, so the result is exact; a misestimate (fewer than k, or more than the buffer
// holds: many ties, adversarial layouts) only returns false and the caller takes the radix path.
constexpr size_t kSample = 1 << 16;
constexpr size_t kSmall = 2048;
bool selectTopKSampled(const float* x, size_t n, size_t k, size_t gather_cap, uint32_t* out) {
  std::unique_ptr<uint32_t[]> sample(new uint32_t[kSample]);
  for (size_t j = 0; j < kSample; ++j) sample[j] = keyAt(x, uniformBelow(counterRandom(0x746f706bull, j), n));
  const double p = static_cast<double>(k) / static_cast<double>(n);
  const double mean = kSample * p;
  const auto rank = static_cast<size_t>(std::ceil(mean + 4 * std::sqrt(mean * (1 - p)))) + 1;
  const size_t expected = static_cast<size_t>(static_cast<double>(n) * rank / kSample);
  const size_t cap = std::min(gather_cap, 2 * expected + 4096);
  if (rank > kSample || expected > cap) return false;
  std::nth_element(sample.get(), sample.get() + (rank - 1), sample.get() + kSample, std::greater<uint32_t>());
  const uint32_t lower = sample[rank - 1];

  std::unique_ptr<uint32_t[]> cand(new uint32_t[cap]);
  std::unique_ptr<uint32_t[]> keys(new uint32_t[cap]);
  size_t m = 0;
  bool over = false;
  scanAtLeast(x, n, lower, [&](size_t i, uint32_t key) {
    if (m == cap) {
      over = true;
      return false;
    }
    keys[m] = key;
    cand[m++] = static_cast<uint32_t>(i);
    return true;
  });
  if (over || m < k) return false;
  keepLargest(cand.get(), keys.get(), m, k);
  std::copy(cand.get(), cand.get() + k, out);
  return true;
}

}  // namespace

size_t selectAtLeast(const float* x, size_t n, uint32_t min_key, uint32_t* idx_out, size_t cap) {
  checkSize(n);
  if (min_key > 0x7fffffffu) return 0;
  size_t c = 0;
  bool over = false;
  scanAtLeast(x, n, min_key, [&](size_t i, uint32_t) {
    if (c == cap) {
      over = true;
      return false;
    }
    idx_out[c++] = static_cast<uint32_t>(i);
    return true;
  });
  return over ? cap + 1 : c;
}

size_t selectTopK(const float* x, size_t n, size_t k, uint32_t* idx_out) {
  checkSize(n);
  if (k == 0 || n == 0) return 0;
  if (k >= n) {
    iotaIndices(idx_out, n);
    return n;
  }
  if (n <= kSmall) {  // below this, histogram set-up costs more than nth_element on all keys
    std::unique_ptr<uint32_t[]> cand(new uint32_t[2 * n]);
    uint32_t* keys = cand.get() + n;
    for (size_t i = 0; i < n; ++i) {
      cand[i] = static_cast<uint32_t>(i);
      keys[i] = keyAt(x, i);
    }
    keepLargest(cand.get(), keys, n, k);
    std::copy(cand.get(), cand.get() + k, idx_out);
    return k;
  }
  const size_t gather_cap = std::max<size_t>(n / 16, 4096);
  if (n >= 4 * kSample && selectTopKSampled(x, n, k, gather_cap, idx_out)) return k;
  struct Level {
    int shift, width;
  };
  static constexpr Level kLevels[3] = {{20, 11}, {9, 11}, {0, 9}};
  uint32_t hist[kTopBins];
  uint32_t prefix = 0;
  size_t need = k;  // how many still to take at or below the current prefix
  for (int l = 0; l < 3; ++l) {
    const Level lv = kLevels[l];
    if (l == 0)
      histogramTop(x, n, hist);
    else
      histogramWithin(x, n, prefix, lv.shift, lv.width, hist);
    size_t above = 0;
    int b = (1 << lv.width) - 1;
    while (b > 0 && above + hist[b] < need) above += hist[b--];
    need -= above;
    prefix = (prefix << lv.width) | static_cast<uint32_t>(b);
    if (l == 2) break;
    if (hist[b] <= gather_cap) return gatherAndFinish(x, n, prefix, lv.shift, k - need, need, hist[b], idx_out);
    if (l == 0) {
      // A huge top-level bin is mostly ties (all equal, mostly zeros): one min/max pass over the
      // bin either proves every key in it equal, or that it fits one level-1 bin (skip that
      // histogram), before paying for more histograms.
      uint32_t lo, hi;
      keyRange(x, n, prefix, lv.shift, lo, hi);
      if (lo == hi) {
        prefix = lo;
        break;
      }
      if ((lo >> kLevels[1].shift) == (hi >> kLevels[1].shift)) {
        prefix = lo >> kLevels[1].shift;
        ++l;
      }
    }
  }
  const size_t got = selectWithTies(x, n, prefix, need, k, idx_out);
  LC_ENFORCE(got == k, "top-k: input changed during selection");
  return got;
}

size_t selectTopKApprox(const float* x, size_t n, size_t k, double sample_ratio, uint64_t seed, uint32_t* idx_out) {
  checkSize(n);
  LC_ENFORCE(sample_ratio > 0 && sample_ratio <= 1, "sample_ratio must be in (0, 1], got ", sample_ratio);
  if (k == 0 || n == 0) return 0;
  if (k >= n) {
    iotaIndices(idx_out, n);
    return n;
  }
  const size_t s = std::max(static_cast<size_t>(std::ceil(sample_ratio * static_cast<double>(n))),
                            std::min<size_t>(n, 1024));
  if (s >= n) return selectTopK(x, n, k, idx_out);  // sampling with replacement buys nothing

  std::unique_ptr<uint32_t[]> sample(new uint32_t[s]);
  for (size_t j = 0; j < s; ++j) sample[j] = magnitudeKey(x[uniformBelow(counterRandom(seed, j), n)]);
  const auto ks = std::clamp<size_t>(static_cast<size_t>(std::llround(static_cast<double>(k) * s / n)), 1, s);
  std::nth_element(sample.get(), sample.get() + (ks - 1), sample.get() + s, std::greater<uint32_t>());
  const uint32_t threshold = sample[ks - 1];

  const size_t cap = approxTopKCapacity(n, k);
  const size_t c = selectAtLeast(x, n, threshold, idx_out, cap);
  if (c > cap || c < (k + 1) / 2) return selectTopK(x, n, k, idx_out);
  if (c <= k + 3 * k / 10) return c;
  // Too many kept: the exact top k of the kept set is the exact top k of x (it contains them).
  std::unique_ptr<float[]> vals(new float[c]);
  std::unique_ptr<uint32_t[]> pos(new uint32_t[k]);
  for (size_t j = 0; j < c; ++j) vals[j] = x[idx_out[j]];
  selectTopK(vals.get(), c, k, pos.get());
  for (size_t j = 0; j < k; ++j) idx_out[j] = idx_out[pos[j]];  // pos[j] >= j: in place is safe
  return k;
}

size_t keepCount(double ratio, size_t n) {
  if (n == 0) return 0;
  const double r = ratio * static_cast<double>(n);
  const double near = std::round(r);
  const double k = std::abs(r - near) <= 1e-9 * std::max(1.0, r) ? near : std::ceil(r);
  return std::clamp<size_t>(static_cast<size_t>(std::max(k, 1.0)), 1, n);
}

}  // namespace lowcomm::compress
