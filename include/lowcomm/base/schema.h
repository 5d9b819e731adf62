// Declared configuration keys: every key of a config section is declared once, bound to the
// member of the section's options struct that holds it, with its type, range or choices and a
// one-line doc. Parsing, validation, the resolved TOML and the generated key reference
// (`lowcomm config keys`) all read that declaration.
//
// Contract:
// - Section<S>::set() converts and checks a value against the key's rule before storing it; a
//   value of the wrong type, out of range or not among the choices throws KeyError naming the
//   key ("section.key") and what it must be.
// - Section<S>::validate() checks every key's current value and then the section's own
//   cross-key rules (check()), so options built in code pass the same checks as parsed ones.
// - A key's default is its member's value in a default-constructed S.
// - The section knows no file format: values arrive as Value (the TOML layer converts).
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::schema {

using List = std::vector<std::string>;
using Value = std::variant<bool, int64_t, double, std::string, List>;

// A step count, or a fraction of the run's total optimizer steps (a number in (0, 1)), so a
// config keeps a reference run's proportions at any length.
struct RunSteps {
  double value = 0;
  RunSteps() = default;
  RunSteps(double v) : value(v) {}  // NOLINT: implicit, so options read naturally (o.warmup_steps = 3)
  // The step count for a run of `total` optimizer steps: a fraction is rounded, at least 1.
  int64_t of(int64_t total) const;
  // The step count once resolved (a factory stores of(total) back); a fraction truncates to 0.
  operator int64_t() const { return static_cast<int64_t>(value); }  // NOLINT: options read as counts
};

enum class Kind { flag, integer, number, text, list, steps };

// Bounds of an integer, number or step-count key; an open bound excludes its value. The
// default (-inf, inf) open admits every finite number.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = true, hi_open = true;
  static Range any() { return {}; }
  static Range atLeast(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, true}; }
  static Range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, true}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }    // [lo, hi]
  static Range halfOpen(double lo, double hi) { return {lo, hi, false, true}; }   // [lo, hi)
  static Range openClosed(double lo, double hi) { return {lo, hi, true, false}; } // (lo, hi]
  bool contains(double v) const;
  std::string text() const;  // "> 0", ">= 1", "in [0, 1)", "finite"
};

// What a key accepts.
struct Rule {
  Kind kind = Kind::text;
  Range range;                                         // integer, number, steps
  List choices;                                        // text: the value; list: each element (empty: any)
  std::vector<std::pair<std::string, int64_t>> names;  // integer: words standing for values ("node" = -2)
  bool non_empty = false;                              // text
};

inline Rule makeRule(Kind kind, Range range = {}, List choices = {}) {
  Rule r;
  r.kind = kind;
  r.range = range;
  r.choices = std::move(choices);
  return r;
}

struct KeyInfo {
  std::string key;  // "section.key" ("seed" at the top level)
  Rule rule;
  std::string doc;
  Value default_value;
};

// The value `v` as the key's rule accepts it (integers widened to numbers, a comma-separated
// string split into a list, a name replaced by its integer), or throws KeyError.
Value checked(const KeyInfo& k, const Value& v);
// "integer in [1, 4096]", "one of: ring, hd", "step count >= 0 or a fraction of the run in (0, 1)".
std::string ruleText(const Rule& r);

class KeyError : public ConfigError {
 public:
  KeyError(std::string key, const std::string& why)
      : ConfigError("key '" + key + "' " + why), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// One key bound to a member of S.
template <class S>
struct Field {
  KeyInfo info;
  std::function<void(S&, const Value&)> store;  // of a checked value
  std::function<Value(const S&)> load;
};

template <class S>
class Section {
 public:
  // `name` prefixes its keys ("" for top-level keys).
  explicit Section(std::string name, std::string doc = "") : name_(std::move(name)), doc_(std::move(doc)) {}

