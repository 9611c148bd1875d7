// SPDX-License-Identifier: BSL-1.0
// The log sink and the counters against real redis-server masters (and a scripted fake server),
// with masters killed, stopped and restarted for real: what is counted where, what is logged at
// which level, what is never logged (passwords, full tokens), and that a misbehaving sink or many
// threads change nothing.

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/observe.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fake_server.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::client_stats;
using redlock::connection_stats;
using redlock::error;
using redlock::log_level;
using redlock::master_status;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::use_tuple;
using clock_type = redlock::clock;

// A thread-safe sink that keeps every message.
class capture {
 public:
  struct entry {
    log_level level;
    std::string text;
  };

  redlock::log_options options(log_level min) const {
    redlock::log_options o;
    o.level = min;
    o.sink = [s = state_](log_level l, std::string_view m) {
      std::lock_guard guard{s->mutex};
      s->entries.push_back({l, std::string{m}});
    };
    return o;
  }

  std::vector<entry> entries() const {
    std::lock_guard guard{state_->mutex};
    return state_->entries;
  }
  // Messages at `level` containing every one of `parts`.
  std::size_t count(log_level level, std::initializer_list<std::string_view> parts) const {
    std::size_t n = 0;
    for (const auto& e : entries()) {
      if (e.level != level) continue;
      n += std::all_of(parts.begin(), parts.end(),
                       [&](std::string_view p) { return e.text.find(p) != std::string::npos; });
    }
    return n;
  }
  std::string dump() const {
    std::string out;
    for (const auto& e : entries()) out += std::string{redlock::to_string(e.level)} + ": " + e.text + "\n";
    return out;
  }

 private:
  struct state {
    std::mutex mutex;
    std::vector<entry> entries;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

// Messages formatted by the client and all its connections.
std::uint64_t formatted(const client_stats& s) {
  std::uint64_t n = s.log_messages;
  for (const auto& m : s.masters) n += m.log_messages;
  return n;
}

template <class Pred>
asio::awaitable<bool> eventually(Pred pred, std::chrono::milliseconds limit = 15s) {
  co_return co_await redlock::test::until(pred, limit);
}

asio::awaitable<void> wait_connected(redlock::client& c) {
  const bool ok = co_await eventually([&] {
    for (const auto& s : c.masters())
      if (s.state != redlock::connection_state::up) return false;
    return true;
  });
  EXPECT_TRUE(ok) << "client did not connect to every master";
}

// Every request of every master has its outcome, and nothing moved for one polling interval (a
// NOSCRIPT fallback is submitted by a handler, just after its EVALSHA completed).
asio::awaitable<void> wait_idle(redlock::client& c) {
  std::optional<client_stats> previous;
  const bool ok = co_await eventually([&] {
    auto s = c.stats();
    bool idle = true;
    for (const auto& m : s.masters) idle = idle && m.in_progress() == 0;
    const bool stable = idle && previous && *previous == s;
    previous = std::move(s);
    return stable;
  });
  EXPECT_TRUE(ok) << "requests still in progress";
}

std::string master_name(redlock::test::master_set& servers, std::size_t i) {
  return "master " + std::to_string(i + 1) + " (127.0.0.1:" + std::to_string(servers[i].port()) + ")";
}

struct observability_test : ::testing::Test {
  redlock::test::master_set servers{5};
  capture log;

  redlock::client_config config(std::chrono::milliseconds request_timeout = 2s, log_level min = log_level::debug) {
    auto cfg = redlock::test::client_config_for(servers, request_timeout);
    cfg.release_timeout = request_timeout;
    cfg.retry.max_wait = 2s;
    cfg.logging = log.options(min);
    // No TIME behind the votes and no probes: the counts below are of the lock requests alone
    // (hazard_test counts the guard's own requests).
    cfg.guard.clock_jumps = false;
    return cfg;
  }

