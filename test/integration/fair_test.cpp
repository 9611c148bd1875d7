// SPDX-License-Identifier: BSL-1.0
// Fair hand-over (docs/design.md, "Fair hand-over") against real redis-server masters: waiters
// queue on every master and are woken by the release; what the masters hold (queues, expiries,
// keys) is read from the masters themselves, not through the client. The `fair_processes` tests
// run worker processes (test/safety/worker.cpp) that contend, are stopped and are killed for real.
//
// No test asserts speed. The bounds are an order of magnitude apart from what a broken
// hand-over would take (a retry delay of seconds, an entry that never expires), and the unfair
// variants assert the slow path explicitly, so each fast bound is shown to be earned.

#include "checker.hpp"
#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <ostream>
#include <set>
#include <signal.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::use_tuple;
using clock_type = redlock::clock;
using ms = std::chrono::milliseconds;

using redlock::test::bulk;
using redlock::test::nil;
using redlock::test::strings_of;

std::string queue_of(const std::string& key) { return key + std::string{redlock::detail::queue_suffix}; }
std::string expiry_of(const std::string& key) { return key + std::string{redlock::detail::expiry_suffix}; }

double ms_of(clock_type::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// An async_lock started with a callback, so that a test can do other things while it waits.
struct pending_lock {
  bool done = false;
  error_code ec;
  redlock::lock lock;
  clock_type::time_point at{};
  asio::cancellation_signal cancel;
};

std::shared_ptr<pending_lock> start_lock(redlock::client& c, const std::string& resource, ms ttl = 10000ms) {
  auto p = std::make_shared<pending_lock>();
  c.async_lock(resource, ttl, asio::bind_cancellation_slot(p->cancel.slot(), [p](error_code ec, redlock::lock l) {
                 p->ec = ec;
                 p->lock = std::move(l);
                 p->at = clock_type::now();
                 p->done = true;
               }));
  return p;
}

// This file's waits: 10 s at most, checked every 2 ms (hand-overs are observed as they happen).
asio::awaitable<bool> until(const std::function<bool()>& pred, clock_type::duration limit = 10s,
                            clock_type::duration step = 2ms) {
  co_return co_await redlock::test::until(pred, limit, step);
}

// Each master's connection counter `field` (written, replies...) in `c`'s statistics.
std::vector<std::uint64_t> per_master(const redlock::client& c, std::uint64_t redlock::connection_stats::*field) {
  std::vector<std::uint64_t> out;
  for (const auto& m : c.stats().masters) out.push_back(m.*field);
  return out;
}

// Waits until `field` grew by at least `n` on every master since `before` (fails the test if not).
asio::awaitable<void> grown_on_every_master(const redlock::client& c, std::uint64_t redlock::connection_stats::*field,
                                            const std::vector<std::uint64_t>& before, std::uint64_t n,
                                            std::string_view what) {
  const bool grown = co_await until([&] {
    const auto now = per_master(c, field);
    for (std::size_t i = 0; i < now.size(); ++i)
      if (now[i] < before.at(i) + n) return false;
    return true;
  });
  if (!grown) ADD_FAILURE() << "timed out waiting for: " << what;
}

// Five masters and what they keep for a lock: its key, its waiter queue and the queue's expiries.
struct fair_base : ::testing::Test {
  redlock::test::master_set servers{5};

  // Tests' defaults (short connect and request timeouts), fairness on; `base`/`jitter` the retry
  // delay, `max_wait` the longest async_lock.
  redlock::client_config config(ms base = 50ms, ms jitter = 100ms, ms max_wait = 10s) {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.base_delay = base;
    cfg.retry.jitter = jitter;
    cfg.retry.max_wait = max_wait;
    return cfg;
  }

  // The waiters queued for `key` on master `i`, first first.
  std::vector<std::string> queue(std::size_t i, const std::string& key) {
    return strings_of(servers[i].command({"ZRANGE", queue_of(key), "0", "-1"}));
  }

  // How many masters have `member` in `key`'s queue or in its expiries.
  std::size_t listing(const std::string& key, const std::string& member) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      n += servers[i].command({"ZSCORE", queue_of(key), member}) != nil ||
           servers[i].command({"ZSCORE", expiry_of(key), member}) != nil;
    }
    return n;
  }

  // Every key of the fair hand-over (queues and expiries, of any lock) on every master.
  std::vector<std::string> fairness_keys() {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      for (auto& k : strings_of(servers[i].command({"KEYS", "*:redlock-*"})))
        out.push_back(fmt::format("master {}: {}", i + 1, k));
    }
    return out;
  }

  // How many masters hold `key` with `value` ("" = absent).
  std::size_t holding(const std::string& key, const std::string& value) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i)
      n += servers[i].command({"GET", key}) == (value.empty() ? nil : bulk(value));
    return n;
  }

  // Waits until every master holds `key` with `token`. A lock is decided at a majority; the
  // waiters of a test must not start before the rest of the holder's SETs have landed, or one of
  // them could take a master first and then never be listed there.
  asio::awaitable<void> held_everywhere(const std::string& key, const std::string& token) {
    if (!co_await until([&] { return holding(key, token) == servers.size(); }, 2s, 2ms))
      ADD_FAILURE() << key << " is held on " << holding(key, token) << " master(s) only";
  }

  // Waits until one waiter more than `before` is queued for `key`, behind `before`, the same on
  // at least `need` masters (every master by default), and returns its name.
  asio::awaitable<std::string> newcomer(const std::string& key, const std::vector<std::string>& before,
                                        std::size_t need = 0) {
    if (need == 0) need = servers.size();
    std::string name;
    const bool ok = co_await until(
        [&] {
          std::map<std::vector<std::string>, std::size_t> seen;
          for (std::size_t i = 0; i < servers.size(); ++i) {
            auto q = queue(i, key);
            if (q.size() != before.size() + 1 || !std::equal(before.begin(), before.end(), q.begin())) continue;
            if (++seen[q] >= need) {
              name = q.back();
              return true;
            }
          }
          return false;
        },
        10s, 5ms);
    if (!ok) {
      std::string seen;
      for (std::size_t i = 0; i < servers.size(); ++i) seen += fmt::format(" [{}]", fmt::join(queue(i, key), " "));
      ADD_FAILURE() << "no new waiter queued behind " << before.size() << " on " << need << " masters; queues:" << seen;
    }
    co_return name;
  }

  asio::awaitable<void> wait_connected(redlock::client& c) {
    const bool ok = co_await until(
        [&] {
          for (const auto& s : c.masters())
            if (s.state != redlock::connection_state::up) return false;
          return true;
        },
        5s, 5ms);
    if (!ok) ADD_FAILURE() << "client did not connect to every master";
  }
};

// ---- 1. wake-up -----------------------------------------------------------------------------------

// A waiter's retry delay is 3 s. With fairness, the release hands it the lock (or, with hand-over
// off, wakes it, and it takes the lock with a round of its own) within a few round trips; without,
// it waits for its retry tick (the fallback, which always stays).
enum class wake_mode { hand_over, wake_only, off };
struct wake_up : fair_base, ::testing::WithParamInterface<wake_mode> {};

