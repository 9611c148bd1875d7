// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Scoped locking: acquire, run the work with the lock kept alive, cancel the work if the lock is
/// lost, release. (Header-only: the work's type is the caller's.)

#include <redlock/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace redlock {

namespace detail {

template <class T>
struct awaitable_value;
template <class T, class E>
struct awaitable_value<boost::asio::awaitable<T, E>> {
  using type = T;
};

template <class Work>
using work_result_t = typename awaitable_value<std::invoke_result_t<Work&, lock&>>::type;

template <class T>
struct work_outcome {
  std::optional<T> value;
  template <class... V>
  void set(V&&... v) {
    value.emplace(std::forward<V>(v)...);
  }
};
// A member call, not `outcome.value` under `if constexpr`: Clang checks a discarded branch's
// expressions that do not depend on the lambda's own parameters, and void has no value.
template <>
struct work_outcome<void> {
  void set() noexcept {}
};

template <class Work>
boost::asio::awaitable<work_result_t<Work>> with_lock_on_strand(client& c, std::string resource,
                                                                std::chrono::milliseconds ttl, Work work,
                                                                keep_alive_options opts) {
  namespace asio = boost::asio;
  using T = work_result_t<Work>;
  constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

  auto [ec, held] = co_await c.async_lock(resource, ttl, tuple);
  if (ec) throw boost::system::system_error(ec, "redlock: lock");
  held.keep_alive(opts);

  // Everything below runs on this strand: the work, the loss notification, and this coroutine.
  auto ex = co_await asio::this_coro::executor;
  struct shared_state {
    explicit shared_state(const asio::any_io_executor& e) : wake(e, std::chrono::steady_clock::time_point::max()) {}
    asio::steady_timer wake;
    asio::cancellation_signal cancel_work;
    bool done = false;
    bool lost = false;
    std::exception_ptr failure;
    work_outcome<T> outcome;
  };
  auto st = std::make_shared<shared_state>(ex);

  held.async_wait_lost(asio::bind_executor(ex, [st](boost::system::error_code e) {
    if (!e) {  // lost (operation_aborted: released first)
      st->lost = true;
      st->wake.cancel();
    }
  }));
  auto on_done = [st](std::exception_ptr e, auto&&... v) {
    st->failure = e;
    if (!e) st->outcome.set(std::forward<decltype(v)>(v)...);
    st->done = true;
    st->wake.cancel();
  };
  asio::co_spawn(ex, work(held), asio::bind_cancellation_slot(st->cancel_work.slot(), std::move(on_done)));

  bool cancelled = false;
  while (!st->done) {
    if (st->lost && !cancelled) {
      cancelled = true;
      st->cancel_work.emit(asio::cancellation_type::terminal);  // the lock is gone: stop the work
    }
    st->wake.expires_at(std::chrono::steady_clock::time_point::max());
    if (st->done || (st->lost && !cancelled)) continue;
    co_await st->wake.async_wait(tuple);
  }
  const bool lost = st->lost || held.lost();
  if (lost) {
    // The lock is gone: nothing to wait for. Dropping the handle releases it in the background
    // (the client sends and counts it, and re-sends it where the answer is in doubt), so the
    // caller hears of the loss at once rather than a release_timeout later when masters are down.
    const auto reason = held.loss_reason();
    auto detail = held.loss_description();
    { [[maybe_unused]] lock gone = std::move(held); }
    throw lock_lost_error(reason ? reason : make_error_code(error::lock_lost), detail);
  }
  // Release (also stops the keep-alive and completes the loss wait).
  co_await held.async_unlock(tuple);
  if (st->failure) std::rethrow_exception(st->failure);
  if constexpr (!std::is_void_v<T>) co_return std::move(*st->outcome.value);
}

}  // namespace detail

/// @brief Acquires `resource` (with retries), runs `work(lock&)` with the lock kept alive
/// (`lock::keep_alive(opts)`), releases the lock, and returns the work's result.
///
/// `work` is invocable as `work(lock&)` returning `asio::awaitable<T>`; it runs on a strand of the
/// caller's executor. If the lock is lost while the work runs, the work receives terminal
/// cancellation (`opts.notify_margin` before the validity ends at the latest, as
/// `lock::keep_alive` says) and, once it has finished, this throws `lock_lost_error` at once: a
/// `boost::system::system_error` whose `code()` is `error::lock_lost` and whose `reason()` (and
/// `what()`) says why the lock was lost. The
/// release of a lost lock is not awaited: it runs in the background, owned and counted by the
/// client (`client_stats::background_releases`), bounded by `release_timeout`. Failing to
/// acquire throws with the acquisition's error. An exception from the work is rethrown after the
/// lock is released (awaited, at the first majority), unless the lock was lost: then the loss
/// is what is thrown.
template <class Work>
boost::asio::awaitable<detail::work_result_t<Work>> with_lock(client& c, std::string resource,
                                                              std::chrono::milliseconds ttl, Work work,
                                                              keep_alive_options opts = {}) {
  auto strand = boost::asio::make_strand(co_await boost::asio::this_coro::executor);
  co_return co_await boost::asio::co_spawn(
      strand, detail::with_lock_on_strand(c, std::move(resource), ttl, std::move(work), opts),
      boost::asio::use_awaitable);
}

/// @brief `with_lock` for any completion token: the handler signature is
/// `void(std::exception_ptr, T)` (`void(std::exception_ptr)` for `T = void`), as `asio::co_spawn`'s.
template <class Work, class Token>
auto async_with_lock(client& c, std::string resource, std::chrono::milliseconds ttl, Work work, keep_alive_options opts,
                     Token&& token) {
  return boost::asio::co_spawn(boost::asio::make_strand(c.get_executor()),
                               detail::with_lock_on_strand(c, std::move(resource), ttl, std::move(work), opts),
                               std::forward<Token>(token));
}

}  // namespace redlock
