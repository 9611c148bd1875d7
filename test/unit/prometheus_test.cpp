// SPDX-License-Identifier: BSL-1.0
// The Prometheus text export of client_stats (no server): the exposition's grammar, values,
// cumulative histogram buckets, escaping, names and options.

#include <redlock/error.hpp>
#include <redlock/prometheus.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using redlock::client_stats;
using redlock::prometheus_options;
using redlock::to_prometheus;

client_stats sample_stats() {
  client_stats s;
  s.lock_operations = 7;
  s.lock_attempts = 11;
  s.locks_acquired = 5;
  s.locks_not_acquired = 1;
  s.locks_quorum_unavailable = 1;
  s.extensions = 3;
  s.locks_lost = 1;
  s.acquire_latency.record(3us);
  s.acquire_latency.record(100us);
  s.acquire_latency.record(5000us);
  s.masters.resize(2);
  s.masters[0].requests = 20;
  s.masters[0].ok = 17;
  s.masters[0].timeouts = 2;
  s.masters[0].latency.record(250us);
  s.masters[1].requests = 4;
  s.masters[1].connect_failures = 9;
  s.masters[1].auth_failures = 9;
  return s;
}

// sample_stats() with three masters, hazard guards (one quarantined, one refusing INFO) and
// latencies in the overflow bucket.
client_stats busy_stats() {
  client_stats s = sample_stats();
  s.acquire_latency.record(3600s);
  s.log_messages = 4;
  s.log_sink_errors = 1;
  s.masters.resize(3);
  s.masters[2].latency.record(1us);
  s.masters[2].latency.record(40s);
  s.masters[2].log_sink_errors = 2;
  s.hazards.resize(3);
  for (std::size_t i = 0; i < 3; ++i) s.hazards[i].index = i;
  s.hazards[0].cause = redlock::hazard_cause::restarted;
  s.hazards[0].quarantined_until = redlock::clock::now() + 30s;
  s.hazards[0].restarts = 1;
  s.hazards[1].cause = redlock::hazard_cause::info_refused;
  s.hazards[1].quarantined_until = redlock::clock::time_point::max();
  s.hazards[2].unguarded = true;
  return s;
}

// ---------------------------------------------------------------------------------------------
// A checker for the text exposition format (0.0.4), stricter than Prometheus where our output
// has no reason to differ: it reports every problem it finds instead of stopping at the first.
// (Hand-written: GCC 12's std::regex warns under the sanitizer builds.)

struct exposition {
  std::map<std::string, std::string> types;    // family -> type
  std::map<std::string, std::string> samples;  // "name{labels}" as written -> value
  std::vector<std::string> order;              // sample keys as written
  std::vector<std::string> problems;           // empty: valid
};

bool name_start(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool name_char(char c, bool colon) { return name_start(c, colon) || (c >= '0' && c <= '9'); }

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, [a-zA-Z_][a-zA-Z0-9_]* for label names.
bool valid_name(std::string_view s, bool colon) {
  if (s.empty() || !name_start(s[0], colon)) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return name_char(c, colon); });
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t more = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
      cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (s.size() - i <= more) return false;
    for (std::size_t k = 1; k <= more; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += more + 1;
  }
  return true;
}

// A float as the format writes one (Go's ParseFloat: digits, exponents, +Inf, -Inf, NaN).
std::optional<double> float_value(const std::string& v) {
  if (v == "+Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (v.empty() || !(std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-' || v[0] == '+' || v[0] == '.')) {
    return std::nullopt;  // strtod would also take "inf", "nan", leading spaces
  }
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size()) return std::nullopt;
  return d;
}

// A count (counter, bucket, _count): digits only.
std::optional<std::uint64_t> count_value(const std::string& v) {
  if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoull(v);
}

struct sample_line {
  std::string name;
  std::string labels_text;                                  // as written, braces included
  std::vector<std::pair<std::string, std::string>> labels;  // values unescaped
  std::string value;

  const std::string* label(std::string_view n) const {
    for (const auto& [k, v] : labels) {
      if (k == n) return &v;
    }
    return nullptr;
  }
  // The label set without `le`, sorted: one histogram series per key.
  std::string key_without_le() const {
    auto sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    std::string out;
    for (const auto& [k, v] : sorted) {
      if (k != "le") out += k + '\x1f' + v + '\x1e';
    }
    return out;
  }
};