TEST_P(wake_up, the_release_wakes_the_waiter_long_before_its_retry_delay) {
  const bool fair = GetParam() != wake_mode::off;
  const bool hand_over = GetParam() == wake_mode::hand_over;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(3000ms, 0ms, 20s);
    cfg.fairness.enabled = fair;
    cfg.fairness.hand_over = hand_over;
    redlock::client a{ioc.get_executor(), cfg};
    redlock::client b{ioc.get_executor(), cfg};
    co_await wait_connected(a);
    co_await wait_connected(b);
    auto [ea, la] = co_await a.async_lock("wake", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    co_await held_everywhere("wake", la.token());

    const auto asked = clock_type::now();
    const auto replies = per_master(b, &redlock::connection_stats::replies);
    auto pb = start_lock(b, "wake");
    if (fair) {
      co_await newcomer("wake", {});  // b's first round failed; it queued on every master
      EXPECT_EQ(b.stats().locks_queued, 1u);
    } else {
      // b's first round failed (every master answered); it sleeps 3 s.
      co_await grown_on_every_master(b, &redlock::connection_stats::replies, replies, 1, "b's first round");
      EXPECT_TRUE(fairness_keys().empty());
    }
    EXPECT_FALSE(pb->done);

    const auto released = clock_type::now();
    auto [eu, held] = co_await la.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_TRUE(co_await until([&] { return pb->done; }, 15s));
    EXPECT_FALSE(pb->ec) << pb->ec.message();
    const auto waited = pb->at - released;
    std::printf(
        "fairness %s: granted %.1f ms after the release (%.1f ms after asking), attempts %zu, wake-ups %llu, "
        "hand-overs %llu\n",
        fair ? (hand_over ? "on" : "on, no hand-over") : "off", ms_of(waited), ms_of(pb->at - asked),
        pb->lock.attempts(), static_cast<unsigned long long>(b.stats().lock_wakeups),
        static_cast<unsigned long long>(b.stats().lock_handovers));
    if (hand_over) {
      EXPECT_LT(waited, 1s);  // a round trip; its retry tick was 3 s after its queueing round
      EXPECT_EQ(b.stats().lock_handovers, 1u);
      EXPECT_EQ(b.stats().lock_wakeups, 0u);
      EXPECT_EQ(pb->lock.attempts(), 2u);  // plain, queueing: the release handed it the lock
      // Each master's key is b's, with its own ttl and the token of its queueing round.
      EXPECT_EQ(holding("wake", pb->lock.token()), 5u);
    } else if (fair) {
      EXPECT_LT(waited, 1s);  // a few round trips; its retry tick was 3 s after its queueing round
      EXPECT_GE(b.stats().lock_wakeups, 1u);
      EXPECT_EQ(b.stats().lock_handovers, 0u);
      EXPECT_EQ(pb->lock.attempts(), 3u);  // plain, queueing, woken
    } else {
      // Only the retry tick: never before 3 s after its first round began.
      EXPECT_GE(pb->at - asked, 3s);
      EXPECT_EQ(b.stats().lock_wakeups, 0u);
      EXPECT_EQ(pb->lock.attempts(), 2u);
    }
    co_await pb->lock.async_unlock(use_tuple);
  });
}

std::string wake_up_name(const ::testing::TestParamInfo<wake_mode>& p) {
  switch (p.param) {
    case wake_mode::hand_over:
      return "fairness_on";
    case wake_mode::wake_only:
      return "fairness_on_without_hand_over";
    case wake_mode::off:
      break;
  }
  return "fairness_off_polls";
}
INSTANTIATE_TEST_SUITE_P(fair, wake_up, ::testing::Values(wake_mode::hand_over, wake_mode::wake_only, wake_mode::off),
                         wake_up_name);

// ---- 2. no barging, first come first served --------------------------------------------------------

using fair = fair_base;

// A locks and unlocks in a tight loop; B waits, 5 ms (one way) farther from the masters than A. A's
// unlock finds B queued (the release answers 2), so A's next async_lock queues from its first
// round, behind B: B has the lock at A's very next hand-over, never after A re-acquired it. If
// A's next first round were a plain SET NX, it would reach the masters long before B's woken
// round and take the lock every time; without fairness at all A re-acquires within a round trip
// of each release, long before B's next poll. Five times over.
TEST_F(fair, the_releaser_does_not_barge_ahead_of_a_queued_waiter) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(50ms, 100ms, 10s);
    auto far = cfg;
    std::vector<std::unique_ptr<redlock::test::fault_proxy>> proxies;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      proxies.push_back(std::make_unique<redlock::test::fault_proxy>(servers[i].host(), servers[i].port()));
      proxies.back()->set_latency(5ms);
      far.masters[i].host = proxies.back()->host();
      far.masters[i].port = proxies.back()->port();
    }
    redlock::client a{ioc.get_executor(), cfg};
    redlock::client b{ioc.get_executor(), far};
    co_await wait_connected(a);
    co_await wait_connected(b);
    auto [ea, first] = co_await a.async_lock("loop", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    co_await held_everywhere("loop", first.token());
    redlock::lock held = std::move(first);
    std::vector<int> barged;  // per try: A's grants while B waited
    for (int round = 0; round < 5; ++round) {
      // B: waits, holds it 20 ms, releases.
      bool b_granted = false, b_done = false;
      error_code b_ec;
      asio::co_spawn(
          ioc,
          [&]() -> asio::awaitable<void> {
            auto [ec, l] = co_await b.async_lock("loop", 10s, use_tuple);
            b_ec = ec;
            b_granted = true;
            co_await sleep_for(20ms);
            if (l.owns_lock()) co_await l.async_unlock(use_tuple);
            b_done = true;
          },
          asio::detached);
      // A majority: A's lock came from a hand-over and may lack a master (its round got there
      // before B's release); B is granted there each time, and so not listed.
      co_await newcomer("loop", {}, 3);

      // A's loop: hold 20 ms, unlock, lock again at once; counts A's grants while B waits.
      int a_grants_while_b_waits = 0, a_cycles = 0;
      while (!b_granted && a_cycles < 40) {
        co_await sleep_for(20ms);
        co_await held.async_unlock(use_tuple);
        auto [ec, l] = co_await a.async_lock("loop", 10s, use_tuple);
        ++a_cycles;
        if (ec) {
          ADD_FAILURE() << "A: " << ec.message();
          break;
        }
        if (!b_granted) ++a_grants_while_b_waits;
        held = std::move(l);
      }
      EXPECT_TRUE(co_await until([&] { return b_done; }, 15s));
      EXPECT_FALSE(b_ec) << b_ec.message();
      barged.push_back(a_grants_while_b_waits);
    }
    std::printf("A's grants while B waited, in 5 tries: %s (A queued %llu times)\n",
                fmt::format("{}", fmt::join(barged, " ")).c_str(),
                static_cast<unsigned long long>(a.stats().locks_queued));
    EXPECT_EQ(barged, std::vector<int>(5, 0));
    EXPECT_GE(a.stats().locks_queued, 5u);  // each of A's locks after a hand-over queued
    if (held.owns_lock()) co_await held.async_unlock(use_tuple);
  });
}