  // One lock, extend, unlock cycle, so that every master has both scripts cached.
  static asio::awaitable<void> warm_up(redlock::client& c) {
    auto [ec, l] = co_await c.async_try_lock("warm-up", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    co_await l.async_extend(10s, use_tuple);
    co_await l.async_unlock(use_tuple);
    co_await wait_idle(c);
  }
};

// ---- counters ---------------------------------------------------------------------------------

TEST_F(observability_test, counters_match_after_lock_unlock_cycles) {
  constexpr std::uint64_t cycles = 20;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    for (std::uint64_t k = 0; k < cycles; ++k) {
      auto [ec, l] = co_await c.async_lock("cycles", 10s, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(uec) << uec.message();
    }
    co_await wait_idle(c);
    const auto s = c.stats();
    EXPECT_EQ(s.masters.size(), 5u);
    if (s.masters.size() != 5) co_return;
    for (std::size_t i = 0; i < 5; ++i) {
      const auto& m = s.masters[i];
      SCOPED_TRACE("master " + std::to_string(i + 1));
      // Per cycle a SET and a release script, after the scripts were loaded on the connection
      // (one request, a reply per script): no EVALSHA meets an empty script cache.
      const std::uint64_t scripts = std::size(redlock::detail::all_scripts);
      EXPECT_EQ(m.requests, 2 * cycles + 1);
      EXPECT_EQ(m.ok, 2 * cycles + 1);
      EXPECT_EQ(m.server_errors, 0u);
      EXPECT_EQ(m.errors(), 0u);
      EXPECT_EQ(m.completed(), m.requests);
      EXPECT_EQ(m.written, m.requests);
      EXPECT_EQ(m.replies, m.requests + scripts - 1);
      EXPECT_EQ(m.dropped_replies, 0u);
      EXPECT_EQ(m.latency.count, m.ok + m.server_errors);
      EXPECT_GT(m.latency.max.count(), 0);
      EXPECT_LE(m.latency.percentile(50), m.latency.percentile(99));
      EXPECT_LE(m.latency.percentile(99), m.latency.max);
      EXPECT_EQ(m.connect_attempts, 1u);
      EXPECT_EQ(m.connects, 1u);
      EXPECT_EQ(m.connect_failures, 0u);
      EXPECT_EQ(m.disconnects, 0u);
      EXPECT_GT(m.bytes_written, 0u);
      EXPECT_GT(m.bytes_read, 0u);
      // The client's view agrees with the connection's own.
      EXPECT_EQ(c.masters()[i].connects, m.connects);
    }
    EXPECT_EQ(s.lock_operations, cycles);
    EXPECT_EQ(s.lock_attempts, cycles);
    EXPECT_EQ(s.locks_acquired, cycles);
    EXPECT_EQ(s.locks_completed(), cycles);
    EXPECT_EQ(s.releases, cycles);
    EXPECT_EQ(s.release_failures, 0u);
    EXPECT_EQ(s.acquire_latency.count, cycles);
    EXPECT_EQ(s.total().requests, 5 * (2 * cycles + 1));

    // What was logged on the way, at debug level.
    EXPECT_EQ(log.count(log_level::debug, {"lock \"cycles\" [", "]: acquired for 10000 ms", "(attempt 1), validity ",
                                           "; masters: 1 ", " granted "}),
              cycles)
        << log.dump();
    EXPECT_EQ(log.count(log_level::debug, {"lock \"cycles\" [", "]: released in"}), cycles);
    for (std::size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(log.count(log_level::info, {master_name(servers, i) + ": connection up (RESP3)"}), 1u);
      // Loaded with the connection: no EVALSHA fell back to EVAL.
      EXPECT_EQ(log.count(log_level::debug, {master_name(servers, i) + ": script not in the server's cache"}), 0u);
    }
    EXPECT_EQ(log.count(log_level::info, {"client started: 5 masters, quorum 3"}), 1u);
    c.close();
    EXPECT_EQ(log.count(log_level::info, {"client closed"}), 1u);
  });
}

TEST_F(observability_test, a_killed_master_counts_its_failures_alone_and_logs_down_and_up) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config(3s)};
    co_await wait_connected(c);
    co_await warm_up(c);
    const auto base = c.stats();
    servers[1].kill();
    EXPECT_TRUE(co_await eventually([&] { return c.masters()[1].state != redlock::connection_state::up; }));
    // Requests while it is down fail at once: not_connected.
    for (int k = 0; k < 3; ++k) {
      auto [ec, l] = co_await c.async_try_lock("victim", 10s, use_tuple);
      EXPECT_FALSE(ec) << ec.message();  // four masters are plenty
      co_await l.async_unlock(use_tuple);
    }
    co_await wait_idle(c);
    const auto d = c.stats() - base;
    EXPECT_EQ(d.masters[1].not_connected, 6u);  // 3 x (SET + release)
    EXPECT_EQ(d.masters[1].ok, 0u);
    EXPECT_EQ(d.masters[1].disconnects, 1u);
    for (std::size_t i : {0u, 2u, 3u, 4u}) {
      SCOPED_TRACE("master " + std::to_string(i + 1));
      EXPECT_EQ(d.masters[i].connection_lost, 0u);
      EXPECT_EQ(d.masters[i].not_connected, 0u);
      EXPECT_EQ(d.masters[i].timeouts, 0u);
      EXPECT_EQ(d.masters[i].disconnects, 0u);
      EXPECT_EQ(d.masters[i].ok, 6u);
    }
    EXPECT_EQ(log.count(log_level::warning, {master_name(servers, 1) + ": connection down: ", "reconnecting in"}), 1u)
        << log.dump();
    // Attempts while it stays down are logged, but never above debug after the "down" warning.
    EXPECT_TRUE(co_await eventually([&] { return c.stats().masters[1].connect_failures >= 2; }));
    EXPECT_GE(log.count(log_level::debug, {master_name(servers, 1) + ": connect failed: ", "retrying in"}), 2u);
    EXPECT_EQ(log.count(log_level::warning, {master_name(servers, 1) + ": connect failed"}), 0u);