// Reads `name{label="value",...} value`; what is wrong with it, or empty.
std::string read_sample(const std::string& line, sample_line& s) {
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  if (!valid_name(s.name, true)) return "invalid metric name \"" + s.name + "\"";
  const auto labels_from = i;
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      const auto name_from = i;
      while (i < line.size() && line[i] != '=' && line[i] != ',' && line[i] != '}') ++i;
      const auto name = line.substr(name_from, i - name_from);
      if (!valid_name(name, false)) return "invalid label name \"" + name + "\"";
      if (name.starts_with("__")) return "reserved label name \"" + name + "\"";
      if (line.compare(i, 2, "=\"") != 0) return "label " + name + " without a quoted value";
      std::string value;
      for (i += 2;; ++i) {
        if (i >= line.size()) return "unterminated value of label " + name;
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i >= line.size()) return "unterminated value of label " + name;
          if (line[i] == 'n') {
            value += '\n';
          } else if (line[i] == '\\' || line[i] == '"') {
            value += line[i];
          } else {
            return "invalid escape in the value of label " + name;
          }
          continue;
        }
        value += line[i];
      }
      ++i;  // the closing quote
      if (!valid_utf8(value)) return "value of label " + name + " is not UTF-8";
      if (s.label(name)) return "label name " + name + " repeated";
      s.labels.emplace_back(name, std::move(value));
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return "expected ',' or '}' after the value of label " + name;
    }
  }
  s.labels_text = line.substr(labels_from, i - labels_from);
  if (i >= line.size() || line[i] != ' ') return "no value";
  s.value = line.substr(i + 1);  // no timestamp: we never write one
  if (!float_value(s.value)) return "invalid value \"" + s.value + "\"";
  return {};
}

// HELP text escapes only backslash and newline.
bool valid_help(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && (++i >= text.size() || (text[i] != '\\' && text[i] != 'n'))) return false;
  }
  return true;
}

struct histogram_series {
  std::vector<std::pair<std::string, std::uint64_t>> buckets;  // le as written, count
  bool sum = false;
  std::optional<std::uint64_t> count;
};