  Section& flag(const char* key, bool S::*m, const char* doc) {
    return add(key, makeRule(Kind::flag), doc, [m](S& s, const Value& v) { s.*m = std::get<bool>(v); },
               [m](const S& s) { return Value(s.*m); });
  }
  template <class I>
  Section& integer(const char* key, I S::*m, int64_t lo, int64_t hi, const char* doc,
                   std::vector<std::pair<std::string, int64_t>> names = {}) {
    Rule r = makeRule(Kind::integer, Range::closed(double(lo), double(hi)));
    r.names = names;
    return add(key, r, doc, [m](S& s, const Value& v) { s.*m = static_cast<I>(std::get<int64_t>(v)); },
               [m, names](const S& s) {
                 for (const auto& [word, value] : names)
                   if (static_cast<int64_t>(s.*m) == value) return Value(word);
                 return Value(static_cast<int64_t>(s.*m));
               });
  }
  Section& number(const char* key, double S::*m, Range range, const char* doc) {
    return add(key, makeRule(Kind::number, range), doc, [m](S& s, const Value& v) { s.*m = std::get<double>(v); },
               [m](const S& s) { return Value(s.*m); });
  }
  Section& text(const char* key, std::string S::*m, const char* doc, bool non_empty = false) {
    Rule r = makeRule(Kind::text);
    r.non_empty = non_empty;
    return add(key, r, doc, [m](S& s, const Value& v) { s.*m = std::get<std::string>(v); },
               [m](const S& s) { return Value(s.*m); });
  }
  Section& choice(const char* key, std::string S::*m, List choices, const char* doc) {
    return add(key, makeRule(Kind::text, {}, std::move(choices)), doc,
               [m](S& s, const Value& v) { s.*m = std::get<std::string>(v); }, [m](const S& s) { return Value(s.*m); });
  }
  Section& list(const char* key, List S::*m, List choices, const char* doc) {
    return add(key, makeRule(Kind::list, {}, std::move(choices)), doc, [m](S& s, const Value& v) { s.*m = std::get<List>(v); },
               [m](const S& s) { return Value(s.*m); });
  }
  // A step count >= min_steps, or a fraction of the run in (0, 1); the member is a RunSteps or
  // a double holding the same.
  template <class M>
  Section& steps(const char* key, M S::*m, int64_t min_steps, const char* doc) {
    return add(key, makeRule(Kind::steps, Range::closed(double(min_steps), 2147483647.0)), doc,
               [m](S& s, const Value& v) {
                 s.*m = std::holds_alternative<int64_t>(v) ? double(std::get<int64_t>(v)) : std::get<double>(v);
               },
               [m](const S& s) {
                 const double v = RunSteps(s.*m).value;
                 return v >= 1 || v == 0 ? Value(static_cast<int64_t>(v)) : Value(v);
               });
  }
  // A rule across this section's keys (or against its context); throws KeyError for the key at fault.
  Section& check(std::function<void(const S&)> rule) {
    checks_.push_back(std::move(rule));
    return *this;
  }

  const std::string& name() const { return name_; }
  const std::string& doc() const { return doc_; }
  const std::vector<Field<S>>& fields() const { return fields_; }
  // Full key names ("ab.svd").
  bool has(const std::string& key) const { return find(key) != nullptr; }

  void set(S& s, const std::string& key, const Value& v) const { field(key).store(s, checked(field(key).info, v)); }
  Value get(const S& s, const std::string& key) const { return field(key).load(s); }
  void validate(const S& s) const {
    for (const auto& f : fields_) checked(f.info, f.load(s));
    for (const auto& rule : checks_) rule(s);
  }
  std::vector<KeyInfo> keys() const {
    std::vector<KeyInfo> out;
    for (const auto& f : fields_) out.push_back(f.info);
    return out;
  }

 private:
  Section& add(const char* key, Rule rule, const char* doc, std::function<void(S&, const Value&)> store,
               std::function<Value(const S&)> load) {
    const std::string full = name_.empty() ? std::string(key) : name_ + "." + key;
    if (find(full)) throw std::logic_error("config key '" + full + "' declared twice");
    const S defaults{};
    fields_.push_back({KeyInfo{full, std::move(rule), doc, load(defaults)}, std::move(store), load});
    return *this;
  }
  const Field<S>* find(const std::string& key) const {
    for (const auto& f : fields_)
      if (f.info.key == key) return &f;
    return nullptr;
  }
  const Field<S>& field(const std::string& key) const {
    if (const auto* f = find(key)) return *f;
    throw KeyError(key, "is unknown (valid keys: `lowcomm config keys`)");
  }

  std::string name_, doc_;
  std::vector<Field<S>> fields_;
  std::vector<std::function<void(const S&)>> checks_;
};

// A section over an options object of any type (a strategy's), held in a std::any.
struct AnySection {
  std::string name, doc;
  std::vector<KeyInfo> keys;
  std::function<std::any()> defaults;
  std::function<void(std::any&, const std::string& key, const Value&)> set;
  std::function<Value(const std::any&, const std::string& key)> get;
  std::function<void(const std::any&)> validate;
};

template <class S>
AnySection erase(Section<S> s) {
  auto p = std::make_shared<const Section<S>>(std::move(s));
  return AnySection{p->name(),
                    p->doc(),
                    p->keys(),
                    [] { return std::any(S{}); },
                    [p](std::any& a, const std::string& k, const Value& v) { p->set(std::any_cast<S&>(a), k, v); },
                    [p](const std::any& a, const std::string& k) { return p->get(std::any_cast<const S&>(a), k); },
                    [p](const std::any& a) { p->validate(std::any_cast<const S&>(a)); }};
}

}  // namespace lowcomm::schema
