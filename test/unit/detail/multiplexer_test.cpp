// SPDX-License-Identifier: BSL-1.0
#include <redlock/detail/multiplexer.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;
using redlock::detail::multiplexer;
using redlock::resp::node;
using redlock::resp::response;
using redlock::resp::type;
using clock_type = redlock::clock;
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
    return [this](int tag, error_code ec, response& r) { finished.push_back({tag, ec, std::move(r)}); };
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

// A completion whose move throws when told to: the queue's entry cannot be made.
struct fragile_completion {
  bool throw_on_move = false;
  int tag = 0;
  fragile_completion(bool t, int g) : throw_on_move(t), tag(g) {}
  fragile_completion(fragile_completion&& o) : throw_on_move(o.throw_on_move), tag(o.tag) {
    if (throw_on_move) throw std::bad_alloc{};
  }
  fragile_completion& operator=(fragile_completion&&) = default;
};

TEST(multiplexer, a_request_whose_entry_cannot_be_made_leaves_no_bytes_behind) {
  // Its bytes written without an entry would go out ahead of the next request, whose reply
  // would then be the orphan's: one lock's yes counted for another.
  multiplexer<fragile_completion> mux;
  mux.add(1, "A", 1, {}, fragile_completion{false, 1});
  EXPECT_THROW(mux.add(2, "ORPHAN", 1, {}, fragile_completion{true, 2}), std::bad_alloc);
  mux.add(3, "C", 1, {}, fragile_completion{false, 3});
  EXPECT_EQ(mux.prepare_write(), "AC");
  EXPECT_EQ(mux.in_flight(), 2u);
  std::vector<int> told;
  const auto complete = [&](fragile_completion&& c, error_code, response&) { told.push_back(c.tag); };
  response r{node{type::simple_string, 0, 0, "first"}};
  mux.on_reply(r, complete);
  response r2{node{type::simple_string, 0, 0, "second"}};
  mux.on_reply(r2, complete);
  EXPECT_EQ(told, (std::vector<int>{1, 3}));
}

TEST(multiplexer, write_batch_cap_still_writes_one_oversized_request) {
  multiplexer<int> mux{{}, 4};
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

// The stall point is that of the written requests still owed a reply, abandoned ones included
// (their replies are as overdue); requests not yet written and answered ones do not count.
TEST(multiplexer, stall_point_is_the_earliest_of_the_written_requests_still_owed_a_reply) {
  harness h;
  EXPECT_EQ(h.mux.stall_point(), clock_type::time_point::max());
  h.mux.add(1, "A", 1, h.t0 + 100ms, 1, h.t0 + 300ms);
  h.mux.add(2, "B", 1, h.t0 + 50ms, 2, h.t0 + 250ms);
  EXPECT_EQ(h.mux.stall_point(), clock_type::time_point::max());  // nothing written yet
  h.mux.prepare_write();
  h.mux.add(3, "C", 1, h.t0 + 10ms, 3, h.t0 + 20ms);  // waiting: not the stream's fault yet
  EXPECT_EQ(h.mux.stall_point(), h.t0 + 250ms);
  h.mux.expire(h.t0 + 150ms, redlock::error::master_timeout, h.sink());  // 1 and 2 abandoned, 3 removed
  EXPECT_EQ(h.finished.size(), 3u);
  EXPECT_EQ(h.mux.stall_point(), h.t0 + 250ms);  // abandoned, still owed
  EXPECT_EQ(h.feed("late-A"), redlock::detail::reply_outcome::dropped);
  EXPECT_EQ(h.mux.stall_point(), h.t0 + 250ms);
  EXPECT_EQ(h.feed("late-B"), redlock::detail::reply_outcome::dropped);
  EXPECT_EQ(h.mux.stall_point(), clock_type::time_point::max());
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
  h.feed("late a");                       // A's late reply is dropped
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
  h.mux.on_reply(r, [&](int, error_code, response&) { h.mux.add(2, "B", 1, h.t0 + 1s, 2); });
  EXPECT_EQ(h.mux.prepare_write(), "B");
}

// ---- the read path: bytes in, replies routed -------------------------------------------------

using redlock::detail::read_event;

// Drives the multiplexer's read side as the connection does: read into read_space(),
// commit_read(), dispatch(); `chunk` bytes per read. Out-of-band pushes are kept with their nodes.
struct reading {
  harness h;
  std::vector<read_event> events;
  std::vector<response> pushes;

  error_code deliver(std::string_view bytes, std::size_t chunk) {
    while (!bytes.empty()) {
      auto space = h.mux.read_space();
      EXPECT_FALSE(space.empty());
      const std::size_t n = std::min({chunk, bytes.size(), space.size()});
      std::memcpy(space.data(), bytes.data(), n);
      bytes.remove_prefix(n);
      h.mux.commit_read(n);
      if (auto ec = h.mux.dispatch(
              h.sink(), [this](read_event e) { events.push_back(e); },
              [this](response& push) { pushes.push_back(push); }))
        return ec;
    }
    return {};
  }
  std::size_t count(read_event e) const {
    return static_cast<std::size_t>(std::count(events.begin(), events.end(), e));
  }
};

// Three requests (the second pipelines two commands) and their replies, with a push message and an
// attribute in between, split at every byte offset into two reads, then read one byte at a time.
TEST(multiplexer_read_path, replies_split_at_every_offset_reach_their_requests) {
  const std::string stream =
      "+OK\r\n"
      ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"  // push: out of band
      ":1\r\n"
      "*2\r\n$1\r\na\r\n_\r\n"
      "|1\r\n+ttl\r\n:3\r\n-ERR boom\r\n";
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    for (std::size_t chunk : {stream.size(), std::size_t{1}}) {
      SCOPED_TRACE(testing::Message() << "split " << split << " chunk " << chunk);
      reading rd;
      rd.h.mux.add(1, "A", 1, rd.h.t0 + 1s, 1);
      rd.h.mux.add(2, "BB", 2, rd.h.t0 + 1s, 2);
      rd.h.mux.add(3, "C", 1, rd.h.t0 + 1s, 3);
      rd.h.mux.prepare_write();
      ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(0, split), chunk));
      ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(split), chunk));
      ASSERT_EQ(rd.h.finished.size(), 3u);
      EXPECT_EQ(rd.h.finished[0].tag, 1);
      EXPECT_EQ(rd.h.finished[0].r, harness::reply("OK"));
      EXPECT_EQ(rd.h.finished[1].tag, 2);
      EXPECT_FALSE(rd.h.finished[1].ec);
      EXPECT_EQ(rd.h.finished[1].r, (response{node{type::integer, 0, 0, "1"}, node{type::array, 2, 0, ""},
                                              node{type::blob_string, 0, 1, "a"}, node{type::null, 0, 1, ""}}));
      EXPECT_EQ(rd.h.finished[2].tag, 3);
      EXPECT_EQ(rd.h.finished[2].ec, redlock::error::server_error);
      EXPECT_EQ(redlock::resp::reply_value(rd.h.finished[2].r)->value, "ERR boom");
      EXPECT_EQ(rd.count(read_event::push), 1u);
      EXPECT_EQ(rd.count(read_event::reply), 4u);
      ASSERT_EQ(rd.pushes.size(), 1u);
      EXPECT_EQ(rd.pushes[0].at(3).value, "hello");
      EXPECT_TRUE(rd.h.mux.empty());
      EXPECT_EQ(rd.h.mux.reader().buffered(), 0u);
    }
  }
}

