// Error-feedback memories, composable with any codec.
//
// Contract: for each bucket (`key`) the compressor calls compensate() on the local gradient
// before encoding, then update() with the vector it encoded and `approx`, what the codec will
// deliver for it (the local decode of this rank's payload).
//   none      x unchanged.
//   residual  x ← g + decay·e;  e ← x − approx      (sent + residual == gradient + decayed residual;
//             decay < 1 is SparseLoCo's error feedback, e ← βe + Δ before compression)
//   dgc       momentum correction (Lin et al., DGC): u ← m·u + g; v ← v + u; x ← v;
//             then v ← x − approx and u is zeroed where a value was sent; optional local
//             gradient clipping (L2 norm of g per bucket ≤ clip).
//   momentum  signum: x ← m ← β·m + (1−β)·g, no error feedback.
// State is sized on first use per key and saved/restored through StateMap.
#pragma once

#include <memory>
#include <string>
#include <map>
#include <vector>

#include "lowcomm/compress/state.h"

namespace lowcomm::compress {

struct MemoryParams {
  double momentum = 0.9;  // dgc, momentum
  double clip = 0.0;      // dgc: local gradient L2 clip per bucket; 0 = off
  double decay = 1.0;     // residual: e decays by this before each use (1 = plain error feedback)
};

class Memory {
 public:
  virtual ~Memory() = default;
  virtual std::string name() const = 0;
  virtual void compensate(int key, float* x, size_t n) = 0;
  virtual void update(int key, const float* x, const float* approx, size_t n) = 0;
  // Whether update() needs `approx` (none and momentum do not).
  virtual bool needsApprox() const { return true; }
  virtual void save(StateMap& s, const std::string& prefix) const;
  virtual void load(const StateMap& s, const std::string& prefix);

 protected:
  std::map<std::string, std::vector<float>> buffers_;  // "<which>.<key>"
};

// none | residual | dgc | momentum. ConfigError for an unknown name.
std::unique_ptr<Memory> makeMemory(const std::string& name, const MemoryParams& params);

}  // namespace lowcomm::compress