    servers[1].restart();
    EXPECT_TRUE(co_await eventually([&] { return c.masters()[1].state == redlock::connection_state::up; }));
    EXPECT_EQ(log.count(log_level::info, {master_name(servers, 1) + ": connection up again (RESP3) after "}), 1u)
        << log.dump();
    EXPECT_EQ(c.stats().masters[1].connects, 2u);
    // The others never went down.
    for (std::size_t i : {0u, 2u, 3u, 4u})
      EXPECT_EQ(log.count(log_level::warning, {master_name(servers, i) + ": connection down"}), 0u);
  });
}

TEST_F(observability_test, a_connection_reset_under_a_written_request_is_connection_lost_on_that_master) {
  redlock::test::fault_proxy proxy{servers[2].host(), servers[2].port()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(3s);
    cfg.masters[2].port = proxy.port();
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    co_await warm_up(c);
    const auto base = c.stats();
    proxy.set_blackhole(true);  // the SET is written, and never answered
    auto [ec, l] = co_await c.async_try_lock("reset", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(co_await eventually([&] { return c.stats().masters[2].written == base.masters[2].written + 1; }));
    proxy.reset_all();
    proxy.set_blackhole(false);
    EXPECT_TRUE(co_await eventually([&] { return c.stats().masters[2].connects == 2; }));
    co_await l.async_unlock(use_tuple);
    co_await wait_idle(c);
    const auto d = c.stats() - base;
    EXPECT_EQ(d.masters[2].connection_lost, 1u);
    EXPECT_EQ(d.masters[2].disconnects, 1u);
    // After reconnecting: the scripts loaded on the new connection (one request), the release.
    EXPECT_EQ(d.masters[2].ok, 2u);
    for (std::size_t i : {0u, 1u, 3u, 4u}) {
      EXPECT_EQ(d.masters[i].connection_lost, 0u) << i;
      EXPECT_EQ(d.masters[i].disconnects, 0u) << i;
      EXPECT_EQ(d.masters[i].ok, 2u) << i;
    }
    const std::string name = "master 3 (127.0.0.1:" + std::to_string(proxy.port()) + ")";
    EXPECT_EQ(
        log.count(log_level::warning, {name + ": connection down: ", "1 written request(s) failed (outcome unknown)"}),
        1u)
        << log.dump();
    EXPECT_EQ(log.count(log_level::info, {name + ": connection up again (RESP3) after 0 failed attempt(s)"}), 1u);
  });
}

TEST_F(observability_test, a_stopped_master_times_out_alone_and_its_late_replies_are_dropped) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config(300ms)};
    co_await wait_connected(c);
    co_await warm_up(c);
    const auto base = c.stats();
    servers[3].pause();
    for (int k = 0; k < 3; ++k) {
      auto [ec, l] = co_await c.async_try_lock("stalled", 10s, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(uec) << uec.message();
    }
    co_await wait_idle(c);  // master 4's requests time out
    auto d = c.stats() - base;
    EXPECT_EQ(d.masters[3].timeouts, 6u);
    EXPECT_EQ(d.masters[3].written, 6u);
    EXPECT_EQ(d.masters[3].latency.count, 0u);  // no reply, no latency sample
    for (std::size_t i : {0u, 1u, 2u, 4u}) {
      EXPECT_EQ(d.masters[i].timeouts, 0u) << i;
      EXPECT_EQ(d.masters[i].ok, 6u) << i;
    }
    EXPECT_GE(log.count(log_level::debug, {master_name(servers, 3) + ": ", "request(s) timed out"}), 1u) << log.dump();

    // Resumed: the six late replies are read and dropped, the connection stays up.
    servers[3].resume();
    EXPECT_TRUE(co_await eventually([&] { return (c.stats() - base).masters[3].dropped_replies == 6; }));
    // The three releases that timed out there were kept in doubt and are sent again once the
    // late replies show the master answering (harmless: each names a token nobody holds).
    EXPECT_TRUE(co_await eventually([&] { return (c.stats() - base).masters[3].replies == 9; }));
    d = c.stats() - base;
    EXPECT_EQ(d.releases_resent, 3u);
    EXPECT_EQ(d.masters[3].replies, 6u + d.releases_resent);
    EXPECT_EQ(d.masters[3].disconnects, 0u);
    EXPECT_EQ(c.masters()[3].dropped_replies, 6u);  // the status agrees
    EXPECT_EQ(log.count(log_level::debug, {master_name(servers, 3) + ": dropped a late reply"}), 6u);
  });
}

