// The auto policy: per bucket, time raw allreduce and each candidate compressor for a few
// steps, then keep the fastest. Times are maxed over ranks (one allreduce) so every rank makes
// the same choice; compression is chosen only when it measured faster end to end, codec cost
// and communication included, so it cannot lose to raw beyond measurement noise.
#include <chrono>
#include <cstdio>

#include "compressors.h"
#include "lowcomm/base/error.h"

namespace lowcomm::compress {
namespace {

class AutoCompressor : public Compressor {
 public:
  explicit AutoCompressor(const CompressConfig& cfg) : cfg_(cfg) {
    if (cfg.auto_trial_steps < 1) throw ConfigError("compress.auto_trial_steps must be >= 1");
    if (cfg.auto_recheck_every < 0) throw ConfigError("compress.auto_recheck_every must be >= 0");
    names_.push_back("none");
    options_.push_back(makeCodecCompressor(cfg, "none", "none"));
    for (const auto& c : cfg.auto_candidates) {
      if (c == "auto" || c == "none") throw ConfigError("compress.auto_candidates: '" + c + "' cannot be a candidate");
      CompressConfig sub = cfg;
      sub.codec = c;
      sub.start_step = 0;  // PowerSGD's plain-allreduce warm-up would be timed instead of PowerSGD
      options_.push_back(makeCompressor(sub));
      names_.push_back(c);
    }
  }

  std::string name() const override { return "auto"; }

  void reduce(comm::Communicator& comm, BucketView& b) override {
    State& st = buckets_[b.index];
    const int64_t trials = cfg_.auto_trial_steps * static_cast<int64_t>(options_.size());
    if (st.steps_since == cfg_.auto_recheck_every && cfg_.auto_recheck_every > 0) {
      st.trial = 0;
      st.steps_since = 0;
      st.time.assign(options_.size(), 0.0);  // a recheck measures afresh
    }
    if (st.trial < trials) {
      // Round robin over the options, so that start-up noise (ranks arriving skewed, cold caches)
      // is spread over all of them instead of falling on the first; and timed from a barrier, so
      // that each time is the option's own cost, not how late the slowest rank arrived.
      const size_t c = static_cast<size_t>(st.trial % static_cast<int64_t>(options_.size()));
      const bool first = st.trial < static_cast<int64_t>(options_.size());
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      options_[c]->reduce(comm, b);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (st.time.empty()) st.time.assign(options_.size(), 0.0);
      // The first call of each option pays warm-up (buffers, PowerSGD start); it is not timed
      // unless it is the only one.
      if (!first || cfg_.auto_trial_steps == 1) st.time[c] += t;
      if (++st.trial == trials) decide(comm, b, st);
    } else {
      options_[st.choice]->reduce(comm, b);
      ++st.steps_since;
    }
    ++stats_.buckets;
  }

  CompressStats stats() const override {
    CompressStats s = stats_;
    s.raw_bytes = s.payload_bytes = 0;
    for (const auto& o : options_) {
      const auto os = o->stats();
      s.raw_bytes += os.raw_bytes;
      s.payload_bytes += os.payload_bytes;
      s.codec_s += os.codec_s;
    }
    return s;
  }

  std::vector<std::string> decisions() const override {
    std::vector<std::string> out;
    for (const auto& [index, st] : buckets_) {
      if (st.decided.empty()) continue;
      out.push_back("bucket " + std::to_string(index) + ": " + st.decided);
    }
    return out;
  }

  void save(StateMap& s) const override {
    std::vector<int64_t> v;
    for (const auto& [index, st] : buckets_) {
      v.insert(v.end(), {index, st.trial, static_cast<int64_t>(st.choice), st.steps_since});
      putState(s, "auto.time." + std::to_string(index), st.time);
    }
    putState(s, "auto.buckets", v);
    std::string names;
    for (const auto& n : names_) names += n + ",";
    putState(s, "auto.options", std::vector<char>(names.begin(), names.end()));
    for (size_t i = 0; i < options_.size(); ++i) {
      StateMap sub;
      options_[i]->save(sub);
      for (auto& [k, blob] : sub) s["auto." + names_[i] + "." + k] = blob;
    }
  }

  void load(const StateMap& s) override {
    buckets_.clear();
    std::vector<char> saved;
    std::string names;
    for (const auto& n : names_) names += n + ",";
    if (getState(s, "auto.options", saved) && std::string(saved.begin(), saved.end()) != names)
      throw DataError("compressor state 'auto.options' is for the candidates " + std::string(saved.begin(), saved.end()) +
                      " but this run has " + names);
    std::vector<int64_t> v;
    if (getState(s, "auto.buckets", v)) {
      if (v.size() % 4) throw DataError("compressor state 'auto.buckets' has a bad size");
      for (size_t i = 0; i < v.size(); i += 4) {
        State& st = buckets_[static_cast<int>(v[i])];
        st.trial = v[i + 1];
        st.choice = static_cast<size_t>(v[i + 2]);
        st.steps_since = v[i + 3];
        if (st.choice >= options_.size()) throw DataError("compressor state 'auto.buckets' names an unknown choice");
        getState(s, "auto.time." + std::to_string(v[i]), st.time);
        if (!st.time.empty() && st.time.size() != options_.size())
          throw DataError("compressor state 'auto.time." + std::to_string(v[i]) + "' has " +
                          std::to_string(st.time.size()) + " times for " + std::to_string(options_.size()) + " options");
      }
    }
    for (size_t i = 0; i < options_.size(); ++i) {
      const std::string prefix = "auto." + names_[i] + ".";
      StateMap sub;
      for (const auto& [k, blob] : s)
        if (k.compare(0, prefix.size(), prefix) == 0) sub[k.substr(prefix.size())] = blob;
      options_[i]->load(sub);
    }
  }

 private:
  struct State {
    int64_t trial = 0;
    size_t choice = 0;
    int64_t steps_since = 0;
    std::vector<double> time;
    std::string decided;
  };

  void decide(comm::Communicator& comm, const BucketView& b, State& st) {
    comm.allreduce(st.time.data(), st.time.size(), comm::DType::f64, comm::ReduceOp::max);
    const double timed = cfg_.auto_trial_steps > 1 ? double(cfg_.auto_trial_steps - 1) : 1.0;
    st.choice = 0;
    for (size_t c = 1; c < options_.size(); ++c)
      if (st.time[c] < st.time[st.choice]) st.choice = c;
    char buf[64];
    std::string d = names_[st.choice] + " (" + std::to_string(b.numel * 4) + " B;";
    for (size_t c = 0; c < options_.size(); ++c) {
      std::snprintf(buf, sizeof buf, " %s %.3f ms", names_[c].c_str(), 1e3 * st.time[c] / timed);
      d += buf;
    }
    st.decided = d + ")";
    st.steps_since = 0;
  }

  CompressConfig cfg_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Compressor>> options_;
  std::map<int, State> buckets_;
};

}  // namespace

std::unique_ptr<Compressor> makeAutoCompressor(const CompressConfig& cfg) {
  return std::make_unique<AutoCompressor>(cfg);
}

}  // namespace lowcomm::compress
