// The debug fingerprint (CommOptions::debug_check): before each collective every rank shares
// what it is about to call, so ranks calling different collectives or arguments fail with
// MismatchError naming them instead of hanging or exchanging garbage.
#include <string>
#include <vector>

#include "link.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

namespace {
struct Fingerprint {
  uint32_t magic;
  uint32_t op;
  uint64_t count;
  uint32_t dtype;
  int32_t extra;
};
}  // namespace

void Communicator::checkFingerprint(const char* op, size_t count, DType dt, int extra) {
  if (!opts_.debug_check || size_ == 1) return;
  uint32_t op_hash = 2166136261u;  // FNV-1a of the op name
  for (const char* c = op; *c; ++c) op_hash = (op_hash ^ static_cast<uint8_t>(*c)) * 16777619u;
  Fingerprint mine{0x4c434650u, op_hash, count, static_cast<uint32_t>(dt), extra};
  std::vector<Fingerprint> all(size_);
  all[rank_] = mine;
  {
    GlooExchange ex(*link_, *meter_, "fingerprint", phase_, opts_.timeout, link_->nextSeq());
    std::vector<size_t> off(size_ + 1);
    for (int i = 0; i <= size_; ++i) off[i] = i * sizeof(Fingerprint);
    AllgatherOptions o;
    o.buf = reinterpret_cast<char*>(all.data());
    o.off_bytes = &off;
    o.segment_bytes = 4096;
    ringAllgather(ex, Group::world(rank_, size_), o);
  }
  bool same = true;
  for (const auto& f : all)
    same = same && f.magic == mine.magic && f.op == mine.op && f.count == mine.count && f.dtype == mine.dtype &&
           f.extra == mine.extra;
  if (same) return;
  std::string msg = std::string("collective mismatch detected by rank ") + std::to_string(rank_) + " calling " + op +
                    ": ranks called different collectives or arguments:";
  for (int i = 0; i < size_; ++i) {
    const auto& f = all[i];
    msg += "\n  rank " + std::to_string(i) + ": " + (f.op == mine.op ? op : "<other op>") +
           " count=" + std::to_string(f.count) + " dtype=" +
           (f.dtype <= static_cast<uint32_t>(DType::u8) ? dtypeName(static_cast<DType>(f.dtype)) : "?") +
           " arg=" + std::to_string(f.extra);
  }
  throw MismatchError(msg);
}

}  // namespace lowcomm::comm