TEST_F(observability_test, an_error_reply_counts_as_a_server_error_on_that_master) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    co_await warm_up(c);
    auto [ec, l] = co_await c.async_lock("wrongtype", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    co_await wait_idle(c);
    // A list where masters 1-3 expect our string: their scripts fail with WRONGTYPE. Three of
    // them make the failure decisive, so all three answers are in the lock's nodes.
    for (std::size_t i = 0; i < 3; ++i) {
      servers[i].command({"DEL", "wrongtype"});
      servers[i].command({"LPUSH", "wrongtype", "x"});
    }
    const auto base = c.stats();
    auto [xec] = co_await l.async_extend(10s, use_tuple);
    EXPECT_EQ(xec, error::quorum_unavailable);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(l.masters().at(i).status, master_status::server_error) << i;
      EXPECT_EQ(l.masters().at(i).server_text.rfind("WRONGTYPE", 0), 0u) << l.masters().at(i).server_text;
    }
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_EQ(uec, error::quorum_unavailable);
    co_await wait_idle(c);
    const auto d = c.stats() - base;
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(d.masters[i].server_errors, 2u) << i;  // the extend and the release scripts
      EXPECT_EQ(d.masters[i].ok, 0u) << i;
      EXPECT_EQ(d.masters[i].latency.count, 2u) << i;  // error replies are replies
    }
    for (std::size_t i : {3u, 4u}) {
      EXPECT_EQ(d.masters[i].server_errors, 0u) << i;
      EXPECT_EQ(d.masters[i].ok, 2u) << i;
    }
    EXPECT_EQ(d.extension_failures, 1u);
    EXPECT_EQ(d.release_failures, 1u);
    EXPECT_EQ(log.count(log_level::warning, {"lock \"wrongtype\" [", "extension failed: ", "1 server error \"WRONGTYPE",
                                             "2 server error \"WRONGTYPE", "3 server error \"WRONGTYPE"}),
              1u)
        << log.dump();
    EXPECT_EQ(log.count(log_level::warning, {"lock \"wrongtype\" [", "release answered by too few masters"}), 1u);
  });
}

// ---- a standalone connection ------------------------------------------------------------------

