// SPDX-License-Identifier: BSL-1.0
// Lock events (lock::async_wait_event), the loss reason, with_lock's lock_lost_error and its
// background release, and the release that waits for every master, against three real masters
// with faults injected for real (paused processes, keys deleted or overwritten behind our back).

#include <redlock/client.hpp>
#include <redlock/with_lock.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::lock_event;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;
using clock_type = redlock::clock;
using type = lock_event::type;

struct events_test : ::testing::Test {
  redlock::test::master_set servers{3};

  redlock::client_config config(std::chrono::milliseconds release_timeout = 1000ms) {
    auto cfg = redlock::test::client_config_for(servers, 100ms);
    cfg.release_timeout = release_timeout;
    return cfg;
  }

  bool has_key(std::size_t i, const std::string& key) { return servers[i].command({"EXISTS", key}) == ":1\r\n"; }
};

// Keep-alive extensions arrive one event each, numbered, each moving the deadline later, with the
// masters' answers; the release is the final event and stays.
TEST_F(events_test, keep_alive_extensions_arrive_as_events_then_released) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    auto [ec, l] = co_await c.async_lock("ev-extended", 300ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    l.keep_alive();
    auto last = l.validity_deadline();
    for (std::size_t n = 1; n <= 4; ++n) {
      auto [wec, e] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(wec) << wec.message();
      EXPECT_EQ(e.what, type::extended) << to_string(e.what);
      EXPECT_EQ(e.extensions, n);
      EXPECT_EQ(e.missed, 0u);
      EXPECT_GT(e.validity_deadline, last);  // each extension moves the deadline on
      last = e.validity_deadline;
      EXPECT_EQ(e.masters.size(), 3u);
      std::size_t granted = 0;
      for (const auto& m : e.masters) granted += m.status == redlock::master_status::granted;
      EXPECT_GE(granted, 2u);
    }
    // An async_extend is an event too.
    auto [xec] = co_await l.async_extend(300ms, use_tuple);
    EXPECT_FALSE(xec);
    auto [xwec, xe] = co_await l.async_wait_event(use_tuple);
    EXPECT_FALSE(xwec);
    EXPECT_EQ(xe.what, type::extended);
    EXPECT_GE(xe.extensions, 5u);

    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec);
    EXPECT_GE(held, 2u);
    // Extensions that happened before the release may come first; then `released`, again and again.
    lock_event e;
    for (int i = 0; i < 5 && e.what != type::released; ++i) {
      auto [wec, got] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(wec);
      e = got;
    }
    EXPECT_EQ(e.what, type::released);
    auto [again_ec, again] = co_await l.async_wait_event(use_tuple);
    EXPECT_FALSE(again_ec);
    EXPECT_EQ(again.what, type::released);
  });
}

// The same on an io_context run by two threads (the client's strand and the reader's coroutine on
// different threads): for the thread sanitizer.
TEST_F(events_test, events_on_a_multithreaded_io_context) {
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client c{ioc.get_executor(), config()};
        auto [ec, l] = co_await c.async_lock("ev-threads", 200ms, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        redlock::keep_alive_options opts;
        opts.max_extensions = 3;
        l.keep_alive(opts);
        std::size_t extended = 0;
        lock_event e;
        while (!e.is_final()) {
          auto [wec, got] = co_await l.async_wait_event(use_tuple);
          EXPECT_FALSE(wec);
          if (wec) break;
          e = got;
          extended += e.what == type::extended;
          (void)l.masters();  // accessors are safe while the client works on another thread
          (void)l.loss_description();
        }
        EXPECT_EQ(extended, 3u);
        EXPECT_EQ(e.what, type::lost);
        EXPECT_EQ(e.error, error::extension_limit);
        EXPECT_NE(e.detail.find("max_extensions 3"), std::string::npos) << e.detail;
      },
      2);
}

