// SPDX-License-Identifier: BSL-1.0
// One multiplexed connection against real redis-server processes, with faults injected for real
// (SIGSTOP, kill -9 and restart, a resetting proxy).

#include <redlock/connection.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::connection;
using redlock::connection_config;
using redlock::connection_state;
using redlock::error;
using redlock::resp::request;
using redlock::resp::response;
using redlock::resp::type;
using clock_type = redlock::clock;

using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;

connection_config config_for(const redlock::test::redis_node& node) {
  connection_config cfg;
  cfg.host = node.host();
  cfg.port = node.port();
  cfg.connect_timeout = 500ms;
  cfg.reconnect = {10ms, 100ms, 0.5};
  return cfg;
}

// Waits until the connection reaches `want` (or fails the test after `limit`).
asio::awaitable<void> wait_state(connection& c, connection_state want, clock_type::duration limit = 10s) {
  if (!co_await until([&] { return c.status().state == want; }, limit))
    ADD_FAILURE() << "connection did not reach state " << static_cast<int>(want) << " (now "
                  << static_cast<int>(c.status().state) << ", last error " << c.status().last_error.message() << ")";
}

// Waits until the connection has written `n` more requests than `before` (or fails the test).
asio::awaitable<void> wait_written(connection& c, std::uint64_t before, std::uint64_t n = 1) {
  if (!co_await until([&] { return c.stats().written >= before + n; }))
    ADD_FAILURE() << "the connection wrote " << c.stats().written - before << " of " << n << " requests";
}

template <class... Args>
request make(std::string_view cmd, const Args&... args) {
  request r;
  r.push(cmd, args...);
  return r;
}

asio::awaitable<std::tuple<error_code, response>> exec(connection& c, request r, clock_type::duration t = 2s) {
  co_return co_await c.async_exec(std::move(r), t, use_tuple);
}

struct connection_test : ::testing::Test {
  redlock::test::master_set servers{1};
  redlock::test::redis_node& node = servers[0];
};

TEST_F(connection_test, many_coroutines_on_two_threads_share_one_connection_and_each_gets_its_own_reply) {
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        connection conn{ioc.get_executor(), config_for(node)};
        conn.async_run(asio::detached);
        constexpr int coroutines = 100;
        constexpr int per_coroutine = 1000;
        std::atomic<int> mismatches{0}, failures{0}, finished{0};
        for (int c = 0; c < coroutines; ++c) {
          asio::co_spawn(
              ioc,
              [&, c]() -> asio::awaitable<void> {
                for (int i = 0; i < per_coroutine; ++i) {
                  const std::string payload = "c" + std::to_string(c) + ":" + std::to_string(i);
                  auto [ec, r] = co_await exec(conn, make("ECHO", payload), 10s);
                  if (ec) {
                    ++failures;
                  } else if (r.size() != 1 || r[0].value != payload) {
                    ++mismatches;
                  }
                }
                ++finished;
              },
              asio::detached);
        }
        EXPECT_TRUE(co_await until([&] { return finished == coroutines; }, 50s))
            << finished << " of " << coroutines << " coroutines finished";
        EXPECT_EQ(failures.load(), 0);
        EXPECT_EQ(mismatches.load(), 0);
        EXPECT_EQ(conn.status().connects, 1u);
        conn.close();
      },
      /*threads=*/2);
}

TEST_F(connection_test, binary_safe_keys_and_values_round_trip) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    std::string big(1 << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 256);
    const std::vector<std::pair<std::string, std::string>> cases{
        {std::string("nul\0key", 7), std::string("v\0v", 3)},
        {"crlf\r\nkey", "value\r\n$3\r\nfoo\r\n"},
        {"ключ-🔒", "значение-✓"},
        {std::string(1 << 20, 'k'), big},
    };
    for (const auto& [k, v] : cases) {
      auto [sec, sr] = co_await exec(conn, make("SET", k, v), 10s);
      EXPECT_FALSE(sec) << sec.message();
      auto [gec, gr] = co_await exec(conn, make("GET", k), 10s);
      EXPECT_FALSE(gec) << gec.message();
      EXPECT_EQ(gr.size(), 1u);
      EXPECT_EQ(gr.at(0).data_type, type::blob_string);
      EXPECT_TRUE(gr.at(0).value == v) << "value of size " << v.size() << " did not round-trip";
    }
    conn.close();
  });
}

