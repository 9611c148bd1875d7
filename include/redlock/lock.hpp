// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// A held (or failed) Redlock lock, and what each master said about it.

#include <redlock/clock.hpp>
#include <redlock/config.hpp>
#include <redlock/error.hpp>
#include <redlock/export.hpp>
#include <redlock/lock_event.hpp>
#include <redlock/lock_options.hpp>
#include <redlock/master_result.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace redlock {

namespace detail {
struct lock_state;
struct lock_op;
class client_impl;
}  // namespace detail

/// How `lock::async_unlock(unlock_options, token)` releases.
struct unlock_options {
  /// Complete only once every master answered or its deadline (`release_timeout`) passed, rather
  /// than at the first majority: the result then accounts for every master.
  bool wait_for_all = false;
};

/// What a release found, master by master (`lock::masters()` has the detail).
struct unlock_result {
  /// Masters that held our token and deleted it.
  std::size_t released = 0;
  /// Masters that answered without our token: the key had expired there, or was someone else's.
  std::size_t not_held = 0;
  /// Masters that could not be reached, did not answer before the deadline, or answered with an
  /// error. Their key, if any, expires with the ttl (and the release is sent again should the
  /// master's connection come back first). Without `wait_for_all`, also the masters that had not
  /// answered yet when the majority had.
  std::size_t unreachable = 0;
};

/// A lock handle. It is returned by `client::async_lock` whether or not the lock was acquired:
/// when not, `owns_lock()` is false and `masters()` says what each master answered.
///
/// Movable, not copyable. Like `std::unique_lock`, a handle that still owns its lock when it is
/// destroyed releases it: the release is sent in the background (bounded by the client's
/// `release_timeout`) and nobody waits for it. Call `async_unlock` to know how it went.
///
/// @par Thread safety
/// Distinct objects: safe. Shared objects: the accessors may be called while an operation on the
/// lock runs on another thread; do not start two operations on one lock at once.
class REDLOCK_API lock {
 public:
  /// The clock of `validity_deadline()` (monotonic).
  using clock = redlock::boot_clock;
  /// The type of `get_executor()`.
  using executor_type = boost::asio::any_io_executor;

  /// An empty handle: holds nothing, `masters()` is empty.
  lock() noexcept = default;
  /// Takes over the other handle's lock; that handle is left empty.
  lock(lock&&) noexcept = default;
  /// Releases the lock this handle holds, if any, in the background (as the destructor does), then
  /// takes over `other`'s.
  lock& operator=(lock&& other) noexcept;
  lock(const lock&) = delete;
  lock& operator=(const lock&) = delete;
  ~lock();

  /// True while the handle holds the lock (acquired, not released). Says nothing about time:
  /// compare `validity_deadline()` with the clock for that.
  bool owns_lock() const noexcept;
  /// `owns_lock()`.
  explicit operator bool() const noexcept { return owns_lock(); }

  /// The resource name as given (without the key prefix); for `async_lock_all`, the first one.
  const std::string& resource() const noexcept;
  /// Every resource the lock covers (one but for `async_lock_all`).
  std::vector<std::string> resources() const;
  /// The kind of lock (`lock_options::kind`).
  lock_kind kind() const noexcept;
  /// The fencing token of a lock taken with `lock_options::fence` (0 otherwise): larger than that
  /// of every earlier holder of the resource, so a guarded resource that remembers the largest it
  /// has seen can refuse a holder that paused past its validity (docs/safety.md, "Fencing tokens").
  std::uint64_t fence() const noexcept;
  /// The random token that signs this lock (40 hex digits: 20 bytes from the OS's CSPRNG).
  const std::string& token() const noexcept;
  /// Until when the holder may rely on the lock: start of the deciding attempt + ttl - drift.
  clock::time_point validity_deadline() const noexcept;
  /// What each master answered in the last operation (acquire, extend or release), in the order
  /// of `client_config::masters`.
  std::vector<master_result> masters() const;
  /// Acquisition attempts it took (1 without retries).
  std::size_t attempts() const noexcept;
  /// Extensions so far (by `async_extend` or by the keep-alive).
  std::size_t extensions() const noexcept;