// One of three masters paused: extensions still reach a majority, and the events say which master
// did not answer. Two paused: the extensions fail (warnings while the lock is still valid), and
// then the lock is lost for want of a quorum.
TEST_F(events_test, paused_masters_give_extend_failed_warnings_then_lost) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    auto [ec, l] = co_await c.async_lock("ev-paused", 1000ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    l.keep_alive();
    servers[2].pause();
    auto [wec, e] = co_await l.async_wait_event(use_tuple);
    EXPECT_FALSE(wec);
    EXPECT_EQ(e.what, type::extended);
    EXPECT_EQ(e.masters.size(), 3u);
    if (e.masters.size() == 3) {
      EXPECT_NE(e.masters[2].status, redlock::master_status::granted);
    }

    servers[1].pause();
    std::size_t failed = 0;
    lock_event last;
    while (true) {
      auto [ec2, ev] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(ec2);
      if (ec2) break;
      if (ev.what == type::extend_failed) {
        ++failed;
        EXPECT_EQ(ev.error, error::quorum_unavailable);
        EXPECT_LT(ev.at, ev.validity_deadline);  // a warning: still valid
        EXPECT_FALSE(l.lost());
      }
      if (ev.is_final()) {
        last = ev;
        break;
      }
    }
    EXPECT_GE(failed, 1u);
    EXPECT_EQ(last.what, type::lost);
    EXPECT_EQ(last.error, error::quorum_unavailable);
    EXPECT_EQ(l.loss_reason(), error::quorum_unavailable);
    EXPECT_FALSE(last.detail.empty());
    EXPECT_EQ(l.loss_description(), last.detail);
    EXPECT_LT(last.at, last.validity_deadline);  // told before it ran out
    servers[1].resume();
    servers[2].resume();
  });
}

// The key overwritten on two masters, or deleted there: the next extension finds it gone from a
// majority, and the lock is lost as taken (not_owner), at once rather than at the deadline.
TEST_F(events_test, key_overwritten_or_deleted_on_a_majority_is_lost_as_taken) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    for (const bool overwrite : {true, false}) {
      const std::string name = overwrite ? "ev-overwritten" : "ev-deleted";
      auto [ec, l] = co_await c.async_lock(name, 2000ms, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      l.keep_alive();
      for (std::size_t i = 0; i < 2; ++i) {
        if (overwrite) {
          servers[i].command({"SET", name, "someone-else", "PX", "60000"});
        } else {
          servers[i].command({"DEL", name});
        }
      }
      auto [wec, e] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(wec);
      EXPECT_EQ(e.what, type::lost) << name;
      EXPECT_EQ(e.error, error::not_owner) << name;
      EXPECT_EQ(l.loss_reason(), error::not_owner);
      EXPECT_NE(e.detail.find("taken"), std::string::npos) << e.detail;
      EXPECT_LT(e.at, e.validity_deadline);  // decided by the masters' answers, not the clock
      // The other client's key is left alone by our release.
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      (void)uec;
      (void)held;
      if (overwrite) {
        EXPECT_EQ(servers[0].command({"GET", name}), "$12\r\nsomeone-else\r\n");
      }
    }
  });
}

TEST_F(events_test, max_hold_is_the_loss_reason) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    auto [ec, l] = co_await c.async_lock("ev-max-hold", 300ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    redlock::keep_alive_options opts;
    opts.max_hold = 500ms;
    l.keep_alive(opts);
    lock_event e;
    while (!e.is_final()) {
      auto [wec, got] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(wec);
      if (wec) break;
      e = got;
    }
    EXPECT_EQ(e.what, type::lost);
    EXPECT_EQ(e.error, error::extension_limit);
    EXPECT_NE(e.detail.find("max_hold"), std::string::npos) << e.detail;
    EXPECT_NE(l.loss_description().find("max_hold"), std::string::npos);
  });
}

// A consumer that does not keep up: the oldest extensions are dropped (and counted in `missed`),
// memory stays bounded, and the final event is never dropped.
TEST_F(events_test, slow_consumer_misses_counted_extensions_but_never_the_end) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    auto [ec, l] = co_await c.async_lock("ev-slow", 200ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    l.keep_alive();
    auto [wec, first] = co_await l.async_wait_event(use_tuple);
    EXPECT_FALSE(wec);
    EXPECT_EQ(first.extensions, 1u);
    // Nobody reads while more extensions happen than the queue keeps.
    EXPECT_TRUE(co_await until([&l = l] { return l.extensions() >= 20; }, 20s));
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec);
    (void)held;
    std::size_t read = 0, accounted = 0, missed = 0;
    while (true) {
      auto [ec2, e] = co_await l.async_wait_event(use_tuple);
      EXPECT_FALSE(ec2);
      if (ec2) break;
      accounted += 1 + e.missed;
      missed += e.missed;
      if (e.is_final()) {
        EXPECT_EQ(e.what, type::released);
        break;
      }
      ++read;
    }
    EXPECT_LE(read, 15u);  // at most 16 kept, the last of them `released`
    EXPECT_GT(missed, 0u);
    EXPECT_EQ(accounted, l.extensions());  // every extension after the first, and the release
  });
}

