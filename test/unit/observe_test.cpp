// SPDX-License-Identifier: BSL-1.0
// The observability value types (no server): histogram buckets and percentiles, snapshot
// arithmetic, level filtering, the logger's delivery, and the text sanitizer.

#include <redlock/detail/observe.hpp>
#include <redlock/error.hpp>
#include <redlock/observe.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using redlock::connection_stats;
using redlock::latency_histogram;
using redlock::log_level;
using us = std::chrono::microseconds;
using H = latency_histogram;

// ---- buckets ------------------------------------------------------------------------------------

TEST(LatencyHistogram, BucketsAtTheirBoundaries) {
  EXPECT_EQ(H::bucket_count, 97u);
  // One bucket per microsecond below 4 µs.
  EXPECT_EQ(H::bucket_of(0), 0u);
  EXPECT_EQ(H::bucket_of(1), 1u);
  EXPECT_EQ(H::bucket_of(3), 3u);
  // Then four per power of two.
  EXPECT_EQ(H::bucket_of(4), 4u);
  EXPECT_EQ(H::bucket_of(7), 7u);
  EXPECT_EQ(H::bucket_of(8), 8u);
  EXPECT_EQ(H::bucket_of(9), 8u);
  EXPECT_EQ(H::bucket_of(10), 9u);
  EXPECT_EQ(H::bucket_of(15), 11u);
  EXPECT_EQ(H::bucket_of(16), 12u);
  EXPECT_EQ(H::bucket_of(1023), 4u * 8 + 3);  // [896, 1024)
  EXPECT_EQ(H::bucket_of(1024), 4u * 9);      // [1024, 1280)
  EXPECT_EQ(H::bucket_of(1279), 4u * 9);
  EXPECT_EQ(H::bucket_of(1280), 4u * 9 + 1);
  // The last regular bucket ends at 2^25 µs (~33.6 s); everything above overflows.
  EXPECT_EQ(H::bucket_of((std::uint64_t{1} << 25) - 1), 95u);
  EXPECT_EQ(H::bucket_of(std::uint64_t{1} << 25), 96u);
  EXPECT_EQ(H::bucket_of(UINT64_MAX), 96u);
  EXPECT_EQ(H::lower_bound_us(96), std::uint64_t{1} << 25);
  EXPECT_EQ(H::upper_bound_us(95), std::uint64_t{1} << 25);
  EXPECT_EQ(H::upper_bound_us(96), UINT64_MAX);
}

TEST(LatencyHistogram, BoundsTileTheRangeAndAgreeWithBucketOf) {
  EXPECT_EQ(H::lower_bound_us(0), 0u);
  for (std::size_t b = 0; b + 1 < H::bucket_count; ++b) {
    const auto lo = H::lower_bound_us(b);
    const auto hi = H::upper_bound_us(b);
    ASSERT_LT(lo, hi) << b;
    EXPECT_EQ(hi, H::lower_bound_us(b + 1)) << b;  // no gap, no overlap
    EXPECT_EQ(H::bucket_of(lo), b) << b;
    EXPECT_EQ(H::bucket_of(hi - 1), b) << b;
    // Relative width at most 25% (from 4 µs up).
    if (lo >= 4) {
      EXPECT_LE((hi - lo) * 4, lo) << b;
    }
  }
}

TEST(LatencyHistogram, RecordCountsSumsAndKeepsTheMaximum) {
  H h;
  h.record(us{0});
  h.record(us{-5});  // a clock oddity counts as 0
  h.record(us{9});
  h.record(40s);
  EXPECT_EQ(h.count, 4u);
  EXPECT_EQ(h.buckets[0], 2u);
  EXPECT_EQ(h.buckets[8], 1u);
  EXPECT_EQ(h.buckets[96], 1u);
  EXPECT_EQ(h.sum, us{9} + 40s);
  EXPECT_EQ(h.max, 40s);
  EXPECT_EQ(h.mean(), (us{9} + 40s) / 4);
}

// ---- percentiles --------------------------------------------------------------------------------

