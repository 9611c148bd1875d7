// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// When a connection counts as stalled, and how soon it tries again: pure arithmetic (the time and
/// the randomness are passed in). Applied by the connection's I/O shell (`src/connection.cpp`).

#include <redlock/core/backoff.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace redlock::core {

/// @brief The time after which a request queued at `now` with `deadline`, once written and still
/// unanswered, shows that the connection is stalled: its deadline plus `grace`, or plus its own
/// length (`deadline - now`) when that is longer.
///
/// Replies come in request order, so such a request holds back every reply behind it. The grace
/// lets a reply be late (a retransmitted segment) without costing the connection; twice the
/// request's own length keeps long requests (releases) from being judged by a short grace.
/// `time_point::max()` (never) for a request without deadline.
template <class Clock>
constexpr typename Clock::time_point stall_point(typename Clock::time_point now, typename Clock::time_point deadline,
                                                 typename Clock::duration grace) noexcept {
  using tp = typename Clock::time_point;
  using dur = typename Clock::duration;
  if (deadline == tp::max()) return tp::max();
  const dur allowance = std::max(std::max(grace, dur::zero()), deadline > now ? deadline - now : dur::zero());
  return deadline >= tp::max() - allowance ? tp::max() : deadline + allowance;
}

/// The delay before the next connect attempt, and the attempt number after it.
struct reconnect_step {
  std::chrono::milliseconds delay{0};  ///< wait this long before the next connect attempt
  std::uint32_t next_attempt = 0;      ///< pass as `attempt` to the `next_reconnect` after it
};

/// @brief The next reconnect after a failure.
///
/// `silent`: nothing answered (a stall, or an attempt that timed out): the node may be back at any
/// moment and the attempt already waited its own timeout, so the delay stays at the backoff's first
/// step and `attempt` does not grow. Otherwise (refused, closed, handshake refused) the delay grows
/// exponentially with `attempt` (see `backoff_delay`).
constexpr reconnect_step next_reconnect(const backoff_policy& p, std::uint32_t attempt, bool silent,
                                        double unit_random) noexcept {
  if (silent) return {backoff_delay(p, 0, unit_random), attempt};
  return {backoff_delay(p, attempt, unit_random), attempt < 64 ? attempt + 1 : attempt};
}

}  // namespace redlock::core
