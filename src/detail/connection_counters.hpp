// SPDX-License-Identifier: BSL-1.0
#pragma once
// A node connection's counters and status (private to src/): written on the connection's strand,
// read by `connection::stats()` / `status()` from any thread.

#include <redlock/clock.hpp>
#include <redlock/connection.hpp>
#include <redlock/detail/multiplexer.hpp>
#include <redlock/detail/observe.hpp>

#include <boost/asio/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace redlock::detail {

// Written by one strand at a time (hence bump<true>: relaxed load + store).
inline void inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept { bump<true>(c, n); }

struct connection_counters {
  using counter = std::atomic<std::uint64_t>;
  using clock = redlock::boot_clock;
  counter requests{0}, ok{0}, server_errors{0}, timeouts{0}, not_connected{0}, connection_lost{0}, protocol_errors{0},
      cancelled{0}, aborted{0}, invalid{0};
  counter written{0}, replies{0}, dropped_replies{0}, pushes{0}, bytes_written{0}, bytes_read{0};
  counter connect_attempts{0}, connects{0}, connect_failures{0}, auth_failures{0}, disconnects{0}, stalls{0};
  live_histogram<true> latency;

  // When a reply came: the read that brought it, or now for a path that did not say.
  static clock::time_point replied(clock::time_point answered) noexcept {
    return answered == clock::time_point{} ? clock::now() : answered;
  }

  // Every request ends here, exactly once. `closing`: an abort is the connection's (else the
  // caller's cancellation). `answered`: when its reply was read (only a reply is timed).
  void count_outcome(clock::time_point start, const boost::system::error_code& ec, bool closing,
                     clock::time_point answered) noexcept {
    if (!ec) {
      inc(ok);
      latency.record(replied(answered) - start);
    } else if (ec == error::server_error) {
      inc(server_errors);
      latency.record(replied(answered) - start);
    } else if (ec == error::master_timeout) {
      inc(timeouts);
    } else if (ec == error::not_connected) {
      inc(not_connected);
    } else if (ec == error::connection_lost) {
      inc(connection_lost);
    } else if (ec == boost::asio::error::operation_aborted) {
      inc(closing ? aborted : cancelled);
    } else if (ec == error::not_supported) {
      inc(invalid);  // refused without effect, as submit() counts it
    } else {
      inc(protocol_errors);  // the stream broke on bad bytes after the request was written
    }
  }

  // Requests whose outcome a broken connection left unknown, and those never sent.
  std::uint64_t lost() const noexcept { return read(connection_lost) + read(protocol_errors); }
  std::uint64_t unsent() const noexcept { return read(not_connected); }

  connection_stats snapshot(const logger& log) const {
    connection_stats s;
    // Outcomes before `requests`: requests are counted first, so this order keeps
    // requests >= completed() on one thread's view (relaxed loads promise no more).
    s.ok = read(ok);
    s.server_errors = read(server_errors);
    s.timeouts = read(timeouts);
    s.not_connected = read(not_connected);
    s.connection_lost = read(connection_lost);
    s.protocol_errors = read(protocol_errors);
    s.cancelled = read(cancelled);
    s.aborted = read(aborted);
    s.invalid = read(invalid);
    s.requests = read(requests);
    s.written = read(written);
    s.replies = read(replies);
    s.dropped_replies = read(dropped_replies);
    s.pushes = read(pushes);
    s.bytes_written = read(bytes_written);
    s.bytes_read = read(bytes_read);
    s.connect_attempts = read(connect_attempts);
    s.connects = read(connects);
    s.connect_failures = read(connect_failures);
    s.auth_failures = read(auth_failures);
    s.disconnects = read(disconnects);
    s.stalls = read(stalls);
    s.latency = latency.snapshot();
    s.log_messages = log.messages();
    s.log_sink_errors = log.sink_errors();
    return s;
  }
};

// The status snapshot, under a mutex (it holds a string).
class shared_status {
 public:
  connection_status get() const {
    std::lock_guard lock{mutex_};
    return status_;
  }
  void set_state(connection_state s) {
    std::lock_guard lock{mutex_};
    status_.state = s;
  }
  void record_error(boost::system::error_code ec, std::string_view text) {
    std::lock_guard lock{mutex_};
    status_.last_error = ec;
    status_.last_error_text = text;
  }
  void count_connect() {
    std::lock_guard lock{mutex_};
    ++status_.connects;
  }
  // What the read path tells of each message.
  void count(read_event e) {
    if (e != read_event::push && e != read_event::dropped) return;
    std::lock_guard lock{mutex_};
    ++(e == read_event::push ? status_.pushes : status_.dropped_replies);
  }

 private:
  mutable std::mutex mutex_;
  connection_status status_;
};

}  // namespace redlock::detail