TEST_F(connection_test, pipelined_request_and_server_errors_surface_with_the_server_text) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    request r;
    r.push("SET", "list", "x");
    r.push("LPUSH", "list", "y");  // WRONGTYPE
    r.push("GET", "list");
    auto [ec, resp] = co_await exec(conn, std::move(r));
    EXPECT_EQ(ec, error::server_error);
    EXPECT_EQ(resp.size(), 3u);
    EXPECT_EQ(resp.at(0).value, "OK");
    EXPECT_EQ(resp.at(1).data_type, type::simple_error);
    EXPECT_EQ(resp.at(1).value.rfind("WRONGTYPE", 0), 0u) << resp.at(1).value;
    EXPECT_EQ(resp.at(2).value, "x");
    // The connection is still in step afterwards.
    auto [ec2, r2] = co_await exec(conn, make("ECHO", "after"));
    EXPECT_FALSE(ec2);
    EXPECT_EQ(r2.at(0).value, "after");
    conn.close();
  });
}

TEST_F(connection_test, stopped_server_fails_each_request_at_its_own_deadline_then_recovers) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    node.pause();
    const std::vector<clock_type::duration> timeouts{300ms, 100ms, 200ms};
    std::vector<clock_type::duration> took(timeouts.size());
    std::vector<error_code> errors(timeouts.size());
    std::atomic<int> done{0};
    for (std::size_t i = 0; i < timeouts.size(); ++i) {
      asio::co_spawn(
          ioc,
          [&, i]() -> asio::awaitable<void> {
            const auto start = clock_type::now();
            auto [ec, r] = co_await exec(conn, make("ECHO", "stale" + std::to_string(i)), timeouts[i]);
            took[i] = clock_type::now() - start;
            errors[i] = ec;
            ++done;
          },
          asio::detached);
    }
    EXPECT_TRUE(co_await until([&] { return done == 3; })) << done << " of 3 requests finished";
    for (std::size_t i = 0; i < timeouts.size(); ++i) {
      EXPECT_EQ(errors[i], error::master_timeout);
      EXPECT_GE(took[i], timeouts[i]);  // never before its deadline
    }
    node.resume();
    // The late replies to the three abandoned requests are read and dropped; fresh requests on
    // the same connection get their own replies.
    for (int i = 0; i < 20; ++i) {
      const std::string payload = "fresh" + std::to_string(i);
      auto [ec, r] = co_await exec(conn, make("ECHO", payload));
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_EQ(r.at(0).value, payload);
    }
    EXPECT_EQ(conn.status().dropped_replies, 3u);
    EXPECT_EQ(conn.status().connects, 1u);  // the same socket throughout
    conn.close();
  });
}

TEST_F(connection_test, killed_and_restarted_server_fails_fast_then_recovers) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    co_await exec(conn, make("SET", "k", "v"));
    node.kill();
    co_await wait_state(conn, connection_state::down);
    // During the outage a request fails with not_connected, not after its (long) deadline.
    int fast_failures = 0;
    for (int i = 0; i < 10; ++i) {
      auto [ec, r] = co_await exec(conn, make("GET", "k"), 30s);
      EXPECT_TRUE(ec == error::not_connected) << ec.message();
      fast_failures += ec == error::not_connected;
    }
    EXPECT_EQ(fast_failures, 10);
    EXPECT_NE(conn.status().last_error, error_code{});
    node.restart();
    co_await wait_state(conn, connection_state::up);
    auto [ec, r] = co_await exec(conn, make("GET", "k"));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.at(0).data_type, type::null);  // restarted without persistence: the key is gone
    EXPECT_EQ(conn.status().connects, 2u);
    conn.close();
  });
}

TEST_F(connection_test, per_operation_cancellation_abandons_a_written_request_without_desync) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    node.pause();
    asio::cancellation_signal sig;
    error_code got;
    bool finished = false;
    const auto written = conn.stats().written;
    conn.async_exec(make("ECHO", "cancelled"), 30s,
                    asio::bind_cancellation_slot(sig.slot(), [&](error_code ec, response) {
                      got = ec;
                      finished = true;
                    }));
    co_await wait_written(conn, written);
    EXPECT_FALSE(finished);
    // Total cancellation cannot take back a written request: nothing happens.
    sig.emit(asio::cancellation_type::total);
    co_await sleep_for(50ms);
    EXPECT_FALSE(finished);
    sig.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return finished; }, 1s)) << "terminal cancellation did not complete it";
    EXPECT_TRUE(finished);
    EXPECT_EQ(got, asio::error::operation_aborted);
    node.resume();
    auto [ec, r] = co_await exec(conn, make("ECHO", "next"));
    EXPECT_FALSE(ec);
    EXPECT_EQ(r.at(0).value, "next");
    conn.close();
  });
}

