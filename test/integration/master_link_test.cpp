// SPDX-License-Identifier: BSL-1.0
// The lock client's private path to one master (src/detail/master_link.hpp) against a real
// redis-server: requests queued by a plain call on the shared strand, replies handed to a sink in
// place, counted like public requests, and no allocation per request in steady state.

#include "detail/master_link.hpp"

#include <redlock/connection.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/request.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

// Counts every allocation of this test binary (the steady-state test reads it). Not under the
// sanitizers: their runtimes allocate with their own operator new what ours would free.
// GCC says so with __SANITIZE_*__, Clang with __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REDLOCK_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(REDLOCK_TEST_SANITIZED)
#define REDLOCK_TEST_COUNTS_ALLOCATIONS 0
#else
#define REDLOCK_TEST_COUNTS_ALLOCATIONS 1
#endif
namespace {
std::atomic<std::size_t> allocations{0};

#if REDLOCK_TEST_COUNTS_ALLOCATIONS
void* counted_alloc(std::size_t n, std::size_t align) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p =
      align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc{};
  return p;
}
#endif
}  // namespace

#if REDLOCK_TEST_COUNTS_ALLOCATIONS
void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::connection_config;
using redlock::connection_state;
using redlock::error;
using redlock::detail::link_observer;
using redlock::detail::master_link;
using redlock::detail::reply_sink;
using redlock::resp::request;
using redlock::resp::response;
using clock_type = redlock::clock;

struct call {
  std::uint64_t tag;
  error_code ec;
  response r;
};

// Records every reply; checks it never runs inside submit, and runs `then` (on the strand) after.
class recorder final : public reply_sink {
 public:
  void on_reply(std::uint64_t tag, error_code ec, const response& r) override {
    EXPECT_FALSE(inside_submit) << "the sink ran inline from submit";
    calls.push_back({tag, ec, r});
    if (then) then(tag, ec, r);
  }
  std::vector<call> calls;
  bool inside_submit = false;
  std::function<void(std::uint64_t, error_code, const response&)> then;
};

// Records what a link tells its observer (on the strand).
class observer final : public link_observer {
 public:
  void on_link_up(std::size_t index) override {
    ups.push_back(index);
    if (then_up) then_up();
  }
  void on_link_down(std::size_t index) override { downs.push_back(index); }
  void on_push(std::size_t index, const response& push) override {
    indexes.push_back(index);
    pushes.push_back(push);
  }
  std::vector<std::size_t> ups, downs, indexes;
  std::vector<response> pushes;
  std::function<void()> then_up;
};

// The nodes of a RESP3 push of blob strings (and integers written as ":n").
response push_of(std::initializer_list<std::string> elements) {
  response r{redlock::resp::node{redlock::resp::type::push, elements.size(), 0, ""}};
  for (const auto& e : elements) {
    if (!e.empty() && e[0] == ':') {
      r.push_back({redlock::resp::type::integer, 0, 1, e.substr(1)});
    } else {
      r.push_back({redlock::resp::type::blob_string, 0, 1, e});
    }
  }
  return r;
}

template <class... Args>
std::string encode(std::string_view cmd, const Args&... args) {
  request r;
  r.push(cmd, args...);
  return r.payload();
}

struct master_link_test : ::testing::Test {
  redlock::test::master_set servers{1};
  asio::io_context ioc;
  master_link::strand_type strand{asio::any_io_executor{ioc.get_executor()}};
  std::shared_ptr<recorder> sink = std::make_shared<recorder>();

  connection_config config() {
    connection_config cfg;
    cfg.host = servers[0].host();
    cfg.port = servers[0].port();
    cfg.connect_timeout = 500ms;
    cfg.reconnect = {10ms, 50ms, 0.5};
    return cfg;
  }

  // Runs the io_context until `done()` or fails after `limit`.
  template <class Pred>
  void run_until(Pred done, clock_type::duration limit = 10s) {
    const auto until = clock_type::now() + limit;
    while (!done()) {
      ASSERT_LT(clock_type::now(), until) << "timed out";
      ioc.restart();
      ioc.run_for(2ms);
    }
  }

