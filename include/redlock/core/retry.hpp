// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The retry schedule of a lock acquisition: bounded, with random delays. Randomness is passed in.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace redlock::core {

/// How `async_lock` retries after a failed attempt.
struct retry_policy {
  /// Attempts in all, the first included; 0 means no limit (then `max_wait` bounds the retries).
  std::size_t max_attempts = 0;
  /// No retry starts later than this after the first attempt began; 0 means no limit.
  std::chrono::milliseconds max_wait{2000};
  /// Fixed part of the delay between attempts. It should exceed the time to reach a majority.
  std::chrono::milliseconds base_delay{50};
  /// Random part of the delay, uniform in [0, jitter): desynchronises competing clients.
  std::chrono::milliseconds jitter{100};
};

/// The delay before the next attempt: `base_delay + jitter * unit_random` with `unit_random` in [0, 1).
constexpr std::chrono::milliseconds retry_delay(const retry_policy& p, double unit_random) noexcept {
  const double r = std::clamp(unit_random, 0.0, 1.0);
  const auto base = std::max<std::int64_t>(p.base_delay.count(), 0);
  const auto jitter = std::max<std::int64_t>(p.jitter.count(), 0);
  return std::chrono::milliseconds{base + static_cast<std::int64_t>(static_cast<double>(jitter) * r)};
}

/// Whether another attempt may start after `attempts_done` attempts, `delay` from now, when
/// `elapsed` has passed since the first attempt began.
constexpr bool may_retry(const retry_policy& p, std::size_t attempts_done, std::chrono::milliseconds elapsed,
                         std::chrono::milliseconds delay) noexcept {
  if (p.max_attempts != 0 && attempts_done >= p.max_attempts) return false;
  if (p.max_wait.count() > 0 && elapsed + delay > p.max_wait) return false;
  return p.max_attempts != 0 || p.max_wait.count() > 0;  // never retry without any bound
}

}  // namespace redlock::core
