// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/link_health.hpp>

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using redlock::core::backoff_policy;
using redlock::core::next_reconnect;
using redlock::core::stall_point;

const clock_type::time_point t0{};

TEST(stall_point, is_the_deadline_plus_the_grace_for_short_requests) {
  // A 250 ms lock request with the default 1 s grace: stalled 1.25 s after it was queued.
  EXPECT_EQ(stall_point<clock_type>(t0, t0 + 250ms, 1000ms), t0 + 1250ms);
}

TEST(stall_point, is_twice_the_length_of_requests_longer_than_the_grace) {
  // A 3 s release is not judged by a 1 s grace: stalled at 6 s.
  EXPECT_EQ(stall_point<clock_type>(t0, t0 + 3s, 1000ms), t0 + 6s);
  // A zero grace still leaves a request its own length beyond the deadline.
  EXPECT_EQ(stall_point<clock_type>(t0, t0 + 100ms, 0ms), t0 + 200ms);
}

TEST(stall_point, never_for_requests_without_deadline_and_never_overflows) {
  EXPECT_EQ(stall_point<clock_type>(t0, clock_type::time_point::max(), 1000ms), clock_type::time_point::max());
  const auto late = clock_type::time_point::max() - 10ms;
  EXPECT_EQ(stall_point<clock_type>(late - 1s, late, 1000ms), clock_type::time_point::max());
  // A negative grace is treated as none, and a deadline already past adds only the grace.
  EXPECT_EQ(stall_point<clock_type>(t0 + 1s, t0 + 500ms, -5ms), t0 + 500ms);
  EXPECT_EQ(stall_point<clock_type>(t0 + 1s, t0 + 500ms, 100ms), t0 + 600ms);
}

TEST(next_reconnect, a_silent_failure_retries_at_the_first_step_without_growing) {
  const backoff_policy p{50ms, 2000ms, 0.0};
  auto s = next_reconnect(p, 5, true, 0.5);
  EXPECT_EQ(s.delay, 50ms);
  EXPECT_EQ(s.next_attempt, 5u);  // a later refusal still backs off from where it was
}

TEST(next_reconnect, a_refusal_backs_off_exponentially_up_to_the_cap) {
  const backoff_policy p{50ms, 2000ms, 0.0};
  std::uint32_t attempt = 0;
  std::chrono::milliseconds last{0};
  for (int i = 0; i < 10; ++i) {
    const auto s = next_reconnect(p, attempt, false, 0.0);
    EXPECT_GE(s.delay, last);
    last = s.delay;
    attempt = s.next_attempt;
  }
  EXPECT_EQ(last, 2000ms);
  EXPECT_EQ(next_reconnect(p, 64, false, 0.0).next_attempt, 64u);  // bounded
}

}  // namespace
