// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Capped, jittered exponential backoff: pure arithmetic, the randomness is passed in.

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace redlock::core {

/// Backoff policy for reconnecting to a node.
struct backoff_policy {
  std::chrono::milliseconds initial{50};  ///< delay scale of the first retry
  std::chrono::milliseconds max{2000};    ///< cap of the exponential growth
  double jitter = 0.5;                    ///< fraction of the delay that is random, in [0, 1]
};

/// The delay before retry number `attempt` (0 for the first retry): `d = min(max, initial * 2^attempt)`,
/// then the last `jitter` fraction of `d` is scaled by `unit_random` in [0, 1), so that many clients
/// that lost the same node do not reconnect in lockstep.
constexpr std::chrono::milliseconds backoff_delay(const backoff_policy& p, std::uint32_t attempt,
                                                  double unit_random) noexcept {
  const auto cap = std::max<std::int64_t>(p.max.count(), 0);
  std::int64_t d = std::max<std::int64_t>(p.initial.count(), 0);
  for (std::uint32_t i = 0; i < attempt && d < cap; ++i) d *= 2;  // bounded: stops at the cap
  d = std::min(d, cap);
  const double jitter = std::clamp(p.jitter, 0.0, 1.0);
  const double r = std::clamp(unit_random, 0.0, 1.0);
  const double fixed = static_cast<double>(d) * (1.0 - jitter);
  return std::chrono::milliseconds{static_cast<std::int64_t>(fixed + static_cast<double>(d) * jitter * r)};
}

}  // namespace redlock::core
