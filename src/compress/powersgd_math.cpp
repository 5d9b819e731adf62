#include "powersgd_math.h"

#include <algorithm>
#include <cmath>

namespace lowcomm::compress::powersgd {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t mixSeed(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  return splitmix64(h);
}

void drawNormal(float* out, size_t count, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < count; ++i) {
    double acc = 0;
    for (int k = 0; k < 12; ++k) acc += double(splitmix64(s) >> 11) * 0x1.0p-53;
    out[i] = float(acc - 6.0);
  }
}

void orthonormalise(float* p, int64_t m, int64_t r, std::vector<double>& ws) {
  ws.resize(size_t(m * r));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < r; ++j) ws[size_t(j * m + i)] = p[i * r + j];
  std::vector<bool> zero(size_t(r), false);
  auto dot = [m](const double* a, const double* b) {
    double d = 0;
    for (int64_t i = 0; i < m; ++i) d += a[i] * b[i];
    return d;
  };
  for (int64_t j = 0; j < r; ++j) {
    double* c = ws.data() + j * m;
    const double orig = std::sqrt(dot(c, c));
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        if (zero[size_t(k)]) continue;
        const double* qk = ws.data() + k * m;
        const double d = dot(c, qk);
        for (int64_t i = 0; i < m; ++i) c[i] -= d * qk[i];
      }
    const double norm = std::sqrt(dot(c, c));
    if (!(norm > 1e-12 * orig) || !std::isfinite(norm)) {
      zero[size_t(j)] = true;
      std::fill(c, c + m, 0.0);
    } else {
      for (int64_t i = 0; i < m; ++i) c[i] /= norm;
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < r; ++j) p[i * r + j] = float(ws[size_t(j * m + i)]);
}

}  // namespace lowcomm::compress::powersgd