  // Calls submit on the strand, as the lock client does, and returns its result.
  error_code submit_on_strand(master_link& link, std::string payload, std::size_t replies, std::uint64_t tag,
                              clock_type::duration timeout = 5s, bool push_confirmed = false) {
    bool done = false;
    error_code result;
    asio::post(strand, [&] {
      sink->inside_submit = true;
      result = link.submit(payload, replies, clock_type::now() + timeout, sink, tag, push_confirmed);
      payload.assign(payload.size(), 'x');  // the link copied the bytes: the caller may reuse them
      sink->inside_submit = false;
      done = true;
    });
    run_until([&] { return done; });
    return result;
  }

  void wait_up(master_link& link) {
    run_until([&] { return link.status().state == connection_state::up; });
  }

  // Runs `f` on the strand (as the lock client's code runs) and waits for it: what it submits is
  // queued in one pass, so requests pipeline behind each other.
  template <class F>
  void on_strand(F f) {
    bool done = false;
    asio::post(strand, [&] {
      f();
      done = true;
    });
    run_until([&] { return done; });
  }
};

TEST_F(master_link_test, replies_reach_the_sink_in_order_with_their_tags_and_are_counted) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  EXPECT_FALSE(submit_on_strand(link, encode("SET", "k", "v"), 1, 11));
  std::string pipelined = encode("GET", "k") + encode("INCR", "k");  // two replies, the second an error
  EXPECT_FALSE(submit_on_strand(link, pipelined, 2, 12));
  EXPECT_FALSE(submit_on_strand(link, encode("GET", "k"), 1, 13));
  run_until([&] { return sink->calls.size() == 3; });
  ASSERT_EQ(sink->calls.size(), 3u);
  EXPECT_EQ(sink->calls[0].tag, 11u);
  EXPECT_FALSE(sink->calls[0].ec);
  EXPECT_EQ(sink->calls[0].r.at(0).value, "OK");
  EXPECT_EQ(sink->calls[1].tag, 12u);
  EXPECT_EQ(sink->calls[1].ec, error::server_error);
  ASSERT_EQ(sink->calls[1].r.size(), 2u);
  EXPECT_EQ(sink->calls[1].r[0].value, "v");
  EXPECT_EQ(sink->calls[2].tag, 13u);
  EXPECT_EQ(sink->calls[2].r.at(0).value, "v");
  const auto s = link.stats();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.ok, 2u);
  EXPECT_EQ(s.server_errors, 1u);
  EXPECT_EQ(s.replies, 4u);
  EXPECT_EQ(s.latency.count, 3u);
  link.close();
  run_until([&] { return link.status().state == connection_state::closed; });
}

TEST_F(master_link_test, requests_submitted_right_after_run_wait_for_the_connection) {
  master_link link{strand, config()};
  error_code ec;
  asio::post(strand, [&] {
    link.run();  // its own post has not reached the strand yet
    ec = link.submit(encode("PING"), 1, clock_type::now() + 5s, sink, 1);
  });
  run_until([&] { return sink->calls.size() == 1; });
  EXPECT_FALSE(ec);
  EXPECT_FALSE(sink->calls[0].ec);
  EXPECT_EQ(sink->calls[0].r.at(0).value, "PONG");
}

TEST_F(master_link_test, invalid_config_fails_requests_queued_since_run) {
  auto cfg = config();
  cfg.port = 0;
  master_link link{strand, cfg};
  asio::post(strand, [&] {
    link.run();
    EXPECT_FALSE(link.submit(encode("PING"), 1, clock_type::now() + 5s, sink, 1));
  });
  run_until([&] { return sink->calls.size() == 1; });
  EXPECT_EQ(sink->calls[0].ec, error::not_connected);
  EXPECT_EQ(link.status().state, connection_state::closed);
}