// Three waiters queue in a known order (each after the previous one is listed on every master)
// and get the lock in that order. Their retry delays are chosen against that order: the last
// polls every 20 ms, the first only every 2 s, so polling alone would hand the lock to the last
// one. When the holder releases, the release wakes the first waiter (and each waiter's release
// the next): the hand-over takes round trips, not retry delays. When the holder crashed instead
// (its key expires, nobody is woken), the queue still decides: the last waiter's many polls are
// refused until the first one's single poll 2 s later has taken the lock.
struct fifo : fair_base, ::testing::WithParamInterface<bool> {};

TEST_P(fifo, queued_waiters_get_the_lock_in_their_order) {
  const bool holder_crashes = GetParam();
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client h{ioc.get_executor(), config()};
    redlock::client w1{ioc.get_executor(), config(2000ms, 0ms, 20s)};
    redlock::client w2{ioc.get_executor(), config(300ms, 0ms, 20s)};
    redlock::client w3{ioc.get_executor(), config(20ms, 0ms, 20s)};
    for (auto* c : {&h, &w1, &w2, &w3}) co_await wait_connected(*c);
    redlock::lock lh;
    if (holder_crashes) {  // a holder's key that nobody releases: it expires in 1.2 s
      for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"SET", "fifo", "crashed", "PX", "1200"});
    } else {
      auto [eh, l] = co_await h.async_lock("fifo", 10s, use_tuple);
      EXPECT_FALSE(eh) << eh.message();
      co_await held_everywhere("fifo", l.token());
      lh = std::move(l);
    }

    std::vector<int> order;
    int done = 0;
    auto waiter = [&](redlock::client& c, int id) -> asio::awaitable<void> {
      auto [ec, l] = co_await c.async_lock("fifo", 10s, use_tuple);
      EXPECT_FALSE(ec) << "waiter " << id << ": " << ec.message();
      order.push_back(id);
      co_await sleep_for(30ms);
      co_await l.async_unlock(use_tuple);
      ++done;
    };
    std::vector<std::string> queued;
    asio::co_spawn(ioc, waiter(w1, 1), asio::detached);
    queued.push_back(co_await newcomer("fifo", queued));
    asio::co_spawn(ioc, waiter(w2, 2), asio::detached);
    queued.push_back(co_await newcomer("fifo", queued));
    asio::co_spawn(ioc, waiter(w3, 3), asio::detached);
    queued.push_back(co_await newcomer("fifo", queued));
    EXPECT_EQ(holding("fifo", holder_crashes ? "crashed" : lh.token()), 5u) << "the holder let go too early";

    const auto released = clock_type::now();
    if (!holder_crashes) co_await lh.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return done == 3; }, 15s));
    const auto took = clock_type::now() - released;
    std::printf("order %s in %.1f ms; wake-ups %llu %llu %llu\n", fmt::format("{}", fmt::join(order, " ")).c_str(),
                ms_of(took), static_cast<unsigned long long>(w1.stats().lock_wakeups),
                static_cast<unsigned long long>(w2.stats().lock_wakeups),
                static_cast<unsigned long long>(w3.stats().lock_wakeups));
    EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
    if (holder_crashes) {
      EXPECT_EQ(w1.stats().lock_wakeups, 0u);  // nobody released: it polled
      EXPECT_LT(took, 2000ms + 1500ms);
    } else {
      // Handed over by the releases: well inside the first waiter's single 2 s retry delay.
      EXPECT_LT(took, 1500ms);
      EXPECT_GE(w1.stats().lock_wakeups + w1.stats().lock_handovers, 1u);
    }
    EXPECT_TRUE(co_await until([&] { return fairness_keys().empty(); }, 2s))
        << fmt::format("{}", fmt::join(fairness_keys(), ", "));
  });
}

std::string fifo_name(const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "the_holder_crashes" : "the_holder_releases";
}
INSTANTIATE_TEST_SUITE_P(fair, fifo, ::testing::Values(false, true), fifo_name);

// Fenced locks queue and are handed over too, and each hand-over grants the next fence: the
// release moves each master's counter one up with the key, so the waiters' masters agree on
// their fences without a confirmation round. Each waiter gets the lock in its order, with a fence
// exactly one above its predecessor's. A release that handed the key over without its fence
// would give the waiter its predecessor's fence; one that did not hand over would leave the
// first waiter to its 2 s retry delay.
TEST_F(fair, fenced_waiters_are_handed_the_lock_in_their_order_with_the_next_fence) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    const std::string name = "fenced-fifo", counter = name + std::string{redlock::detail::fence_suffix};
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"SET", counter, "100"});
    redlock::lock_options fenced;
    fenced.fence = true;
    redlock::client h{ioc.get_executor(), config()};
    redlock::client w1{ioc.get_executor(), config(2000ms, 0ms, 20s)};
    redlock::client w2{ioc.get_executor(), config(300ms, 0ms, 20s)};
    redlock::client w3{ioc.get_executor(), config(20ms, 0ms, 20s)};
    for (auto* c : {&h, &w1, &w2, &w3}) co_await wait_connected(*c);
    auto [eh, lh] = co_await h.async_lock(name, 10s, fenced, use_tuple);
    EXPECT_FALSE(eh) << eh.message();
    EXPECT_EQ(lh.fence(), 101u);
    co_await held_everywhere(name, lh.token());

    std::vector<int> order;
    std::vector<std::uint64_t> fences;
    int done = 0;
    auto waiter = [&](redlock::client& c, int id) -> asio::awaitable<void> {
      auto [ec, l] = co_await c.async_lock(name, 10s, fenced, use_tuple);
      EXPECT_FALSE(ec) << "waiter " << id << ": " << ec.message();
      order.push_back(id);
      fences.push_back(l.fence());
      co_await sleep_for(30ms);
      co_await l.async_unlock(use_tuple);
      ++done;
    };
    std::vector<std::string> queued;
    asio::co_spawn(ioc, waiter(w1, 1), asio::detached);
    queued.push_back(co_await newcomer(name, queued));
    asio::co_spawn(ioc, waiter(w2, 2), asio::detached);
    queued.push_back(co_await newcomer(name, queued));
    asio::co_spawn(ioc, waiter(w3, 3), asio::detached);
    queued.push_back(co_await newcomer(name, queued));

    const auto released = clock_type::now();
    co_await lh.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return done == 3; }, 15s));
    const auto took = clock_type::now() - released;
    const auto handovers = w1.stats().lock_handovers + w2.stats().lock_handovers + w3.stats().lock_handovers;
    const auto confirmations =
        w1.stats().fence_confirmations + w2.stats().fence_confirmations + w3.stats().fence_confirmations;
    std::printf("fenced order %s, fences %s, in %.1f ms; hand-overs %llu, confirmations %llu\n",
                fmt::format("{}", fmt::join(order, " ")).c_str(), fmt::format("{}", fmt::join(fences, " ")).c_str(),
                ms_of(took), static_cast<unsigned long long>(handovers),
                static_cast<unsigned long long>(confirmations));
    EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(fences, (std::vector<std::uint64_t>{102, 103, 104}));
    EXPECT_EQ(handovers, 3u) << "each waiter is handed the lock by its predecessor's release";
    EXPECT_EQ(confirmations, 0u) << "the hand-overs moved every counter alike";
    EXPECT_LT(took, 1500ms);  // well inside the first waiter's single 2 s retry delay
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(servers[i].command({"GET", counter}), bulk("104")) << "master " << i + 1;
    }
    // Nothing of the queues is left (the counter stays: it has no ttl, by design).
    EXPECT_TRUE(co_await until(
        [&] {
          for (std::size_t i = 0; i < servers.size(); ++i) {
            if (servers[i].command({"EXISTS", queue_of(name), expiry_of(name)}) != ":0\r\n") return false;
          }
          return true;
        },
        2s));
  });
}