  /// @brief Keeps the lock alive in the background until it is released, the handle destroyed or
  /// the client closed: before the remaining validity falls below `opts.renew_below` the extend
  /// script runs on every master (quorum rules as for acquiring; the new validity counts from the
  /// start of that extension); failed extensions are retried while validity remains.
  ///
  /// When the lock can no longer be kept (a master says it is not ours, no quorum before the
  /// deadline, or the cap is reached), it is *lost*: `async_wait_lost` completes,
  /// `opts.notify_margin` before the validity deadline at the latest, even when an extension
  /// request is merely hanging (later only by the event loop's own latency). One client-wide timer
  /// serves every kept-alive lock: no thread, strand or timer per lock. When more than 256 of
  /// them come due together, its pass may let other handlers run between slices, which can put
  /// a wake-up off by up to an eighth of the smallest notify margin of the client's watched
  /// locks and one round of the loop (none when that margin is under 8 ms). Calling it again
  /// replaces the options. Does nothing on a handle that holds no lock.
  void keep_alive(keep_alive_options opts = {});

  /// True once the lock was lost while held (see `keep_alive`, `async_wait_lost`).
  bool lost() const noexcept;
  /// Why the lock was lost; empty while not lost:
  /// - `not_owner`: so many masters no longer had our token (it expired there, or someone deleted
  ///   or took the key) that a majority cannot: the lock was taken from us;
  /// - `quorum_unavailable`: extensions kept failing (masters down or slow) until too little
  ///   validity was left for another try;
  /// - `validity_expired`: the validity ran out (no keep-alive, or an extension decided too late);
  /// - `extension_limit`: the keep-alive stopped at `max_extensions` or `max_hold`
  ///   (`loss_description()` says which) and the validity then ran out.
  boost::system::error_code loss_reason() const;
  /// The loss reason in words, with its detail ("keep-alive cap reached: max_hold 1h", ...);
  /// empty while not lost.
  std::string loss_description() const;

  /// The executor of the client that made this lock (its operations complete there when their
  /// handler has no executor of its own); for a default-constructed handle, the system executor.
  executor_type get_executor() const noexcept;