exposition check(const std::string& text) {
  exposition e;
  const auto problem = [&](const std::string& what, std::string_view line) {
    e.problems.push_back(what + ": [" + std::string{line} + "]");
  };
  std::set<std::string> helped;                                               // families with a HELP line
  std::set<std::string> sampled;                                              // families with a sample
  std::set<std::string> finished;                                             // families whose lines have ended
  std::set<std::string> series;                                               // name and sorted labels of every sample
  std::map<std::string, std::map<std::string, histogram_series>> histograms;  // family -> labels -> series
  std::string current;                                                        // family of the last line
  // The lines of a family must be together: HELP, TYPE, samples.
  const auto enter = [&](const std::string& family, std::string_view line) {
    if (family == current) return;
    if (!current.empty()) finished.insert(current);
    if (finished.count(family)) problem("lines of family " + family + " not together", line);
    current = family;
  };

  if (!text.empty() && text.back() != '\n') problem("no newline at the end", text.substr(text.rfind('\n') + 1));
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      const bool help = line[2] == 'H';
      const auto rest = line.substr(7);
      const auto space = rest.find(' ');
      const auto family = rest.substr(0, space);
      const auto what = space == std::string::npos ? std::string{} : rest.substr(space + 1);
      if (!valid_name(family, true)) {
        problem("invalid metric name \"" + family + "\"", line);
        continue;
      }
      enter(family, line);
      if (sampled.count(family)) problem(std::string{help ? "HELP" : "TYPE"} + " after samples of " + family, line);
      if (help) {
        if (!helped.insert(family).second) problem("second HELP for " + family, line);
        if (what.empty() || !valid_help(what)) problem("HELP text empty or badly escaped", line);
      } else {
        if (!helped.count(family)) problem("TYPE before HELP", line);
        if (what != "counter" && what != "gauge" && what != "histogram") problem("unexpected type", line);
        if (!e.types.emplace(family, what).second) problem("second TYPE for " + family, line);
      }
      continue;
    }
    if (line.empty() || line[0] == '#') continue;  // blank lines and comments are allowed

    sample_line s;
    if (const auto why = read_sample(line, s); !why.empty()) {
      problem("not a sample line, " + why, line);
      continue;
    }
    std::string family = s.name;
    std::string part;  // histogram: "_bucket", "_sum" or "_count"
    if (!e.types.count(family)) {
      for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
        const auto base = s.name.substr(0, s.name.size() - std::min(s.name.size(), suffix.size()));
        if (s.name.ends_with(suffix) && e.types.count(base) && e.types[base] == "histogram") {
          family = base;
          part = suffix;
        }
      }
    }
    const auto type = e.types.find(family);
    if (type == e.types.end()) {
      problem("sample without TYPE", line);
      continue;
    }
    if (!helped.count(family)) problem("sample without HELP", line);
    enter(family, line);
    sampled.insert(family);
    const std::string key = s.name + s.labels_text;
    e.samples.emplace(key, s.value);
    e.order.push_back(key);

    auto sorted = s.labels;
    std::sort(sorted.begin(), sorted.end());
    std::string canonical = s.name;
    for (const auto& [k, v] : sorted) canonical += '\x1e' + k + '\x1f' + v;
    if (!series.insert(canonical).second) problem("duplicate series", line);

    const auto* le = s.label("le");
    if (part == "_bucket" && !le) problem("histogram bucket without le", line);
    if (part != "_bucket" && le) problem("le outside a histogram bucket", line);
    if (type->second == "counter") {
      if (!s.name.ends_with("_total")) problem("counter not ending in _total", line);
      if (!count_value(s.value)) problem("counter value not a count", line);
    } else if (type->second == "histogram") {
      if (part.empty()) {
        problem("histogram sample without _bucket, _sum or _count", line);
        continue;
      }
      auto& h = histograms[family][s.key_without_le()];
      if (part == "_sum") {
        if (h.sum) problem("second _sum", line);
        h.sum = true;
        continue;
      }
      const auto n = count_value(s.value);
      if (!n) {
        problem("histogram " + part + " not a count", line);
      } else if (part == "_count") {
        if (h.count) problem("second _count", line);
        h.count = n;
      } else if (le) {
        h.buckets.emplace_back(*le, *n);
      }
    }
  }

  for (const auto& [family, all] : histograms) {
    for (const auto& [labels, h] : all) {
      auto where = family + "{";
      for (const char c : labels) where += c == '\x1f' ? '=' : c == '\x1e' ? ',' : c;
      where += "}";
      if (h.buckets.empty()) {
        problem("histogram series without buckets", where);
        continue;
      }
      std::optional<double> last_le;
      std::uint64_t last = 0;
      for (const auto& [le_text, n] : h.buckets) {
        const auto le = float_value(le_text);
        if (!le || *le != *le) {
          problem("le \"" + le_text + "\" not a number", where);
          continue;
        }
        if (last_le && !(*le > *last_le)) problem("le " + le_text + " not ascending", where);
        if (n < last) problem("bucket le=" + le_text + " below the one before", where);
        last_le = le;
        last = n;
      }
      if (h.buckets.back().first != "+Inf") problem("last bucket not le=\"+Inf\"", where);
      if (!h.sum) problem("histogram series without _sum", where);
      if (!h.count) {
        problem("histogram series without _count", where);
      } else if (*h.count != h.buckets.back().second) {
        problem("_count differs from the +Inf bucket", where);
      }
    }
  }
  return e;
}

// check(), each problem a test failure.
exposition parse(const std::string& text) {
  auto e = check(text);
  for (const auto& p : e.problems) ADD_FAILURE() << p;
  return e;
}

// Whether check() finds no problem in `text`.
testing::AssertionResult valid(const std::string& text) {
  const auto e = check(text);
  if (e.problems.empty()) return testing::AssertionSuccess();
  auto r = testing::AssertionFailure() << e.problems.size() << " problems, the first ones:";
  for (std::size_t i = 0; i < e.problems.size() && i < 8; ++i) r << "\n  " << e.problems[i];
  return r;
}

// Whether check() finds a problem containing `what` in `text`.
testing::AssertionResult rejects(const std::string& text, std::string_view what) {
  const auto e = check(text);
  for (const auto& p : e.problems) {
    if (p.find(what) != std::string::npos) return testing::AssertionSuccess();
  }
  auto r = testing::AssertionFailure() << "no problem with \"" << what << "\" in:\n" << text << "problems:";
  for (const auto& p : e.problems) r << "\n  " << p;
  return r;
}