TEST_F(connection_test, close_aborts_pending_requests_and_run) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    error_code run_ec;
    bool run_done = false;
    conn.async_run([&](error_code ec) {
      run_ec = ec;
      run_done = true;
    });
    co_await wait_state(conn, connection_state::up);
    node.pause();
    int aborted = 0, finished = 0;
    const auto written = conn.stats().written;
    for (int i = 0; i < 5; ++i) {
      conn.async_exec(make("PING"), 30s, [&](error_code ec, response) {
        aborted += ec == asio::error::operation_aborted;
        ++finished;
      });
    }
    co_await wait_written(conn, written, 5);
    conn.close();
    EXPECT_TRUE(co_await until([&] { return finished == 5 && run_done; }, 1s))
        << finished << " of 5 requests finished, run " << (run_done ? "done" : "still running");
    EXPECT_EQ(aborted, 5);
    EXPECT_TRUE(run_done);
    EXPECT_EQ(run_ec, asio::error::operation_aborted);
    auto [ec, r] = co_await exec(conn, make("PING"));
    EXPECT_EQ(ec, error::not_connected);
    EXPECT_EQ(conn.status().state, connection_state::closed);
    node.resume();
  });
}

TEST_F(connection_test, invalid_requests_and_config_get_clear_errors) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    auto [e1, r1] = co_await exec(conn, request{});
    EXPECT_EQ(e1, error::invalid_argument);
    auto [e2, r2] = co_await exec(conn, make("PING"), 0s);
    EXPECT_EQ(e2, error::invalid_argument);
    auto [e3] = co_await conn.async_run(use_tuple);  // already running
    EXPECT_EQ(e3, error::invalid_argument);
    conn.close();

    connection_config bad = config_for(node);
    bad.port = 0;
    std::string what;
    EXPECT_EQ(redlock::validate(bad, &what), error::invalid_config);
    EXPECT_FALSE(what.empty());
    connection broken{ioc.get_executor(), bad};
    auto [e4] = co_await broken.async_run(use_tuple);
    EXPECT_EQ(e4, error::invalid_config);
    EXPECT_EQ(broken.status().last_error, error::invalid_config);
  });
}

TEST_F(connection_test, database_and_client_name_are_applied) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config_for(node);
    cfg.database = 3;
    cfg.client_name = "redlock-test";
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    co_await exec(conn, make("SET", "db3key", "x"));
    auto [ec, name] = co_await exec(conn, make("CLIENT", "GETNAME"));
    EXPECT_EQ(name.at(0).value, "redlock-test");
    EXPECT_EQ(node.command({"EXISTS", "db3key"}), ":0\r\n");  // db 0 does not have it
    EXPECT_EQ(node.command({"SELECT", "3"}), "+OK\r\n");
    conn.close();

    cfg.database = 999;  // beyond `databases 16`
    connection bad{ioc.get_executor(), cfg};
    bad.async_run(asio::detached);
    EXPECT_TRUE(co_await until([&] { return bad.status().last_error == error::handshake_failed; }))
        << bad.status().last_error.message();
    EXPECT_EQ(bad.status().last_error, error::handshake_failed);
    EXPECT_FALSE(bad.status().last_error_text.empty());
    bad.close();
  });
}

TEST_F(connection_test, connect_timeout_when_the_node_accepts_but_never_answers) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    node.pause();
    auto cfg = config_for(node);
    cfg.connect_timeout = 100ms;
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    EXPECT_TRUE(co_await until([&] { return conn.status().last_error == error::connect_timeout; }))
        << conn.status().last_error.message();
    EXPECT_EQ(conn.status().last_error, error::connect_timeout);
    EXPECT_EQ(conn.status().connects, 0u);
    node.resume();
    co_await wait_state(conn, connection_state::up);
    auto [ec, r] = co_await exec(conn, make("PING"));
    EXPECT_FALSE(ec);
    conn.close();
  });
}