TEST_F(master_link_test, refusals_return_at_once_without_calling_the_sink) {
  master_link link{strand, config()};
  EXPECT_EQ(submit_on_strand(link, encode("PING"), 1, 1), error::not_connected);  // not running yet
  link.run();
  wait_up(link);
  EXPECT_EQ(submit_on_strand(link, "", 1, 2), error::invalid_argument);
  EXPECT_EQ(submit_on_strand(link, encode("PING"), 0, 3), error::invalid_argument);
  servers[0].kill();
  run_until([&] { return link.status().state == connection_state::down; });
  EXPECT_EQ(submit_on_strand(link, encode("PING"), 1, 4), error::not_connected);
  ioc.restart();
  ioc.run_for(20ms);
  EXPECT_TRUE(sink->calls.empty());
  const auto s = link.stats();
  EXPECT_EQ(s.requests, 4u);
  EXPECT_EQ(s.invalid, 2u);
  EXPECT_EQ(s.not_connected, 2u);
}

TEST_F(master_link_test, deadline_abandons_the_request_and_the_late_reply_is_dropped) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  servers[0].pause();
  EXPECT_FALSE(submit_on_strand(link, encode("SET", "k", "late"), 1, 1, 50ms));
  run_until([&] { return sink->calls.size() == 1; });
  EXPECT_EQ(sink->calls[0].ec, error::master_timeout);
  EXPECT_TRUE(sink->calls[0].r.empty());
  // Overdue (the timed-out SET's reply is still owed): the lock client's requests fail fast
  // instead of waiting behind it, and the sink is not called for them.
  EXPECT_EQ(submit_on_strand(link, encode("GET", "k"), 1, 9), error::not_connected);
  servers[0].resume();
  run_until([&] { return link.stats().dropped_replies == 1; });  // the late reply: in step again
  EXPECT_FALSE(submit_on_strand(link, encode("GET", "k"), 1, 2));
  run_until([&] { return sink->calls.size() == 2; });
  EXPECT_FALSE(sink->calls[1].ec);
  EXPECT_EQ(sink->calls[1].r.at(0).value, "late");  // the abandoned SET still ran, before the GET
  EXPECT_EQ(link.stats().timeouts, 1u);
  EXPECT_EQ(link.stats().dropped_replies, 1u);
}

TEST_F(master_link_test, close_completes_pending_requests_with_operation_aborted) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  servers[0].pause();
  EXPECT_FALSE(submit_on_strand(link, encode("PING"), 1, 7));
  link.close();
  run_until([&] { return sink->calls.size() == 1; });
  EXPECT_EQ(sink->calls[0].tag, 7u);
  EXPECT_EQ(sink->calls[0].ec, asio::error::operation_aborted);
  servers[0].resume();
  EXPECT_EQ(submit_on_strand(link, encode("PING"), 1, 8), error::not_connected);
}

TEST_F(master_link_test, the_sink_may_submit_again_from_inside_its_call) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  sink->then = [&](std::uint64_t tag, error_code, const response&) {
    if (tag < 5) {
      EXPECT_FALSE(link.submit(encode("PING"), 1, clock_type::now() + 5s, sink, tag + 1));
    }
  };
  EXPECT_FALSE(submit_on_strand(link, encode("PING"), 1, 1));
  run_until([&] { return sink->calls.size() == 5; });
  for (std::uint64_t i = 0; i < 5; ++i) EXPECT_EQ(sink->calls[i].tag, i + 1);
}

