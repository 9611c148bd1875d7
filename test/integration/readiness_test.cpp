// SPDX-License-Identifier: BSL-1.0
// Readiness and failure causes against real redis-server processes:
// client::async_wait_ready, each master's real cause in a lock's results, the per-master report,
// and acquisitions that stop retrying when no retry can help (wrong password, unknown host). Each
// test names the wrong implementation it would catch.

#include <redlock/client.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::master_status;
using redlock::quorum_report;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;

constexpr auto limit = std::chrono::seconds{40};  // per test body

redlock::test::redis_options with_password() {
  redlock::test::redis_options o;
  o.password = "right-password";
  return o;
}

// The first `wrong` masters get a wrong password, the others the right one.
redlock::client_config passwords(redlock::test::master_set& servers, std::size_t wrong) {
  auto cfg = redlock::test::client_config_for(servers);
  for (std::size_t i = 0; i < cfg.masters.size(); ++i)
    cfg.masters[i].password = i < wrong ? "wrong-password" : "right-password";
  return cfg;
}

bool lists(const quorum_report& r, std::size_t index) {
  for (const auto& m : r.failing) {
    if (m.index == index) return true;
  }
  return false;
}

// Every master up: ready with nothing failing, and a lock right after it is granted by all three.
// Catches a wait that never completes on success or completes with an error.
TEST(readiness, ready_with_every_master_up) {
  redlock::test::master_set servers{3};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), redlock::test::client_config_for(servers)};
        auto [ec, rep] = co_await c.async_wait_ready(10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(rep.masters, 3u);
        EXPECT_EQ(rep.needed, 2u);
        // At least a majority is up; the third may still be completing its handshake.
        EXPECT_LE(rep.failing.size(), 1u);
        const auto st = c.masters();
        std::size_t up = 0;
        for (const auto& s : st) up += s.state == redlock::connection_state::up ? 1 : 0;
        EXPECT_GE(up, 2u);
        auto [lec, l] = co_await c.async_try_lock("ready-all", 10s, use_tuple);
        EXPECT_FALSE(lec) << lec.message();
        c.close();
      },
      1, limit);
}

// One master killed before the client starts: two of three are a quorum, so ready; the report
// names the dead one if it lists any. Catches a wait for every master.
TEST(readiness, ready_with_two_of_three) {
  redlock::test::master_set servers{3};
  servers[2].kill();
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), redlock::test::client_config_for(servers)};
        auto [ec, rep] = co_await c.async_wait_ready(10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        for (const auto& m : rep.failing) EXPECT_EQ(m.index, 2u) << redlock::to_string(rep);
        c.close();
      },
      1, limit);
}

// Two of three refuse the password: the wait fails with quorum_unavailable (not at the timeout,
// which would say not_ready), and the report gives each bad master's cause and refusal text.
// Catches a wait that treats credentials like a network failure (waits out the timeout), and a
// report without the cause.
TEST(readiness, fails_at_once_when_a_majority_refuses_the_password) {
  redlock::test::master_set servers{3, with_password()};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), passwords(servers, 2)};
        auto [ec, rep] = co_await c.async_wait_ready(30s, use_tuple);
        EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
        EXPECT_EQ(rep.error, error::quorum_unavailable);
        EXPECT_GE(rep.failing.size(), 2u) << redlock::to_string(rep);
        EXPECT_TRUE(lists(rep, 0));
        EXPECT_TRUE(lists(rep, 1));
        EXPECT_FALSE(lists(rep, 2) && rep.failing.size() == 3 && rep.failing[2].error);
        for (const auto& m : rep.failing) {
          if (m.index == 2) continue;
          EXPECT_EQ(m.status, master_status::unreachable);
          EXPECT_EQ(m.error, error::auth_failed);
          EXPECT_EQ(m.server_text.rfind("WRONGPASS", 0), 0u) << m.server_text;
        }
        const auto text = redlock::to_string(rep);
        EXPECT_NE(text.find("2 of 3 masters could not be used"), std::string::npos) << text;
        EXPECT_NE(text.find(servers[0].host() + ":" + std::to_string(servers[0].port())), std::string::npos) << text;
        EXPECT_NE(text.find("WRONGPASS"), std::string::npos) << text;
        EXPECT_EQ(text.find("right-password"), std::string::npos) << text;
        EXPECT_EQ(text.find("wrong-password"), std::string::npos) << text;  // the password is redacted
        c.close();
      },
      1, limit);
}