TEST(LatencyHistogram, PercentilesOfAnEmptyHistogramAreZero) {
  H h;
  EXPECT_EQ(h.percentile(50), us{0});
  EXPECT_EQ(h.percentile(100), us{0});
  EXPECT_EQ(h.mean(), us{0});
}

TEST(LatencyHistogram, PercentilesOfAUniformSampleAreWithinTheBucketWidth) {
  H h;
  for (int v = 1; v <= 10000; ++v) h.record(us{v});
  for (const double p : {1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9}) {
    const double exact = p / 100.0 * 10000;
    const auto est = static_cast<double>(h.percentile(p).count());
    EXPECT_NEAR(est, exact, exact * 0.125 + 1) << "p" << p;  // one bucket is at most 25% wide
  }
  EXPECT_EQ(h.percentile(100), us{10000});  // the maximum, exactly
  EXPECT_LE(h.percentile(0), us{1});
  // Out-of-range arguments are clamped.
  EXPECT_EQ(h.percentile(250), h.percentile(100));
  EXPECT_EQ(h.percentile(-3), h.percentile(0));
}

TEST(LatencyHistogram, PercentilesPickTheRightBucket) {
  H h;
  for (int i = 0; i < 90; ++i) h.record(us{100});   // bucket [96, 112)
  for (int i = 0; i < 10; ++i) h.record(us{5000});  // bucket [4096, 5120)
  EXPECT_GE(h.percentile(50), us{96});
  EXPECT_LE(h.percentile(50), us{112});
  EXPECT_GE(h.percentile(90), us{96});
  EXPECT_LE(h.percentile(90), us{112});  // the 90th sample is still 100 µs
  EXPECT_GE(h.percentile(91), us{4096});
  EXPECT_LE(h.percentile(91), us{5000});  // never above the maximum
  EXPECT_EQ(h.percentile(100), us{5000});
}

TEST(LatencyHistogram, OverflowPercentileIsBoundedByTheMaximum) {
  H h;
  h.record(60s);
  EXPECT_EQ(h.percentile(50), 60s);
  EXPECT_EQ(h.percentile(100), 60s);
}

// ---- arithmetic ---------------------------------------------------------------------------------

TEST(LatencyHistogram, SnapshotArithmetic) {
  H a, b;
  a.record(us{10});
  a.record(us{1000});
  b = a;
  b.record(us{10});
  b.record(us{20000});
  const H delta = b - a;  // what happened between the snapshots
  EXPECT_EQ(delta.count, 2u);
  EXPECT_EQ(delta.sum, us{20010});
  EXPECT_EQ(delta.buckets[H::bucket_of(10)], 1u);
  EXPECT_EQ(delta.buckets[H::bucket_of(1000)], 0u);
  EXPECT_EQ(delta.buckets[H::bucket_of(20000)], 1u);
  EXPECT_EQ(delta.max, us{20000});
  const H total = a + b;
  EXPECT_EQ(total.count, 6u);
  EXPECT_EQ(total.sum, a.sum + b.sum);
  EXPECT_EQ(total.max, us{20000});
  // Subtracting a later snapshot saturates instead of wrapping around.
  const H backwards = a - b;
  EXPECT_EQ(backwards.count, 0u);
  EXPECT_EQ(backwards.sum, us{0});
  EXPECT_EQ(backwards.buckets[H::bucket_of(10)], 0u);
}

TEST(ConnectionStats, OutcomesAddUp) {
  connection_stats s;
  s.requests = 20;
  s.ok = 10;
  s.server_errors = 2;
  s.timeouts = 1;
  s.not_connected = 1;
  s.connection_lost = 1;
  s.protocol_errors = 1;
  s.cancelled = 1;
  s.aborted = 1;
  s.invalid = 1;
  EXPECT_EQ(s.completed(), 19u);
  EXPECT_EQ(s.errors(), 9u);
  EXPECT_EQ(s.in_progress(), 1u);
  s.requests = 18;  // a snapshot torn mid-update never reports a negative backlog
  EXPECT_EQ(s.in_progress(), 0u);
}

