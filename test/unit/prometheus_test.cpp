// SPDX-License-Identifier: BSL-1.0
// The Prometheus text export of client_stats (no server): the exposition's grammar, values,
// cumulative histogram buckets, escaping, names and options.

#include <redlock/error.hpp>
#include <redlock/prometheus.hpp>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
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

struct parsed {
  std::map<std::string, std::string> types;    // family -> type
  std::map<std::string, std::string> samples;  // "name{labels}" -> value
  std::vector<std::string> order;              // sample keys as written
};

bool name_start(char c, bool colon) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':');
}
bool name_char(char c, bool colon) { return name_start(c, colon) || std::isdigit(static_cast<unsigned char>(c)); }

// Reads a name at `i` (metric names may hold ':', label names not); empty when there is none.
std::string read_name(const std::string& line, std::size_t& i, bool colon) {
  const auto from = i;
  if (i < line.size() && name_start(line[i], colon)) {
    while (i < line.size() && name_char(line[i], colon)) ++i;
  }
  return line.substr(from, i - from);
}

// Reads `{name="value",...}` at `i` (values escape only \\, \" and \n); false when malformed.
bool read_labels(const std::string& line, std::size_t& i) {
  if (i >= line.size() || line[i] != '{') return true;  // no labels
  ++i;
  for (;;) {
    if (read_name(line, i, false).empty()) return false;
    if (line.compare(i, 2, "=\"") != 0) return false;
    for (i += 2;; ++i) {
      if (i >= line.size() || line[i] == '\n') return false;
      if (line[i] == '"') break;
      if (line[i] == '\\') {
        if (++i >= line.size() || (line[i] != '\\' && line[i] != '"' && line[i] != 'n')) return false;
      }
    }
    ++i;
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    if (i < line.size() && line[i] == '}') {
      ++i;
      return true;
    }
    return false;
  }
}

bool valid_value(const std::string& v) {
  if (v == "+Inf" || v == "-Inf" || v == "NaN") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  (void)std::strtod(v.c_str(), &end);
  return end == v.c_str() + v.size();
}

// Checks every line against the text format (0.0.4) and that each sample follows its family's
// HELP and TYPE; returns the samples. (A hand-written reader: GCC 12's std::regex warns under
// the sanitizer builds.)
parsed parse(const std::string& text) {
  parsed p;
  std::set<std::string> helped;
  std::istringstream in{text};
  std::string line;
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      std::size_t i = 7;
      const auto family = read_name(line, i, true);
      EXPECT_FALSE(family.empty()) << line;
      EXPECT_TRUE(i < line.size() && line[i] == ' ' && i + 1 < line.size()) << line;
      const auto rest = i + 1 < line.size() ? line.substr(i + 1) : std::string{};
      if (line[2] == 'H') {
        EXPECT_TRUE(helped.insert(family).second) << "second HELP for " << family;
      } else {
        EXPECT_TRUE(helped.count(family)) << "TYPE before HELP: " << line;
        EXPECT_TRUE(p.types.emplace(family, rest).second) << "second TYPE for " << family;
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram") << line;
      }
      continue;
    }
    std::size_t i = 0;
    const auto name = read_name(line, i, true);
    const auto labels_from = i;
    const bool labels_ok = !name.empty() && read_labels(line, i);
    const auto labels = line.substr(labels_from, i - labels_from);
    const bool spaced = labels_ok && i < line.size() && line[i] == ' ';
    const auto value = spaced ? line.substr(i + 1) : std::string{};
    if (!spaced || !valid_value(value)) {
      ADD_FAILURE() << "not a sample line: [" << line << "]";
      continue;
    }
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (!p.types.count(family) && family.ends_with(sfx)) family.resize(family.size() - sfx.size());
    }
    EXPECT_TRUE(p.types.count(family)) << "sample without TYPE: " << line;
    if (p.types[family] == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << line;
    }
    const std::string key = name + labels;
    EXPECT_TRUE(p.samples.emplace(key, value).second) << "duplicate series: " << key;
    p.order.push_back(key);
  }
  return p;
}

// The reader above rejects what the format forbids, so that the tests below can fail.
TEST(Prometheus, TheTestsReaderRejectsMalformedLines) {
  EXPECT_NONFATAL_FAILURE(parse("# HELP a_total x\n# TYPE a_total counter\na_total{b=\"c} 1\n"), "not a sample line");
  EXPECT_NONFATAL_FAILURE(parse("# HELP a_total x\n# TYPE a_total counter\na_total one\n"), "not a sample line");
  EXPECT_NONFATAL_FAILURE(parse("# HELP a x\n# TYPE a counter\na 1\n"), "a 1");  // a counter without _total
  EXPECT_NONFATAL_FAILURE(parse("b_total 1\n"), "sample without TYPE");
  EXPECT_NONFATAL_FAILURE(parse("# TYPE a gauge\n"), "TYPE before HELP");
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

}  // namespace