  /// @brief Waits until the lock is lost.
  ///
  /// Handler: `void(boost::system::error_code)`. As with a timer, the awaited event is not an
  /// error: success when the lock is lost (the reason in `loss_reason()`; also when it was lost
  /// before the wait began), `operation_aborted` when it is released (or its handle dropped, or
  /// the client closed) first, `error::not_locked` on a handle that never held a lock. Without
  /// `keep_alive`, the lock is lost when its validity runs out (reason `validity_expired`).
  /// Several waits may be pending at once. To stop guarded work when the lock is lost, race the
  /// work against this wait (`with_lock` does it for a coroutine).
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`, `total`: completes with `operation_aborted`; the lock is unaffected.
  template <boost::asio::completion_token_for<void(boost::system::error_code)> Token = boost::asio::deferred_t>
  auto async_wait_lost(Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(initiation{this}, token, wait_lost_op{});
  }

  /// @brief Waits for the next event of the lock: extended, an extension failed (a warning), lost,
  /// released (`lock_event`).
  ///
  /// Handler: `void(boost::system::error_code, lock_event)`. Each event completes one wait; call
  /// again for the next. `extended` and `extend_failed` are recorded from the first
  /// `async_wait_event` on (a lock nobody observes pays nothing for them); extensions by
  /// `async_extend` count too. `lost` and `released` are recorded once the lock is watched (by
  /// `keep_alive`, `async_wait_lost` or `async_wait_event`). Events queue in the lock's state while
  /// nobody waits: at most 16, after which the oldest is dropped and the next event's `missed`
  /// counts it. `lost` and `released` are never dropped and are final: once one is queued nothing
  /// follows, and every wait after it completes with it again at once. So a consumer that is
  /// slow, or starts late, still sees the end.
  ///
  /// Errors: `error::not_locked` (a handle that never held a lock, or released before the first
  /// wait: nothing to report), `operation_aborted` (the handle was destroyed or reassigned while
  /// holding, or the client closed).
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`, `total`: completes with `operation_aborted`; no event is consumed.
  template <
      boost::asio::completion_token_for<void(boost::system::error_code, lock_event)> Token = boost::asio::deferred_t>
  auto async_wait_event(Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock_event)>(initiation{this}, token,
                                                                                           wait_event_op{});
  }

  /// @brief Releases the lock on every master (check-the-token script, so never someone else's):
  /// the quick form, done at the first majority.
  ///
  /// Handler: `void(boost::system::error_code, std::size_t held)`. `held` counts the masters that
  /// still had our token and deleted it (0 when the lock had expired everywhere: not an error).
  /// Completes once a majority of masters answered; the rest finish in the background. Errors:
  /// `error::not_locked` (the handle holds nothing), `error::quorum_unavailable` (fewer than a
  /// majority answered before `release_timeout`; their keys expire with the ttl).
  /// The handle no longer owns the lock once this is called.
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`: completes at once with `operation_aborted`; the release itself still
  /// runs to completion (within its deadline) in the background.
  template <
      boost::asio::completion_token_for<void(boost::system::error_code, std::size_t)> Token = boost::asio::deferred_t>
  auto async_unlock(Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(initiation{this}, token,
                                                                                            unlock_op{});
  }

  /// @brief Releases the lock on every master, with a result that accounts for each of them.
  ///
  /// Handler: `void(boost::system::error_code, unlock_result)`. With `opts.wait_for_all`, it
  /// completes once every master answered or the `release_timeout` passed for those that did not
  /// (a master that hangs, paused or partitioned, costs up to the whole timeout; one whose
  /// connection is known to be down counts as unreachable at once); otherwise at the first
  /// majority, as the quick form. Errors as the quick form: `error::not_locked`,
  /// `error::quorum_unavailable` (fewer than a majority answered cleanly; the counts still say what
  /// each did). `masters()` has each master's answer. Like the quick form, the handle no longer
  /// owns the lock once called.
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`: completes at once with `operation_aborted` and empty counts; the
  /// release still runs to completion in the background.
  template <
      boost::asio::completion_token_for<void(boost::system::error_code, unlock_result)> Token = boost::asio::deferred_t>
  auto async_unlock(unlock_options opts, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, unlock_result)>(initiation{this}, token,
                                                                                              opts);
  }

  /// @brief Extends the lock to `ttl` from now on a majority of masters (check-the-token script).
  ///
  /// Handler: `void(boost::system::error_code)`. On success `validity_deadline()` moves to the
  /// start of this extension + ttl - drift, unless it was later already: an extension never
  /// shortens a lock, on the masters or here (a ttl shorter than the time left changes nothing).
  /// The extension counts only if a majority extended it before the current validity ran out. Errors:
  /// `error::not_locked`; `error::validity_expired` (the lock had already run out, or the quorum came too late);
  /// `error::not_owner` (so many masters no longer have our token that a majority cannot); `error::quorum_unavailable`;
  /// `error::invalid_argument` (ttl too short for the drift and request timeout). After a failure the lock stays valid
  /// until its old deadline at most.
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`: completes at once with `operation_aborted`; the extension requests
  /// already sent still run, and if they succeed the deadline is not moved (the conservative
  /// choice: the holder relies on the old one).
  template <boost::asio::completion_token_for<void(boost::system::error_code)> Token = boost::asio::deferred_t>
  auto async_extend(std::chrono::milliseconds ttl, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(initiation{this}, token, ttl);
  }

 private:
  friend class detail::client_impl;
  friend struct detail::lock_op;
  using unlock_handler = boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
  using extend_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
  using lost_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
  using event_handler = boost::asio::any_completion_handler<void(boost::system::error_code, lock_event)>;
  using unlock_all_handler = boost::asio::any_completion_handler<void(boost::system::error_code, unlock_result)>;
  struct wait_lost_op {};
  struct wait_event_op {};
  struct unlock_op {};

  // Carries the lock's executor, so that adapters such as `asio::cancel_after` and completion
  // executor look-ups see it before the operation starts.
  struct initiation {
    lock* self;
    using executor_type = lock::executor_type;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    void operator()(lost_handler h, wait_lost_op) const { self->start_wait_lost(std::move(h)); }
    void operator()(unlock_handler h, unlock_op) const { self->start_unlock(std::move(h)); }
    void operator()(event_handler h, wait_event_op) const { self->start_wait_event(std::move(h)); }
    void operator()(unlock_all_handler h, unlock_options o) const { self->start_unlock(std::move(h), o); }
    void operator()(extend_handler h, std::chrono::milliseconds ttl) const { self->start_extend(std::move(h), ttl); }
  };

  explicit lock(std::shared_ptr<detail::lock_state> state) noexcept : state_(std::move(state)) {}
  static lock make(std::shared_ptr<detail::lock_state> state) noexcept;
  void start_wait_lost(lost_handler h);
  void start_unlock(unlock_handler h);
  void start_unlock(unlock_all_handler h, unlock_options opts);
  void start_wait_event(event_handler h);
  void start_extend(extend_handler h, std::chrono::milliseconds ttl);
  void release_in_background() noexcept;

  std::shared_ptr<detail::lock_state> state_;
};

}  // namespace redlock