// Two threads run the io_context; four chains of requests share the link (and its strand). Under
// TSan this checks that the hot path's completions, which start outside the strand, enter it.
TEST_F(master_link_test, chains_of_requests_on_two_threads_share_the_strand) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  constexpr std::uint64_t chains = 4;
  constexpr std::uint64_t per_chain = 300;
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint64_t> failed{0};
  class chain_sink final : public reply_sink {
   public:
    explicit chain_sink(std::function<void(std::uint64_t, error_code, const response&)> f) : f_(std::move(f)) {}
    void on_reply(std::uint64_t tag, error_code ec, const response& r) override { f_(tag, ec, r); }

   private:
    std::function<void(std::uint64_t, error_code, const response&)> f_;
  };
  std::vector<std::uint64_t> seen(chains, 0);  // touched on the strand only
  std::shared_ptr<reply_sink> next;
  next = std::make_shared<chain_sink>([&](std::uint64_t tag, error_code ec, const response& r) {
    const std::uint64_t chain = tag % chains;
    const std::uint64_t step = tag / chains;
    if (ec || r.size() != 1 || r[0].value != std::to_string(tag)) ++failed;
    if (step != seen[chain]++) ++failed;  // each chain's replies in order
    if (step + 1 < per_chain) {
      const std::uint64_t t = tag + chains;
      if (link.submit(encode("ECHO", t), 1, clock_type::now() + 10s, next, t)) ++failed;
    } else {
      ++done;
    }
  });
  asio::post(strand, [&] {
    for (std::uint64_t c = 0; c < chains; ++c) {
      if (link.submit(encode("ECHO", c), 1, clock_type::now() + 10s, next, c)) ++failed;
    }
  });
  ioc.restart();
  std::thread other{[&] { ioc.run_for(30s); }};
  const auto until = clock_type::now() + 30s;
  while (done < chains && clock_type::now() < until) ioc.run_for(10ms);
  link.close();
  ioc.stop();
  other.join();
  next.reset();
  EXPECT_EQ(done.load(), chains);
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(link.stats().ok, chains * per_chain);
}

// One request after another, each submitted from the previous one's reply (as a lock operation
// does). After warm-up: no allocation at all, and three io_context handlers per request: the read's
// completion (which runs the sink in place), the write's completion, and the reactor waking for
// the socket's edge-triggered EPOLLOUT when the send buffer drains (Asio keeps EPOLLOUT registered
// once a connect has waited for it; that handler finds nothing to do).
TEST_F(master_link_test, steady_state_allocates_nothing_per_request) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  constexpr std::uint64_t warm_up = 200;
  constexpr std::uint64_t measured = 2000;
  const std::string payload =
      encode("SET", "lock:resource", "0123456789abcdef0123456789abcdef01234567", "NX", "PX", 30000);
  std::size_t replies = 0;
  std::size_t allocations_at_start = 0;
  std::size_t handlers = 0;
  bool counting = false;
  // The sink only counts: storing each reply would allocate.
  class counter final : public reply_sink {
   public:
    explicit counter(std::function<void(std::uint64_t, error_code)> f) : f_(std::move(f)) {}
    void on_reply(std::uint64_t tag, error_code ec, const response&) override { f_(tag, ec); }

   private:
    std::function<void(std::uint64_t, error_code)> f_;
  };
  std::shared_ptr<reply_sink> chain;
  chain = std::make_shared<counter>([&](std::uint64_t tag, error_code ec) {
    ASSERT_TRUE(!ec || ec == error::server_error) << ec.message();
    ++replies;
    if (tag == warm_up) {
      allocations_at_start = allocations.load();
      counting = true;
    }
    if (tag < warm_up + measured) {
      ASSERT_FALSE(link.submit(payload, 1, clock_type::now() + 10s, chain, tag + 1));
    }
  });
  asio::post(strand, [&] { ASSERT_FALSE(link.submit(payload, 1, clock_type::now() + 10s, chain, 1)); });
  const auto until = clock_type::now() + 60s;
  while (replies < warm_up + measured && clock_type::now() < until) {
    ioc.restart();
    const auto n = ioc.run_one_for(1s);
    if (counting) handlers += n;
  }
  const std::size_t used = allocations.load() - allocations_at_start;
  chain.reset();
  ASSERT_EQ(replies, warm_up + measured);
  const double per_request = static_cast<double>(used) / measured;
  const double handlers_per_request = static_cast<double>(handlers) / measured;
  std::printf("steady state: %.3f allocations and %.2f io_context handlers per request\n", per_request,
              handlers_per_request);
  if (REDLOCK_TEST_COUNTS_ALLOCATIONS) {
    EXPECT_LE(per_request, 0.01);  // a stray one is not the request's
  }
  EXPECT_LE(handlers_per_request, 3.1);
}

// ---- pub/sub on the link's own connection (RESP3 pushes) ---------------------------------------