// ---- 5. interoperability with plain Redlock clients ------------------------------------------------

// Another library's client on the same resource name: plain `SET key token NX PX ttl` on each
// master, released by its own check-the-token script, which publishes nothing.
struct plain_client {
  fair_base& bed;
  std::string token;
  std::size_t lock(const std::string& key, ms ttl = 10000ms) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < bed.servers.size(); ++i)
      ok += bed.servers[i].command({"SET", key, token, "NX", "PX", std::to_string(ttl.count())}) == "+OK\r\n";
    return ok;
  }
  std::size_t unlock(const std::string& key) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < bed.servers.size(); ++i) {
      n += bed.servers[i].command({"EVAL",
                                   "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) "
                                   "else return 0 end",
                                   "1", key, token}) == ":1\r\n";
    }
    return n;
  }
};

// Masters that order the waiters differently (here: rewritten by hand so that each of three
// waiters is first on at most two of five masters, a cyclic split in which nobody can win a
// majority if the orders stayed) must not livelock: every waiter sends the highest ticket it was
// given with each attempt, which rewrites its place alike everywhere, so the orders agree again
// after one poll (checked while the lock is still held) and all three get the lock. With each
// master's own order kept (a client that sends no ticket), the orders stay split until a release
// (shown by that mutation: the agreement check fails).
TEST_F(fair, waiters_ordered_differently_by_the_masters_converge_and_all_get_the_lock) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    const std::string key = "scrambled";
    auto cfg = config(50ms, 100ms, 5s);
    redlock::client h{ioc.get_executor(), cfg};
    std::vector<std::unique_ptr<redlock::client>> ws;
    for (int k = 0; k < 3; ++k) ws.push_back(std::make_unique<redlock::client>(ioc.get_executor(), cfg));
    co_await wait_connected(h);
    for (auto& w : ws) co_await wait_connected(*w);
    auto [eh, lh] = co_await h.async_lock(key, 10s, use_tuple);
    EXPECT_FALSE(eh) << eh.message();
    std::vector<std::shared_ptr<pending_lock>> ps;
    for (auto& w : ws) ps.push_back(start_lock(*w, key));
    EXPECT_TRUE(co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i) {
        if (queue(i, key).size() != 3) return false;
      }
      return true;
    }));
    // The same three names everywhere; rotate their order from master to master.
    auto names = queue(0, key);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names.size(), 3U);
    if (names.size() != 3) co_return;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      for (std::size_t k = 0; k < 3; ++k) {
        const auto score = std::to_string(1 + (k + 3 - i % 3) % 3);
        servers[i].command({"ZADD", queue_of(key), score, names[k]});
      }
    }
    std::set<std::string> heads;
    for (std::size_t i = 0; i < 3; ++i) heads.insert(queue(i, key).front());
    EXPECT_EQ(heads.size(), 3U) << "the rewrite did not split the heads";
    // While the lock is still held, the waiters' polls alone make the five orders agree again.
    EXPECT_TRUE(co_await until(
        [&] {
          const auto first = queue(0, key);
          for (std::size_t i = 1; i < servers.size(); ++i) {
            if (queue(i, key) != first) return false;
          }
          return first.size() == 3;
        },
        2s))
        << "the masters still order the waiters differently";
    co_await lh.async_unlock(use_tuple);
    // Each winner releases at once so that the next can win too.
    std::size_t granted = 0;
    const auto end = clock_type::now() + 4s;
    while (granted < 3 && clock_type::now() < end) {
      for (auto& p : ps) {
        if (p->done && p->lock.owns_lock()) {
          ++granted;
          co_await p->lock.async_unlock(use_tuple);
        }
      }
      co_await sleep_for(2ms);
    }
    for (std::size_t k = 0; k < ps.size(); ++k) {
      EXPECT_TRUE(ps[k]->done) << "waiter " << k << " still waiting";
      EXPECT_FALSE(ps[k]->ec) << "waiter " << k << ": " << ps[k]->ec.message();
    }
    EXPECT_EQ(granted, 3U);
  });
}

TEST_F(fair, a_plain_redlock_client_and_ours_exclude_each_other_and_its_release_lets_ours_in) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    plain_client other{*this, "other-library-token"};
    redlock::client c{ioc.get_executor(), config(50ms, 100ms, 600ms)};
    co_await wait_connected(c);

    // The other client holds it: ours is refused, with and without retries, and touches nothing.
    EXPECT_EQ(other.lock("shared"), 5u);
    auto [e1, l1] = co_await c.async_try_lock("shared", 10s, use_tuple);
    EXPECT_EQ(e1, error::not_acquired);
    auto [e2, l2] = co_await c.async_lock("shared", 10s, use_tuple);  // queues, retries for 600 ms
    EXPECT_EQ(e2, error::not_acquired);
    EXPECT_GE(c.stats().locks_queued, 1u);
    EXPECT_EQ(holding("shared", other.token), 5u);
    EXPECT_EQ(other.unlock("shared"), 5u);

    // Ours holds it: the other client's SET NX fails everywhere.
    auto [e3, l3] = co_await c.async_lock("shared", 10s, use_tuple);
    EXPECT_FALSE(e3) << e3.message();
    co_await held_everywhere("shared", l3.token());
    EXPECT_EQ(other.lock("shared"), 0u);
    co_await l3.async_unlock(use_tuple);

    // The other client holds it and ours queues; its release publishes nothing, and ours still
    // gets in at its next poll (retry delay 500 ms): liveness without the message.
    redlock::client w{ioc.get_executor(), config(500ms, 0ms, 20s)};
    co_await wait_connected(w);
    EXPECT_EQ(other.lock("shared"), 5u);
    auto pw = start_lock(w, "shared");
    co_await newcomer("shared", {});
    const auto released = clock_type::now();
    EXPECT_EQ(other.unlock("shared"), 5u);
    EXPECT_TRUE(co_await until([&] { return pw->done; }, 10s));
    EXPECT_FALSE(pw->ec) << pw->ec.message();
    std::printf("granted %.1f ms after the plain release\n", ms_of(pw->at - released));
    EXPECT_LT(pw->at - released, 500ms + 1500ms);
    EXPECT_EQ(w.stats().lock_wakeups, 0u);  // nobody said anything: it polled
    co_await held_everywhere("shared", pw->lock.token());
    co_await pw->lock.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return fairness_keys().empty(); }, 2s))
        << fmt::format("{}", fmt::join(fairness_keys(), ", "));
  });
}