TEST(multiplexer_read_path, reply_with_nothing_in_flight_is_an_error) {
  reading rd;
  rd.h.mux.add(1, "A", 1, rd.h.t0 + 1s, 1);  // queued but not written: its reply cannot be due
  EXPECT_EQ(rd.deliver("+OK\r\n", 64), redlock::error::protocol_error);
  EXPECT_EQ(rd.count(read_event::unsolicited), 1u);
  EXPECT_TRUE(rd.h.finished.empty());
}

TEST(multiplexer_read_path, a_push_alone_is_not_a_reply) {
  reading rd;
  EXPECT_FALSE(rd.deliver(">2\r\n+invalidate\r\n_\r\n", 64));
  EXPECT_EQ(rd.count(read_event::push), 1u);
  EXPECT_EQ(rd.count(read_event::reply), 0u);
}

TEST(multiplexer_read_path, bad_bytes_fail_the_stream_until_reset) {
  reading rd;
  rd.h.mux.add(1, "A", 1, rd.h.t0 + 1s, 1);
  rd.h.mux.prepare_write();
  EXPECT_EQ(rd.deliver("?what\r\n", 64), redlock::error::protocol_error);
  EXPECT_TRUE(rd.h.finished.empty());
  EXPECT_TRUE(rd.deliver("+OK\r\n", 64));  // sticky
  rd.h.mux.reset_read();
  EXPECT_FALSE(rd.deliver("+OK\r\n", 64));
  ASSERT_EQ(rd.h.finished.size(), 1u);
}

TEST(multiplexer_read_path, late_reply_of_an_abandoned_request_is_dropped) {
  reading rd;
  rd.h.mux.add(1, "A", 1, rd.h.t0 + 10ms, 1);
  rd.h.mux.add(2, "B", 1, rd.h.t0 + 1s, 2);
  rd.h.mux.prepare_write();
  rd.h.mux.expire(rd.h.t0 + 10ms, redlock::error::master_timeout, rd.h.sink());
  EXPECT_FALSE(rd.deliver("+late\r\n+b\r\n", 64));
  EXPECT_EQ(rd.count(read_event::dropped), 1u);
  ASSERT_EQ(rd.h.finished.size(), 2u);
  EXPECT_EQ(rd.h.finished[1].tag, 2);
  EXPECT_EQ(rd.h.finished[1].r, harness::reply("b"));
}

