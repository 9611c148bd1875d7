// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/retry.hpp>
#include <redlock/core/validity.hpp>

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;
using redlock::core::drift;
using redlock::core::drift_policy;
using redlock::core::validity;
using redlock::core::validity_deadline;

// A clock that only moves when the test says so: the core takes time as input, so "controlling the
// clock" is choosing time points.
struct manual_clock {
  using duration = std::chrono::microseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<manual_clock>;
  [[maybe_unused]] static constexpr bool is_steady = true;  // a Clock must say
};
using tp = manual_clock::time_point;

TEST(validity, drift_is_one_percent_plus_two_ms_by_default) {
  EXPECT_EQ(drift(10'000'000us, drift_policy{}), 102'000us);  // 10 s → 100 ms + 2 ms
  EXPECT_EQ(drift(300'000us, drift_policy{}), 5'000us);       // 300 ms → 3 ms + 2 ms
  EXPECT_EQ(drift(1us, drift_policy{}), 2'001us);             // rounded up, never in the holder's favour
  EXPECT_EQ(drift(10'000us, drift_policy{0.0, 0ms}), 0us);
}

TEST(validity, is_ttl_minus_elapsed_minus_drift) {
  const tp start{5s};
  EXPECT_EQ(validity<manual_clock>(10'000'000us, start, start + 3ms, drift_policy{}),
            10'000'000us - 3'000us - 102'000us);
  EXPECT_EQ(validity_deadline<manual_clock>(10'000'000us, start, drift_policy{}), start + 10'000'000us - 102'000us);
}

TEST(validity, expires_exactly_at_the_edge) {
  const tp start{0s};
  const auto ttl = 100'000us;  // drift 3 ms → usable 97 ms
  EXPECT_GT(validity<manual_clock>(ttl, start, start + 96'999us, drift_policy{}), 0us);
  EXPECT_EQ(validity<manual_clock>(ttl, start, start + 97'000us, drift_policy{}), 0us);   // not usable
  EXPECT_LT(validity<manual_clock>(ttl, start, start + 120'000us, drift_policy{}), 0us);  // slow majority
}

TEST(retry, delay_is_base_plus_jitter_fraction) {
  redlock::core::retry_policy p;
  p.base_delay = 100ms;
  p.jitter = 50ms;
  EXPECT_EQ(redlock::core::retry_delay(p, 0.0), 100ms);
  EXPECT_EQ(redlock::core::retry_delay(p, 0.5), 125ms);
  EXPECT_EQ(redlock::core::retry_delay(p, 2.0), 150ms);  // clamped
}

TEST(retry, bounded_by_attempts_and_by_total_wait) {
  redlock::core::retry_policy p;
  p.max_attempts = 3;
  p.max_wait = 0ms;
  EXPECT_TRUE(redlock::core::may_retry(p, 2, 10s, 100ms));
  EXPECT_FALSE(redlock::core::may_retry(p, 3, 0ms, 100ms));
  p.max_attempts = 0;
  p.max_wait = 1000ms;
  EXPECT_TRUE(redlock::core::may_retry(p, 50, 800ms, 200ms));
  EXPECT_FALSE(redlock::core::may_retry(p, 50, 801ms, 200ms));
  p.max_wait = 0ms;  // neither bound: never retry rather than retry forever
  EXPECT_FALSE(redlock::core::may_retry(p, 1, 0ms, 1ms));
}

}  // namespace