// A wait can be cancelled without consuming an event; dropping the handle and closing the client
// complete pending waits with operation_aborted; a handle without a lock says not_locked.
TEST_F(events_test, cancelled_dropped_and_closed_waits_complete_with_operation_aborted) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    {
      redlock::lock empty;
      auto [ec, e] = co_await empty.async_wait_event(use_tuple);
      EXPECT_EQ(ec, error::not_locked);
    }
    auto [ec, l] = co_await c.async_lock("ev-cancel", 2000ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    l.keep_alive();
    asio::cancellation_signal sig;
    std::optional<error_code> got;
    l.async_wait_event(asio::bind_cancellation_slot(sig.slot(), [&](error_code e, lock_event) { got = e; }));
    co_await sleep_for(20ms);
    sig.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return got.has_value(); }));
    EXPECT_EQ(got, asio::error::operation_aborted);
    // The lock is unaffected, and the next extension still comes.
    auto [wec, e] = co_await l.async_wait_event(use_tuple);
    EXPECT_FALSE(wec);
    EXPECT_EQ(e.what, type::extended);
    EXPECT_EQ(e.extensions, 1u);

    // Dropping the handle while a wait is pending.
    std::optional<error_code> dropped;
    {
      auto [ec2, l2] = co_await c.async_lock("ev-drop", 2000ms, use_tuple);
      EXPECT_FALSE(ec2);
      l2.async_wait_event([&](error_code e2, lock_event) { dropped = e2; });
      co_await sleep_for(20ms);
    }
    EXPECT_TRUE(co_await until([&] { return dropped.has_value(); }));
    EXPECT_EQ(dropped, asio::error::operation_aborted);

    // Closing the client.
    std::optional<error_code> closed;
    l.async_wait_event([&](error_code e3, lock_event) { closed = e3; });
    co_await sleep_for(20ms);
    c.close();
    EXPECT_TRUE(co_await until([&] { return closed.has_value(); }));
    EXPECT_EQ(closed, asio::error::operation_aborted);
  });
}

// with_lock throws lock_lost_error with the reason as soon as the work ends, without waiting for
// the release on stopped masters (release_timeout 5 s); the release still happens in the
// background: the keys are gone from every master, the paused ones once resumed, before they
// would have expired.
TEST_F(events_test, with_lock_throws_the_reason_at_once_and_releases_in_the_background) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    const auto release_timeout = 5000ms;
    redlock::client c{ioc.get_executor(), config(release_timeout)};
    // The cap stops the keep-alive at once; the loss is declared 3 s before the 4 s validity ends,
    // so the keys outlive the loss by about 3 s.
    redlock::keep_alive_options opts;
    opts.max_hold = 100ms;
    opts.renew_below = 3500ms;
    opts.notify_margin = 3000ms;
    clock_type::time_point cancelled_at{}, valid_until{};
    std::optional<redlock::lock_lost_error> caught;
    try {
      co_await redlock::with_lock(
          c, "ev-with-lock", 4000ms,
          [&](redlock::lock& l) -> asio::awaitable<void> {
            valid_until = l.validity_deadline();
            servers[1].pause();  // their releases cannot be answered until resumed
            servers[2].pause();
            asio::steady_timer t{co_await asio::this_coro::executor, 30s};
            auto [ec] = co_await t.async_wait(use_tuple);
            EXPECT_EQ(ec, asio::error::operation_aborted);
            cancelled_at = clock_type::now();
          },
          opts);
    } catch (const redlock::lock_lost_error& e) {
      caught = e;
    }
    const auto thrown_at = clock_type::now();
    EXPECT_TRUE(caught.has_value());
    if (caught) {
      EXPECT_EQ(caught->code(), error::lock_lost);  // compatible with callers testing the code
      EXPECT_EQ(caught->reason(), error::extension_limit);
      EXPECT_NE(std::string{caught->what()}.find("max_hold"), std::string::npos) << caught->what();
      // Ordering, not speed: the throw did not wait for the release's deadline.
      EXPECT_LT(thrown_at - cancelled_at, release_timeout);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(thrown_at - cancelled_at).count();
      ::testing::Test::RecordProperty("throw_after_work_end_us", std::to_string(us));
      std::printf("with_lock threw %lld us after the work ended (release_timeout 5 s)\n", static_cast<long long>(us));
    }
    servers[1].resume();
    servers[2].resume();
    const bool gone = co_await until(
        [&] { return !has_key(0, "ev-with-lock") && !has_key(1, "ev-with-lock") && !has_key(2, "ev-with-lock"); });
    EXPECT_TRUE(gone);
    EXPECT_LT(clock_type::now(), valid_until);  // released, not expired
    EXPECT_GE(c.stats().background_releases, 1u);
  });
}