// ---- 6. nothing left behind --------------------------------------------------------------------------

// Entries live 10 s here, so whatever disappears within a second was removed by the client (the
// waiter leaving its queues, or its grant), not by expiry.
TEST_F(fair, waiters_that_time_out_are_cancelled_or_are_granted_leave_no_queue_behind) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(50ms, 100ms, 20s);
    cfg.fairness.entry_timeout = 10s;
    redlock::client h{ioc.get_executor(), cfg};
    auto short_cfg = cfg;
    short_cfg.retry.max_wait = 500ms;
    redlock::client timing_out{ioc.get_executor(), short_cfg};
    redlock::client cancelled{ioc.get_executor(), cfg};
    redlock::client granted{ioc.get_executor(), cfg};
    for (auto* c : {&h, &timing_out, &cancelled, &granted}) co_await wait_connected(*c);
    auto [eh, lh] = co_await h.async_lock("tidy", 10s, use_tuple);
    EXPECT_FALSE(eh) << eh.message();
    co_await held_everywhere("tidy", lh.token());

    // Gives up after 500 ms: gone from every queue when it returns.
    auto pt = start_lock(timing_out, "tidy");
    const auto t_name = co_await newcomer("tidy", {});
    EXPECT_TRUE(co_await until([&] { return pt->done; }, 5s));
    EXPECT_EQ(pt->ec, error::not_acquired);
    EXPECT_TRUE(co_await until([&] { return listing("tidy", t_name) == 0; }, 1s))
        << "the timed-out waiter is still listed on " << listing("tidy", t_name) << " master(s)";

    // Cancelled while queued: gone at once, not after its 10 s.
    auto pc = start_lock(cancelled, "tidy");
    const auto c_name = co_await newcomer("tidy", {});
    EXPECT_EQ(listing("tidy", c_name), 5u);
    const auto cancelled_at = clock_type::now();
    pc->cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return pc->done; }, 2s));
    EXPECT_EQ(pc->ec, asio::error::operation_aborted);
    EXPECT_TRUE(co_await until([&] { return listing("tidy", c_name) == 0; }, 1s))
        << "the cancelled waiter is still listed on " << listing("tidy", c_name) << " master(s)";
    std::printf("cancelled waiter gone from every master %.1f ms after the cancellation\n",
                ms_of(clock_type::now() - cancelled_at));

    // Granted: its grant takes it off the masters that granted, its end off the others.
    auto pg = start_lock(granted, "tidy");
    co_await newcomer("tidy", {});
    co_await lh.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return pg->done; }, 5s));
    EXPECT_FALSE(pg->ec) << pg->ec.message();
    co_await pg->lock.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return fairness_keys().empty(); }, 1s))
        << fmt::format("left behind: {}", fmt::join(fairness_keys(), ", "));
    EXPECT_TRUE(co_await until([&] { return holding("tidy", "") == 5; }, 1s));
  });
}

// A waiter's leaving (the dequeue) that a stalled connection swallowed is sent again once the
// master is reachable, as a lost release is: otherwise its entry there, and a key that master
// may have handed it, would stay until they expire (30 s and the key's ttl).
TEST_F(fair, a_dequeue_lost_with_a_stalled_connection_is_sent_again_on_the_new_one) {
  redlock::test::fault_proxy proxy{servers[0].host(), servers[0].port()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(50ms, 100ms, 20s);
    cfg.fairness.entry_timeout = 30s;
    redlock::client h{ioc.get_executor(), cfg};
    auto wcfg = cfg;
    wcfg.masters[0].host = proxy.host();
    wcfg.masters[0].port = proxy.port();
    wcfg.masters[0].stall_grace = 200ms;
    wcfg.request_timeout = 100ms;
    wcfg.release_timeout = 200ms;
    redlock::client w{ioc.get_executor(), wcfg};
    co_await wait_connected(h);
    co_await wait_connected(w);
    auto [eh, lh] = co_await h.async_lock("lost-dequeue", 10s, use_tuple);
    EXPECT_FALSE(eh) << eh.message();
    co_await held_everywhere("lost-dequeue", lh.token());
    auto pw = start_lock(w, "lost-dequeue");
    const auto name = co_await newcomer("lost-dequeue", {});
    proxy.set_blackhole(true);  // master 0 goes silent for the waiter: its leaving is written, never run
    pw->cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return pw->done; }, 2s));
    EXPECT_EQ(pw->ec, asio::error::operation_aborted);
    EXPECT_TRUE(co_await until([&] { return listing("lost-dequeue", name) == 1; }, 1s))
        << "listed on " << listing("lost-dequeue", name) << " master(s), not only on the silent one";
    EXPECT_TRUE(co_await until([&] { return w.stats().masters[0].stalls >= 1; })) << "the stall was not detected";
    EXPECT_NE(servers[0].command({"ZSCORE", queue_of("lost-dequeue"), name}), nil)
        << "the dequeue must not have arrived";
    const auto resent = w.stats().releases_resent;
    proxy.set_blackhole(false);
    EXPECT_TRUE(co_await until([&] { return listing("lost-dequeue", name) == 0; }, 3s))
        << "the lost dequeue was not sent again on the new connection";
    EXPECT_GT(w.stats().releases_resent, resent);
    co_await lh.async_unlock(use_tuple);
  });
}

// A master that was down for the whole of a waiter's acquisition holds nothing of it: the
// dequeue refused there is not kept for its next connection (where it would take a place in
// the ledger of releases in doubt, for nothing, each time a waiter ends during an outage).
TEST_F(fair, no_dequeue_is_kept_for_a_master_the_waiter_never_reached) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(50ms, 100ms, 20s);
    cfg.fairness.entry_timeout = 30s;
    redlock::client h{ioc.get_executor(), cfg};
    redlock::client w{ioc.get_executor(), cfg};
    co_await wait_connected(h);
    co_await wait_connected(w);
    auto [eh, lh] = co_await h.async_lock("unreached", 10s, use_tuple);
    EXPECT_FALSE(eh) << eh.message();
    co_await held_everywhere("unreached", lh.token());
    servers[4].kill();
    EXPECT_TRUE(co_await until([&] { return w.masters()[4].state != redlock::connection_state::up; }, 2s));
    auto pw = start_lock(w, "unreached");
    // Queued on the four masters that are up (the dead one is not asked: it has no server).
    const auto queued = [&] {
      std::size_t n = 0;
      for (std::size_t i = 0; i < 4; ++i) n += queue(i, "unreached").size();
      return n;
    };
    EXPECT_TRUE(co_await until([&] { return queued() == 4; }));
    pw->cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return pw->done; }, 2s));
    EXPECT_TRUE(co_await until([&] { return queued() == 0; }, 1s));
    const auto resent = w.stats().releases_resent;
    servers[4].start();
    co_await wait_connected(w);
    co_await sleep_for(200ms);  // past the reconnection's re-sends
    EXPECT_EQ(w.stats().releases_resent, resent) << "a dequeue was kept for a master the waiter never reached";
    co_await lh.async_unlock(use_tuple);
  });
}