// The checker rejects what the format forbids (and what ours must never do), so that the tests
// below can fail.
TEST(Prometheus, TheCheckerRejectsMalformedExpositions) {
  const std::string ok_counter = "# HELP a_total x\n# TYPE a_total counter\n";
  const std::string ok_histogram = "# HELP h x\n# TYPE h histogram\n";
  const std::string ok = ok_counter + "a_total{b=\"c\\\\ \\\" \\n\"} 1\n" + ok_histogram +
                         "h_bucket{x=\"1\",le=\"0.5\"} 0\nh_bucket{x=\"1\",le=\"+Inf\"} 2\nh_sum{x=\"1\"} 1.5\n"
                         "h_count{x=\"1\"} 2\n";
  EXPECT_TRUE(valid(ok));

  // Lines.
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"c} 1\n", "not a sample line"));
  EXPECT_TRUE(rejects(ok_counter + "a_total one\n", "not a sample line"));
  EXPECT_TRUE(rejects(ok_counter + "a_total 1", "no newline"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"c\"d\"} 1\n", "expected ','"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"c\\t\"} 1\n", "invalid escape"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"\xff\"} 1\n", "not UTF-8"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{1b=\"c\"} 1\n", "invalid label name"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b-c=\"c\"} 1\n", "invalid label name"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{__x=\"c\"} 1\n", "reserved label name"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"1\",b=\"2\"} 1\n", "label name b repeated"));
  EXPECT_TRUE(rejects(ok_counter + "a_total{b=\"1\"} 1\na_total{b=\"1\"} 2\n", "duplicate series"));
  EXPECT_TRUE(rejects("# HELP a-b x\n", "invalid metric name"));
  // Families.
  EXPECT_TRUE(rejects("# HELP a x\n# TYPE a counter\na 1\n", "a 1"));  // a counter without _total
  EXPECT_TRUE(rejects("b_total 1\n", "sample without TYPE"));
  EXPECT_TRUE(rejects("# TYPE a gauge\n", "TYPE before HELP"));
  EXPECT_TRUE(rejects(ok_counter + "# HELP a_total y\na_total 1\n", "second HELP"));
  EXPECT_TRUE(rejects(ok_counter + "# TYPE a_total counter\na_total 1\n", "second TYPE"));
  EXPECT_TRUE(rejects(ok_counter + "a_total 1\n# HELP b x\n# TYPE b gauge\nb 1\na_total{c=\"d\"} 1\n", "not together"));
  EXPECT_TRUE(rejects(ok_counter + "a_total 1\n# HELP b x\n# TYPE b gauge\nb{le=\"1\"} 1\n", "le outside"));
  // Histograms.
  EXPECT_TRUE(rejects(ok_histogram + "h 1\n", "without _bucket"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                                     "h_sum 1\nh_count 1\n",
                      "not ascending"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                      "below the one before"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "not le=\"+Inf\""));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n", "differs"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n", "without _sum"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket{le=\"+Inf\"} 1\nh_sum 1\n", "without _count"));
  EXPECT_TRUE(
      rejects(ok_histogram + "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\nh_sum{x=\"y\"} 1\n", "without buckets"));
  EXPECT_TRUE(rejects(ok_histogram + "h_bucket 1\n", "bucket without le"));
  // The reported bug: a user label `le` in a bucket.
  EXPECT_TRUE(rejects(ok_histogram +
                          "h_bucket{service=\"s\",le=\"oops\",le=\"1e-06\"} 0\n"
                          "h_bucket{service=\"s\",le=\"oops\",le=\"+Inf\"} 0\nh_sum{service=\"s\",le=\"oops\"} 0\n"
                          "h_count{service=\"s\",le=\"oops\"} 0\n",
                      "label name le repeated"));
}