TEST(ConnectionStats, SnapshotArithmeticCoversEveryCounter) {
  // Every field set to a distinct value: a counter forgotten by += or -= shows up.
  connection_stats a;
  std::uint64_t v = 1;
  for (auto* f : {&a.requests,         &a.ok,
                  &a.server_errors,    &a.timeouts,
                  &a.not_connected,    &a.connection_lost,
                  &a.protocol_errors,  &a.cancelled,
                  &a.aborted,          &a.invalid,
                  &a.written,          &a.replies,
                  &a.dropped_replies,  &a.pushes,
                  &a.bytes_written,    &a.bytes_read,
                  &a.connect_attempts, &a.connects,
                  &a.connect_failures, &a.auth_failures,
                  &a.disconnects,      &a.stalls,
                  &a.log_messages,     &a.log_sink_errors}) {
    *f = v++;
  }
  a.latency.record(us{5});
  const connection_stats twice = a + a;
  EXPECT_EQ(twice.requests, 2 * a.requests);
  EXPECT_EQ(twice.log_sink_errors, 2 * a.log_sink_errors);
  EXPECT_EQ(twice.disconnects, 2 * a.disconnects);
  EXPECT_EQ(twice.latency.count, 2u);
  EXPECT_EQ(twice - a, a);  // every counter, the histogram included
  EXPECT_EQ(
      a - a, connection_stats{} + [&] {
        connection_stats m;  // only max survives a subtraction
        m.latency.max = a.latency.max;
        return m;
      }());
}

TEST(ClientStats, TotalsAndDifferences) {
  redlock::client_stats earlier, later;
  earlier.masters.resize(3);
  later.masters.resize(3);
  for (std::size_t i = 0; i < 3; ++i) {
    earlier.masters[i].requests = 10 * (i + 1);
    later.masters[i].requests = 10 * (i + 1) + i;
    later.masters[i].latency.record(us{100});
  }
  earlier.lock_operations = 5;
  later.lock_operations = 9;
  later.locks_acquired = 3;
  later.locks_not_acquired = 1;
  later.acquire_latency.record(us{700});
  EXPECT_EQ(later.total().requests, 10u + 21 + 32);
  EXPECT_EQ(later.total().latency.count, 3u);
  const auto delta = later - earlier;
  EXPECT_EQ(delta.lock_operations, 4u);
  EXPECT_EQ(delta.locks_completed(), 4u);
  ASSERT_EQ(delta.masters.size(), 3u);
  EXPECT_EQ(delta.masters[0].requests, 0u);
  EXPECT_EQ(delta.masters[2].requests, 2u);
  EXPECT_EQ(delta.acquire_latency.count, 1u);
  // Adding a client with more masters keeps the extra ones.
  redlock::client_stats small;
  small.masters.resize(1);
  small += later;
  EXPECT_EQ(small.masters.size(), 3u);
  EXPECT_EQ(small.masters[2].requests, 32u);
}

// ---- logging ------------------------------------------------------------------------------------

TEST(LogOptions, LevelFiltering) {
  redlock::log_options o;
  // No sink: nothing, whatever the level.
  for (auto l : {log_level::trace, log_level::debug, log_level::info, log_level::warning, log_level::error})
    EXPECT_FALSE(o.enabled(l));
  o.sink = [](log_level, std::string_view) {};
  o.level = log_level::warning;
  EXPECT_FALSE(o.enabled(log_level::trace));
  EXPECT_FALSE(o.enabled(log_level::debug));
  EXPECT_FALSE(o.enabled(log_level::info));
  EXPECT_TRUE(o.enabled(log_level::warning));
  EXPECT_TRUE(o.enabled(log_level::error));
  EXPECT_FALSE(o.enabled(log_level::off));
  o.level = log_level::trace;
  EXPECT_TRUE(o.enabled(log_level::trace));
  o.level = log_level::off;
  EXPECT_FALSE(o.enabled(log_level::error));
  EXPECT_EQ(redlock::to_string(log_level::warning), "warning");
  EXPECT_EQ(redlock::to_string(log_level::off), "off");
}