// The release that waits for every master, and what it says about each.
TEST_F(events_test, waitable_release_accounts_for_every_master) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    const auto release_timeout = 600ms;
    redlock::client c{ioc.get_executor(), config(release_timeout)};
    const redlock::unlock_options all{.wait_for_all = true};
    {
      auto [ec, l] = co_await c.async_lock("ev-rel-all", 5000ms, use_tuple);
      EXPECT_FALSE(ec);
      auto [uec, r] = co_await l.async_unlock(all, use_tuple);
      EXPECT_FALSE(uec) << uec.message();
      EXPECT_EQ(r.released, 3u);
      EXPECT_EQ(r.not_held, 0u);
      EXPECT_EQ(r.unreachable, 0u);
      for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(has_key(i, "ev-rel-all"));
    }
    {
      auto [ec, l] = co_await c.async_lock("ev-rel-one-gone", 5000ms, use_tuple);
      EXPECT_FALSE(ec);
      servers[1].command({"DEL", "ev-rel-one-gone"});
      auto [uec, r] = co_await l.async_unlock(all, use_tuple);
      EXPECT_FALSE(uec) << uec.message();
      EXPECT_EQ(r.released, 2u);
      EXPECT_EQ(r.not_held, 1u);
      EXPECT_EQ(r.unreachable, 0u);
      EXPECT_EQ(l.masters()[1].status, redlock::master_status::taken);
    }
    {
      auto [ec, l] = co_await c.async_lock("ev-rel-paused", 5000ms, use_tuple);
      EXPECT_FALSE(ec);
      servers[2].pause();
      const auto start = clock_type::now();
      auto [uec, r] = co_await l.async_unlock(all, use_tuple);
      const auto took = clock_type::now() - start;
      EXPECT_FALSE(uec) << uec.message();
      EXPECT_EQ(r.released, 2u);
      EXPECT_EQ(r.not_held, 0u);
      EXPECT_EQ(r.unreachable, 1u);
      EXPECT_GE(took, release_timeout);  // it waited for the paused master's deadline
      EXPECT_EQ(l.masters()[2].status, redlock::master_status::timeout);
      servers[2].resume();
    }
    {
      // Two paused: no majority, and the counts still say what each master did.
      auto [ec, l] = co_await c.async_lock("ev-rel-two-paused", 5000ms, use_tuple);
      EXPECT_FALSE(ec);
      servers[1].pause();
      servers[2].pause();
      auto [uec, r] = co_await l.async_unlock(all, use_tuple);
      EXPECT_EQ(uec, error::quorum_unavailable);
      EXPECT_EQ(r.released, 1u);
      EXPECT_EQ(r.unreachable, 2u);
      servers[1].resume();
      servers[2].resume();
    }
  });
}

// The quick form is unchanged: it completes at the first majority, not at the paused master's
// deadline.
TEST_F(events_test, quick_release_still_completes_at_the_majority) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    const auto release_timeout = 5000ms;
    redlock::client c{ioc.get_executor(), config(release_timeout)};
    auto [ec, l] = co_await c.async_lock("ev-rel-quick", 5000ms, use_tuple);
    EXPECT_FALSE(ec);
    servers[2].pause();
    const auto start = clock_type::now();
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec);
    EXPECT_EQ(held, 2u);
    EXPECT_LT(clock_type::now() - start, release_timeout);  // did not wait for the paused master
    servers[2].resume();
  });
}

}  // namespace
