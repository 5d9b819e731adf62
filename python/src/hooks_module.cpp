// lowcomm._C.Compressor: the compressor behind lowcomm.hooks (see hooks.h), configured from a dict
// with the keys of a TOML config's [compress] section.
#include <pybind11/stl.h>

#include "bindings.h"
#include "lowcomm/c10d/hooks.h"
#include "lowcomm/base/error.h"

namespace pb = pybind11;  // not `py`: that is lowcomm::py here

namespace lowcomm::py {

using torchdist::HookCompressor;

namespace {

compress::CompressConfig configFromDict(const pybind11::dict& d) {
  compress::CompressConfig c;
  const std::vector<std::string> known = {
      "codec", "memory", "ratio", "levels", "threshold", "block", "sample_ratio", "momentum", "clip", "skip_1d",
      "min_numel", "exclude", "rank", "start_step", "min_compression", "warm_start", "auto_candidates",
      "auto_trial_steps", "auto_recheck_every", "seed"};
  for (const auto& [k, v] : d) {
    const std::string key = pybind11::str(k);
    try {
      if (key == "codec") c.codec = v.cast<std::string>();
      else if (key == "memory") c.memory = v.cast<std::string>();
      else if (key == "ratio") c.codec_params.ratio = v.cast<double>();
      else if (key == "levels") c.codec_params.levels = v.cast<int64_t>();
      else if (key == "threshold") c.codec_params.threshold = v.cast<double>();
      else if (key == "block") c.codec_params.block = v.cast<int64_t>();
      else if (key == "sample_ratio") c.codec_params.sample_ratio = v.cast<double>();
      else if (key == "momentum") c.memory_params.momentum = v.cast<double>();
      else if (key == "clip") c.memory_params.clip = v.cast<double>();
      else if (key == "skip_1d") c.skip_1d = v.cast<bool>();
      else if (key == "min_numel") c.min_numel = v.cast<int64_t>();
      else if (key == "exclude") c.exclude = v.cast<std::vector<std::string>>();
      else if (key == "rank") c.rank = v.cast<int64_t>();
      else if (key == "start_step") c.start_step = v.cast<int64_t>();
      else if (key == "min_compression") c.min_compression = v.cast<double>();
      else if (key == "warm_start") c.warm_start = v.cast<bool>();
      else if (key == "auto_candidates") c.auto_candidates = v.cast<std::vector<std::string>>();
      else if (key == "auto_trial_steps") c.auto_trial_steps = v.cast<int64_t>();
      else if (key == "auto_recheck_every") c.auto_recheck_every = v.cast<int64_t>();
      else if (key == "seed") c.seed = v.cast<uint64_t>();
      else {
        std::string all;
        for (const auto& n : known) all += (all.empty() ? "" : ", ") + n;
        throw ConfigError("lowcomm.hooks.state: unknown option '" + key + "' (known: " + all + ")");
      }
    } catch (const pybind11::cast_error&) {
      throw ConfigError("lowcomm.hooks.state: option '" + key + "' has the wrong type (" +
                        std::string(pybind11::str(pybind11::type::of(v).attr("__name__"))) + ")");
    }
  }
  return c;
}

pybind11::dict statsDict(const compress::CompressStats& s) {
  pybind11::dict d;
  d["raw_bytes"] = s.raw_bytes;
  d["payload_bytes"] = s.payload_bytes;
  d["buckets"] = s.buckets;
  d["codec_s"] = s.codec_s;
  d["compression_ratio"] = s.ratio();
  return d;
}

}  // namespace

void bindHooks(pybind11::module& m) {
  pb::class_<HookCompressor, std::shared_ptr<HookCompressor>>(m, "Compressor")
      .def(pb::init([](const pb::dict& options) { return std::make_shared<HookCompressor>(configFromDict(options)); }),
           pb::arg("options"))
      .def_property_readonly("name", &HookCompressor::name)
      .def(
          "reduce",
          [](HookCompressor& h, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const at::Tensor& bucket, int index,
             const std::vector<std::tuple<std::string, std::vector<int64_t>, size_t, size_t>>& segments) {
            std::vector<compress::Segment> segs;
            for (const auto& [name, shape, offset, numel] : segments) segs.push_back({name, shape, offset, numel});
            return h.reduce(lowcommGroup(pg), bucket, index, std::move(segs));
          },
          pb::arg("pg"), pb::arg("bucket"), pb::arg("index"), pb::arg("segments"),
          "Queues the bucket's compressed reduce on the group; returns its Work (future: the averaged bucket).")
      .def("state",
           [](const HookCompressor& h) {
             pb::dict d;
             for (const auto& [k, v] : h.save())
               d[pb::str(k)] = pb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
             return d;
           })
      .def("load",
           [](HookCompressor& h, const pb::dict& d) {
             compress::StateMap s;
             for (const auto& [k, v] : d) {
               const std::string b = v.cast<std::string>();
               s[pb::str(k)] = std::vector<uint8_t>(b.begin(), b.end());
             }
             h.load(s);
           })
      .def("stats", [](const HookCompressor& h) { return statsDict(h.stats()); })
      .def("decisions", &HookCompressor::decisions);
  m.def("compressor_names", &compress::compressorNames);
}

}  // namespace lowcomm::py