TEST(observability_connection, every_outcome_is_counted_once) {
  redlock::test::master_set servers{1};
  capture log;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::connection_config cfg;
    cfg.port = servers[0].port();
    cfg.logging = log.options(log_level::trace);
    redlock::connection conn{ioc.get_executor(), cfg};
    auto ping = [] {
      redlock::resp::request r;
      r.push("PING");
      return r;
    };
    // Not running yet: not sent.
    auto [e1, r1] = co_await conn.async_exec(ping(), 1s, use_tuple);
    EXPECT_EQ(e1, error::not_connected);
    conn.async_run(asio::detached);
    EXPECT_TRUE(co_await eventually([&] { return conn.status().state == redlock::connection_state::up; }));
    auto [e2, r2] = co_await conn.async_exec(redlock::resp::request{}, 1s, use_tuple);
    EXPECT_EQ(e2, error::invalid_argument);
    auto [e3, r3] = co_await conn.async_exec(ping(), 1s, use_tuple);
    EXPECT_FALSE(e3);
    redlock::resp::request bad;
    bad.push("NO-SUCH-COMMAND");
    auto [e4, r4] = co_await conn.async_exec(std::move(bad), 1s, use_tuple);
    EXPECT_EQ(e4, error::server_error);

    servers[0].pause();
    auto [e5, r5] = co_await conn.async_exec(ping(), 100ms, use_tuple);
    EXPECT_EQ(e5, error::master_timeout);
    asio::cancellation_signal cancel;
    bool cancelled = false;
    conn.async_exec(ping(), 30s,
                    asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, redlock::resp::response) {
                      EXPECT_EQ(ec, asio::error::operation_aborted);
                      cancelled = true;
                    }));
    EXPECT_TRUE(co_await eventually([&] { return conn.stats().written == 4; }));
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await eventually([&] { return cancelled; }));
    bool aborted = false;
    conn.async_exec(ping(), 30s, [&](error_code ec, redlock::resp::response) {
      EXPECT_EQ(ec, asio::error::operation_aborted);
      aborted = true;
    });
    EXPECT_TRUE(co_await eventually([&] { return conn.stats().written == 5; }));
    conn.close();
    EXPECT_TRUE(co_await eventually([&] { return aborted; }));
    EXPECT_TRUE(co_await eventually([&] { return conn.status().state == redlock::connection_state::closed; }));
    servers[0].resume();

    const auto s = conn.stats();
    EXPECT_EQ(s.requests, 7u);
    EXPECT_EQ(s.not_connected, 1u);
    EXPECT_EQ(s.invalid, 1u);
    EXPECT_EQ(s.ok, 1u);
    EXPECT_EQ(s.server_errors, 1u);
    EXPECT_EQ(s.timeouts, 1u);
    EXPECT_EQ(s.cancelled, 1u);
    EXPECT_EQ(s.aborted, 1u);
    EXPECT_EQ(s.connection_lost, 0u);
    EXPECT_EQ(s.completed(), 7u);
    EXPECT_EQ(s.in_progress(), 0u);
    EXPECT_EQ(s.written, 5u);
    EXPECT_EQ(s.latency.count, 2u);
    EXPECT_EQ(s.connects, 1u);
    EXPECT_EQ(s.disconnects, 0u);  // close() is not a failure
    EXPECT_EQ(s.log_messages, log.entries().size());
    const std::string name = "127.0.0.1:" + std::to_string(servers[0].port());
    EXPECT_EQ(log.count(log_level::info, {name + ": connection up (RESP3)"}), 1u) << log.dump();
    EXPECT_EQ(log.count(log_level::info, {name + ": connection closed"}), 1u);
    EXPECT_EQ(log.count(log_level::trace, {name + ": request cancelled by its caller"}), 1u);
    EXPECT_EQ(log.count(log_level::trace, {name + ": writing 1 request(s), "}), 5u);
  });
}

TEST(observability_connection, bad_bytes_are_protocol_errors_logged_as_errors) {
  redlock::test::fake_server server;
  server.set_responder(
      [](const redlock::test::fake_server::command& cmd) -> std::optional<redlock::test::reply_action> {
        if (cmd.at(0) == "PING") return redlock::test::reply_action::send("garbage\r\n");
        return std::nullopt;
      });
  capture log;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::connection_config cfg;
    cfg.port = server.port();
    cfg.logging = log.options(log_level::warning);
    cfg.logging.prefix = "fake";
    redlock::connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    EXPECT_TRUE(co_await eventually([&] { return conn.status().state == redlock::connection_state::up; }));
    redlock::resp::request r;
    r.push("PING");
    auto [ec, resp] = co_await conn.async_exec(std::move(r), 1s, use_tuple);
    EXPECT_EQ(ec, error::protocol_error);
    const auto s = conn.stats();
    EXPECT_EQ(s.protocol_errors, 1u);
    EXPECT_EQ(s.disconnects, 1u);
    EXPECT_TRUE(co_await eventually([&] {
      return log.count(log_level::error, {"fake: connection down: ", "[redlock:1]",
                                          "1 written request(s) failed (outcome unknown)"}) == 1;
    })) << log.dump();
    conn.close();
  });
}

// ---- levels -----------------------------------------------------------------------------------

TEST_F(observability_test, acquired_is_debug_and_a_keep_alive_loss_is_a_warning) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config(100ms)};
    co_await wait_connected(c);
    auto [ec, l] = co_await c.async_lock("kept", 600ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    const std::string name = "lock \"kept\" [" + l.token().substr(0, 8) + "]";
    EXPECT_EQ(log.count(log_level::debug, {name + ": acquired for 600 ms", "validity"}), 1u) << log.dump();
    l.keep_alive();
    servers[0].pause();
    servers[1].pause();
    servers[2].pause();
    auto [lost] = co_await l.async_wait_lost(use_tuple);
    EXPECT_FALSE(lost);  // the awaited event: success
    EXPECT_EQ(log.count(log_level::warning, {name + ": lost ("}), 1u) << log.dump();
    EXPECT_GE(log.count(log_level::warning, {name + ": keep-alive extension failed: "}), 1u);
    const auto s = c.stats();
    EXPECT_EQ(s.locks_lost, 1u);
    EXPECT_GE(s.extension_failures, 1u);
    for (std::size_t i = 0; i < 3; ++i) servers[i].resume();
  });
}

