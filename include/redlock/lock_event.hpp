// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// What happens to a held lock, as `lock::async_wait_event` reports it, and the error `with_lock`
/// throws when the lock is lost during the work.

#include <redlock/clock.hpp>
#include <redlock/error.hpp>
#include <redlock/export.hpp>
#include <redlock/master_result.hpp>

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redlock {

/// One thing that happened to a held lock (`lock::async_wait_event`).
struct lock_event {
  /// The clock of `at` and `validity_deadline` (the client's).
  using clock = redlock::boot_clock;

  /// The kinds of event.
  enum class type : std::uint8_t {
    /// An extension (keep-alive or `async_extend`) reached a quorum: `validity_deadline` moved.
    extended,
    /// A keep-alive extension failed, but the lock is still valid until `validity_deadline` and
    /// the keep-alive tries again (`error` says why: `quorum_unavailable` when masters are down or
    /// slow). A warning worth an operator's attention; `lost` follows if no retry succeeds.
    extend_failed,
    /// The lock is lost (`error` says why, as `lock::loss_reason()`). The last event: every wait
    /// after it completes with it again.
    lost,
    /// The lock was released by `async_unlock`. The last event, as `lost`.
    released,
    /// A master that granted the lock restarted (and may have forgotten the key) or its wall clock
    /// jumped forward (the key may expire early): `master` names it, `error` is
    /// `master_quarantined`, `detail` says what was seen. The lock is not given up: its validity
    /// still rests on the other masters, and an extension is counted without this one. For
    /// programs that prefer to stop early, and for fleets whose other clients do not quarantine.
    master_hazard,
  };

  /// What happened.
  type what = type::extended;
  /// When it happened.
  clock::time_point at{};
  /// The lock's validity deadline after the event (unchanged for `extend_failed`).
  clock::time_point validity_deadline{};
  /// Extensions of the lock so far (for `extended`: this one's number, from 1).
  std::size_t extensions = 0;
  /// `extend_failed`: the extension's error; `lost`: the loss reason; empty otherwise.
  boost::system::error_code error;
  /// `lost`: the reason in words, with its detail (the cap that was reached, ...); empty otherwise.
  std::string detail;
  /// What each master answered to the extension behind `extended` or `extend_failed`, in the
  /// order of `client_config::masters` (empty when no round was decided by the masters).
  std::vector<master_result> masters;
  /// `master_hazard`: the master, in the order of `client_config::masters`.
  std::size_t master = 0;
  /// Events dropped just before this one because nobody waited for them in time (only
  /// `extended` and `extend_failed` are ever dropped: see `lock::async_wait_event`).
  std::size_t missed = 0;

  /// True for `lost` and `released`: no event follows.
  bool is_final() const noexcept { return what == type::lost || what == type::released; }
};

/// "extended", "extend_failed", "lost", "released".
constexpr std::string_view to_string(lock_event::type t) noexcept {
  switch (t) {
    case lock_event::type::extended:
      return "extended";
    case lock_event::type::extend_failed:
      return "extend_failed";
    case lock_event::type::lost:
      return "lost";
    case lock_event::type::released:
      return "released";
    case lock_event::type::master_hazard:
      return "master_hazard";
  }
  return "unknown";
}

/// @brief Thrown by `with_lock` when the lock was lost while the work ran.
///
/// `code()` is `error::lock_lost`, as before this type existed, so that callers catching
/// `boost::system::system_error` and testing for `lock_lost` keep working; `reason()` says why the
/// lock was lost (the lock's `loss_reason()`: `not_owner`, `quorum_unavailable`,
/// `validity_expired`, `extension_limit`) and `what()` includes it in words.
class REDLOCK_API lock_lost_error : public boost::system::system_error {
 public:
  /// A loss for `reason` (the lock's `loss_reason()`), told in words by `detail` (its
  /// `loss_description()`; empty: the reason's message).
  lock_lost_error(boost::system::error_code reason, const std::string& detail)
      : boost::system::system_error(make_error_code(error::lock_lost),
                                    "redlock: lock lost during work: " + (detail.empty() ? reason.message() : detail)),
        reason_(reason) {}

  /// Why the lock was lost.
  boost::system::error_code reason() const noexcept { return reason_; }

 private:
  boost::system::error_code reason_;
};

}  // namespace redlock
