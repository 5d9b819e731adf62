#include "bench_options.h"

#include <cctype>
#include <cstdlib>
#include <numeric>
#include <random>
#include <utility>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/selector.h"

namespace lowcomm::cli {

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> algosFor(const std::string& op, const std::vector<std::string>& algos) {
  std::vector<std::string> out;
  for (const auto& a : algos) {
    // "ina" (in-network aggregation) is the simulator's allreduce, not an algorithm of the table.
    if (op == "allreduce" ? a == "ina" || comm::algoRuns(comm::Op::allreduce, comm::parseAlgo(a))
                          : (op == "broadcast" || op == "allgather") && a != "auto" && a != "ina" &&
                                comm::algoRuns(op, comm::parseAlgo(a)))
      out.push_back(a);
  }
  return out;
}

size_t parseSize(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) throw ConfigError("bad size '" + s + "' (expected e.g. 4B, 64KiB, 256MiB)");
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(c));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else throw ConfigError("bad size unit in '" + s + "' (expected B, KiB, MiB or GiB)");
  return static_cast<size_t>(v * mult);
}

std::vector<size_t> parseSizes(const std::string& spec) {
  std::vector<size_t> out;
  if (auto colon = spec.find(':'); colon != std::string::npos) {
    size_t lo = parseSize(spec.substr(0, colon)), hi = parseSize(spec.substr(colon + 1));
    if (lo == 0 || hi < lo) throw ConfigError("bad size range '" + spec + "' (expected LO:HI with 0 < LO <= HI)");
    for (size_t s = lo; s <= hi; s *= 2) out.push_back(s);
    return out;
  }
  for (const auto& part : splitList(spec)) out.push_back(parseSize(part));
  if (out.empty()) throw ConfigError("no sizes in '" + spec + "'");
  return out;
}

std::string formatSize(size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return std::to_string(b) + units[u];
}

std::vector<size_t> roundOrder(size_t cases, int round, uint64_t salt) {
  std::vector<size_t> order(cases);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 gen(salt * 1000003u + static_cast<uint64_t>(round));
  for (size_t i = cases; i > 1; --i) std::swap(order[i - 1], order[gen() % i]);  // Fisher-Yates
  return order;
}

}  // namespace lowcomm::cli