TEST_F(observability_test, nothing_below_the_minimum_level_is_even_formatted) {
  // The same session at three levels: debug shows it produces debug messages; at warning the sink
  // sees nothing below warning, and every message formatted was delivered (none formatted to be
  // dropped); with the level off nothing is formatted at all.
  auto session = [&](log_level min, capture& sink) {
    run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
      auto cfg = config(2s, min);
      cfg.logging = sink.options(min);
      redlock::client a{ioc.get_executor(), cfg};
      redlock::client b{ioc.get_executor(), cfg};
      co_await wait_connected(a);
      co_await wait_connected(b);
      auto [ec, l] = co_await a.async_lock("levels", 10s, use_tuple);
      EXPECT_FALSE(ec);
      auto [ec2, l2] = co_await b.async_try_lock("levels", 10s, use_tuple);
      EXPECT_EQ(ec2, error::not_acquired);
      co_await l.async_unlock(use_tuple);
      servers[4].kill();
      EXPECT_TRUE(co_await eventually(
          [&] { return a.stats().masters[4].connect_failures >= 1 && b.stats().masters[4].connect_failures >= 1; }));
      co_await wait_idle(a);
      co_await wait_idle(b);
      // One thread runs everything: no message is between being counted and being delivered.
      EXPECT_EQ(formatted(a.stats()) + formatted(b.stats()), sink.entries().size());
      servers[4].restart();
    });
  };
  capture debug_log, warning_log, off_log;
  session(log_level::debug, debug_log);
  EXPECT_GE(debug_log.count(log_level::debug, {"acquired"}), 1u);
  EXPECT_GE(debug_log.count(log_level::debug, {"not acquired after 1 attempt(s)"}), 1u);

  session(log_level::warning, warning_log);
  EXPECT_EQ(warning_log.count(log_level::warning, {master_name(servers, 4) + ": connection down"}), 2u)
      << warning_log.dump();
  for (const auto& e : warning_log.entries()) EXPECT_GE(e.level, log_level::warning) << e.text;

  session(log_level::off, off_log);
  EXPECT_TRUE(off_log.entries().empty());
}

// ---- secrets ----------------------------------------------------------------------------------

