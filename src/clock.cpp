// SPDX-License-Identifier: BSL-1.0
#include <redlock/clock.hpp>

#include <atomic>
#include <ctime>

namespace redlock {

namespace {
// What tests added to the clock (advance_clock_for_testing); 0 in every real program.
std::atomic<std::int64_t> advanced_ns{0};
}  // namespace

boot_clock::time_point boot_clock::now() noexcept {
#if defined(__linux__)
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);  // vDSO: no system call
  const std::int64_t ns = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
#else
  const std::int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
  return time_point{duration{ns + advanced_ns.load(std::memory_order_relaxed)}};
}

void detail::advance_clock_for_testing(std::chrono::nanoseconds d) noexcept {
  advanced_ns.fetch_add(d.count(), std::memory_order_relaxed);
}

}  // namespace redlock