// A single-reply request is handed the read side's reply storage itself, and nothing the steady
// state does makes the read buffer or that storage give up their capacity.
TEST(multiplexer_read_path, buffer_and_reply_storage_keep_their_capacity) {
  multiplexer<int> mux;
  std::size_t completions = 0;
  auto complete = [&](int, error_code ec, response& r) {
    EXPECT_FALSE(ec);
    EXPECT_EQ(&r, &mux.reader().reply());  // not a copy
    ++completions;
  };
  auto ignore = [](read_event) {};
  std::size_t buffer = 0;
  std::size_t reply = 0;
  for (int round = 0; round < 100; ++round) {
    mux.add(1, "PING", 1, {}, round);
    mux.add(2, "PING", 1, {}, round);
    mux.prepare_write();
    const std::string_view bytes = "*2\r\n+a\r\n+b\r\n*2\r\n+c\r\n+d\r\n";
    auto space = mux.read_space();
    std::memcpy(space.data(), bytes.data(), bytes.size());
    mux.commit_read(bytes.size());
    ASSERT_FALSE(mux.dispatch(complete, ignore, [](response&) { FAIL() << "no push was sent"; }));
    if (round == 0) {
      buffer = mux.reader().buffer_capacity();
      reply = mux.reader().reply_capacity();
      EXPECT_GE(reply, 3u);
    }
    EXPECT_EQ(mux.reader().buffer_capacity(), buffer);
    EXPECT_EQ(mux.reader().reply_capacity(), reply);
  }
  EXPECT_EQ(completions, 200u);
}

TEST(multiplexer, cancelled_waiting_request_leaves_the_others_bytes_intact) {
  harness h;
  h.mux.add(1, "AAA", 1, h.t0 + 1s, 1);
  h.mux.add(2, "BB", 1, h.t0 + 5ms, 2);
  h.mux.add(3, "C", 1, h.t0 + 1s, 3);
  h.mux.add(4, "DDDD", 1, h.t0 + 1s, 4);
  EXPECT_TRUE(h.mux.cancel(3, false, boost::asio::error::operation_aborted, h.sink()));
  h.mux.expire(h.t0 + 5ms, redlock::error::master_timeout, h.sink());
  EXPECT_EQ(h.mux.prepare_write(), "AAADDDD");
}

TEST(multiplexer, expiring_interleaved_waiting_requests_keeps_the_others_in_order) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1);
  h.mux.prepare_write();  // in flight, not due
  const char* bytes[] = {"bb", "CCC", "d", "EEEE", "ff", "G"};
  for (int i = 0; i < 6; ++i) h.mux.add(10 + i, bytes[i], 1, h.t0 + (i % 2 ? 5ms : 1s), 10 + i);
  h.mux.expire(h.t0 + 5ms, redlock::error::master_timeout, h.sink());
  ASSERT_EQ(h.finished.size(), 3u);  // the odd ones, in order
  EXPECT_EQ(h.finished[0].tag, 11);
  EXPECT_EQ(h.finished[1].tag, 13);
  EXPECT_EQ(h.finished[2].tag, 15);
  EXPECT_EQ(h.mux.prepare_write(), "bbdff");
  h.feed("a");
  h.feed("b");
  h.feed("d");
  h.feed("f");
  ASSERT_EQ(h.finished.size(), 7u);
  EXPECT_EQ(h.finished[3].tag, 1);
  EXPECT_EQ(h.finished[4].tag, 10);
  EXPECT_EQ(h.finished[5].tag, 12);
  EXPECT_EQ(h.finished[6].tag, 14);
  EXPECT_TRUE(h.mux.empty());
}

TEST(multiplexer, write_batch_cap_takes_a_prefix_and_keeps_the_rest_waiting) {
  multiplexer<int> mux{{}, 3};
  mux.add(1, "AA", 1, {}, 1);
  mux.add(2, "BB", 1, {}, 2);
  mux.add(3, "CC", 1, {}, 3);
  EXPECT_EQ(mux.prepare_write(), "AABB");  // under the cap after "AA": takes one more
  mux.add(4, "DD", 1, {}, 4);
  EXPECT_EQ(mux.prepare_write(), "CCDD");
  EXPECT_EQ(mux.in_flight(), 4u);
}

