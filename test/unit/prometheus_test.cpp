// The Prometheus text export of client_stats (no server): the exposition's grammar, values,
// cumulative histogram buckets, escaping, names and options.

#include <redlock/error.hpp>
#include <redlock/prometheus.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <regex>
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

// Checks every line against the text format (0.0.4) and that each sample follows its family's
// HELP and TYPE; returns the samples.
parsed parse(const std::string& text) {
  static const std::regex comment{R"(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$)"};
  static const std::regex sample{
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? ([-+]?([0-9.]+(e[-+]?[0-9]+)?|Inf|NaN))$)re"};
  parsed p;
  std::set<std::string> helped;
  std::istringstream in{text};
  std::string line;
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, comment)) {
      if (m[1] == "HELP") {
        EXPECT_TRUE(helped.insert(m[2]).second) << "second HELP for " << m[2];
      } else {
        EXPECT_TRUE(helped.count(m[2])) << "TYPE before HELP: " << line;
        EXPECT_TRUE(p.types.emplace(m[2], m[3]).second) << "second TYPE for " << m[2];
        EXPECT_TRUE(m[3] == "counter" || m[3] == "gauge" || m[3] == "histogram") << line;
      }
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not a sample line: [" << line << "]";
      continue;
    }
    const std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (!p.types.count(family) && family.ends_with(sfx)) family.resize(family.size() - sfx.size());
    }
    EXPECT_TRUE(p.types.count(family)) << "sample without TYPE: " << line;
    if (p.types[family] == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << line;
    }
    const std::string key = name + std::string{m[2]};
    EXPECT_TRUE(p.samples.emplace(key, m[7]).second) << "duplicate series: " << key;
    p.order.push_back(key);
  }
  return p;
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
