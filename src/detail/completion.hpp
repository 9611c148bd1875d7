// SPDX-License-Identifier: BSL-1.0
#pragma once
// Completing a type-erased handler the Asio way (private to src/).

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>

#include <new>
#include <utility>

namespace redlock::detail {

// Runs `h(args...)` on the handler's associated executor (`fallback` when it has none), after
// disconnecting its cancellation slot (our slot handler must not outlive the operation).
// Not asio::append: in Boost 1.81 it re-wraps an lvalue any_completion_handler without end.
template <class Handler, class Executor, class... Args>
void complete_handler(Handler h, const Executor& fallback, Args... args) {
  auto slot = boost::asio::get_associated_cancellation_slot(h);
  if (slot.is_connected()) slot.clear();
  auto ex = boost::asio::get_associated_executor(h, fallback);
  boost::asio::dispatch(ex,
                        [h = std::move(h), ... args = std::move(args)]() mutable { std::move(h)(std::move(args)...); });
}

// Completes an operation that has no client to post through (an empty or failed handle): hops
// through the system executor so as never to complete inline, holding outstanding work on the
// handler's executor until the completion has been handed over (so its io_context cannot be torn
// down meanwhile).
template <class Handler, class... Args>
void complete_without_client(Handler h, Args... args) {
  auto work =
      boost::asio::prefer(boost::asio::get_associated_executor(h), boost::asio::execution::outstanding_work.tracked);
  boost::asio::post(boost::asio::system_executor(), [h = std::move(h), work = std::move(work), args...]() mutable {
    complete_handler(std::move(h), work, std::move(args)...);
  });
}

// A handler held where it may be move-assigned (a vector that erases from the middle). Boost
// 1.81's any_completion_handler move *assignment* re-wraps the source instead of moving it
// (unbounded recursion), so assignment here is destroy + move-construct.
template <class Handler>
struct handler_box {
  Handler handler;
  handler_box() = default;
  explicit handler_box(Handler h) noexcept : handler(std::move(h)) {}
  handler_box(handler_box&& o) noexcept : handler(std::move(o.handler)) {}
  handler_box& operator=(handler_box&& o) noexcept {
    if (this != &o) {
      handler.~Handler();
      new (&handler) Handler(std::move(o.handler));
    }
    return *this;
  }
  ~handler_box() = default;
};

}  // namespace redlock::detail