// Two masters paused (SIGSTOP: the kernel accepts the connection, nothing answers the
// handshake): no quorum comes up, and the wait ends with not_ready at its timeout. Catches a
// timeout that is ignored (the body would hit its limit) and a paused master taken for hopeless.
TEST(readiness, timeout_is_honoured_when_masters_hang) {
  redlock::test::master_set servers{3};
  servers[0].pause();
  servers[1].pause();
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), redlock::test::client_config_for(servers)};
        auto [ec, rep] = co_await c.async_wait_ready(700ms, use_tuple);
        EXPECT_EQ(ec, error::not_ready) << ec.message();
        EXPECT_TRUE(ec == redlock::condition::timeout);
        EXPECT_TRUE(lists(rep, 0)) << redlock::to_string(rep);
        EXPECT_TRUE(lists(rep, 1)) << redlock::to_string(rep);
        EXPECT_FALSE(lists(rep, 2)) << redlock::to_string(rep);
        // A non-positive timeout answers at once with the state of now.
        auto [now_ec, now_rep] = co_await c.async_wait_ready(0ms, use_tuple);
        EXPECT_EQ(now_ec, error::not_ready);
        c.close();
      },
      1, limit);
}

// Per-operation cancellation and close() end a wait that would otherwise never complete (every
// master hangs, no timeout). Catches a waiter that ignores its cancellation slot or close().
TEST(readiness, cancellation_and_close_end_the_wait) {
  redlock::test::master_set servers{3};
  for (std::size_t i = 0; i < 3; ++i) servers[i].pause();
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), redlock::test::client_config_for(servers)};
        asio::cancellation_signal cancel;
        auto done = std::make_shared<error_code>(error::not_connected);  // a value the wait never gives
        c.async_wait_ready(
            asio::bind_cancellation_slot(cancel.slot(), [done](error_code ec, quorum_report) { *done = ec; }));
        co_await sleep_for(100ms);
        EXPECT_EQ(*done, error::not_connected);  // still waiting
        cancel.emit(asio::cancellation_type::terminal);
        EXPECT_TRUE(co_await until([&] { return *done != error::not_connected; }));
        EXPECT_EQ(*done, asio::error::operation_aborted);

        auto closed = std::make_shared<error_code>(error::not_connected);
        c.async_wait_ready([closed](error_code ec, quorum_report) { *closed = ec; });
        co_await sleep_for(50ms);
        c.close();
        EXPECT_TRUE(co_await until([&] { return *closed != error::not_connected; }));
        EXPECT_EQ(*closed, asio::error::operation_aborted);
      },
      1, limit);
}

// Every master refuses the password: async_lock, allowed to retry for 20 s, fails with
// quorum_unavailable after a single attempt or two, each master's result says auth_failed (not
// not_connected), and the report carries the server's refusal. Catches the old behaviour (retry
// for the whole wait, causes only in client::masters()).
TEST(readiness, wrong_password_lock_fails_fast_with_the_cause) {
  redlock::test::master_set servers{3, with_password()};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = passwords(servers, 3);
        cfg.retry.max_wait = 20s;
        redlock::client c{io.get_executor(), cfg};
        auto [ec, l] = co_await c.async_lock("wrong-password", 10s, use_tuple);
        EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
        EXPECT_LE(l.attempts(), 2u);
        const auto res = l.masters();
        EXPECT_EQ(res.size(), 3u);
        if (res.size() != 3) co_return;
        std::size_t auth = 0;
        for (const auto& r : res) {
          if (r.status == master_status::pending) continue;  // decided before it answered
          EXPECT_EQ(r.status, master_status::unreachable);
          EXPECT_EQ(r.error, error::auth_failed) << r.error.message();
          ++auth;
        }
        EXPECT_GE(auth, 2u);
        const auto rep = c.report(l);
        EXPECT_EQ(rep.error, error::quorum_unavailable);
        EXPECT_GE(rep.failing.size(), 2u);
        const auto text = redlock::to_string(rep);
        EXPECT_NE(text.find("the node rejected the credentials"), std::string::npos) << text;
        EXPECT_NE(text.find("WRONGPASS"), std::string::npos) << text;
        c.close();
      },
      1, limit);
}

