#include <redlock/detail/multiplexer.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using redlock::detail::multiplexer;
using redlock::resp::node;
using redlock::resp::response;
using redlock::resp::type;
using clock_type = std::chrono::steady_clock;
using boost::system::error_code;

struct done {
  int tag;
  error_code ec;
  response r;
};

struct harness {
  multiplexer<int> mux;
  std::vector<done> finished;
  clock_type::time_point t0{};

  auto sink() {
    return [this](int tag, error_code ec, response&& r) { finished.push_back({tag, ec, std::move(r)}); };
  }
  static response reply(std::string v, type t = type::simple_string) { return {node{t, 0, 0, std::move(v)}}; }
  redlock::detail::reply_outcome feed(std::string v, type t = type::simple_string) {
    auto r = reply(std::move(v), t);
    return mux.on_reply(r, sink());
  }
};

TEST(multiplexer, coalesces_waiting_requests_into_one_write_in_order) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.add(2, "B", 1, h.t0 + 1s, 2);
  h.mux.add(3, "C", 1, h.t0 + 1s, 3);
  EXPECT_EQ(h.mux.prepare_write(), "ABC");
  EXPECT_FALSE(h.mux.has_waiting());
  EXPECT_EQ(h.mux.in_flight(), 3u);
  EXPECT_EQ(h.mux.prepare_write(), "");
}

TEST(multiplexer, write_batch_cap_still_writes_one_oversized_request) {
  multiplexer<int> mux{4};
  mux.add(1, std::string(10, 'x'), 1, {}, 1);
  mux.add(2, "yy", 1, {}, 2);
  EXPECT_EQ(mux.prepare_write().size(), 10u);
  EXPECT_EQ(mux.prepare_write(), "yy");
}

TEST(multiplexer, replies_match_requests_fifo) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.add(2, "B", 1, h.t0 + 1s, 2);
  h.mux.prepare_write();
  ASSERT_EQ(h.feed("a"), redlock::detail::reply_outcome::completed);
  ASSERT_EQ(h.feed("b"), redlock::detail::reply_outcome::completed);
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[0].tag, 1);
  EXPECT_EQ(h.finished[0].r.front().value, "a");
  EXPECT_EQ(h.finished[1].tag, 2);
  EXPECT_EQ(h.finished[1].r.front().value, "b");
  EXPECT_TRUE(h.mux.empty());
}

TEST(multiplexer, unsolicited_reply_is_reported) {
  harness h;
  EXPECT_EQ(h.feed("surprise"), redlock::detail::reply_outcome::unsolicited);
}

TEST(multiplexer, pipelined_request_collects_all_its_replies_and_flags_errors) {
  harness h;
  h.mux.add(7, "AB", 2, h.t0 + 1s, 7);
  h.mux.prepare_write();
  EXPECT_EQ(h.feed("one"), redlock::detail::reply_outcome::partial);
  EXPECT_TRUE(h.finished.empty());
  h.feed("ERR two", type::simple_error);
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].ec, redlock::error::server_error);
  ASSERT_EQ(h.finished[0].r.size(), 2u);
  EXPECT_EQ(h.finished[0].r[1].value, "ERR two");
}

TEST(multiplexer, error_reply_behind_a_resp3_attribute_is_still_an_error) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.prepare_write();
  response r{node{type::attribute, 1, 0, ""}, node{type::simple_string, 0, 1, "ttl"}, node{type::integer, 0, 1, "3"},
             node{type::simple_error, 0, 0, "ERR boom"}};
  h.mux.on_reply(r, h.sink());
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].ec, redlock::error::server_error);
  EXPECT_EQ(redlock::resp::reply_value(h.finished[0].r)->value, "ERR boom");
}

TEST(multiplexer, cancelling_a_waiting_request_removes_it_from_the_write) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.add(2, "B", 1, h.t0 + 1s, 2);
  EXPECT_TRUE(h.mux.cancel(1, false, boost::asio::error::operation_aborted, h.sink()));
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].tag, 1);
  EXPECT_EQ(h.finished[0].ec, boost::asio::error::operation_aborted);
  EXPECT_EQ(h.mux.prepare_write(), "B");
}

TEST(multiplexer, total_only_cancellation_cannot_take_back_a_written_request) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.prepare_write();
  EXPECT_FALSE(h.mux.cancel(1, false, boost::asio::error::operation_aborted, h.sink()));
  EXPECT_TRUE(h.finished.empty());
  h.feed("a");
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_FALSE(h.finished[0].ec);
}

TEST(multiplexer, abandoned_request_drops_its_late_reply_and_keeps_the_stream_in_step) {
  harness h;
  h.mux.add(1, "A", 2, h.t0 + 1s, 1);  // two replies due
  h.mux.add(2, "B", 1, h.t0 + 1s, 2);
  h.mux.prepare_write();
  h.feed("a1");  // first half arrives before the cancel
  EXPECT_TRUE(h.mux.cancel(1, true, boost::asio::error::operation_aborted, h.sink()));
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_TRUE(h.finished[0].r.empty());
  EXPECT_EQ(h.feed("a2"), redlock::detail::reply_outcome::dropped);  // late reply of the abandoned request
  EXPECT_EQ(h.finished.size(), 1u);
  h.feed("b");
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[1].tag, 2);
  EXPECT_EQ(h.finished[1].r.front().value, "b");
  EXPECT_TRUE(h.mux.empty());
}

TEST(multiplexer, expire_times_out_due_requests_only_and_returns_the_next_deadline) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 10ms, 1);
  h.mux.add(2, "B", 1, h.t0 + 30ms, 2);
  h.mux.prepare_write();
  h.mux.add(3, "C", 1, h.t0 + 5ms, 3);   // waiting, due first
  h.mux.add(4, "D", 1, h.t0 + 20ms, 4);  // waiting
  auto next = h.mux.expire(h.t0 + 10ms, redlock::error::master_timeout, h.sink());
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[0].tag, 3);
  EXPECT_EQ(h.finished[1].tag, 1);
  EXPECT_EQ(h.finished[1].ec, redlock::error::master_timeout);
  EXPECT_EQ(next, h.t0 + 20ms);
  EXPECT_EQ(h.mux.prepare_write(), "D");  // C never reaches the wire
  h.feed("late a");                        // A's late reply is dropped
  h.feed("b");
  ASSERT_EQ(h.finished.size(), 3u);
  EXPECT_EQ(h.finished[2].tag, 2);
  EXPECT_EQ(h.mux.expire(h.t0 + 25ms, redlock::error::master_timeout, h.sink()), clock_type::time_point::max());
  EXPECT_EQ(h.finished.back().tag, 4);
}

TEST(multiplexer, fail_all_tells_written_from_unsent) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.prepare_write();
  h.mux.add(2, "B", 1, h.t0 + 1s, 2);
  h.mux.fail_all(redlock::error::connection_lost, redlock::error::not_connected, h.sink());
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[0].ec, redlock::error::connection_lost);
  EXPECT_EQ(h.finished[1].ec, redlock::error::not_connected);
  EXPECT_TRUE(h.mux.empty());
}

TEST(multiplexer, completion_may_reenter_the_queue) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.prepare_write();
  auto r = harness::reply("a");
  h.mux.on_reply(r, [&](int, error_code, response&&) { h.mux.add(2, "B", 1, h.t0 + 1s, 2); });
  EXPECT_EQ(h.mux.prepare_write(), "B");
}

}  // namespace