// A SUBSCRIBE pipelined between normal commands is answered by its confirmation push; the
// commands before and after it get their own replies; a PUBLISH from another connection reaches
// the observer out of band with channel and payload, and normal commands keep working after it.
TEST_F(master_link_test, subscribe_on_the_link_and_messages_reach_the_observer) {
  master_link link{strand, config()};
  auto obs = std::make_shared<observer>();
  link.observe(obs, 4);
  EXPECT_EQ(link.protocol(), 0);  // no connection yet
  link.run();
  wait_up(link);
  EXPECT_EQ(link.protocol(), 3);
  on_strand([&] {
    const auto deadline = clock_type::now() + 5s;
    EXPECT_FALSE(link.submit(encode("SET", "k", "v"), 1, deadline, sink, 1));
    EXPECT_FALSE(link.submit(encode("SUBSCRIBE", "ch"), 1, deadline, sink, 2, true));
    EXPECT_FALSE(link.submit(encode("GET", "k"), 1, deadline, sink, 3));
    EXPECT_FALSE(link.submit(encode("ECHO", "after"), 1, deadline, sink, 4));
  });
  run_until([&] { return sink->calls.size() == 4; });
  ASSERT_EQ(sink->calls.size(), 4u);
  EXPECT_EQ(sink->calls[0].tag, 1u);
  EXPECT_EQ(sink->calls[0].r.at(0).value, "OK");
  EXPECT_EQ(sink->calls[1].tag, 2u);
  EXPECT_FALSE(sink->calls[1].ec) << sink->calls[1].ec.message();
  EXPECT_EQ(sink->calls[1].r, push_of({"subscribe", "ch", ":1"}));
  EXPECT_EQ(sink->calls[2].tag, 3u);
  EXPECT_FALSE(sink->calls[2].ec);
  EXPECT_EQ(sink->calls[2].r.at(0).value, "v");
  EXPECT_EQ(sink->calls[3].tag, 4u);
  EXPECT_EQ(sink->calls[3].r.at(0).value, "after");
  EXPECT_TRUE(obs->pushes.empty());  // the confirmation was the SUBSCRIBE's reply, not out of band

  EXPECT_EQ(servers[0].command({"PUBLISH", "ch", "payload"}), ":1\r\n");  // one subscriber: the link
  run_until([&] { return obs->pushes.size() == 1; });
  ASSERT_EQ(obs->pushes.size(), 1u);
  EXPECT_EQ(obs->pushes[0], push_of({"message", "ch", "payload"}));
  EXPECT_EQ(obs->indexes, std::vector<std::size_t>{4});

  // Still a normal connection: commands and messages interleave, each where it belongs.
  on_strand([&] { EXPECT_FALSE(link.submit(encode("GET", "k"), 1, clock_type::now() + 5s, sink, 5)); });
  EXPECT_EQ(servers[0].command({"PUBLISH", "ch", "second"}), ":1\r\n");
  on_strand([&] { EXPECT_FALSE(link.submit(encode("PING"), 1, clock_type::now() + 5s, sink, 6)); });
  run_until([&] { return sink->calls.size() == 6 && obs->pushes.size() == 2; });
  ASSERT_EQ(sink->calls.size(), 6u);
  ASSERT_EQ(obs->pushes.size(), 2u);
  EXPECT_EQ(sink->calls[4].r.at(0).value, "v");
  EXPECT_EQ(sink->calls[5].r.at(0).value, "PONG");
  EXPECT_EQ(obs->pushes[1], push_of({"message", "ch", "second"}));

  const auto s = link.stats();
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.ok, 6u);
  EXPECT_EQ(s.replies, 6u);  // the confirmation counts as the SUBSCRIBE's reply
  EXPECT_EQ(s.pushes, 2u);   // the two messages
  EXPECT_EQ(link.status().pushes, 2u);
  EXPECT_EQ(s.latency.count, 6u);
}

