// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The machinery behind redlock/observe.hpp, shared by the library's sources (and their tests):
/// live counters, the logger, and helpers that keep secrets and untrusted bytes out of messages.

#include <redlock/clock.hpp>
#include <redlock/export.hpp>
#include <redlock/observe.hpp>

#include <boost/system/error_code.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace redlock {

namespace detail {

/// Adds `n` to a counter. `SingleWriter`: only one thread at a time ever writes it (a strand), so
/// a relaxed load and store suffice (no locked instruction); otherwise a relaxed fetch_add.
template <bool SingleWriter>
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  if constexpr (SingleWriter) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  } else {
    c.fetch_add(n, std::memory_order_relaxed);
  }
}

inline std::uint64_t read(const std::atomic<std::uint64_t>& c) noexcept { return c.load(std::memory_order_relaxed); }

/// The live counterpart of `latency_histogram`: relaxed atomics, snapshotted by `snapshot()`.
template <bool SingleWriter>
class live_histogram {
 public:
  void record(redlock::boot_clock::duration d) noexcept {
    const auto us = d.count() <= 0
                        ? std::uint64_t{0}
                        : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    bump<SingleWriter>(buckets_[latency_histogram::bucket_of(us)]);
    bump<SingleWriter>(sum_, us);
    if constexpr (SingleWriter) {
      if (us > max_.load(std::memory_order_relaxed)) max_.store(us, std::memory_order_relaxed);
    } else {
      auto m = max_.load(std::memory_order_relaxed);
      while (us > m && !max_.compare_exchange_weak(m, us, std::memory_order_relaxed)) {
      }
    }
  }

  latency_histogram snapshot() const noexcept {
    latency_histogram h;
    for (std::size_t b = 0; b < latency_histogram::bucket_count; ++b) {
      h.buckets[b] = read(buckets_[b]);
      h.count += h.buckets[b];
    }
    h.sum = std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(read(sum_))};
    h.max = std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(read(max_))};
    return h;
  }

 private:
  std::array<std::atomic<std::uint64_t>, latency_histogram::bucket_count> buckets_{};
  std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> max_{0};
};

/// A sink with its level and prefix, and its counters. Formatting is done by the caller (in the
/// library's sources, after checking `enabled`); `write` delivers.
class REDLOCK_API logger {
 public:
  logger() = default;
  explicit logger(log_options opts);
  logger(const logger&) = delete;
  logger& operator=(const logger&) = delete;

  /// True when a message of `level` is wanted: check before formatting anything.
  bool enabled(log_level level) const noexcept {
    return static_cast<std::uint8_t>(level) >= threshold_ && level != log_level::off;
  }
  /// Put before every message (with ": "); may be empty.
  const std::string& prefix() const noexcept { return prefix_; }
  /// Counts one formatted message and hands it to the sink if `level` is enabled; exceptions from
  /// the sink are counted and dropped.
  void write(log_level level, std::string_view message) const noexcept;

  std::uint64_t messages() const noexcept { return read(messages_); }
  std::uint64_t sink_errors() const noexcept { return read(sink_errors_); }

 private:
  log_sink sink_;
  std::string prefix_;
  std::uint8_t threshold_ = 0xff;  // disabled
  mutable std::atomic<std::uint64_t> messages_{0};
  mutable std::atomic<std::uint64_t> sink_errors_{0};
};

/// Replaces every occurrence of each non-empty `secrets` entry in `text` by "***".
REDLOCK_API void redact(std::string& text, std::initializer_list<std::string_view> secrets);

/// Text from outside (a server's error reply, a resource name) made safe for a log line: every
/// occurrence of a non-empty `secrets` entry replaced by "***", then control and non-ASCII bytes
/// escaped as \xNN (a backslash as \\), and cut after `max_length` characters ("..." appended).
REDLOCK_API std::string printable(std::string_view text, std::size_t max_length,
                                  std::initializer_list<std::string_view> secrets = {});

/// "message [category:value]", e.g. "Connection refused [system:111]".
REDLOCK_API std::string describe(const boost::system::error_code& ec);

/// A duration for humans: "850 us", "12.34 ms", "1.500 s".
REDLOCK_API std::string format_duration(std::chrono::nanoseconds d);

/// The first 8 characters of a lock token: enough to tell locks apart in logs, useless to
/// release one (the token is 40 hex digits).
REDLOCK_API std::string_view short_token(std::string_view token) noexcept;

}  // namespace detail

}  // namespace redlock
