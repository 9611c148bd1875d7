// SPDX-License-Identifier: BSL-1.0
#pragma once
// Runs a function on an io_context's own thread and waits for it (private to the test bed): how
// the proxy and the fake server apply a setting from the test's thread, so that it is in effect
// when the setter returns.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <exception>
#include <future>

namespace redlock::test {

template <class F>
void run_on_io_thread(boost::asio::io_context& io, F&& f) {
  if (io.get_executor().running_in_this_thread()) {
    f();
    return;
  }
  std::promise<void> done;
  auto result = done.get_future();
  boost::asio::post(io, [&] {
    try {
      f();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  result.get();  // rethrows what f threw
}

}  // namespace redlock::test
