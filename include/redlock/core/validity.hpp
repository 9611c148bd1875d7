// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Validity arithmetic of Redlock: how long a lock may be relied on. Times are passed in, never read.

#include <chrono>
#include <cstdint>

namespace redlock::core {

/// Allowance for clock-rate differences between processes: `ttl * factor + fixed`.
struct drift_policy {
  double factor = 0.01;                ///< fraction of the ttl, in [0, 1) (`validate` checks)
  std::chrono::milliseconds fixed{2};  ///< constant part, at least 0
};

/// The drift allowance for a lock of `ttl`, rounded up to whole microseconds (never in the
/// holder's favour).
constexpr std::chrono::microseconds drift(std::chrono::microseconds ttl, const drift_policy& p) noexcept {
  const double scaled = static_cast<double>(ttl.count()) * p.factor;
  auto up = static_cast<std::int64_t>(scaled);
  if (static_cast<double>(up) < scaled) ++up;
  return std::chrono::microseconds{up} + std::chrono::duration_cast<std::chrono::microseconds>(p.fixed);
}

/// Remaining validity of a lock whose `SET`s were sent at `start` and whose deciding reply came at
/// `end`: `ttl - (end - start) - drift`. Every key of the quorum lives at least until
/// `start + ttl` (on the master's clock, which advances at about our rate), so the holder may
/// rely on the lock until `start + validity`. Zero or negative means the lock must not be used.
template <class Clock>
constexpr typename Clock::duration validity(std::chrono::microseconds ttl, typename Clock::time_point start,
                                            typename Clock::time_point end, const drift_policy& p) noexcept {
  return std::chrono::duration_cast<typename Clock::duration>(ttl - drift(ttl, p)) - (end - start);
}

/// The time point until which the holder may rely on the lock (`start + validity`), or nothing
/// usable when the validity is not positive.
template <class Clock>
constexpr typename Clock::time_point validity_deadline(std::chrono::microseconds ttl, typename Clock::time_point start,
                                                       const drift_policy& p) noexcept {
  return start + std::chrono::duration_cast<typename Clock::duration>(ttl - drift(ttl, p));
}

}  // namespace redlock::core