// The queue is a ring: it must keep the order when it wraps around and when it grows while
// wrapped, and when an entry is removed from the middle of a wrapped ring.
TEST(multiplexer, queue_keeps_order_across_wrap_around_growth_and_removal) {
  harness h;
  int next_tag = 0;
  for (int round = 0; round < 50; ++round) {
    const int batch = 1 + round % 13;  // crosses the initial capacity (8) at various offsets
    for (int i = 0; i < batch; ++i, ++next_tag) {
      h.mux.add(static_cast<std::uint64_t>(next_tag), std::to_string(next_tag) + ";", 1, h.t0 + 1s, next_tag);
    }
    if (round % 5 == 0) {  // remove one waiting request from the middle
      const int victim = next_tag - 1 - batch / 2;
      ASSERT_TRUE(
          h.mux.cancel(static_cast<std::uint64_t>(victim), false, boost::asio::error::operation_aborted, h.sink()));
    }
    const std::string written{h.mux.prepare_write()};
    std::string want;
    for (int t = next_tag - batch; t < next_tag; ++t) {
      if (round % 5 == 0 && t == next_tag - 1 - batch / 2) continue;
      want += std::to_string(t) + ";";
    }
    ASSERT_EQ(written, want);
    while (h.mux.in_flight() > static_cast<std::size_t>(round % 3)) {
      ASSERT_EQ(h.feed("r"), redlock::detail::reply_outcome::completed);
    }
  }
  while (h.mux.in_flight() > 0) h.feed("r");
  std::vector<int> completed;
  for (const auto& f : h.finished) {
    if (!f.ec) completed.push_back(f.tag);
  }
  ASSERT_FALSE(completed.empty());
  EXPECT_TRUE(std::is_sorted(completed.begin(), completed.end()));
  EXPECT_TRUE(h.mux.empty());
}

// ---- pub/sub on the same connection: requests confirmed by a push ----------------------------

using redlock::detail::confirmed_by;
using redlock::detail::is_subscription_push;
using redlock::detail::reply_outcome;

// What RESP3 Redis sends for `SUBSCRIBE ch` (in order, among the replies) and for a PUBLISH to it.
constexpr std::string_view subscribed = ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
constexpr std::string_view message = ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n";

const response subscribed_nodes{node{type::push, 3, 0, ""}, node{type::blob_string, 0, 1, "subscribe"},
                                node{type::blob_string, 0, 1, "ch"}, node{type::integer, 0, 1, "1"}};
const response message_nodes{node{type::push, 3, 0, ""}, node{type::blob_string, 0, 1, "message"},
                             node{type::blob_string, 0, 1, "ch"}, node{type::blob_string, 0, 1, "hello"}};

TEST(multiplexer_push, subscription_pushes_are_recognised_by_their_first_element) {
  auto push_of = [](std::string kind, type t = type::blob_string) {
    return response{node{type::push, 3, 0, ""}, node{t, 0, 1, std::move(kind)}, node{type::blob_string, 0, 1, "ch"},
                    node{type::integer, 0, 1, "1"}};
  };
  for (const char* kind : {"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"}) {
    EXPECT_TRUE(is_subscription_push(push_of(kind))) << kind;
  }
  EXPECT_TRUE(is_subscription_push(push_of("subscribe", type::simple_string)));
  EXPECT_FALSE(is_subscription_push(push_of("message")));
  EXPECT_FALSE(is_subscription_push(push_of("pmessage")));
  EXPECT_FALSE(is_subscription_push(push_of("invalidate")));
  EXPECT_FALSE(is_subscription_push(push_of("SUBSCRIBE")));  // Redis spells it in lower case
  EXPECT_FALSE(is_subscription_push(push_of("subscribe", type::integer)));
  EXPECT_FALSE(is_subscription_push(response{node{type::push, 0, 0, ""}}));  // no first element
  EXPECT_FALSE(is_subscription_push(response{}));
  // The same elements in an array are a RESP2-style reply, not a push.
  auto array = push_of("subscribe");
  array[0].data_type = type::array;
  EXPECT_FALSE(is_subscription_push(array));
  // Attributes may describe the push or its first element; the kind is still the first element.
  EXPECT_TRUE(is_subscription_push(response{node{type::attribute, 1, 0, ""}, node{type::simple_string, 0, 1, "a"},
                                            node{type::integer, 0, 1, "1"}, node{type::push, 3, 0, ""},
                                            node{type::attribute, 1, 1, ""}, node{type::simple_string, 0, 2, "b"},
                                            node{type::integer, 0, 2, "2"}, node{type::blob_string, 0, 1, "subscribe"},
                                            node{type::blob_string, 0, 1, "ch"}, node{type::integer, 0, 1, "1"}}));
}

TEST(multiplexer_push, only_a_request_of_one_reply_may_be_confirmed_by_a_push) {
  harness h;
  EXPECT_EQ(h.mux.add(1, "SS", 2, h.t0 + 1s, 1, clock_type::time_point::max(), confirmed_by::push),
            redlock::error::invalid_argument);
  EXPECT_EQ(h.mux.add(2, "S", 0, h.t0 + 1s, 2, clock_type::time_point::max(), confirmed_by::push),
            redlock::error::invalid_argument);
  EXPECT_TRUE(h.mux.empty());
  EXPECT_EQ(h.mux.prepare_write(), "");
  EXPECT_TRUE(h.finished.empty());  // refused, never completed
  EXPECT_FALSE(h.mux.add(3, "S", 1, h.t0 + 1s, 3, clock_type::time_point::max(), confirmed_by::push));
  EXPECT_FALSE(h.mux.add(4, "AB", 2, h.t0 + 1s, 4));
  EXPECT_EQ(h.mux.prepare_write(), "SAB");
}