// A waiter whose client is closed while it is queued completes with operation_aborted. Its
// leaving (ZREM) is submitted on each connection just before close() closes them, which writes
// what was queued first (see a_waiter_closed_mid_round_leaves_its_queues_at_once below); should a
// master miss it anyway, `entry_timeout` bounds how long the entry stays: 1.5 s.
asio::awaitable<void> close_a_queued_waiter(fair_base& bed, asio::io_context& ioc, const std::string& key,
                                            std::string& name) {
  auto cfg = bed.config(50ms, 100ms, 20s);
  cfg.fairness.entry_timeout = 1500ms;
  redlock::client h{ioc.get_executor(), cfg};
  auto w = std::make_unique<redlock::client>(ioc.get_executor(), cfg);
  co_await bed.wait_connected(h);
  co_await bed.wait_connected(*w);
  auto [eh, lh] = co_await h.async_lock(key, 10s, use_tuple);
  EXPECT_FALSE(eh) << eh.message();
  co_await bed.held_everywhere(key, lh.token());
  auto pw = start_lock(*w, key);
  name = co_await bed.newcomer(key, {});
  w->close();
  EXPECT_TRUE(co_await until([&] { return pw->done; }, 2s));
  EXPECT_EQ(pw->ec, asio::error::operation_aborted);
  co_await lh.async_unlock(use_tuple);
}

TEST_F(fair, a_waiter_whose_client_closes_is_dropped_within_its_entry_timeout) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    std::string name;
    co_await close_a_queued_waiter(*this, ioc, "closing", name);
    const auto closed = clock_type::now();
    EXPECT_TRUE(co_await until([&] { return listing("closing", name) == 0; }, 1500ms + 1s))
        << "still listed on " << listing("closing", name) << " master(s)";
    std::printf("the closed client's waiter was gone from every master %.1f ms after close()\n",
                ms_of(clock_type::now() - closed));
    EXPECT_TRUE(co_await until([&] { return fairness_keys().empty(); }, 2s))
        << fmt::format("left behind: {}", fmt::join(fairness_keys(), ", "));
  });
}

// A waiter whose round is in flight when it ends (the masters are paused, so the round surely
// is): the round runs on each master before anything sent after it on that connection, so the
// waiter's leaving (ZREM) comes after the round that renews its entry, never before it. Ended by
// cancellation (`close` false) or by closing its client.
asio::awaitable<void> end_a_waiter_mid_round(fair_base& bed, asio::io_context& ioc, bool close) {
  auto cfg = bed.config(50ms, 100ms, 20s);
  cfg.fairness.entry_timeout = 10s;
  cfg.request_timeout = 5s;  // the round stays in flight while the masters are paused
  redlock::client h{ioc.get_executor(), cfg};
  redlock::client w{ioc.get_executor(), cfg};
  co_await bed.wait_connected(h);
  co_await bed.wait_connected(w);
  auto [eh, lh] = co_await h.async_lock("mid-round", 10s, use_tuple);
  EXPECT_FALSE(eh) << eh.message();
  co_await bed.held_everywhere("mid-round", lh.token());
  auto pw = start_lock(w, "mid-round");
  const auto name = co_await bed.newcomer("mid-round", {});
  const auto attempts = w.stats().lock_attempts;
  const auto written = per_master(w, &redlock::connection_stats::written);
  for (std::size_t i = 0; i < bed.servers.size(); ++i) bed.servers[i].pause();
  // Past its longest retry delay: its next round is in flight, written to every master.
  EXPECT_TRUE(co_await until([&] { return w.stats().lock_attempts > attempts; }, 1s));
  co_await grown_on_every_master(w, &redlock::connection_stats::written, written, 1, "the next round written");
  if (close) {
    w.close();
  } else {
    pw->cancel.emit(asio::cancellation_type::terminal);
  }
  EXPECT_TRUE(co_await until([&] { return pw->done; }, 2s));
  EXPECT_EQ(pw->ec, asio::error::operation_aborted);
  for (std::size_t i = 0; i < bed.servers.size(); ++i) bed.servers[i].resume();
  EXPECT_TRUE(co_await until([&] { return bed.listing("mid-round", name) == 0; }, 500ms))
      << "the waiter is still listed on " << bed.listing("mid-round", name) << " master(s)";
  co_await lh.async_unlock(use_tuple);
}

TEST_F(fair, a_waiter_cancelled_mid_round_leaves_its_queues_after_the_round) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> { co_await end_a_waiter_mid_round(*this, ioc, false); });
}

// close() cancels the operations in progress, as cancellation does (the test above): the waiter
// must leave the queues at once, not after its entry expires (10 s here). The cancellation
// submits two requests per master: the in-flight round's release, then leave_queues()'s ZREMs.
// With requests in flight the first goes out through async_write, and the ZREMs queue behind it;
// until the fix (master_link::close_after_writes) closing the connection aborted them unsent. The
// paused masters make the round surely in flight; without them it happened by chance (2 of about
// 200 closes of a queued waiter).
TEST_F(fair, a_waiter_closed_mid_round_leaves_its_queues_at_once) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> { co_await end_a_waiter_mid_round(*this, ioc, true); });
}

// The same cause without fairness: two acquisitions in flight when the client closes. Each one's
// cancellation releases its round; before the fix only the first release submitted on a
// connection was written, the second was aborted by the close, and its keys stayed on every
// master for their whole ttl (10 s), held by nobody, although close() promises to release what
// operations in progress acquired.
TEST_F(fair, closing_a_client_with_two_rounds_in_flight_releases_both) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config(50ms, 100ms, 20s);
    cfg.fairness.enabled = false;
    cfg.request_timeout = 5s;  // the rounds stay in flight while the masters are paused
    redlock::client w{ioc.get_executor(), cfg};
    co_await wait_connected(w);
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].pause();
    const auto written = per_master(w, &redlock::connection_stats::written);
    auto p1 = start_lock(w, "first");
    auto p2 = start_lock(w, "second");
    // Both rounds are in flight: written to every master.
    co_await grown_on_every_master(w, &redlock::connection_stats::written, written, 2, "both rounds written");
    w.close();
    EXPECT_TRUE(co_await until([&] { return p1->done && p2->done; }, 2s));
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].resume();  // the SETs run now, then the releases
    EXPECT_TRUE(co_await until([&] { return holding("first", "") == 5 && holding("second", "") == 5; }, 500ms))
        << "\"first\" absent on " << holding("first", "") << " master(s), \"second\" on " << holding("second", "");
  });
}

// ---- 7. RESP2 masters --------------------------------------------------------------------------------

// Masters without HELLO (as a Redis older than 6 answers) speak RESP2: a subscription would turn
// the shared connection into a subscriber, so there is none, and no wake-up from them. Their
// queues still order the waiters; a waiter then polls. Two such masters of five leave the three
// others' messages, a majority: wake-ups still work.
struct resp2 : ::testing::Test, ::testing::WithParamInterface<std::size_t> {};