TEST(observability_secrets, no_password_and_no_full_token_in_any_message) {
  const std::string password = "pw-Secret-7481";
  const std::string user_password = "user-Secret-3390";
  const std::string wrong_password = "wrong-Secret-5126";
  redlock::test::redis_options opts;
  opts.password = password;
  opts.user = redlock::test::acl_user{"locker", user_password};
  redlock::test::master_set servers{5, opts};
  capture log;
  std::vector<std::string> tokens;

  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto config = [&](std::string user, std::string pass) {
      auto cfg = redlock::test::client_config_for(servers, 100ms);
      for (auto& m : cfg.masters) {
        m.username = user;
        m.password = pass;
      }
      cfg.logging = log.options(log_level::trace);  // everything
      return cfg;
    };
    redlock::client a{ioc.get_executor(), config("", password)};
    redlock::client b{ioc.get_executor(), config("locker", user_password)};
    co_await wait_connected(a);
    co_await wait_connected(b);

    // Acquire, extend, contend, keep alive.
    auto [ec, held] = co_await a.async_lock("secret-1", 2s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    tokens.push_back(held.token());
    auto [xec] = co_await held.async_extend(3s, use_tuple);
    EXPECT_FALSE(xec) << xec.message();
    auto [cec, none] = co_await b.async_try_lock("secret-1", 2s, use_tuple);
    EXPECT_EQ(cec, error::not_acquired);
    auto [kec, kept] = co_await b.async_lock("secret-2", 400ms, use_tuple);
    EXPECT_FALSE(kec) << kec.message();
    tokens.push_back(kept.token());
    kept.keep_alive();
    EXPECT_TRUE(co_await eventually([&, &kept = kept] { return kept.extensions() >= 1; }, 2s))
        << "no keep-alive extension";
    EXPECT_GE(kept.extensions(), 1u);
    {
      auto [dec, dropped] = co_await a.async_lock("secret-3", 2s, use_tuple);  // released in the background
      EXPECT_FALSE(dec);
      tokens.push_back(dropped.token());
    }
    // Loss: a majority stops answering.
    servers[0].pause();
    servers[1].pause();
    servers[2].pause();
    auto [lost] = co_await kept.async_wait_lost(use_tuple);
    EXPECT_FALSE(lost);  // the awaited event: success
    for (std::size_t i = 0; i < 3; ++i) servers[i].resume();
    co_await held.async_unlock(use_tuple);

    // Refused credentials: logged as an error with the server's words.
    redlock::client wrong{ioc.get_executor(), config("", wrong_password)};
    EXPECT_TRUE(co_await eventually([&] { return wrong.stats().total().auth_failures >= 5; }));
    auto [wec, wl] = co_await wrong.async_try_lock("secret-4", 2s, use_tuple);
    EXPECT_EQ(wec, error::quorum_unavailable);
    for (const auto& s : wrong.masters()) {
      EXPECT_EQ(s.last_error, error::auth_failed);
      EXPECT_EQ(s.last_error_text.find(wrong_password), std::string::npos);
    }
  });

  const auto entries = log.entries();
  ASSERT_GT(entries.size(), 50u);
  EXPECT_EQ(log.count(log_level::error, {"authentication refused: WRONGPASS"}), 5u) << log.dump();
  for (const auto& e : entries) {
    EXPECT_EQ(e.text.find(password), std::string::npos) << e.text;
    EXPECT_EQ(e.text.find(user_password), std::string::npos) << e.text;
    EXPECT_EQ(e.text.find(wrong_password), std::string::npos) << e.text;
    for (const auto& t : tokens) EXPECT_EQ(e.text.find(t), std::string::npos) << e.text;
  }
  // The locks are named by the first 8 hex digits of their tokens, and every step was logged.
  ASSERT_EQ(tokens.size(), 3u);
  for (const auto& t : tokens) {
    ASSERT_EQ(t.size(), 40u);
    EXPECT_GE(log.count(log_level::debug, {"[" + t.substr(0, 8) + "]: acquired"}), 1u);
  }
  EXPECT_EQ(log.count(log_level::debug, {"[" + tokens[0].substr(0, 8) + "]: extension to 3000 ms done"}), 1u);
  EXPECT_GE(log.count(log_level::debug, {"[" + tokens[1].substr(0, 8) + "]: keep-alive extension to 400 ms done"}), 1u);
  EXPECT_EQ(log.count(log_level::warning, {"[" + tokens[1].substr(0, 8) + "]: lost ("}), 1u);
  EXPECT_EQ(log.count(log_level::debug, {"[" + tokens[2].substr(0, 8) + "]: handle dropped while held"}), 1u);
}

TEST(observability_secrets, a_server_echoing_the_password_is_redacted) {
  // An old server (no HELLO) that repeats its arguments in its errors, as Redis does for unknown
  // commands, and then refuses the password.
  const std::string password = "echo-Secret-2207";
  redlock::test::fake_server server;
  server.set_responder(
      [&](const redlock::test::fake_server::command& cmd) -> std::optional<redlock::test::reply_action> {
        std::string args;
        for (std::size_t i = 1; i < cmd.size(); ++i) args += " '" + cmd[i] + "'";
        if (cmd.at(0) == "HELLO")
          return redlock::test::reply_action::send("-ERR unknown command 'HELLO', with args beginning with:" + args +
                                                   "\r\n");
        if (cmd.at(0) == "AUTH") return redlock::test::reply_action::send("-ERR invalid password:" + args + "\r\n");
        return std::nullopt;
      });
  capture log;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::connection_config cfg;
    cfg.port = server.port();
    cfg.password = password;
    cfg.logging = log.options(log_level::trace);
    redlock::connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    EXPECT_TRUE(co_await eventually([&] { return conn.stats().auth_failures >= 2; }));
    const auto st = conn.status();
    EXPECT_EQ(st.last_error, error::auth_failed);
    EXPECT_NE(st.last_error_text.find("ERR invalid password: '***'"), std::string::npos) << st.last_error_text;
    EXPECT_EQ(st.last_error_text.find(password), std::string::npos);
    conn.close();
  });
  EXPECT_GE(log.count(log_level::debug, {"refused HELLO 3", "'AUTH' 'default' '***'"}), 1u) << log.dump();
  EXPECT_EQ(log.count(log_level::error, {"authentication refused: ERR invalid password: '***'"}), 1u) << log.dump();
  for (const auto& e : log.entries()) EXPECT_EQ(e.text.find(password), std::string::npos) << e.text;
}

// ---- robustness -------------------------------------------------------------------------------

