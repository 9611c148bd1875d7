// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Running coroutine test bodies on an io_context, bounded in time (header-only, tests only).

#include <redlock/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace redlock::test {

inline constexpr auto use_tuple = boost::asio::as_tuple(boost::asio::use_awaitable);

/// Runs the coroutine `body(ioc)` on `threads` threads of a fresh io_context. A body that does
/// not finish within `limit` fails the test instead of hanging the suite.
template <class Body>
void run_test(Body body, int threads = 1, redlock::clock::duration limit = std::chrono::seconds{60}) {
  boost::asio::io_context ioc{threads};
  std::atomic<bool> finished{false};
  std::exception_ptr failure;
  boost::asio::co_spawn(ioc, body(ioc), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
  });
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { ioc.run_for(limit); });
  ioc.run_for(limit);
  for (auto& t : pool) t.join();
  ASSERT_TRUE(finished.load()) << "test body did not finish within its time limit";
  if (failure) std::rethrow_exception(failure);
}

inline boost::asio::awaitable<void> sleep_for(redlock::clock::duration d) {
  boost::asio::steady_timer t{co_await boost::asio::this_coro::executor, d};
  co_await t.async_wait(use_tuple);
}

/// Waits, bounded, until `pred()` holds, checking every `step`; false if it never did.
inline boost::asio::awaitable<bool> until(const std::function<bool()>& pred,
                                          redlock::clock::duration limit = std::chrono::seconds{5},
                                          redlock::clock::duration step = std::chrono::milliseconds{5}) {
  const auto end = redlock::clock::now() + limit;
  while (!pred()) {
    if (redlock::clock::now() >= end) co_return false;
    co_await sleep_for(step);
  }
  co_return true;
}

/// Waits (`limit` at most) until every master of `c` is connected; a test failure when not.
inline boost::asio::awaitable<void> wait_connected(redlock::client& c,
                                                   redlock::clock::duration limit = std::chrono::seconds{2}) {
  const bool up = co_await until(
      [&] {
        for (const auto& s : c.masters())
          if (s.state != redlock::connection_state::up) return false;
        return true;
      },
      limit);
  if (!up) ADD_FAILURE() << "client did not connect to every master";
}

}  // namespace redlock::test