TEST_P(resp2, waiters_still_get_the_lock_on_resp2_masters) {
  const std::size_t legacy_count = GetParam();
  redlock::test::redis_options legacy_options;
  legacy_options.extra_args = {"--rename-command", "HELLO", ""};
  redlock::test::master_set modern{5 - legacy_count};
  redlock::test::master_set legacy{legacy_count, legacy_options};
  auto cfg = redlock::test::client_config_for(modern);
  auto legacy_cfg = redlock::test::client_config_for(legacy);
  cfg.masters.insert(cfg.masters.end(), legacy_cfg.masters.begin(), legacy_cfg.masters.end());
  cfg.retry = {.max_attempts = 0, .max_wait = 20s, .base_delay = 2000ms, .jitter = 0ms};
  std::mutex m;
  std::vector<std::string> log;
  cfg.logging.level = redlock::log_level::info;
  cfg.logging.sink = [&](redlock::log_level, std::string_view msg) {
    std::lock_guard g{m};
    log.emplace_back(msg);
  };
  auto all_nodes = [&](const std::function<void(redlock::test::redis_node&)>& f) {
    for (std::size_t i = 0; i < modern.size(); ++i) f(modern[i]);
    for (std::size_t i = 0; i < legacy.size(); ++i) f(legacy[i]);
  };
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client a{ioc.get_executor(), cfg};
    redlock::client b{ioc.get_executor(), cfg};
    auto count_nodes = [&](const std::vector<std::string>& cmd, const std::string& want) {
      std::size_t n = 0;
      all_nodes([&](redlock::test::redis_node& node) { n += node.command({cmd[0], cmd[1]}) == want; });
      return n;
    };
    for (auto* c : {&a, &b}) {
      EXPECT_TRUE(co_await until([&] {
        for (const auto& st : c->masters())
          if (st.state != redlock::connection_state::up) return false;
        return true;
      }));
    }
    auto [ea, la] = co_await a.async_lock("old", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    EXPECT_TRUE(co_await until([&, &la = la] { return count_nodes({"GET", "old"}, bulk(la.token())) == 5; }, 2s));
    const auto asked = clock_type::now();
    auto pb = start_lock(b, "old");
    // Queued on every master, RESP2 ones included.
    EXPECT_TRUE(co_await until([&] {
      std::size_t n = 0;
      all_nodes([&](redlock::test::redis_node& node) { n += node.command({"ZCARD", queue_of("old")}) == ":1\r\n"; });
      return n == 5;
    }));
    const auto released = clock_type::now();
    co_await la.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return pb->done; }, 10s));
    EXPECT_FALSE(pb->ec) << pb->ec.message();
    const auto waited = pb->at - released;
    std::printf("%zu RESP2 master(s): granted %.1f ms after the release, wake-ups %llu\n", legacy_count, ms_of(waited),
                static_cast<unsigned long long>(b.stats().lock_wakeups));
    if (legacy_count >= 3) {  // no majority of messages: it polls, every 2 s
      EXPECT_EQ(b.stats().lock_wakeups, 0u);
      EXPECT_GE(pb->at - asked, 2s);
      EXPECT_LT(waited, 2000ms + 1500ms);
    } else {  // the three RESP3 masters hand it the lock (or wake it)
      EXPECT_GE(b.stats().lock_wakeups + b.stats().lock_handovers, 1u);
      EXPECT_LT(waited, 1s);
    }
    co_await pb->lock.async_unlock(use_tuple);
    // Nothing broke on the RESP2 connections (a subscription there would have put them in
    // subscribe mode, refusing everything else): every master takes the next lock and its release.
    auto [ec, l] = co_await b.async_try_lock("old", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(co_await until([&, &l = l] { return count_nodes({"GET", "old"}, bulk(l.token())) == 5; }, 2s));
    co_await l.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return count_nodes({"GET", "old"}, nil) == 5; }, 2s));
    EXPECT_TRUE(co_await until([&] { return count_nodes({"EXISTS", queue_of("old")}, ":0\r\n") == 5; }, 2s));
    // The RESP2 masters, and only they, were named as giving no wake-ups.
    std::lock_guard g{m};
    std::set<std::size_t> named;
    for (const auto& s : log) {
      if (s.find("no wake-ups for waiters") == std::string::npos) continue;
      named.insert(static_cast<std::size_t>(std::stoul(s.substr(s.find("master ") + 7))));
    }
    std::set<std::size_t> expected;
    for (std::size_t i = 5 - legacy_count + 1; i <= 5; ++i) expected.insert(i);
    EXPECT_EQ(named, expected) << fmt::format("{}", fmt::join(log, "\n"));
  });
}

std::string resp2_name(const ::testing::TestParamInfo<std::size_t>& p) { return fmt::format("{}_of_5_resp2", p.param); }
INSTANTIATE_TEST_SUITE_P(fair, resp2, ::testing::Values(std::size_t{2}, std::size_t{5}), resp2_name);

// ---- worker processes ----------------------------------------------------------------------------------

