// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The Redlock client: distributed locks over N independent Redis masters.

#include <redlock/clock.hpp>
#include <redlock/config.hpp>
#include <redlock/connection.hpp>
#include <redlock/export.hpp>
#include <redlock/lock.hpp>
#include <redlock/lock_options.hpp>
#include <redlock/master_result.hpp>
#include <redlock/observe.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>

#include <chrono>
#include <concepts>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <vector>

namespace redlock {

namespace detail {
class client_impl;
}

/// A Redlock client bound to an executor and a set of masters.
///
/// Construction opens one multiplexed connection per master and keeps it alive (reconnecting
/// after failures) until `close()` or destruction. Locks acquired through the client keep a
/// reference to its internals, so a lock may outlive the client object (its release then finds
/// the connections closed and the keys expire with their ttl).
///
/// @par Thread safety
/// Distinct objects: safe. Shared objects: safe; operations may be started from any thread.
/// All of a client's operations and its masters' connections run on one strand of `ex`, so one
/// client uses one thread at a time; for lock traffic on several threads, use several clients.
class REDLOCK_API client {
 public:
  /// The type of the executor given to the constructor (`get_executor()`).
  using executor_type = boost::asio::any_io_executor;
  /// The clock of validity deadlines (monotonic).
  using clock = redlock::boot_clock;

  /// Starts connecting to every master. An invalid `cfg` does not throw: every operation then
  /// completes with `error::invalid_config` (see `validate`).
  client(executor_type ex, client_config cfg);
  /// Closes the client (see `close`).
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// The executor given to the constructor.
  executor_type get_executor() const noexcept;
  /// The configuration given to the constructor (even when invalid).
  const client_config& config() const noexcept;
  /// Each master's connection state, in the order of `client_config::masters`.
  std::vector<connection_status> masters() const;
  /// What the hazard guards say of each master (docs/safety.md, "Restarts and clock jumps"), in
  /// the order of `client_config::masters`: whether its votes count, and if not why and until
  /// when. From any thread.
  std::vector<master_hazard> hazards() const;
  /// A snapshot of the client's counters (lock outcomes, extensions, losses, releases, acquire
  /// latency) and of every master's connection counters, in the order of `client_config::masters`.
  /// Cheap enough to call periodically from any thread.
  client_stats stats() const;