TEST(Prometheus, WritesTheCountersInTheTextFormat) {
  const auto p = parse(to_prometheus(sample_stats()));
  EXPECT_EQ(p.types.at("redlock_lock_operations_total"), "counter");
  EXPECT_EQ(p.samples.at("redlock_lock_operations_total"), "7");
  EXPECT_EQ(p.samples.at("redlock_lock_attempts_total"), "11");
  EXPECT_EQ(p.samples.at(R"(redlock_lock_outcomes_total{outcome="acquired"})"), "5");
  EXPECT_EQ(p.samples.at(R"(redlock_lock_outcomes_total{outcome="quorum_unavailable"})"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_lock_outcomes_total{outcome="rejected"})"), "0");  // zero, still written
  EXPECT_EQ(p.samples.at("redlock_extensions_total"), "3");
  EXPECT_EQ(p.samples.at("redlock_locks_lost_total"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_master_requests_total{master="0"})"), "20");
  EXPECT_EQ(p.samples.at(R"(redlock_master_request_outcomes_total{master="0",outcome="timeout"})"), "2");
  EXPECT_EQ(p.samples.at(R"(redlock_master_requests_in_progress{master="0"})"), "1");  // 20 - 17 - 2
  EXPECT_EQ(p.types.at("redlock_master_requests_in_progress"), "gauge");
  EXPECT_EQ(p.samples.at(R"(redlock_master_auth_failures_total{master="1"})"), "9");
}

TEST(Prometheus, HistogramBucketsAreCumulativeAndExact) {
  const auto p = parse(to_prometheus(sample_stats()));
  EXPECT_EQ(p.types.at("redlock_acquire_duration_seconds"), "histogram");
  // 3 µs, 100 µs, 5000 µs: boundaries at powers of two of microseconds.
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="2e-06"})"), "0");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="4e-06"})"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="6.4e-05"})"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="0.000128"})"), "2");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="0.004096"})"), "2");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="0.008192"})"), "3");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="+Inf"})"), "3");
  EXPECT_EQ(p.samples.at("redlock_acquire_duration_seconds_count"), "3");
  EXPECT_EQ(std::stod(p.samples.at("redlock_acquire_duration_seconds_sum")), 0.005103);
  // Non-decreasing, in increasing `le` order, ending with +Inf.
  std::uint64_t last = 0;
  double last_le = -1;
  std::size_t buckets = 0;
  for (const auto& key : p.order) {
    if (!key.starts_with("redlock_acquire_duration_seconds_bucket")) continue;
    ++buckets;
    const auto le_text = key.substr(key.find("le=\"") + 4, key.rfind('"') - key.find("le=\"") - 4);
    const double le = le_text == "+Inf" ? 1e300 : std::stod(le_text);
    const auto v = std::stoull(p.samples.at(key));
    EXPECT_GT(le, last_le) << key;
    EXPECT_GE(v, last) << key;
    last_le = le;
    last = v;
  }
  EXPECT_EQ(buckets, 27u);  // 2^0 .. 2^25 µs, then +Inf
  // Per master, labelled.
  EXPECT_EQ(p.samples.at(R"(redlock_master_request_duration_seconds_bucket{master="0",le="0.000256"})"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_master_request_duration_seconds_count{master="1"})"), "0");
}

TEST(Prometheus, LabelsPrefixAndEscaping) {
  prometheus_options o;
  o.prefix = "locks";
  o.masters = {"10.0.0.1:6379", "we\"ird\\name\nx"};
  o.labels = {{"service", "billing \"eu\""}};
  const auto p = parse(to_prometheus(sample_stats(), o));
  EXPECT_EQ(p.samples.at(R"(locks_lock_operations_total{service="billing \"eu\""})"), "7");
  EXPECT_EQ(p.samples.at(R"(locks_master_requests_total{service="billing \"eu\"",master="10.0.0.1:6379"})"), "20");
  EXPECT_EQ(p.samples.at(R"(locks_master_requests_total{service="billing \"eu\"",master="we\"ird\\name\nx"})"), "4");
  EXPECT_FALSE(p.samples.count("redlock_lock_operations_total"));
}

TEST(Prometheus, RepairsInvalidNamesAndValidateSaysWhy) {
  prometheus_options o;
  o.prefix = "my-app.locks";
  o.labels = {{"1zone", "a"}};
  const auto text = to_prometheus(sample_stats(), o);
  const auto p = parse(text);
  EXPECT_EQ(p.samples.at(R"(my_app_locks_lock_operations_total{_zone="a"})"), "7");

  std::string what;
  EXPECT_EQ(redlock::validate(o, &what), redlock::error::invalid_argument);
  EXPECT_NE(what.find("my-app.locks"), std::string::npos) << what;
  o.prefix = "ok:name";
  EXPECT_EQ(redlock::validate(o, &what), redlock::error::invalid_argument);
  EXPECT_NE(what.find("1zone"), std::string::npos) << what;
  o.labels = {{"master", "x"}};
  EXPECT_EQ(redlock::validate(o, &what), redlock::error::invalid_argument);
  EXPECT_NE(what.find("reserved"), std::string::npos) << what;
  o.labels = {{"__name__", "x"}};
  EXPECT_EQ(redlock::validate(o, &what), redlock::error::invalid_argument);
  o.labels = {{"zone", "any \"text\" \n at all"}};
  EXPECT_FALSE(redlock::validate(o, &what));
  EXPECT_FALSE(redlock::validate(prometheus_options{}));
}