// A written request unanswered well past its deadline means nothing behind it can be answered
// either (TCP retransmission backoff, a partition, a stopped server): the connection is replaced
// at once instead of queuing more requests behind it, and while the node stays silent requests
// fail fast rather than each waiting out its deadline.
TEST_F(connection_test, a_stalled_connection_is_replaced_and_requests_fail_fast_meanwhile) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config_for(node);
    cfg.stall_grace = 200ms;
    cfg.connect_timeout = 150ms;
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    node.pause();
    const auto start = clock_type::now();
    // Written first: abandoned at its 100 ms deadline; its stall point is 100 + max(200, 100) ms.
    error_code first;
    conn.async_exec(make("ECHO", "first"), 100ms, [&](error_code ec, response) { first = ec; });
    // Written behind it with a long deadline: the stall ends it with connection_lost (unknown).
    auto [ec, r] = co_await exec(conn, make("ECHO", "behind"), 30s);
    const auto took = clock_type::now() - start;
    EXPECT_EQ(first, error::master_timeout);
    EXPECT_EQ(ec, error::connection_lost) << ec.message();
    EXPECT_GE(took, 300ms);
    EXPECT_LT(took, 2s);  // not the request's 30 s deadline
    EXPECT_EQ(conn.stats().stalls, 1u);
    EXPECT_EQ(conn.status().last_error, error::connection_stalled);
    // Still stopped: reconnect attempts time out, and requests are refused at once meanwhile.
    EXPECT_TRUE(co_await until([&] { return conn.status().last_error == error::connect_timeout; }))
        << "no reconnect attempt timed out: " << conn.status().last_error.message();
    for (int i = 0; i < 5; ++i) {
      const auto t0 = clock_type::now();
      auto [ec2, r2] = co_await exec(conn, make("PING"), 30s);
      EXPECT_EQ(ec2, error::not_connected) << ec2.message();
      EXPECT_LT(clock_type::now() - t0, 100ms);
    }
    node.resume();
    const auto resumed = clock_type::now();
    co_await wait_state(conn, connection_state::up);
    // Within about one connect attempt (150 ms) plus its short retry delay, not TCP's backoff.
    EXPECT_LT(clock_type::now() - resumed, 1s);
    auto [ec3, r3] = co_await exec(conn, make("ECHO", "back"));
    EXPECT_FALSE(ec3) << ec3.message();
    EXPECT_EQ(r3.at(0).value, "back");
    conn.close();
  });
}

// One reply late, the next ones on time: the late reply is dropped and the same socket serves
// on, in step (no reconnect while the lateness stays within the stall grace).
TEST_F(connection_test, one_late_reply_within_the_grace_keeps_the_connection_in_step) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config_for(node);
    cfg.stall_grace = 1000ms;
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    for (int round = 0; round < 3; ++round) {
      node.pause();
      auto [ec, r] = co_await exec(conn, make("ECHO", "late"), 50ms);
      EXPECT_EQ(ec, error::master_timeout);
      co_await sleep_for(150ms);
      node.resume();
      for (int i = 0; i < 10; ++i) {
        const std::string payload = fmt::format("on-time-{}-{}", round, i);
        const auto t0 = clock_type::now();
        auto [ec2, r2] = co_await exec(conn, make("ECHO", payload), 500ms);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(r2.at(0).value, payload);
        EXPECT_LT(clock_type::now() - t0, 500ms);
      }
    }
    EXPECT_EQ(conn.status().dropped_replies, 3u);
    EXPECT_EQ(conn.status().connects, 1u);
    EXPECT_EQ(conn.stats().stalls, 0u);
    conn.close();
  });
}

// With stall detection off, a silent connection is kept (the old behaviour, for users who want it).
TEST_F(connection_test, stall_detection_can_be_turned_off) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config_for(node);
    cfg.stall_grace = 50ms;
    cfg.detect_stalls = false;
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    node.pause();
    auto [ec, r] = co_await exec(conn, make("ECHO", "late"), 50ms);
    EXPECT_EQ(ec, error::master_timeout);
    co_await sleep_for(400ms);
    EXPECT_EQ(conn.status().state, connection_state::up);
    node.resume();
    auto [ec2, r2] = co_await exec(conn, make("ECHO", "same"));
    EXPECT_FALSE(ec2) << ec2.message();
    EXPECT_EQ(conn.status().connects, 1u);
    EXPECT_EQ(conn.stats().stalls, 0u);
    conn.close();
  });
}

TEST_F(connection_test, push_messages_do_not_steal_replies) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), config_for(node)};
    conn.async_run(asio::detached);
    // Client-side caching invalidations arrive as RESP3 pushes on this same connection.
    co_await exec(conn, make("CLIENT", "TRACKING", "ON"));
    co_await exec(conn, make("GET", "tracked"));
    node.command({"SET", "tracked", "changed"});
    for (int i = 0; i < 50; ++i) {
      const std::string payload = "p" + std::to_string(i);
      auto [ec, r] = co_await exec(conn, make("ECHO", payload));
      EXPECT_EQ(r.at(0).value, payload);
      co_await sleep_for(1ms);
    }
    EXPECT_GE(conn.status().pushes, 1u);
    conn.close();
  });
}