  /// @brief Acquires `resource` for `ttl`, retrying per `client_config::retry`.
  ///
  /// Handler: `void(boost::system::error_code, lock)`. Sends `SET key token NX PX ttl` to every
  /// master at once; succeeds as soon as a majority granted it with validity left, fails as soon
  /// as a majority cannot grant it, and after a failed attempt releases on every master before
  /// the random retry delay. The returned lock tells what each master answered even on failure
  /// (an unreachable master's `error` is why its connection failed). No retry when none can help:
  /// if the masters unreachable for a hopeless cause (credentials refused, a host name that does
  /// not exist) leave too few others for a quorum, it completes at once with `quorum_unavailable`.
  /// Errors: `error::not_acquired` (held by someone else), `error::quorum_unavailable` (too many
  /// masters down or failing; `report(lock)` says why, master by master), `error::validity_expired`,
  /// `error::invalid_argument` (empty or overlong resource, one whose key would end like a key the
  /// lock kinds keep beside a lock, such as `x:redlock-fence`; ttl not above drift + request timeout),
  /// `error::invalid_config`.
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`: completes at once with `operation_aborted`; whatever the attempt in
  /// progress acquires is released. `close()` has the same effect.
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_lock(std::string_view resource, std::chrono::milliseconds ttl, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(initiation{this}, token,
                                                                                     std::string{resource}, ttl, true);
  }

  /// @brief As `async_lock`, with a single attempt (no retry).
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_try_lock(std::string_view resource, std::chrono::milliseconds ttl, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(initiation{this}, token,
                                                                                     std::string{resource}, ttl, false);
  }

  /// @brief As `async_lock`, for a kind of lock other than the plain one (`lock_options`: a
  /// reader or writer of a read/write lock, a counting semaphore, a fencing token, reentrancy).
  ///
  /// Errors as for `async_lock`, and `error::invalid_argument` for options that do not go together
  /// (permits other than 1 without `semaphore`, `fence` or `owner` with another kind, an owner
  /// that is empty, longer than 256 bytes, holds spaces or control characters or begins with
  /// `redlock:`). A master that
  /// holds the resource as another kind (say, a semaphore locked as a plain lock) answers an error
  /// (`master_status::server_error`) and does not count. See docs/api.md, "Lock kinds".
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_lock(std::string_view resource, std::chrono::milliseconds ttl, lock_options opts, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, std::vector<std::string>{std::string{resource}}, ttl, std::move(opts), true);
  }

  /// @brief As `async_lock` with options, with a single attempt (no retry).
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_try_lock(std::string_view resource, std::chrono::milliseconds ttl, lock_options opts, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, std::vector<std::string>{std::string{resource}}, ttl, std::move(opts), false);
  }

  /// @brief Acquires every one of `resources` or none, as one lock (`async_lock_all({"a", "b"}, 10s)`).
  ///
  /// `resources` is a braced list of names or any range of string-like names. One round per
  /// master: a script sets every resource's key on that master, or none if any is held, so two
  /// clients locking overlapping sets never both hold a shared resource and never deadlock (nobody
  /// holds part of a set while waiting for the rest). Validity, release, extension and keep-alive
  /// cover the whole set. Errors as for `async_lock`, and `error::invalid_argument` for an empty
  /// list, more than `client_config::max_resources` resources, or a resource named twice. Other
  /// clients locking one of the resources alone with plain Redlock are excluded as usual.
  template <class Names,
            boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  requires std::ranges::input_range<Names> &&
      std::convertible_to<std::ranges::range_reference_t<Names>, std::string_view>
  auto async_lock_all(const Names& resources, std::chrono::milliseconds ttl, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, names_of(resources), ttl, multi_resource{}, true);
  }

  /// @brief As `async_lock_all`, with a single attempt (no retry).
  template <class Names,
            boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  requires std::ranges::input_range<Names> &&
      std::convertible_to<std::ranges::range_reference_t<Names>, std::string_view>
  auto async_try_lock_all(const Names& resources, std::chrono::milliseconds ttl, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, names_of(resources), ttl, multi_resource{}, false);
  }

  // A braced list of names (a range parameter cannot be deduced from one). GCC 12 cannot keep a
  // braced list alive across a `co_await`: inside a coroutine, name the list first.
  /// @brief `async_lock_all` for a braced list of names, `async_lock_all({"a", "b"}, ttl)`.
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_lock_all(std::initializer_list<std::string_view> resources, std::chrono::milliseconds ttl,
                      Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, names_of(resources), ttl, multi_resource{}, true);
  }

  /// @brief `async_try_lock_all` for a braced list of names.
  template <boost::asio::completion_token_for<void(boost::system::error_code, lock)> Token = boost::asio::deferred_t>
  auto async_try_lock_all(std::initializer_list<std::string_view> resources, std::chrono::milliseconds ttl,
                          Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, lock)>(
        initiation{this}, token, names_of(resources), ttl, multi_resource{}, false);
  }

  /// @brief Waits until a quorum of masters (a majority, `N/2 + 1`) is connected and handshaken,
  /// at most `timeout`.
  ///
  /// Handler: `void(boost::system::error_code, quorum_report)`. Short-lived programs call it
  /// before their first lock, so that connecting does not eat that lock's request deadline. No
  /// polling: it is woken by the connections. The report lists the masters that are not up (on
  /// success too) and why each last failed. Errors:
  /// - `error::quorum_unavailable` as soon as no quorum can come up without a change of
  ///   configuration: the masters that failed for a hopeless cause (credentials refused, a host
  ///   name that does not exist; see `core::is_hopeless`) leave fewer than a majority;
  /// - `error::not_ready` when `timeout` passed first (a non-positive `timeout` completes at
  ///   once: success if a quorum is up now, else `not_ready`);
  /// - `error::invalid_config`, and `operation_aborted` after `close()`.
  ///
  /// @par Per-operation cancellation
  /// `terminal`, `partial`: completes at once with `operation_aborted`.
  template <
      boost::asio::completion_token_for<void(boost::system::error_code, quorum_report)> Token = boost::asio::deferred_t>
  auto async_wait_ready(std::chrono::milliseconds timeout, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, quorum_report)>(
        ready_initiation{this}, token, std::optional<std::chrono::milliseconds>{timeout});
  }

  /// @brief As `async_wait_ready(timeout, token)` without a timeout: until a quorum is up, no
  /// quorum can come up, cancellation, or `close()`.
  template <
      boost::asio::completion_token_for<void(boost::system::error_code, quorum_report)> Token = boost::asio::deferred_t>
  auto async_wait_ready(Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, quorum_report)>(
        ready_initiation{this}, token, std::optional<std::chrono::milliseconds>{});
  }

  /// Why `l`'s acquisition failed, master by master (empty `failing` when every master answered
  /// or it was acquired): each master that could not be used, with its address and cause (for
  /// an unreachable one, why its connection failed, and the master's refusal text). Print it with
  /// `to_string`. `l.masters()` holds the same causes without addresses.
  quorum_report report(const lock& l) const;

  /// Stops the client: lock operations in progress complete with `operation_aborted` (releasing
  /// what they acquired), connections close. Held locks stay held until their ttl. Idempotent.
  void close();

 private:
  using lock_handler = boost::asio::any_completion_handler<void(boost::system::error_code, lock)>;
  struct multi_resource {};
  template <class Names>
  static std::vector<std::string> names_of(const Names& names) {
    std::vector<std::string> out;
    for (auto&& n : names) out.emplace_back(std::string_view{n});
    return out;
  }

  // Carries the client's executor, so that adapters such as `asio::cancel_after` and completion
  // executor look-ups see it before the operation starts.
  struct initiation {
    client* self;
    using executor_type = client::executor_type;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    void operator()(lock_handler h, std::string resource, std::chrono::milliseconds ttl, bool retry) const {
      self->start_lock(std::move(h), std::move(resource), ttl, retry);
    }
    void operator()(lock_handler h, std::vector<std::string> resources, std::chrono::milliseconds ttl,
                    lock_options opts, bool retry) const {
      self->start_lock(std::move(h), std::move(resources), ttl, std::move(opts), false, retry);
    }
    void operator()(lock_handler h, std::vector<std::string> resources, std::chrono::milliseconds ttl, multi_resource,
                    bool retry) const {
      self->start_lock(std::move(h), std::move(resources), ttl, lock_options{}, true, retry);
    }
  };

  using ready_handler = boost::asio::any_completion_handler<void(boost::system::error_code, quorum_report)>;
  struct ready_initiation {
    client* self;
    using executor_type = client::executor_type;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    void operator()(ready_handler h, std::optional<std::chrono::milliseconds> timeout) const {
      self->start_wait_ready(std::move(h), timeout);
    }
  };
  void start_wait_ready(ready_handler h, std::optional<std::chrono::milliseconds> timeout);

  void start_lock(lock_handler h, std::string resource, std::chrono::milliseconds ttl, bool retry);
  void start_lock(lock_handler h, std::vector<std::string> resources, std::chrono::milliseconds ttl, lock_options opts,
                  bool multi, bool retry);

  std::shared_ptr<detail::client_impl> impl_;
};

}  // namespace redlock