// An ACL user without the channel gets an error reply for SUBSCRIBE (server_error, the node's
// text); the stream stays in step: the next commands get their own replies, on the same socket.
TEST_F(master_link_test, a_refused_subscription_is_a_server_error_and_the_stream_stays_in_step) {
  ASSERT_EQ(servers[0].command({"ACL", "SETUSER", "u", "on", ">pw", "resetchannels", "+@all", "~*"}), "+OK\r\n");
  auto cfg = config();
  cfg.username = "u";
  cfg.password = "pw";
  master_link link{strand, cfg};
  auto obs = std::make_shared<observer>();
  link.observe(obs, 0);
  link.run();
  wait_up(link);
  on_strand([&] {
    const auto deadline = clock_type::now() + 5s;
    EXPECT_FALSE(link.submit(encode("SET", "k", "v"), 1, deadline, sink, 1));
    EXPECT_FALSE(link.submit(encode("SUBSCRIBE", "ch"), 1, deadline, sink, 2, true));
    EXPECT_FALSE(link.submit(encode("GET", "k"), 1, deadline, sink, 3));
  });
  run_until([&] { return sink->calls.size() == 3; });
  ASSERT_EQ(sink->calls.size(), 3u);
  EXPECT_EQ(sink->calls[0].r.at(0).value, "OK");
  EXPECT_EQ(sink->calls[1].tag, 2u);
  EXPECT_EQ(sink->calls[1].ec, error::server_error);
  ASSERT_EQ(sink->calls[1].r.size(), 1u);
  EXPECT_EQ(sink->calls[1].r[0].value.rfind("NOPERM", 0), 0u) << sink->calls[1].r[0].value;
  EXPECT_EQ(sink->calls[2].tag, 3u);
  EXPECT_FALSE(sink->calls[2].ec);
  EXPECT_EQ(sink->calls[2].r.at(0).value, "v");
  EXPECT_EQ(servers[0].command({"PUBLISH", "ch", "payload"}), ":0\r\n");  // not subscribed
  EXPECT_FALSE(submit_on_strand(link, encode("ECHO", "next"), 1, 4));
  run_until([&] { return sink->calls.size() == 4; });
  ASSERT_EQ(sink->calls.size(), 4u);
  EXPECT_EQ(sink->calls[3].r.at(0).value, "next");
  EXPECT_TRUE(obs->pushes.empty());
  EXPECT_EQ(link.status().connects, 1u);  // the same socket all along
  EXPECT_EQ(link.stats().server_errors, 1u);
}

// A SUBSCRIBE that times out is abandoned like any request: its late confirmation is dropped and
// the next command gets its own reply. The node did subscribe, though: its messages still come,
// out of band (the caller decides whether to unsubscribe).
TEST_F(master_link_test, a_timed_out_subscription_drops_its_late_confirmation) {
  master_link link{strand, config()};
  auto obs = std::make_shared<observer>();
  link.observe(obs, 0);
  link.run();
  wait_up(link);
  servers[0].pause();
  EXPECT_FALSE(submit_on_strand(link, encode("SUBSCRIBE", "ch"), 1, 1, 50ms, true));
  run_until([&] { return sink->calls.size() == 1; });
  ASSERT_EQ(sink->calls.size(), 1u);
  EXPECT_EQ(sink->calls[0].ec, error::master_timeout);
  servers[0].resume();
  run_until([&] { return link.stats().dropped_replies == 1; });
  EXPECT_FALSE(submit_on_strand(link, encode("ECHO", "in step"), 1, 2));
  run_until([&] { return sink->calls.size() == 2; });
  ASSERT_EQ(sink->calls.size(), 2u);
  EXPECT_EQ(sink->calls[1].r.at(0).value, "in step");
  EXPECT_EQ(servers[0].command({"PUBLISH", "ch", "anyway"}), ":1\r\n");
  run_until([&] { return obs->pushes.size() == 1; });
  ASSERT_EQ(obs->pushes.size(), 1u);
  EXPECT_EQ(obs->pushes[0], push_of({"message", "ch", "anyway"}));
  EXPECT_EQ(link.status().connects, 1u);
}

