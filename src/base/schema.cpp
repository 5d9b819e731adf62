#include "lowcomm/base/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace lowcomm::schema {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e20) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string joined(const List& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

const char* kindText(Kind k) {
  switch (k) {
    case Kind::flag: return "true or false";
    case Kind::integer: return "an integer";
    case Kind::number: return "a number";
    case Kind::text: return "a string";
    case Kind::list: return "an array of strings";
    case Kind::steps: return "a step count (integer) or a fraction of the run in (0, 1)";
  }
  return "?";
}

[[noreturn]] void wrongType(const KeyInfo& k) { throw KeyError(k.key, std::string("must be ") + kindText(k.rule.kind)); }

void inRange(const KeyInfo& k, double v) {
  if (k.rule.range.contains(v)) return;
  throw KeyError(k.key, "must be " + k.rule.range.text() + ", got " + num(v));
}

void oneOf(const KeyInfo& k, const std::string& v) {
  const auto& c = k.rule.choices;
  if (c.empty() || std::find(c.begin(), c.end(), v) != c.end()) return;
  throw KeyError(k.key, "is '" + v + "'; expected one of: " + joined(c));
}

Value integer(const KeyInfo& k, const Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) {
    for (const auto& [word, value] : k.rule.names)
      if (*s == word) return value;
    if (k.rule.names.empty()) wrongType(k);
    List words;
    for (const auto& n : k.rule.names) words.push_back("\"" + n.first + "\"");
    throw KeyError(k.key, "is '" + *s + "'; expected " + joined(words) + " or an integer " + k.rule.range.text());
  }
  const auto* i = std::get_if<int64_t>(&v);
  if (!i) wrongType(k);
  inRange(k, double(*i));
  return *i;
}

Value steps(const KeyInfo& k, const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) {
    inRange(k, double(*i));
    return *i;
  }
  const auto* d = std::get_if<double>(&v);
  if (!d) wrongType(k);
  if (!(*d > 0 && *d < 1))
    throw KeyError(k.key, "is a number: a fraction of the run must be in (0, 1); a step count must be an integer");
  return *d;
}

Value list(const KeyInfo& k, const Value& v) {
  List out;
  if (const auto* l = std::get_if<List>(&v)) {
    out = *l;
  } else if (const auto* s = std::get_if<std::string>(&v)) {  // comma-separated (handy with --set)
    std::stringstream ss(*s);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) out.push_back(item);
  } else {
    wrongType(k);
  }
  for (const auto& e : out) oneOf(k, e);
  return out;
}

}  // namespace

int64_t RunSteps::of(int64_t total) const {
  if (value >= 1 || value <= 0) return static_cast<int64_t>(value);
  return std::max<int64_t>(1, std::llround(value * static_cast<double>(total)));
}

bool Range::contains(double v) const {
  const bool above_lo = lo_open ? v > lo : v >= lo;
  const bool below_hi = hi_open ? v < hi : v <= hi;
  return above_lo && below_hi;  // false for NaN
}

std::string Range::text() const {
  const bool no_lo = std::isinf(lo) && lo < 0, no_hi = std::isinf(hi) && hi > 0;
  if (no_lo && no_hi) return "finite";
  if (no_hi) return (lo_open ? "> " : ">= ") + num(lo);
  if (no_lo) return (hi_open ? "< " : "<= ") + num(hi);
  return std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
}

Value checked(const KeyInfo& k, const Value& v) {
  switch (k.rule.kind) {
    case Kind::flag:
      if (!std::holds_alternative<bool>(v)) wrongType(k);
      return v;
    case Kind::integer: return integer(k, v);
    case Kind::number: {
      double d = 0;
      if (const auto* i = std::get_if<int64_t>(&v)) d = double(*i);
      else if (const auto* x = std::get_if<double>(&v)) d = *x;
      else wrongType(k);
      inRange(k, d);
      return d;
    }
    case Kind::text: {
      const auto* s = std::get_if<std::string>(&v);
      if (!s) wrongType(k);
      if (k.rule.non_empty && s->empty()) throw KeyError(k.key, "must not be empty");
      oneOf(k, *s);
      return v;
    }
    case Kind::list: return list(k, v);
    case Kind::steps: return steps(k, v);
  }
  wrongType(k);
}

std::string ruleText(const Rule& r) {
  switch (r.kind) {
    case Kind::flag: return "bool";
    case Kind::integer: {
      std::string t = "integer " + r.range.text();
      for (const auto& [word, value] : r.names) t += ", or \"" + word + "\" (" + std::to_string(value) + ")";
      return t;
    }
    case Kind::number: return "number " + r.range.text();
    case Kind::text:
      if (!r.choices.empty()) return "one of: " + joined(r.choices);
      return r.non_empty ? "string, not empty" : "string";
    case Kind::list: return r.choices.empty() ? "list of strings" : "list of: " + joined(r.choices);
    case Kind::steps: return "steps " + r.range.text() + ", or a fraction of the run in (0, 1)";
  }
  return "?";
}

}  // namespace lowcomm::schema
