// In-use heap bytes from glibc.
#include "lowcomm/base/heap.h"

#include <malloc.h>

namespace lowcomm {

int64_t heapInUseBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

}  // namespace lowcomm