TEST(Logger, FiltersCountsAndSwallowsSinkExceptions) {
  std::vector<std::pair<log_level, std::string>> got;
  redlock::log_options o;
  o.sink = [&](log_level l, std::string_view m) {
    if (m == "throw") throw std::runtime_error{"sink failure"};
    if (m == "throw int") throw 42;
    got.emplace_back(l, std::string{m});
  };
  o.level = log_level::info;
  o.prefix = "p";
  const redlock::detail::logger lg{o};
  EXPECT_EQ(lg.prefix(), "p");
  EXPECT_FALSE(lg.enabled(log_level::debug));
  EXPECT_TRUE(lg.enabled(log_level::info));
  EXPECT_FALSE(lg.enabled(log_level::off));
  lg.write(log_level::info, "one");
  lg.write(log_level::error, "two");
  lg.write(log_level::debug, "filtered");  // a caller that formatted without checking: counted, not delivered
  EXPECT_NO_THROW(lg.write(log_level::error, "throw"));
  EXPECT_NO_THROW(lg.write(log_level::error, "throw int"));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (std::pair<log_level, std::string>{log_level::info, "one"}));
  EXPECT_EQ(got[1].first, log_level::error);
  EXPECT_EQ(lg.messages(), 5u);
  EXPECT_EQ(lg.sink_errors(), 2u);

  const redlock::detail::logger off;  // default: disabled at every level
  EXPECT_FALSE(off.enabled(log_level::error));
  off.write(log_level::error, "nobody listens");  // no sink: must not crash
}

TEST(Printable, EscapesRedactsAndCuts) {
  using redlock::detail::printable;
  EXPECT_EQ(printable("plain text", 100), "plain text");
  EXPECT_EQ(printable("a\r\nb\x01\xff\\", 100), "a\\x0d\\x0ab\\x01\\xff\\\\");
  EXPECT_EQ(printable("0123456789", 4), "0123...");
  EXPECT_EQ(printable("0123", 4), "0123");
  EXPECT_EQ(printable("ERR args: 'AUTH' 'default' 's3cret' and s3cret", 200, {"s3cret"}),
            "ERR args: 'AUTH' 'default' '***' and ***");
  // Redaction happens before cutting, so a cut cannot leave half a secret behind.
  EXPECT_EQ(printable("xxs3cret", 4, {"s3cret"}), "xx**...");
  EXPECT_EQ(printable("abc", 10, {""}), "abc");  // an empty secret redacts nothing
  EXPECT_EQ(printable("aaaa", 100, {"a"}), "************");
  EXPECT_EQ(printable("tok tok", 100, {"tok", "k t"}), "*** ***");
  // A long text is cut without being copied whole, and a secret straddling the cut is still hidden.
  const std::string big = std::string(1 << 20, 'x');
  EXPECT_EQ(printable(big, 8), "xxxxxxxx...");
  EXPECT_EQ(printable("abcdefgh" + std::string{"SECRET"} + "tail", 10, {"SECRET"}), "abcdefgh**...");
  EXPECT_EQ(printable("abcdefghSECRET", 10, {"SECRET"}), "abcdefgh**...");
}

TEST(ShortToken, FirstEightCharacters) {
  EXPECT_EQ(redlock::detail::short_token("0123456789abcdef0123456789abcdef01234567"), "01234567");
  EXPECT_EQ(redlock::detail::short_token("abc"), "abc");
}

TEST(FormatHelpers, DescribeAndDuration) {
  EXPECT_EQ(redlock::detail::describe(make_error_code(redlock::error::master_timeout)),
            "the node did not reply before the request's deadline [redlock:6]");
  EXPECT_EQ(redlock::detail::format_duration(850us), "850 us");
  EXPECT_EQ(redlock::detail::format_duration(12340us), "12.34 ms");
  EXPECT_EQ(redlock::detail::format_duration(1500ms), "1.500 s");
  EXPECT_EQ(redlock::detail::format_duration(-5ms), "0 us");
}

}  // namespace