// Two masters named by host names that never resolve (the reserved .invalid domain): the lock
// fails at once with host_not_found in their results, client::masters() shows it too, and the
// client logs it. Catches an unknown host reported as not_connected, or retried for the whole wait.
TEST(readiness, unresolvable_host_is_named) {
  redlock::test::master_set servers{3};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = redlock::test::client_config_for(servers);
        cfg.masters[0].host = "first.nohost.invalid";
        cfg.masters[1].host = "second.nohost.invalid";
        cfg.retry.max_wait = 20s;
        auto lines = std::make_shared<std::vector<std::string>>();
        auto mutex = std::make_shared<std::mutex>();
        cfg.logging.level = redlock::log_level::error;
        cfg.logging.sink = [lines, mutex](redlock::log_level, std::string_view m) {
          std::lock_guard g{*mutex};
          lines->emplace_back(m);
        };
        redlock::client c{io.get_executor(), cfg};
        auto [ec, l] = co_await c.async_lock("no-host", 10s, use_tuple);
        EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
        EXPECT_LE(l.attempts(), 2u);
        const auto res = l.masters();
        EXPECT_EQ(res.size(), 3u);
        if (res.size() != 3) co_return;
        EXPECT_EQ(res[0].error, asio::error::host_not_found) << res[0].error.message();
        EXPECT_EQ(res[1].error, asio::error::host_not_found) << res[1].error.message();
        EXPECT_EQ(c.masters()[0].last_error, asio::error::host_not_found);
        const auto text = redlock::to_string(c.report(l));
        EXPECT_NE(text.find("first.nohost.invalid"), std::string::npos) << text;
        bool logged = false;
        {
          std::lock_guard g{*mutex};
          for (const auto& m : *lines) logged = logged || m.find("first.nohost.invalid") != std::string::npos;
        }
        EXPECT_TRUE(logged);
        c.close();
      },
      1, limit);
}

// One master of three refuses the password: the other two still make a quorum, the lock is
// granted, and that master's cause is in the lock's result and in client::masters(), and stays in
// the results of the extension and the release that follow. Catches a fast failure that fires on
// any hopeless master, a cause lost on success, and extensions or releases saying not_connected.
TEST(readiness, one_wrong_password_of_three_still_locks) {
  redlock::test::master_set servers{3, with_password()};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), passwords(servers, 1)};
        auto [rec, rep] = co_await c.async_wait_ready(10s, use_tuple);
        EXPECT_FALSE(rec) << rec.message();
        // Once the bad master's first attempt has failed, a lock finds it down at once.
        EXPECT_TRUE(co_await until([&] { return static_cast<bool>(c.masters()[0].last_error); }));
        auto [ec, l] = co_await c.async_lock("one-bad", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(l.owns_lock());
        EXPECT_EQ(c.masters()[0].last_error, error::auth_failed);
        const auto res = l.masters();
        EXPECT_EQ(res.size(), 3u);
        if (res.size() != 3) co_return;
        EXPECT_EQ(res[0].status, master_status::unreachable);
        EXPECT_EQ(res[0].error, error::auth_failed);
        EXPECT_EQ(res[1].status, master_status::granted);
        EXPECT_EQ(res[2].status, master_status::granted);
        const auto lrep = c.report(l);
        EXPECT_FALSE(lrep.error);  // acquired: the one bad master did not keep the quorum away
        EXPECT_EQ(lrep.failing.size(), 1u);
        if (!lrep.failing.empty()) {
          EXPECT_EQ(lrep.failing[0].index, 0u);
        }
        // The extension's and the release's results name the cause too.
        auto [xec] = co_await l.async_extend(10s, use_tuple);
        EXPECT_FALSE(xec) << xec.message();
        EXPECT_EQ(l.masters()[0].error, error::auth_failed) << l.masters()[0].error.message();
        redlock::unlock_options every;
        every.wait_for_all = true;
        auto [uec, counts] = co_await l.async_unlock(every, use_tuple);
        EXPECT_FALSE(uec) << uec.message();
        EXPECT_EQ(counts.released, 2u);
        EXPECT_EQ(counts.unreachable, 1u);
        EXPECT_EQ(l.masters()[0].status, master_status::unreachable);
        EXPECT_EQ(l.masters()[0].error, error::auth_failed) << l.masters()[0].error.message();
        c.close();
      },
      1, limit);
}

}  // namespace
