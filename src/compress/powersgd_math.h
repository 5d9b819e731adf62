// PowerSGD's deterministic numerics (private to lowcomm_compress): the seeds and draws of the
// initial Q, and the orthonormalisation of P. Every rank computes the same bits from the same
// inputs, so the compressor needs no extra collective to keep the ranks' factors equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lowcomm::compress::powersgd {

// A seed derived from h and v (splitmix64 of their mix).
uint64_t mixSeed(uint64_t h, uint64_t v);

// Approximately standard normal values (Irwin-Hall: sum of 12 uniforms minus 6, mean 0, variance
// 1). Only exact integer and IEEE operations are used, so every rank on every host draws the
// same bits for the same seed (no libm transcendental functions involved).
void drawNormal(float* out, size_t count, uint64_t seed);

// Orthonormalises the r columns of the row-major m x r matrix p in place: modified Gram-Schmidt
// in double, two passes ("twice is enough"). A column that vanishes against the previous ones
// (norm <= 1e-12 of its original norm, zero or non-finite) becomes zero, like PyTorch's epsilon
// guard: P Q^T then simply has a lower rank. Deterministic given p (no threads, fixed order).
void orthonormalise(float* p, int64_t m, int64_t r, std::vector<double>& ws);

}  // namespace lowcomm::compress::powersgd