TEST(Prometheus, ClientOnlyWithoutPerMasterSeries) {
  prometheus_options o;
  o.per_master = false;
  const auto text = to_prometheus(sample_stats(), o);
  parse(text);
  EXPECT_EQ(text.find("redlock_master_"), std::string::npos);
  EXPECT_EQ(text.find("master=\""), std::string::npos);
  // Appending keeps what was there.
  std::string out = "# before\n";
  redlock::append_prometheus(out, sample_stats(), o);
  EXPECT_EQ(out, "# before\n" + text);
}

TEST(Prometheus, EmptyStatsStillWriteEveryClientSeries) {
  const auto p = parse(to_prometheus(client_stats{}));
  EXPECT_EQ(p.samples.at("redlock_lock_operations_total"), "0");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="+Inf"})"), "0");
  EXPECT_EQ(p.samples.at("redlock_acquire_duration_seconds_sum"), "0");
}

// The exposition is valid whatever the options: names repaired, reserved ones renamed.
TEST(Prometheus, EveryOptionSetGivesAValidExposition) {
  std::vector<std::pair<std::string, prometheus_options>> sets;
  sets.emplace_back("default", prometheus_options{});
  sets.emplace_back("per_master off", prometheus_options{});
  sets.back().second.per_master = false;
  sets.emplace_back("no prefix", prometheus_options{});
  sets.back().second.prefix.clear();
  sets.emplace_back("odd prefix", prometheus_options{});
  sets.back().second.prefix = "9 my-app.locks::é";
  sets.emplace_back("reserved and invalid labels", prometheus_options{});
  sets.back().second.labels = {
      {"le", "oops"},  {"master", "m"},       {"outcome", "o"},          {"__x", "y"},     {"__name__", "n"},
      {"1zone", "a"},  {"", "empty"},         {"bad name!", "b"},        {"--", "dashes"}, {"quantile", "q"},
      {"zürich", "z"}, {"label_le", "taken"}, {"service", "\"q\" \\ \n"}};
  sets.emplace_back("duplicate labels", prometheus_options{});
  sets.back().second.labels = {{"zone", "a"}, {"zone", "b"}, {"zone_2", "c"},
                               {"a-b", "d"},  {"a.b", "e"},  {"zone", "f"}};
  sets.emplace_back("odd master labels", prometheus_options{});
  sets.back().second.masters = {"", "a\"b\\c\nd", "zürich:6379"};
  sets.back().second.labels = {{"master", "x"}, {"le", "+Inf"}};

  for (const auto& [what, opts] : sets) {
    for (const auto& stats : {client_stats{}, sample_stats(), busy_stats()}) {
      const auto text = to_prometheus(stats, opts);
      EXPECT_TRUE(valid(text)) << what;
      std::string appended = "# HELP other x\n# TYPE other gauge\nother 1\n";
      redlock::append_prometheus(appended, stats, opts);
      EXPECT_TRUE(valid(appended)) << what;
    }
  }
  // busy_stats() reaches the hazard gauges (+Inf among them), the overflow bucket, the log counters.
  const auto p = parse(to_prometheus(busy_stats()));
  EXPECT_EQ(p.samples.at(R"(redlock_master_quarantine_seconds{master="1"})"), "+Inf");
  EXPECT_GT(std::stod(p.samples.at(R"(redlock_master_quarantine_seconds{master="0"})")), 0.0);
  EXPECT_EQ(p.samples.at(R"(redlock_master_unguarded{master="2"})"), "1");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="33.554432"})"), "3");
  EXPECT_EQ(p.samples.at(R"(redlock_acquire_duration_seconds_bucket{le="+Inf"})"), "4");
  EXPECT_EQ(p.samples.at("redlock_log_messages_total"), "4");
  EXPECT_EQ(p.samples.at("redlock_log_sink_errors_total"), "3");  // the client's and its masters'
}

