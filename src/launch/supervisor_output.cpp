// Supervisor's output forwarding: every worker's stdout and stderr, line by line, prefixed with
// its rank.
#include "supervisor.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace lowcomm::launch {

namespace {

constexpr size_t kMaxLine = 64 * 1024;  // longer unterminated output is forwarded in pieces

}  // namespace

void Supervisor::pollOnce(Clock::time_point until) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<OutStream*> streams{nullptr};
  for (auto& w : workers_) {
    for (OutStream* s : {&w.out, &w.err}) {
      if (s->fd.get() < 0) continue;
      fds.push_back({s->fd.get(), POLLIN, 0});
      streams.push_back(s);
    }
  }
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
  const int n = ::poll(fds.data(), fds.size(), std::max<int>(0, wait.count()));
  if (n <= 0) return;  // timeout or EINTR: the caller's checks run either way
  for (size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents != 0) readOnce(*streams[i]);
}

// Reads one chunk; returns false when nothing more is available now (or EOF).
bool Supervisor::readOnce(OutStream& s) {
  if (s.fd.get() < 0) return false;
  char buf[64 * 1024];
  const ssize_t n = ::read(s.fd.get(), buf, sizeof(buf));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (n <= 0) {  // EOF, or an error that ends this stream just the same
    flushPartial(s);
    s.fd.reset();
    return false;
  }
  forward(s, buf, static_cast<size_t>(n));
  return true;
}

// Everything the exited worker wrote is in its pipes now; bounded in case a child of it
// keeps writing (the poll loop picks up the rest).
void Supervisor::drain(Worker& w) {
  for (OutStream* s : {&w.out, &w.err})
    for (int i = 0; i < 16 && readOnce(*s); ++i) {
    }
}

void Supervisor::forward(OutStream& s, const char* data, size_t n) {
  if (opts_.quiet_nonzero && s.rank != 0 && !s.is_err) return;  // errors of every rank reach the user
  s.partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(s, s.partial.substr(start, nl - start));
  s.partial.erase(0, start);
  while (s.partial.size() >= kMaxLine) {
    emit(s, s.partial.substr(0, kMaxLine));
    s.partial.erase(0, kMaxLine);
  }
}

void Supervisor::flushPartial(OutStream& s) {
  if (!s.partial.empty()) emit(s, s.partial);
  s.partial.clear();
}

void Supervisor::emit(const OutStream& s, const std::string& line) {
  std::ostream& os = s.is_err ? err_ : out_;
  os << "[rank " << s.rank << "] " << line << '\n';
  os.flush();
}

}  // namespace lowcomm::launch