// A PING, the SUBSCRIBE and an ECHO written in one batch: the confirmation push, in the reply
// stream between the PING's and the ECHO's replies, is the SUBSCRIBE's reply. Split at every offset.
TEST(multiplexer_push, the_confirmation_is_the_reply_of_the_push_confirmed_request_among_pipelined_ones) {
  const std::string stream = std::string{"+PONG\r\n"} + std::string{subscribed} + "$1\r\nx\r\n";
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    for (std::size_t chunk : {stream.size(), std::size_t{1}}) {
      SCOPED_TRACE(testing::Message() << "split " << split << " chunk " << chunk);
      reading rd;
      rd.h.mux.add(1, "PING", 1, rd.h.t0 + 1s, 1);
      rd.h.mux.add(2, "SUBSCRIBE", 1, rd.h.t0 + 1s, 2, clock_type::time_point::max(), confirmed_by::push);
      rd.h.mux.add(3, "ECHO", 1, rd.h.t0 + 1s, 3);
      EXPECT_EQ(rd.h.mux.prepare_write(), "PINGSUBSCRIBEECHO");
      ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(0, split), chunk));
      ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(split), chunk));
      ASSERT_EQ(rd.h.finished.size(), 3u);
      EXPECT_EQ(rd.h.finished[0].tag, 1);
      EXPECT_EQ(rd.h.finished[0].r, harness::reply("PONG"));
      EXPECT_EQ(rd.h.finished[1].tag, 2);
      EXPECT_FALSE(rd.h.finished[1].ec);
      EXPECT_EQ(rd.h.finished[1].r, subscribed_nodes);
      EXPECT_EQ(rd.h.finished[2].tag, 3);
      EXPECT_EQ(rd.h.finished[2].r, harness::reply("x", type::blob_string));
      EXPECT_TRUE(rd.pushes.empty());
      EXPECT_EQ(rd.count(read_event::reply), 3u);  // the confirmation counts as a reply
      EXPECT_EQ(rd.count(read_event::push), 0u);
      EXPECT_TRUE(rd.h.mux.empty());
    }
  }
}

// Messages of a subscription made earlier may come before the confirmation (from another
// channel) and after it, while requests are in flight: each goes out of band, with its content,
// told as a push before it is handed over; the requests still get their own replies.
TEST(multiplexer_push, message_pushes_before_and_after_go_out_of_band_with_their_content) {
  const std::string other = ">3\r\n$7\r\nmessage\r\n$5\r\nother\r\n$3\r\nbye\r\n";
  const std::string stream =
      other + "+PONG\r\n" + std::string{subscribed} + std::string{message} + ":7\r\n" + std::string{message};
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    SCOPED_TRACE(testing::Message() << "split " << split);
    reading rd;
    rd.h.mux.add(1, "PING", 1, rd.h.t0 + 1s, 1);
    rd.h.mux.add(2, "SUBSCRIBE", 1, rd.h.t0 + 1s, 2, clock_type::time_point::max(), confirmed_by::push);
    rd.h.mux.add(3, "INCR", 1, rd.h.t0 + 1s, 3);
    rd.h.mux.prepare_write();
    ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(0, split), 1000));
    ASSERT_FALSE(rd.deliver(std::string_view{stream}.substr(split), 1000));
    ASSERT_EQ(rd.h.finished.size(), 3u);
    EXPECT_EQ(rd.h.finished[0].r, harness::reply("PONG"));
    EXPECT_EQ(rd.h.finished[1].tag, 2);
    EXPECT_EQ(rd.h.finished[1].r, subscribed_nodes);
    EXPECT_EQ(rd.h.finished[2].tag, 3);
    EXPECT_EQ(rd.h.finished[2].r, harness::reply("7", type::integer));
    ASSERT_EQ(rd.pushes.size(), 3u);
    EXPECT_EQ(rd.pushes[0], (response{node{type::push, 3, 0, ""}, node{type::blob_string, 0, 1, "message"},
                                      node{type::blob_string, 0, 1, "other"}, node{type::blob_string, 0, 1, "bye"}}));
    EXPECT_EQ(rd.pushes[1], message_nodes);
    EXPECT_EQ(rd.pushes[2], message_nodes);  // with nothing in flight: still out of band, no error
    EXPECT_EQ(rd.events, (std::vector<read_event>{read_event::push, read_event::reply, read_event::reply,
                                                  read_event::push, read_event::reply, read_event::push}));
    EXPECT_TRUE(rd.h.mux.empty());
  }
}

