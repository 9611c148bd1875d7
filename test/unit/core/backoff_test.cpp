// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/backoff.hpp>

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using redlock::core::backoff_delay;
using redlock::core::backoff_policy;

TEST(backoff, grows_exponentially_without_jitter) {
  backoff_policy p{10ms, 1000ms, 0.0};
  EXPECT_EQ(backoff_delay(p, 0, 0.7), 10ms);
  EXPECT_EQ(backoff_delay(p, 1, 0.7), 20ms);
  EXPECT_EQ(backoff_delay(p, 3, 0.7), 80ms);
}

TEST(backoff, is_capped_even_for_huge_attempts) {
  backoff_policy p{10ms, 1000ms, 0.0};
  EXPECT_EQ(backoff_delay(p, 7, 0.0), 1000ms);
  EXPECT_EQ(backoff_delay(p, 4'000'000'000u, 0.0), 1000ms);
}

TEST(backoff, jitter_spans_the_random_fraction) {
  backoff_policy p{100ms, 1000ms, 0.5};
  EXPECT_EQ(backoff_delay(p, 0, 0.0), 50ms);
  EXPECT_EQ(backoff_delay(p, 0, 0.5), 75ms);
  EXPECT_EQ(backoff_delay(p, 0, 0.999), 99ms);
  // Out-of-range inputs are clamped rather than producing negative or huge delays.
  EXPECT_EQ(backoff_delay(p, 0, 7.0), 100ms);
  EXPECT_EQ(backoff_delay(backoff_policy{100ms, 1000ms, 3.0}, 0, 0.0), 0ms);
}

TEST(backoff, negative_settings_give_zero_not_garbage) {
  backoff_policy p{-5ms, -1ms, 0.0};
  EXPECT_EQ(backoff_delay(p, 3, 0.5), 0ms);
}
