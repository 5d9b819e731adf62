#include "lowcomm/parallel/compress_hook.h"

#include <cstring>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

CompressHook::CompressHook(std::shared_ptr<compress::Compressor> c) : c_(std::move(c)) {
  LC_ENFORCE(c_, "CompressHook needs a compressor");
}

void CompressHook::run(comm::Communicator& comm, GradBucket& bucket) {
  compress::BucketView view;
  view.index = bucket.index;
  view.data = bucket.flat.data_ptr<float>();
  view.numel = static_cast<size_t>(bucket.flat.numel());
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    compress::Segment s;
    s.name = bucket.names[k];
    s.shape = bucket.shapes[k];
    s.offset = static_cast<size_t>(bucket.offsets[k]);
    s.numel = static_cast<size_t>(bucket.offsets[k + 1] - bucket.offsets[k]);
    view.segments.push_back(std::move(s));
  }
  c_->reduce(comm, view);
}

// Blob names may contain characters archive keys do not allow, so they travel in one tensor.
void CompressHook::saveState(torch::serialize::OutputArchive& ar) const {
  compress::StateMap s;
  c_->save(s);
  std::string names;
  int i = 0;
  for (const auto& [key, blob] : s) {
    names += key + '\n';
    auto t = torch::empty({static_cast<int64_t>(blob.size())}, torch::kUInt8);
    if (!blob.empty()) std::memcpy(t.data_ptr<uint8_t>(), blob.data(), blob.size());
    ar.write("b" + std::to_string(i++), t);
  }
  auto n = torch::empty({static_cast<int64_t>(names.size())}, torch::kUInt8);
  if (!names.empty()) std::memcpy(n.data_ptr<uint8_t>(), names.data(), names.size());
  ar.write("names", n);
}

void CompressHook::loadState(torch::serialize::InputArchive& ar) {
  torch::Tensor n;
  if (!ar.try_read("names", n)) throw DataError("checkpoint has no state for compressor '" + c_->name() + "'");
  const std::string names(reinterpret_cast<const char*>(n.data_ptr<uint8_t>()), static_cast<size_t>(n.numel()));
  compress::StateMap s;
  size_t pos = 0;
  int i = 0;
  while (pos < names.size()) {
    const size_t end = names.find('\n', pos);
    if (end == std::string::npos) throw DataError("compressor state names are truncated");
    torch::Tensor t;
    if (!ar.try_read("b" + std::to_string(i), t) || t.scalar_type() != torch::kUInt8)
      throw DataError("compressor state blob " + std::to_string(i) + " is missing");
    t = t.contiguous();
    auto& blob = s[names.substr(pos, end - pos)];
    blob.resize(static_cast<size_t>(t.numel()));
    if (!blob.empty()) std::memcpy(blob.data(), t.data_ptr<uint8_t>(), blob.size());
    pos = end + 1;
    ++i;
  }
  c_->load(s);
}

}  // namespace lowcomm::parallel