// A refusal (an ACL without the channel) is a normal error reply: it completes the SUBSCRIBE with
// server_error and its text, and the next reply reaches the next request.
TEST(multiplexer_push, an_error_reply_to_a_subscription_keeps_the_stream_in_step) {
  reading rd;
  rd.h.mux.add(1, "SUBSCRIBE", 1, rd.h.t0 + 1s, 1, clock_type::time_point::max(), confirmed_by::push);
  rd.h.mux.add(2, "GET", 1, rd.h.t0 + 1s, 2);
  rd.h.mux.add(3, "SUBSCRIBE", 1, rd.h.t0 + 1s, 3, clock_type::time_point::max(), confirmed_by::push);
  rd.h.mux.add(4, "PING", 1, rd.h.t0 + 1s, 4);
  rd.h.mux.prepare_write();
  const std::string stream =
      "-NOPERM this user has no permissions to access the 'ch' channel\r\n$1\r\nv\r\n"
      "-NOPERM this user has no permissions to access the 'ch' channel\r\n" +
      std::string{message} + "+PONG\r\n";
  ASSERT_FALSE(rd.deliver(stream, 7));
  ASSERT_EQ(rd.h.finished.size(), 4u);
  EXPECT_EQ(rd.h.finished[0].tag, 1);
  EXPECT_EQ(rd.h.finished[0].ec, redlock::error::server_error);
  EXPECT_EQ(rd.h.finished[0].r.at(0).value, "NOPERM this user has no permissions to access the 'ch' channel");
  EXPECT_EQ(rd.h.finished[1].tag, 2);
  EXPECT_FALSE(rd.h.finished[1].ec);
  EXPECT_EQ(rd.h.finished[1].r, harness::reply("v", type::blob_string));
  EXPECT_EQ(rd.h.finished[2].tag, 3);
  EXPECT_EQ(rd.h.finished[2].ec, redlock::error::server_error);
  EXPECT_EQ(rd.h.finished[3].tag, 4);  // a message while PING is the oldest: out of band
  EXPECT_EQ(rd.h.finished[3].r, harness::reply("PONG"));
  EXPECT_EQ(rd.pushes.size(), 1u);
  EXPECT_TRUE(rd.h.mux.empty());
}

// A SUBSCRIBE that timed out after it was written is abandoned like any request: its late
// confirmation is its reply all the same and is dropped (neither handed out of band nor taken for
// the next request's reply); a message that comes meanwhile is still out of band.
TEST(multiplexer_push, the_late_confirmation_of_an_abandoned_subscription_is_dropped) {
  reading rd;
  rd.h.mux.add(1, "SUBSCRIBE", 1, rd.h.t0 + 10ms, 1, rd.h.t0 + 1s, confirmed_by::push);
  rd.h.mux.add(2, "PING", 1, rd.h.t0 + 1s, 2, rd.h.t0 + 2s);
  rd.h.mux.prepare_write();
  EXPECT_EQ(rd.h.mux.stall_point(), rd.h.t0 + 1s);  // stall detection sees it like any request
  rd.h.mux.expire(rd.h.t0 + 10ms, redlock::error::master_timeout, rd.h.sink());
  ASSERT_EQ(rd.h.finished.size(), 1u);
  EXPECT_EQ(rd.h.finished[0].ec, redlock::error::master_timeout);
  EXPECT_TRUE(rd.h.mux.overdue());
  EXPECT_EQ(rd.h.mux.stall_point(), rd.h.t0 + 1s);  // still owed a reply
  ASSERT_FALSE(rd.deliver(std::string{message} + std::string{subscribed} + "+PONG\r\n", 64));
  EXPECT_EQ(rd.count(read_event::dropped), 1u);
  ASSERT_EQ(rd.pushes.size(), 1u);
  EXPECT_EQ(rd.pushes[0], message_nodes);
  ASSERT_EQ(rd.h.finished.size(), 2u);
  EXPECT_EQ(rd.h.finished[1].tag, 2);
  EXPECT_EQ(rd.h.finished[1].r, harness::reply("PONG"));
  EXPECT_FALSE(rd.h.mux.overdue());
  EXPECT_TRUE(rd.h.mux.empty());
}

// The same for an abandoned SUBSCRIBE whose late answer is a refusal.
TEST(multiplexer_push, the_late_refusal_of_an_abandoned_subscription_is_dropped) {
  reading rd;
  rd.h.mux.add(1, "SUBSCRIBE", 1, rd.h.t0 + 1s, 1, clock_type::time_point::max(), confirmed_by::push);
  rd.h.mux.add(2, "PING", 1, rd.h.t0 + 1s, 2);
  rd.h.mux.prepare_write();
  EXPECT_TRUE(rd.h.mux.cancel(1, true, boost::asio::error::operation_aborted, rd.h.sink()));
  ASSERT_FALSE(rd.deliver("-NOPERM no\r\n+PONG\r\n", 64));
  EXPECT_EQ(rd.count(read_event::dropped), 1u);
  ASSERT_EQ(rd.h.finished.size(), 2u);
  EXPECT_EQ(rd.h.finished[1].tag, 2);
  EXPECT_FALSE(rd.h.finished[1].ec);
  EXPECT_TRUE(rd.h.mux.empty());
}

