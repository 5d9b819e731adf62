#include "lowcomm/compress/memory.h"

#include <cmath>

#include "lowcomm/base/error.h"

namespace lowcomm::compress {

void Memory::save(StateMap& s, const std::string& prefix) const {
  for (const auto& [k, v] : buffers_) putState(s, prefix + k, v);
}

void Memory::load(const StateMap& s, const std::string& prefix) {
  buffers_.clear();
  for (const auto& [k, v] : s) {
    if (k.compare(0, prefix.size(), prefix) != 0) continue;
    std::vector<float> buf;
    getState(s, k, buf);
    buffers_[k.substr(prefix.size())] = std::move(buf);
  }
}

namespace {

class NoMemory : public Memory {
 public:
  std::string name() const override { return "none"; }
  void compensate(int, float*, size_t) override {}
  void update(int, const float*, const float*, size_t) override {}
  bool needsApprox() const override { return false; }
};

// A restored buffer must match the bucket it belongs to; silently zeroing it would hide a
// checkpoint from a different model.
std::vector<float>& restored(Memory* m, std::map<std::string, std::vector<float>>& bufs, const std::string& which,
                             int key, size_t n) {
  auto it = bufs.find(which + "." + std::to_string(key));
  if (it != bufs.end() && !it->second.empty() && it->second.size() != n)
    throw DataError("compressor state '" + m->name() + "." + it->first + "' holds " +
                    std::to_string(it->second.size()) + " values, bucket " + std::to_string(key) + " has " +
                    std::to_string(n));
  auto& v = bufs[which + "." + std::to_string(key)];
  if (v.size() != n) v.assign(n, 0.0f);
  return v;
}

class ResidualMemory : public Memory {
 public:
  explicit ResidualMemory(double decay) : decay_(static_cast<float>(decay)) {}
  std::string name() const override { return "residual"; }
  void compensate(int key, float* x, size_t n) override {
    const float* e = restored(this, buffers_, "e", key, n).data();
    if (decay_ == 1.0f) {
      for (size_t i = 0; i < n; ++i) x[i] += e[i];
    } else {
      for (size_t i = 0; i < n; ++i) x[i] += decay_ * e[i];
    }
  }
  void update(int key, const float* x, const float* approx, size_t n) override {
    float* e = restored(this, buffers_, "e", key, n).data();
    for (size_t i = 0; i < n; ++i) e[i] = x[i] - approx[i];
  }

 private:
  float decay_;
};

class DgcMemory : public Memory {
 public:
  explicit DgcMemory(MemoryParams p) : p_(p) {}
  std::string name() const override { return "dgc"; }
  void compensate(int key, float* g, size_t n) override {
    if (p_.clip > 0) {
      double sq = 0;
      for (size_t i = 0; i < n; ++i) sq += double(g[i]) * g[i];
      const double norm = std::sqrt(sq);
      if (norm > p_.clip) {
        const float f = static_cast<float>(p_.clip / norm);
        for (size_t i = 0; i < n; ++i) g[i] *= f;
      }
    }
    float* u = restored(this, buffers_, "u", key, n).data();
    float* v = restored(this, buffers_, "v", key, n).data();
    const float m = static_cast<float>(p_.momentum);
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      v[i] += u[i];
      g[i] = v[i];
    }
  }
  void update(int key, const float* x, const float* approx, size_t n) override {
    float* u = restored(this, buffers_, "u", key, n).data();
    float* v = restored(this, buffers_, "v", key, n).data();
    for (size_t i = 0; i < n; ++i) {
      v[i] = x[i] - approx[i];
      if (approx[i] != 0.0f) u[i] = 0.0f;  // momentum factor masking
    }
  }

 private:
  MemoryParams p_;
};

class MomentumMemory : public Memory {
 public:
  explicit MomentumMemory(MemoryParams p) : p_(p) {}
  std::string name() const override { return "momentum"; }
  void compensate(int key, float* g, size_t n) override {
    float* m = restored(this, buffers_, "m", key, n).data();
    const float b = static_cast<float>(p_.momentum);
    for (size_t i = 0; i < n; ++i) g[i] = m[i] = b * m[i] + (1.0f - b) * g[i];
  }
  void update(int, const float*, const float*, size_t) override {}
  bool needsApprox() const override { return false; }

 private:
  MemoryParams p_;
};

}  // namespace

std::unique_ptr<Memory> makeMemory(const std::string& name, const MemoryParams& p) {
  if (p.momentum < 0 || p.momentum >= 1)
    throw ConfigError("compress.momentum must be in [0, 1), got " + std::to_string(p.momentum));
  if (p.clip < 0) throw ConfigError("compress.clip must be >= 0, got " + std::to_string(p.clip));
  if (name == "none") return std::make_unique<NoMemory>();
  if (!(p.decay > 0 && p.decay <= 1)) throw ConfigError("compress.decay must be in (0, 1], got " + std::to_string(p.decay));
  if (name == "residual") return std::make_unique<ResidualMemory>(p.decay);
  if (name == "dgc") return std::make_unique<DgcMemory>(p);
  if (name == "momentum") return std::make_unique<MomentumMemory>(p);
  throw ConfigError("unknown compress.memory '" + name + "' (known: none, residual, dgc, momentum)");
}

}  // namespace lowcomm::compress
