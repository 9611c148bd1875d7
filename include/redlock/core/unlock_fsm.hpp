// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The release of a Redlock lock as a sans-I/O state machine: the check-the-token release script
/// on every master, decided once a majority answered (granted or not ours: the key is gone from
/// that master either way); the masters that have not answered finish in the background. Or, when
/// asked to wait for all, decided once every master answered or its request's deadline passed
/// (the shell reports a master past its deadline as `master_timeout`).

#include <redlock/core/outcome.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace redlock::core {

/// What the shell does next for an `unlock_fsm`.
struct unlock_action {
  /// What the shell is asked to do.
  enum class type : std::uint8_t {
    wait,      ///< nothing: wait for replies
    release,   ///< send the release script to every master, per-request deadline `at`
    complete,  ///< complete with `ec` and `held()`
  };
  /// What to do; the members below say with what.
  type what = type::wait;
  /// For `release`: each request's deadline.
  clock::time_point at{};
  /// For `complete`: the release's result (empty: a majority no longer holds the key;
  /// `error::quorum_unavailable`: too few answered cleanly; `operation_aborted`: cancelled).
  boost::system::error_code ec;
};

/// One `async_unlock`.
class unlock_fsm {
 public:
  /// A release on `masters` masters.
  /// @param masters masters the release is sent to
  /// @param release_timeout how long each master has to answer
  /// @param wait_for_all complete only once every master answered (or timed out), not at the
  /// first majority: the counts then cover every master.
  unlock_fsm(std::size_t masters, std::chrono::milliseconds release_timeout, bool wait_for_all = false) noexcept
      : masters_(masters), timeout_(release_timeout), wait_for_all_(wait_for_all) {}

  /// Sends the release script to every master at `now`.
  unlock_action start(clock::time_point now) {
    if (state_ != state::idle) return {};
    state_ = state::waiting;
    table_.begin(command::release, masters_, now);
    answered_.assign(wait_for_all_ ? masters_ : 0, false);
    return {unlock_action::type::release, now + timeout_, {}};
  }

  /// Master `master`'s answer at `now`. `down_cause`: for an answer `error::not_connected`, why
  /// the master's connection last failed (kept as its result's error; empty when unknown).
  unlock_action on_reply(std::size_t master, boost::system::error_code ec, const resp::response& reply,
                         clock::time_point now, boost::system::error_code down_cause = {}) {
    if (state_ != state::waiting) return {};
    auto result = classify(command::release, ec, reply);
    if (result.status == master_status::unreachable && down_cause) result.error = down_cause;
    if (result.status == master_status::granted && !waiters_) {
      // 2 rather than 1: deleted, and other clients' waiters are queued.
      const resp::node* v = resp::reply_value(reply);
      waiters_ = v && v->value.size() == 1 && v->value[0] == '2';
    }
    const bool decided = table_.record(master, std::move(result), now);
    if (wait_for_all_) {
      if (master >= masters_ || answered_[master]) return {};
      answered_[master] = true;
      if (++answers_ < masters_) return {};
    } else if (!decided) {
      return {};
    }
    state_ = state::done;
    held_ = table_.count(master_status::granted);
    const bool reached = table_.state() == quorum_state::reached;
    return {unlock_action::type::complete, {}, reached ? boost::system::error_code{} : error::quorum_unavailable};
  }

  /// The caller stopped waiting: completes now; the requests already sent run to completion.
  unlock_action cancel() {
    if (state_ == state::done) return {};
    state_ = state::done;
    cancelled_ = true;
    return {unlock_action::type::complete, {}, boost::asio::error::operation_aborted};
  }

  /// Whether the release has completed (a `complete` action was returned).
  bool done() const noexcept { return state_ == state::done; }
  /// True when the outcome was decided by the masters (not by cancellation).
  bool decided() const noexcept { return state_ == state::done && !cancelled_; }
  /// Masters that still had our token and deleted it, among those that answered by the decision.
  std::size_t held() const noexcept { return held_; }
  /// Whether a master said other clients' waiters are queued for the lock (fair hand-over): the
  /// releasing client then queues behind them should it ask for the same lock again soon.
  bool waiters() const noexcept { return waiters_; }
  /// Masters that had our token and deleted it (as `held()`).
  std::size_t released() const noexcept { return table_.count(master_status::granted); }
  /// Masters that answered cleanly without our token (expired there, or someone else's key).
  std::size_t not_held() const noexcept { return table_.count(master_status::taken); }
  /// Masters with no usable answer by the decision: down, timed out, a broken connection, an
  /// error reply, or (at a majority) no answer yet.
  std::size_t no_answer() const noexcept { return masters_ - released() - not_held(); }
  /// Each master's answer to the release.
  const round_table& table() const noexcept { return table_; }
  /// The same, mutable (the shell may move the results out).
  round_table& table() noexcept { return table_; }

 private:
  enum class state : std::uint8_t { idle, waiting, done };
  std::size_t masters_;
  std::chrono::milliseconds timeout_;
  state state_ = state::idle;
  bool cancelled_ = false;
  bool waiters_ = false;
  bool wait_for_all_ = false;
  std::size_t held_ = 0;
  std::size_t answers_ = 0;     // wait_for_all: masters that answered
  std::vector<bool> answered_;  // wait_for_all: by master
  round_table table_;
};

}  // namespace redlock::core