// A confirmation is a reply only for the oldest request in flight, and only if that one is
// confirmed by a push. Otherwise (a normal request is oldest, nothing is in flight, or the
// push-confirmed request is still waiting to be written) it is out of band, not an error.
TEST(multiplexer_push, a_confirmation_when_the_oldest_request_is_not_push_confirmed_is_out_of_band) {
  reading rd;
  ASSERT_FALSE(rd.deliver(subscribed, 64));  // nothing in flight
  rd.h.mux.add(1, "GET", 1, rd.h.t0 + 1s, 1);
  rd.h.mux.prepare_write();
  rd.h.mux.add(2, "SUBSCRIBE", 1, rd.h.t0 + 1s, 2, clock_type::time_point::max(), confirmed_by::push);
  ASSERT_FALSE(rd.deliver(subscribed, 64));  // GET is oldest; the SUBSCRIBE is not even written
  rd.h.mux.prepare_write();
  ASSERT_FALSE(rd.deliver(subscribed, 64));  // GET is still the oldest
  EXPECT_TRUE(rd.h.finished.empty());
  EXPECT_EQ(rd.pushes.size(), 3u);
  EXPECT_EQ(rd.count(read_event::push), 3u);
  ASSERT_FALSE(rd.deliver("$1\r\nv\r\n", 64));
  ASSERT_FALSE(rd.deliver(subscribed, 64));  // now the SUBSCRIBE is oldest: its reply
  ASSERT_EQ(rd.h.finished.size(), 2u);
  EXPECT_EQ(rd.h.finished[0].tag, 1);
  EXPECT_EQ(rd.h.finished[0].r, harness::reply("v", type::blob_string));
  EXPECT_EQ(rd.h.finished[1].tag, 2);
  EXPECT_EQ(rd.h.finished[1].r, subscribed_nodes);
  EXPECT_EQ(rd.pushes.size(), 3u);
  EXPECT_TRUE(rd.h.mux.empty());
}

// on_reply says what it did with a push: routed to its request, or left for the I/O layer.
TEST(multiplexer_push, on_reply_leaves_an_out_of_band_push_untouched) {
  harness h;
  h.mux.add(1, "S", 1, h.t0 + 1s, 1, clock_type::time_point::max(), confirmed_by::push);
  h.mux.prepare_write();
  response m = message_nodes;
  EXPECT_EQ(h.mux.on_reply(m, h.sink()), reply_outcome::out_of_band);
  EXPECT_EQ(m, message_nodes);
  EXPECT_TRUE(h.finished.empty());
  response c = subscribed_nodes;
  EXPECT_EQ(h.mux.on_reply(c, h.sink()), reply_outcome::completed);
  EXPECT_TRUE(c.empty());
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].r, subscribed_nodes);
  response late = subscribed_nodes;  // nothing in flight: out of band, not unsolicited
  EXPECT_EQ(h.mux.on_reply(late, h.sink()), reply_outcome::out_of_band);
}

// A connection that came up as RESP2 refuses the push-confirmed requests queued while connecting:
// they never reach the wire; the others are written in order, and written requests stay.
TEST(multiplexer_push, refuse_waiting_removes_the_push_confirmed_requests_only) {
  harness h;
  h.mux.add(1, "A", 1, h.t0 + 1s, 1, clock_type::time_point::max(), confirmed_by::push);
  h.mux.prepare_write();
  h.mux.add(2, "SS", 1, h.t0 + 1s, 2, clock_type::time_point::max(), confirmed_by::push);
  h.mux.add(3, "BBB", 1, h.t0 + 1s, 3);
  h.mux.add(4, "TTTT", 1, h.t0 + 1s, 4, clock_type::time_point::max(), confirmed_by::push);
  h.mux.add(5, "C", 1, h.t0 + 1s, 5);
  EXPECT_EQ(h.mux.refuse_waiting(confirmed_by::push, redlock::error::not_supported, h.sink()), 2u);
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[0].tag, 2);
  EXPECT_EQ(h.finished[0].ec, redlock::error::not_supported);
  EXPECT_EQ(h.finished[1].tag, 4);
  EXPECT_EQ(h.mux.in_flight(), 1u);
  EXPECT_EQ(h.mux.waiting(), 2u);
  EXPECT_EQ(h.mux.prepare_write(), "BBBC");
  EXPECT_EQ(h.mux.refuse_waiting(confirmed_by::push, redlock::error::not_supported, h.sink()), 0u);
}

}  // namespace