TEST_F(observability_test, a_throwing_sink_changes_nothing) {
  std::atomic<int> calls{0};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.logging.level = log_level::trace;
    cfg.logging.sink = [&](log_level, std::string_view) {
      if (++calls % 2) throw std::runtime_error{"sink failure"};
      throw 42;  // not even a std::exception
    };
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    for (int k = 0; k < 5; ++k) {
      auto [ec, l] = co_await c.async_lock("throwing", 10s, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(uec) << uec.message();
    }
    servers[0].kill();
    EXPECT_TRUE(co_await eventually([&] { return c.stats().masters[0].disconnects == 1; }));
    servers[0].restart();
    EXPECT_TRUE(co_await eventually([&] { return c.masters()[0].state == redlock::connection_state::up; }));
    const auto before = c.stats().masters[0].ok;
    auto [ec, l] = co_await c.async_lock("throwing", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    co_await l.async_unlock(use_tuple);
    EXPECT_TRUE(co_await eventually([&] { return c.stats().masters[0].ok >= before + 2; }));  // serves again
    co_await wait_idle(c);
    const auto s = c.stats();
    EXPECT_EQ(s.locks_acquired, 6u);
    EXPECT_GT(s.log_messages, 0u);
    EXPECT_EQ(s.log_sink_errors, s.log_messages);
    std::uint64_t errors = s.log_sink_errors;
    for (const auto& m : s.masters) {
      EXPECT_GT(m.log_messages, 0u);
      EXPECT_EQ(m.log_sink_errors, m.log_messages);
      errors += m.log_sink_errors;
    }
    EXPECT_EQ(errors, static_cast<std::uint64_t>(calls.load()));
  });
}

TEST_F(observability_test, four_threads_lock_log_and_read_counters_concurrently) {
  constexpr int contenders = 40;
  std::atomic<std::uint64_t> sink_calls{0};
  std::atomic<int> acquired{0};
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = config();
        cfg.retry.max_wait = 60s;
        cfg.retry.base_delay = 2ms;
        cfg.retry.jitter = 10ms;
        cfg.logging.level = log_level::trace;
        cfg.logging.sink = [&](log_level, std::string_view m) {
          EXPECT_FALSE(m.empty());
          ++sink_calls;
        };
        redlock::client c{ioc.get_executor(), cfg};
        co_await wait_connected(c);
        std::atomic<int> done{0};
        for (int k = 0; k < contenders; ++k) {
          asio::co_spawn(
              ioc,
              [&, k]() -> asio::awaitable<void> {
                auto [ec, l] = co_await c.async_lock("threads-" + std::to_string(k % 4), 5s, use_tuple);
                if (!ec) {
                  ++acquired;
                  co_await sleep_for(1ms);
                  co_await l.async_unlock(use_tuple);
                }
                ++done;
              },
              asio::detached);
        }
        // Meanwhile, read the counters from here and there: they only grow.
        std::vector<std::uint64_t> last(5, 0);
        while (done != contenders) {
          const auto s = c.stats();
          for (std::size_t i = 0; i < 5; ++i) {
            EXPECT_GE(s.masters[i].requests, last[i]);
            last[i] = s.masters[i].requests;
          }
          co_await sleep_for(1ms);
        }
        co_await wait_idle(c);
        const auto s = c.stats();
        EXPECT_EQ(s.lock_operations, static_cast<std::uint64_t>(contenders));
        EXPECT_EQ(s.locks_acquired, static_cast<std::uint64_t>(contenders));
        EXPECT_EQ(s.releases, static_cast<std::uint64_t>(contenders));
        EXPECT_EQ(s.acquire_latency.count, static_cast<std::uint64_t>(contenders));
        EXPECT_GE(s.lock_attempts, s.lock_operations);
        for (const auto& m : s.masters) {
          EXPECT_EQ(m.completed(), m.requests);
          // One reply per command, and a waiter leaving its queues (fair hand-over) sends two
          // commands (ZREM queue, ZREM expiry) as one request: replies exceed requests by those.
          EXPECT_GE(m.replies, m.written);
          EXPECT_LE(m.replies, 2 * m.written);
          EXPECT_EQ(m.latency.count, m.ok + m.server_errors);
          EXPECT_EQ(m.errors(), m.server_errors);  // healthy masters: only NOSCRIPT
        }
        c.close();
        EXPECT_TRUE(co_await eventually([&] { return formatted(c.stats()) == sink_calls.load(); }));
      },
      /*threads=*/4, 120s);
  EXPECT_EQ(acquired.load(), contenders);
}

}  // namespace
