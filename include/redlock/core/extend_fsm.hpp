// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// One extension of a held Redlock lock as a sans-I/O state machine: the check-the-token extend
/// script on every master, with per-master deadlines cut to the remaining validity. The extension
/// counts only if a majority extended it *before the old validity ran out* (after that, someone
/// else may hold the lock) and the new validity is positive.
///
/// An extension never shortens a lock. Every extend script only moves an expiry later (a ttl
/// shorter than the time left leaves it where it is), so whatever happens to the round (success,
/// failure, cancellation, answers after the deadline) the masters keep the key at least until the
/// old deadline: the holder may keep relying on it, and after success on the later of the two.

#include <redlock/core/outcome.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace redlock::core {

/// What the shell does next for an `extend_fsm`.
struct extend_action {
  /// What the shell is asked to do.
  enum class type : std::uint8_t {
    wait,      ///< nothing: wait for replies
    extend,    ///< send the extend script to every master, per-request deadline `at`
    complete,  ///< complete with `ec`; on success the new deadline is `validity_deadline()`
  };
  /// What to do; the members below say with what.
  type what = type::wait;
  /// For `extend`: each request's deadline (never past the old validity deadline).
  clock::time_point at{};
  /// For `complete`: the extension's result (empty: extended).
  boost::system::error_code ec;
};

/// One extension (by `async_extend` or the keep-alive).
class extend_fsm {
 public:
  /// @param masters number of masters (N).
  /// @param ttl the ttl the extension sets on each master.
  /// @param request_timeout each master's deadline, cut to the remaining validity.
  /// @param drift clock-drift allowance subtracted from the new validity.
  /// @param old_deadline the lock's current validity deadline.
  /// @param needed masters that must extend it (0: a majority; a semaphore needs its quorum).
  extend_fsm(std::size_t masters, std::chrono::milliseconds ttl, std::chrono::milliseconds request_timeout,
             const drift_policy& drift, clock::time_point old_deadline, std::size_t needed = 0) noexcept
      : masters_(masters),
        needed_(needed),
        ttl_(ttl),
        timeout_(request_timeout),
        drift_(drift),
        old_deadline_(old_deadline) {}

  /// Makes the machine ready for another extension of the same lock (keeps the table's storage).
  void reset(std::chrono::milliseconds ttl, clock::time_point old_deadline) noexcept {
    ttl_ = ttl;
    old_deadline_ = old_deadline;
    new_deadline_ = {};
    state_ = state::idle;
    ok_ = false;
    decided_ = false;
  }
  /// The same, for a lock of the same client whose quorum is `needed` (0: a majority): a machine
  /// kept between two locks' extensions.
  void reset(std::chrono::milliseconds ttl, clock::time_point old_deadline, std::size_t needed) noexcept {
    needed_ = needed;
    reset(ttl, old_deadline);
  }

  /// Sends the extension at `now`; completes at once with `error::validity_expired` when the old
  /// deadline has passed.
  extend_action start(clock::time_point now) {
    if (state_ != state::idle) return {};
    if (now >= old_deadline_) return finish(error::validity_expired);  // someone else may hold it now
    state_ = state::waiting;
    table_.begin(command::extend, masters_, now, needed_);
    // The extension must be decided within the remaining validity: no master may take longer.
    const auto timeout = std::min<clock::duration>(timeout_, old_deadline_ - now);
    return {extend_action::type::extend, now + timeout, {}};
  }

  /// Master `master`'s answer (or failure `ec`) at `now`. Completes once the quorum is decided:
  /// success, `error::validity_expired` (decided at or after the old deadline), `error::not_owner` (too many masters no
  /// longer hold our token) or `error::quorum_unavailable` (too many failed; the lock may still be ours). `down_cause`:
  /// for an answer `error::not_connected`, why the master's connection last failed (kept as its result's error; empty
  /// when unknown).
  extend_action on_reply(std::size_t master, boost::system::error_code ec, const resp::response& reply,
                         clock::time_point now, boost::system::error_code down_cause = {}) {
    if (state_ != state::waiting) return {};
    auto result = classify(command::extend, ec, reply);
    if (result.status == master_status::unreachable && down_cause) result.error = down_cause;
    if (!table_.record(master, std::move(result), now)) return {};
    decided_ = true;
    if (table_.state() == quorum_state::reached) {
      if (now >= old_deadline_) return finish(error::validity_expired);  // someone else may hold it now
      // The extend scripts never move an expiry earlier, so the old deadline still holds where
      // the new one would come sooner (a ttl shorter than the time left): the later of the two.
      new_deadline_ = std::max(old_deadline_, core::validity_deadline<clock>(ttl_, table_.start(), drift_));
      return finish({});
    }
    // "Not ours" from a master proves the key expired or was taken *there* (a master that missed an
    // earlier extension lets its copy expire: normal under load). The lock is gone only when so
    // many say so that a majority cannot hold our token any more; otherwise the quorum merely
    // failed this time (timeouts, errors) and the keep-alive may try again while validity lasts.
    const bool gone = table_.count(master_status::taken) > masters_ - table_.needed();
    return finish(gone ? error::not_owner : error::quorum_unavailable);
  }

  /// The caller stopped waiting: the old deadline stands even if the extension later succeeds
  /// (the conservative choice: the holder relies on the old one).
  extend_action cancel() {
    if (state_ == state::done) return {};
    return finish(boost::asio::error::operation_aborted);
  }

  /// Whether the extension has completed (a `complete` action was returned).
  bool done() const noexcept { return state_ == state::done; }
  /// The ttl the extension sets.
  std::chrono::milliseconds ttl() const noexcept { return ttl_; }
  /// When its round was sent (`start`'s `now`).
  clock::time_point sent() const noexcept { return table_.start(); }
  /// Whether a round was sent and decided by the masters (not refused up front, not cancelled).
  bool decided() const noexcept { return decided_; }
  /// After success the later of the old deadline and start + ttl - drift; the old one otherwise.
  clock::time_point validity_deadline() const noexcept { return ok_ ? new_deadline_ : old_deadline_; }
  /// Each master's answer to the extension.
  const round_table& table() const noexcept { return table_; }
  /// The same, mutable (the shell may move the results out).
  round_table& table() noexcept { return table_; }

 private:
  enum class state : std::uint8_t { idle, waiting, done };

  extend_action finish(boost::system::error_code ec) {
    state_ = state::done;
    ok_ = !ec;
    return {extend_action::type::complete, {}, ec};
  }

  std::size_t masters_;
  std::size_t needed_;
  std::chrono::milliseconds ttl_;
  std::chrono::milliseconds timeout_;
  drift_policy drift_;
  clock::time_point old_deadline_;
  clock::time_point new_deadline_{};
  state state_ = state::idle;
  bool ok_ = false;
  bool decided_ = false;
  round_table table_;
};

}  // namespace redlock::core