// After a burst the queue gives its room back once it is empty (a connection that once carried
// 10,000 requests would otherwise keep room for them for good); steady traffic below the kept
// sizes keeps its room, so that it still allocates nothing per request.
TEST(multiplexer, trim_gives_back_what_a_burst_left_and_keeps_steady_room) {
  harness h;
  for (int i = 0; i < 10; ++i) h.mux.add(i, "PING", 1, h.t0 + 1s, i);
  (void)h.mux.prepare_write();
  for (int i = 0; i < 10; ++i) (void)h.feed("PONG");
  const auto steady = h.mux.queue_capacity();
  h.mux.trim();
  EXPECT_EQ(h.mux.queue_capacity(), steady) << "room below the kept size stays";
  const std::string payload(100, 'x');
  for (int i = 0; i < 2000; ++i) h.mux.add(i, payload, 1, h.t0 + 1s, i);
  EXPECT_GE(h.mux.queue_capacity(), 2000u);
  h.mux.trim();
  EXPECT_GE(h.mux.queue_capacity(), 2000u) << "nothing is given back while requests are queued";
  while (h.mux.has_waiting()) (void)h.mux.prepare_write();
  for (int i = 0; i < 2000; ++i) (void)h.feed("PONG");
  ASSERT_TRUE(h.mux.empty());
  EXPECT_GE(h.mux.bytes_capacity(), 200'000u);
  h.mux.trim();
  EXPECT_LE(h.mux.queue_capacity(), multiplexer<int>::kept_entries);
  EXPECT_LE(h.mux.bytes_capacity(), 2 * multiplexer<int>::kept_buffer_bytes);
  // And it still works: the queue grows again.
  h.mux.add(1, "PING", 1, h.t0 + 1s, 1);
  EXPECT_EQ(h.mux.prepare_write(), "PING");
  EXPECT_EQ(h.feed("PONG"), redlock::detail::reply_outcome::completed);
}

// A finished request's slot is reused with its old fields in place (only its completion is freed):
// each new request must start clean. Every kind of request that leaves a flag behind goes first
// (an error reply, a pipelined request's partial replies, a timed-out one, a push-confirmed one),
// then plain requests reuse their slots and must each complete on their own single reply, without
// an error, and without taking a subscription push as their reply.
TEST(multiplexer, a_reused_slot_keeps_nothing_of_the_request_before) {
  harness h;
  const auto cap = h.mux.queue_capacity() == 0 ? std::size_t{8} : h.mux.queue_capacity();
  int tag = 0;
  for (std::size_t k = 0; k < cap; ++k) {
    ++tag;
    switch (k % 4) {
      case 0:
        h.mux.add(tag, "E", 1, h.t0 + 1s, tag);
        break;
      case 1:
        h.mux.add(tag, "PP", 2, h.t0 + 1s, tag);
        break;
      case 2:
        h.mux.add(tag, "T", 1, h.t0 + 10ms, tag);
        break;
      default:
        h.mux.add(tag, "S", 1, h.t0 + 1s, tag, clock_type::time_point::max(), redlock::detail::confirmed_by::push);
        break;
    }
  }
  (void)h.mux.prepare_write();
  (void)h.mux.expire(h.t0 + 10ms, redlock::error::master_timeout, h.sink());
  for (std::size_t k = 0; k < cap; ++k) {
    switch (k % 4) {
      case 0:
        h.feed("ERR no", type::simple_error);
        break;
      case 1:
        h.feed("one");
        h.feed("ERR two", type::simple_error);
        break;
      case 2:
        h.feed("late");  // dropped
        break;
      default:
        h.feed("ERR refused", type::simple_error);
        break;
    }
  }
  ASSERT_TRUE(h.mux.empty());
  EXPECT_EQ(h.mux.queue_capacity(), cap) << "the same slots are reused";
  h.finished.clear();
  for (std::size_t k = 0; k < cap; ++k)
    h.mux.add(100 + static_cast<int>(k), "OK", 1, h.t0 + 1s, 100 + static_cast<int>(k));
  (void)h.mux.prepare_write();
  EXPECT_FALSE(h.mux.overdue()) << "no slot still says timed out";
  for (std::size_t k = 0; k < cap; ++k) {
    auto push = subscribed_nodes;
    EXPECT_EQ(h.mux.on_reply(push, h.sink()), redlock::detail::reply_outcome::out_of_band) << "slot " << k;
    EXPECT_EQ(h.feed("fine"), redlock::detail::reply_outcome::completed) << "slot " << k;
  }
  ASSERT_EQ(h.finished.size(), cap);
  for (std::size_t k = 0; k < cap; ++k) {
    EXPECT_EQ(h.finished[k].tag, 100 + static_cast<int>(k));
    EXPECT_FALSE(h.finished[k].ec) << "slot " << k << ": " << h.finished[k].ec.message();
    EXPECT_EQ(h.finished[k].r, harness::reply("fine"));
  }
}