redlock::test::redis_options with_password() {
  redlock::test::redis_options o;
  o.password = "s3cret";
  o.user = redlock::test::acl_user{"locker", "pw-locker"};
  return o;
}

struct auth_test : ::testing::Test {
  redlock::test::master_set servers{1, with_password()};
  redlock::test::redis_node& node = servers[0];
};

TEST_F(auth_test, password_and_acl_user_work_and_wrong_credentials_are_auth_errors) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config_for(node);
    const auto try_cfg =
        [&](connection_config c) -> asio::awaitable<std::pair<error_code, redlock::connection_status>> {
      connection conn{ioc.get_executor(), std::move(c)};
      conn.async_run(asio::detached);
      auto [ec, r] = co_await exec(conn, make("PING"));
      auto st = conn.status();
      conn.close();
      co_return std::pair{ec, st};
    };
    cfg.password = "s3cret";
    auto [ok_ec, ok_st] = co_await try_cfg(cfg);
    EXPECT_FALSE(ok_ec) << ok_ec.message();

    cfg.username = "locker";
    cfg.password = "pw-locker";
    auto [acl_ec, acl_st] = co_await try_cfg(cfg);
    EXPECT_FALSE(acl_ec) << acl_ec.message();

    cfg.username.clear();
    cfg.password = "wrong";
    auto [bad_ec, bad_st] = co_await try_cfg(cfg);
    EXPECT_EQ(bad_ec, error::not_connected);
    EXPECT_EQ(bad_st.last_error, error::auth_failed);
    EXPECT_NE(bad_st.last_error_text.find("WRONGPASS"), std::string::npos) << bad_st.last_error_text;

    cfg.password.clear();
    auto [none_ec, none_st] = co_await try_cfg(cfg);
    EXPECT_EQ(none_ec, error::not_connected);
    EXPECT_EQ(none_st.last_error, error::auth_failed);
  });
}

struct proxy_test : ::testing::Test {
  redlock::test::master_set servers{1};
  redlock::test::fault_proxy proxy{servers[0].host(), servers[0].port()};
  connection_config cfg() {
    connection_config c;
    c.port = proxy.port();
    c.connect_timeout = 300ms;
    c.reconnect = {10ms, 100ms, 0.5};
    return c;
  }
};

TEST_F(proxy_test, reset_mid_flight_loses_the_request_then_the_connection_recovers) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection conn{ioc.get_executor(), cfg()};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::up);
    proxy.set_blackhole(true);  // the request is written but never answered...
    bool finished = false;
    error_code got;
    const auto written = conn.stats().written;
    conn.async_exec(make("ECHO", "lost"), 30s, [&](error_code ec, response) {
      got = ec;
      finished = true;
    });
    co_await wait_written(conn, written);
    proxy.reset_all();  // ...then the connection dies under it
    EXPECT_TRUE(co_await until([&] { return finished; })) << "the lost request never completed";
    EXPECT_TRUE(finished);
    EXPECT_EQ(got, error::connection_lost);  // outcome unknown, said so
    proxy.set_blackhole(false);
    co_await wait_state(conn, connection_state::up);
    auto [ec, r] = co_await exec(conn, make("ECHO", "back"));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.at(0).value, "back");
    EXPECT_GE(conn.status().connects, 2u);
    conn.close();
  });
}

TEST_F(proxy_test, refused_connections_fail_requests_fast) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    proxy.set_refuse(true);
    connection conn{ioc.get_executor(), cfg()};
    conn.async_run(asio::detached);
    co_await wait_state(conn, connection_state::down);
    auto [ec, r] = co_await exec(conn, make("PING"), 30s);
    EXPECT_EQ(ec, error::not_connected);
    EXPECT_EQ(conn.status().last_error, asio::error::connection_refused);
    proxy.set_refuse(false);
    co_await wait_state(conn, connection_state::up);
    auto [ec2, r2] = co_await exec(conn, make("PING"));
    EXPECT_FALSE(ec2);
    conn.close();
  });
}

TEST(connection_unix_socket, connects_over_a_unix_domain_socket) {
  const auto path = std::filesystem::temp_directory_path() / ("redlock-" + std::to_string(::getpid()) + ".sock");
  redlock::test::redis_options opts;
  opts.extra_args = {"--unixsocket", path.string()};
  redlock::test::master_set servers{1, opts};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection_config cfg;
    cfg.unix_socket = path.string();
    connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    auto [ec, r] = co_await exec(conn, make("ECHO", "via unix"));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.at(0).value, "via unix");
    conn.close();
  });
}

}  // namespace
