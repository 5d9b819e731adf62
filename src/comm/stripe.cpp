// GlooExchange's striped messages (stripe.h): posting and waiting for pieces 1 .. k-1.
#include "stripe.h"

#include <algorithm>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "link.h"

namespace lowcomm::comm {

Piece stripePiece(size_t bytes, int k, int j) {
  const size_t n = static_cast<size_t>(k), i = static_cast<size_t>(j);
  const size_t base = bytes / n, extra = bytes % n;
  return Piece{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

void GlooExchange::postPieces(Request& r, char* ptr, uint64_t slot) {
  const int k = link_.streams();
  try {
    for (int j = 1; j < k; ++j) {
      const Piece p = stripePiece(r.bytes, k, j);
      auto buf = link_.stream(j).createUnboundBuffer(ptr + p.offset, p.bytes);
      if (r.send) buf->send(r.peer, slot);
      else buf->recv(r.peer, slot);
      r.pieces.push_back(std::move(buf));
    }
  } catch (const gloo::Exception& e) {
    fail(r, e);
  }
}

void GlooExchange::waitPieces(Request& r) {
  try {
    for (; r.waited < r.pieces.size(); ++r.waited) {
      auto& buf = r.pieces[r.waited];
      const bool ok = r.send ? buf->waitSend(left()) : buf->waitRecv(left());
      if (!ok) throw gloo::IoException("aborted");
    }
  } catch (const gloo::Exception& e) {
    fail(r, e);
  }
}

}  // namespace lowcomm::comm
