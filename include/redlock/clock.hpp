// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The library's clock: every validity, deadline and timer is measured on it.

#include <redlock/export.hpp>

#include <chrono>
#include <cstdint>

namespace redlock {

/// @brief A monotonic clock that keeps counting while the machine is suspended.
///
/// `std::chrono::steady_clock` is `CLOCK_MONOTONIC` on Linux, which stops during a suspend: a
/// holder that was suspended for longer than its validity would resume and trust a deadline that
/// has already passed on the masters, whose keys expired meanwhile. This clock is
/// `CLOCK_BOOTTIME` on Linux (`steady_clock` elsewhere), so a suspend counts as time that passed.
/// Wall-clock steps do not move it. Meets the C++ *Clock* requirements (`redlock::timer`, in
/// redlock/timer.hpp, is an Asio timer on it).
struct REDLOCK_API boot_clock {
  using rep = std::int64_t;                                ///< nanoseconds
  using period = std::nano;                                ///< the tick
  using duration = std::chrono::nanoseconds;               ///< a span on this clock
  using time_point = std::chrono::time_point<boot_clock>;  ///< an instant on this clock
  static constexpr bool is_steady = true;                  ///< never goes back
  /// The time since boot, suspends included.
  static time_point now() noexcept;
};

/// The clock of every `validity_deadline()`, event time and deadline in the library.
using clock = boot_clock;

namespace detail {
/// Test seam: adds `d` to every later `boot_clock::now()` (process-wide), as a suspend of `d`
/// would. Only for tests that show what the library does after a suspend; never call it in a
/// program: timers already armed are not moved.
REDLOCK_API void advance_clock_for_testing(std::chrono::nanoseconds d) noexcept;
}  // namespace detail

}  // namespace redlock
