// SPDX-License-Identifier: BSL-1.0
// The waiter list behind lock::async_wait_lost and lock::async_wait_event (src/detail/waiter_list.hpp):
// completion order, one completion per waiter, per-waiter cancellation, and a cancellation that
// arrives after the list's owner is gone.

#include "detail/waiter_list.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using list_type = redlock::detail::waiter_list<void(error_code, std::string)>;

struct owner {
  list_type waiters;
};

struct outcome {
  int calls = 0;
  error_code ec;
  std::string value;
};

struct waiter_list : ::testing::Test {
  asio::io_context io;
  asio::strand<asio::any_io_executor> strand{asio::make_strand(asio::any_io_executor{io.get_executor()})};
  std::shared_ptr<owner> o = std::make_shared<owner>();
  std::vector<outcome> out = std::vector<outcome>(4);
  std::vector<asio::cancellation_signal> signals = std::vector<asio::cancellation_signal>(4);

  // Runs what is ready (an io_context that ran out of work must be restarted).
  void drain() {
    io.restart();
    io.poll();
  }

  void add(std::size_t i, bool cancellable = true) {
    auto record = [this, i](error_code ec, std::string v) {
      ++out[i].calls;
      out[i].ec = ec;
      out[i].value = std::move(v);
    };
    if (cancellable) {
      o->waiters.add(asio::bind_cancellation_slot(signals[i].slot(), std::move(record)), strand,
                     std::weak_ptr<owner>(o), &owner::waiters, io.get_executor());
    } else {
      o->waiters.add(std::move(record), strand, std::weak_ptr<owner>(o), &owner::waiters, io.get_executor());
    }
  }
};

TEST_F(waiter_list, completes_the_oldest_first_and_the_rest_together) {
  add(0);
  add(1);
  add(2, false);
  EXPECT_EQ(o->waiters.size(), 3u);
  o->waiters.complete_front(io.get_executor(), error_code{}, "first");
  drain();
  EXPECT_EQ(out[0].calls, 1);
  EXPECT_EQ(out[0].value, "first");
  EXPECT_EQ(out[1].calls, 0);
  o->waiters.complete_all(io.get_executor(), error_code{}, "final");
  drain();
  EXPECT_TRUE(o->waiters.empty());
  EXPECT_EQ(out[1].value, "final");
  EXPECT_EQ(out[2].value, "final");
  EXPECT_EQ(out[1].calls + out[2].calls, 2);
  signals[1].emit(asio::cancellation_type::terminal);
  drain();
  EXPECT_EQ(out[1].calls, 1) << "a cancellation after the completion completes nothing";
}

TEST_F(waiter_list, a_cancelled_waiter_alone_completes_with_operation_aborted) {
  add(0);
  add(1);
  add(2);
  signals[1].emit(asio::cancellation_type::terminal);
  drain();
  EXPECT_EQ(out[1].calls, 1);
  EXPECT_EQ(out[1].ec, asio::error::operation_aborted);
  EXPECT_EQ(out[1].value, "");
  EXPECT_EQ(out[0].calls, 0);
  EXPECT_EQ(out[2].calls, 0);
  EXPECT_EQ(o->waiters.size(), 2u);
  o->waiters.complete_front(io.get_executor(), error_code{}, "x");
  o->waiters.complete_front(io.get_executor(), error_code{}, "y");
  drain();
  EXPECT_EQ(out[0].value, "x") << "order kept after an erase from the middle";
  EXPECT_EQ(out[2].value, "y");
}

TEST_F(waiter_list, a_cancellation_after_the_owner_is_gone_does_nothing) {
  add(0);
  signals[0].emit(asio::cancellation_type::terminal);  // queued on the strand
  o.reset();                                           // the handler goes with the list, uncalled
  drain();
  EXPECT_EQ(out[0].calls, 0);
}

}  // namespace
