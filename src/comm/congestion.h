// Per-socket TCP congestion control for a mesh's pairs (private to the comm layer).
//
// The congestion control decides what one stream carries on a lossy path: CUBIC halves its window
// per loss (the Mathis bound), BBR paces at the measured bottleneck rate. The system default is
// one value per network namespace; lowcomm may choose one for its own pair sockets instead
// (CommOptions::congestion_control).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"  // checkCongestionControl

namespace lowcomm::comm {

class Link;

// The socket of every pair of `link`, indexed by peer rank (-1 for this rank and for a pair whose
// socket was not found). Collective over the link (the ranks exchange their pairs' listening
// addresses, unmetered); `timeout` bounds that exchange.
std::vector<int> pairSockets(Link& link, std::chrono::milliseconds timeout);

// Sets TCP_CONGESTION to `name` (checked) on the socket of every pair of `link`; nothing for "".
// Collective over the link, as pairSockets. ConfigError when the kernel refuses (e.g. an algorithm
// outside /proc/sys/net/ipv4/tcp_allowed_congestion_control without CAP_NET_ADMIN) or when a
// pair's socket cannot be found.
void setCongestionControl(Link& link, const std::string& name, std::chrono::milliseconds timeout);

// Sets TCP_NOTSENT_LOWAT to `bytes` on the socket of the pair with every rank r for which
// peers[r] holds (lanes.h: a send then completes when its data is nearly on the wire). Collective
// over the link, as pairSockets. ConfigError when a socket is missing or the kernel refuses.
void setNotSentLowat(Link& link, const std::vector<bool>& peers, int bytes, std::chrono::milliseconds timeout);

// What a socket reports (getsockopt TCP_CONGESTION); "" when it cannot tell.
std::string socketCongestionControl(int fd);

}  // namespace lowcomm::comm