TEST(Prometheus, ReservedLabelNamesAreRenamed) {
  prometheus_options o;
  o.labels = {{"le", "oops"}, {"master", "m"}, {"outcome", "o"}, {"__x", "y"}};
  const auto p = parse(to_prometheus(sample_stats(), o));
  const std::string own = R"(label_le="oops",label_master="m",label_outcome="o",label___x="y")";
  EXPECT_EQ(p.samples.at("redlock_lock_operations_total{" + own + "}"), "7");
  EXPECT_EQ(p.samples.at("redlock_lock_outcomes_total{" + own + R"(,outcome="acquired"})"), "5");
  EXPECT_EQ(p.samples.at("redlock_acquire_duration_seconds_bucket{" + own + R"(,le="4e-06"})"), "1");
  EXPECT_EQ(p.samples.at("redlock_acquire_duration_seconds_count{" + own + "}"), "3");
  EXPECT_EQ(p.samples.at("redlock_master_request_outcomes_total{" + own + R"(,master="0",outcome="timeout"})"), "2");
  EXPECT_EQ(p.samples.at("redlock_master_request_duration_seconds_bucket{" + own + R"(,master="0",le="+Inf"})"), "1");
  // Repaired first, then renamed when the repair gives a reserved name.
  o.labels = {{"--x", "a"}, {"l.e", "b"}, {"", "c"}};
  const auto q = parse(to_prometheus(sample_stats(), o));
  EXPECT_EQ(q.samples.at(R"(redlock_lock_operations_total{label___x="a",l_e="b",_="c"})"), "7");
}

TEST(Prometheus, DuplicateLabelNamesGetASuffix) {
  prometheus_options o;
  o.labels = {{"zone", "a"}, {"zone", "b"}, {"zone_2", "c"}, {"a-b", "d"}, {"a.b", "e"}, {"zone", "f"}};
  auto p = parse(to_prometheus(sample_stats(), o));
  EXPECT_EQ(
      p.samples.at(R"(redlock_lock_operations_total{zone="a",zone_2="b",zone_2_2="c",a_b="d",a_b_2="e",zone_3="f"})"),
      "7");
  // A renamed reserved name meeting a user's label of that name: the earlier keeps it.
  o.labels = {{"label_le", "mine"}, {"le", "oops"}};
  p = parse(to_prometheus(sample_stats(), o));
  EXPECT_EQ(p.samples.at(R"(redlock_lock_operations_total{label_le="mine",label_le_2="oops"})"), "7");
  o.labels = {{"le", "oops"}, {"label_le", "mine"}};
  p = parse(to_prometheus(sample_stats(), o));
  EXPECT_EQ(p.samples.at(R"(redlock_lock_operations_total{label_le="oops",label_le_2="mine"})"), "7");
}

TEST(Prometheus, ValidateListsEveryProblem) {
  prometheus_options o;
  o.prefix = "my-app";
  o.labels = {{"1zone", "a"}, {"le", "b"}, {"__x", "c"}, {"zone", "d"},   {"master", "e"},
              {"zone", "f"},  {"", "g"},   {"ok", "h"},  {"outcome", "i"}};
  std::string what;
  EXPECT_EQ(redlock::validate(o, &what), redlock::error::invalid_argument);
  for (const char* expected : {"prefix \"my-app\"", "label \"1zone\"", "label \"le\"", "label \"__x\"",
                               "label \"zone\"", "label \"master\"", "label \"\"", "label \"outcome\""}) {
    EXPECT_NE(what.find(expected), std::string::npos) << expected << " not in: " << what;
  }
  EXPECT_EQ(what.find("\"ok\""), std::string::npos) << what;
  // One problem per entry above but "ok" and the second "zone": 8, separated by "; ".
  std::size_t separators = 0;
  for (auto at = what.find("; "); at != std::string::npos; at = what.find("; ", at + 2)) ++separators;
  EXPECT_EQ(separators, 7u) << what;
  EXPECT_NE(what.find("reserved"), std::string::npos) << what;

  // Nothing wrong: no error, `what` untouched.
  what = "unchanged";
  o.prefix = "app";
  o.labels = {{"zone", "a"}, {"label_le", "b"}};
  EXPECT_FALSE(redlock::validate(o, &what));
  EXPECT_EQ(what, "unchanged");
}

}  // namespace