// A worker process (test/safety/worker.cpp); killed (after SIGCONT) when dropped.
class worker_process {
 public:
  explicit worker_process(std::vector<std::string> args) {
    args.insert(args.begin(), REDLOCK_WORKER_PATH);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, REDLOCK_WORKER_PATH, nullptr, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start the worker");
  }
  ~worker_process() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    ::waitpid(pid_, nullptr, 0);
  }
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  // Sends `sig` and returns once it took effect (stopped, or dead and reaped).
  void signal(int sig) {
    ::kill(pid_, sig);
    int status = 0;
    if (sig == SIGSTOP) {
      ::waitpid(pid_, &status, WUNTRACED);
    } else if (sig == SIGKILL) {
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  // Waits for the exit; true if it exited with status 0.
  bool wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
};

struct fair_processes : fair_base {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("redlock-fair-{}-{}", ::getpid(), ++runs);
  static inline int runs = 0;

  fair_processes() { std::filesystem::create_directories(dir); }
  ~fair_processes() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  std::string masters() {
    std::string out;
    for (std::size_t i = 0; i < servers.size(); ++i)
      out += fmt::format("{}127.0.0.1:{}", i ? "," : "", servers[i].port());
    return out;
  }
};

// ---- 3. processes share ---------------------------------------------------------------------------------

// Four processes with the library's defaults contend for one resource for 8 s, each holding it
// 20-300 ms and asking again at once. Polling lets the releaser take it again nearly every time
// (one process got 239 of 259 sections in such a run); with the queue every process gets about a
// quarter. The checker finds no overlap.
TEST_F(fair_processes, four_processes_share_one_lock) {
  constexpr int count = 4;
  std::vector<std::unique_ptr<worker_process>> ws;
  std::vector<std::string> outs;
  for (int w = 0; w < count; ++w) {
    outs.push_back((dir / fmt::format("worker-{}.txt", w)).string());
    ws.push_back(std::make_unique<worker_process>(std::vector<std::string>{
        "--masters", masters(), "--resources", "shared", "--seconds", "8", "--ttl-ms", "2000", "--out", outs.back(),
        "--seed", std::to_string(w + 1), "--defaults", "--no-restart-guard", "--hold-ms", "20-300"}));
  }
  for (auto& w : ws) EXPECT_TRUE(w->wait()) << "a worker failed";
  std::vector<redlock::test::section> all;
  std::vector<std::size_t> shares;
  std::vector<std::map<std::string, long>> counts(count);
  for (int w = 0; w < count; ++w) {
    auto s = redlock::test::read_sections(outs[static_cast<std::size_t>(w)], w);
    shares.push_back(s.size());
    all.insert(all.end(), s.begin(), s.end());
    redlock::test::read_counts(outs[static_cast<std::size_t>(w)], counts[static_cast<std::size_t>(w)]);
  }
  const auto r = redlock::test::check(all);
  const double mean = static_cast<double>(std::accumulate(shares.begin(), shares.end(), std::size_t{0})) / count;
  const auto min = *std::min_element(shares.begin(), shares.end());
  std::printf("sections per process: %s; min/mean %.2f; overlaps %zu; longest gap %.0f ms\n",
              fmt::format("{}", fmt::join(shares, " ")).c_str(), static_cast<double>(min) / mean, r.overlaps,
              static_cast<double>(r.max_gap_ns) / 1e6);
  for (int w = 0; w < count; ++w) {
    std::string line;
    for (const auto& [k, v] : counts[static_cast<std::size_t>(w)]) line += fmt::format(" {}={}", k, v);
    std::printf("  worker %d:%s\n", w, line.c_str());
  }
  EXPECT_GT(r.sections, 20u);
  EXPECT_EQ(r.overlaps, 0u);
  for (const auto& e : r.examples) ADD_FAILURE() << "overlap: " << e;
  EXPECT_EQ(r.past_validity, 0u);
  EXPECT_GT(min, 0u);
  EXPECT_GE(static_cast<double>(min) / mean, 0.5);
  for (int w = 0; w < count; ++w) {
    auto& c = counts[static_cast<std::size_t>(w)];
    EXPECT_GT(c["queued"], 0) << "worker " << w;
    EXPECT_GT(c["wakeups"] + c["handovers"], 0) << "worker " << w;
  }
}

// ---- 4. a waiter that stops or dies ----------------------------------------------------------------------

// Holder H and waiter W2 are clients here; W1, queued before W2, is a worker process, stopped
// (SIGSTOP) or killed (SIGKILL) before H releases. The release names W1, which cannot act; W1's
// entries expire `entry_timeout` after its last attempt, and W2's next poll then wins. So W2 is
// held up by at most W1's entry timeout (plus its own poll interval), far below its 20 s
// max_wait; with a longer entry timeout on W1's side the bound moves with it. A killed W1 has no
// connection left to hear the release, and is not handed the lock. A stopped W1 that takes
// hand-overs (the default) still has its connections: the release hands it the lock, and W2 is
// held up until W1's keys expire, its ttl (2 s here), as by a stopped holder.
struct stuck_waiter_case {
  int sig;
  long w1_entry_timeout_ms;  // 0: the library's default
  bool hand_over;            // W1 takes hand-overs
  const char* name;
};

struct stuck_waiter : fair_processes, ::testing::WithParamInterface<stuck_waiter_case> {};

TEST_P(stuck_waiter, a_stopped_or_killed_waiter_holds_up_the_next_one_only_until_its_entry_expires) {
  const auto param = GetParam();
  // W1 runs with the library's defaults but for its max_wait (it must stay queued throughout).
  redlock::client_config w1_cfg;
  w1_cfg.fairness.entry_timeout = ms{param.w1_entry_timeout_ms};
  const ms entry = redlock::queue_entry_timeout(w1_cfg);
  std::printf("W1's entry timeout: %lld ms\n", static_cast<long long>(entry.count()));
  // Built outside the coroutine: g++ 12 rejects this braced list in a coroutine's body.
  std::vector<std::string> args{"--masters",     masters(),
                                "--resources",   "stuck",
                                "--seconds",     "60",
                                "--ttl-ms",      "10000",
                                "--out",         (dir / "w1.txt").string(),
                                "--defaults",    "--no-restart-guard",
                                "--max-wait-ms", "60000"};
  if (param.hand_over) {
    args[7] = "2000";  // W1's ttl: what a stopped W1 that was handed the lock holds it up for
  } else {
    args.push_back("--no-hand-over");
  }
  if (param.w1_entry_timeout_ms > 0) {
    args.push_back("--entry-timeout-ms");
    args.push_back(std::to_string(param.w1_entry_timeout_ms));
  }
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client h{ioc.get_executor(), config()};
        redlock::client w2{ioc.get_executor(), config(50ms, 100ms, 20s)};
        co_await wait_connected(h);
        co_await wait_connected(w2);
        auto [eh, lh] = co_await h.async_lock("stuck", 30s, use_tuple);
        EXPECT_FALSE(eh) << eh.message();
        co_await held_everywhere("stuck", lh.token());

        worker_process w1{args};
        const auto w1_name = co_await newcomer("stuck", {});
        auto p2 = start_lock(w2, "stuck");
        const std::vector<std::string> first{w1_name};
        const auto w2_name = co_await newcomer("stuck", first);

        w1.signal(param.sig);
        const auto released = clock_type::now();
        co_await lh.async_unlock(use_tuple);
        EXPECT_TRUE(co_await until([&] { return p2->done; }, entry + 10s)) << "W2 was never granted";
        if (!p2->done) co_return;
        EXPECT_FALSE(p2->ec) << p2->ec.message();
        const auto waited = p2->at - released;
        std::printf("%s: W2 granted %.1f ms after the release (W1's entry timeout %lld ms), attempts %zu\n", param.name,
                    ms_of(waited), static_cast<long long>(entry.count()), p2->lock.attempts());
        // Nobody woke W2: the release named W1, and W2 got in by polling once W1's entry (or W1's
        // handed keys) expired.
        EXPECT_EQ(w2.stats().lock_wakeups, 0u);
        if (param.hand_over && param.sig == SIGSTOP) {
          EXPECT_GT(waited, 2000ms - 100ms) << "W1 was not handed the lock";
          EXPECT_LT(waited, 2000ms + 1500ms);
        } else {
          EXPECT_LT(waited, entry + 1500ms);
        }
        if (param.w1_entry_timeout_ms >= 2000) {
          // W1 really held it up: its last renewal was at most ~150 ms before it stopped.
          EXPECT_GT(waited, entry / 2);
        }
        co_await p2->lock.async_unlock(use_tuple);
        // W1's entries expired (dropped by the next script, or with the queue's own expiry), W2
        // left: nothing stays.
        EXPECT_TRUE(co_await until([&] { return fairness_keys().empty(); }, entry + 2s))
            << fmt::format("left behind: {}", fmt::join(fairness_keys(), ", "));
      },
      1, 60s);
}

const stuck_waiter_case stuck_cases[] = {
    {SIGSTOP, 0, false, "stopped"},
    {SIGKILL, 0, true, "killed"},
    {SIGSTOP, 3000, false, "stopped_3s_entries"},
    {SIGSTOP, 0, true, "stopped_after_taking_hand_overs"},
};
std::string stuck_name(const ::testing::TestParamInfo<stuck_waiter_case>& p) { return p.param.name; }
void PrintTo(const stuck_waiter_case& c, std::ostream* os) { *os << c.name; }
INSTANTIATE_TEST_SUITE_P(fair_processes, stuck_waiter, ::testing::ValuesIn(stuck_cases), stuck_name);

}  // namespace