TEST_F(master_link_test, a_push_confirmed_request_must_be_of_one_reply) {
  master_link link{strand, config()};
  link.run();
  wait_up(link);
  EXPECT_EQ(submit_on_strand(link, encode("SUBSCRIBE", "a") + encode("SUBSCRIBE", "b"), 2, 1, 5s, true),
            error::invalid_argument);
  ioc.restart();
  ioc.run_for(20ms);
  EXPECT_TRUE(sink->calls.empty());
  EXPECT_EQ(link.stats().invalid, 1u);
}

// A node that refuses HELLO 3 (here a real Redis with HELLO renamed away, as a Redis older than 6
// would answer) gets a RESP2 connection. RESP2 has no pushes: a SUBSCRIBE there would put the
// whole connection in subscribe mode and the lock client's commands would be refused. So a
// subscription queued while the protocol was unknown completes with not_supported, unsent; one
// submitted once RESP2 is known (on_link_up included) is refused at once; nothing else changes.
TEST_F(master_link_test, a_resp2_connection_never_writes_a_subscription) {
  redlock::test::redis_options options;
  options.extra_args = {"--rename-command", "HELLO", ""};
  redlock::test::master_set legacy{1, options};
  ASSERT_EQ(legacy[0].command({"HELLO", "3"}).rfind("-ERR unknown command", 0), 0u);
  auto cfg = config();
  cfg.host = legacy[0].host();
  cfg.port = legacy[0].port();
  master_link link{strand, cfg};
  auto obs = std::make_shared<observer>();
  error_code from_link_up;
  obs->then_up = [&] {
    from_link_up = link.submit(encode("SUBSCRIBE", "ch"), 1, clock_type::now() + 5s, sink, 9, true);
  };
  link.observe(obs, 0);
  std::vector<error_code> accepted;
  on_strand([&] {
    link.run();
    const auto deadline = clock_type::now() + 5s;
    accepted.push_back(link.submit(encode("SET", "k", "v"), 1, deadline, sink, 1));
    accepted.push_back(link.submit(encode("SUBSCRIBE", "ch"), 1, deadline, sink, 2, true));
    accepted.push_back(link.submit(encode("GET", "k"), 1, deadline, sink, 3));
  });
  EXPECT_EQ(accepted, std::vector<error_code>(3));  // queued: the protocol is not known yet
  run_until([&] { return sink->calls.size() == 3; });
  ASSERT_EQ(sink->calls.size(), 3u);
  EXPECT_EQ(sink->calls[0].tag, 2u);  // refused before anything was written
  EXPECT_EQ(sink->calls[0].ec, error::not_supported);
  EXPECT_TRUE(sink->calls[0].r.empty());
  EXPECT_EQ(sink->calls[1].tag, 1u);
  EXPECT_EQ(sink->calls[1].r.at(0).value, "OK");
  EXPECT_EQ(sink->calls[2].tag, 3u);
  EXPECT_EQ(sink->calls[2].r.at(0).value, "v");
  EXPECT_EQ(link.protocol(), 2);
  EXPECT_EQ(obs->ups.size(), 1u);
  EXPECT_EQ(from_link_up, error::not_supported);

  EXPECT_EQ(submit_on_strand(link, encode("SUBSCRIBE", "ch"), 1, 4, 5s, true), error::not_supported);
  EXPECT_FALSE(submit_on_strand(link, encode("GET", "k"), 1, 5));
  run_until([&] { return sink->calls.size() == 4; });
  ASSERT_EQ(sink->calls.size(), 4u);
  EXPECT_EQ(sink->calls[3].tag, 5u);
  EXPECT_EQ(sink->calls[3].r.at(0).value, "v");
  const std::string stats = legacy[0].command({"INFO", "commandstats"});
  EXPECT_NE(stats.find("cmdstat_get:"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("cmdstat_subscribe:"), std::string::npos) << stats;
  const auto s = link.stats();
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.invalid, 3u);  // the three subscriptions: refused without effect
  EXPECT_EQ(s.ok, 3u);
  EXPECT_EQ(s.written, 3u);
}

}  // namespace
