// SPDX-License-Identifier: BSL-1.0
// Lock kinds (docs/design.md, "Lock kinds") against five real redis-server masters: what each kind
// excludes, shares and leaves behind, read from the masters themselves.
//
// Multi-resource locks, reentrant holds and fencing tokens are shown here in depth: each test
// names the wrong implementation it would catch. No test asserts speed; the bounds are generous
// waits for something that must happen, never limits on how fast it happens.

#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/co_spawn.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::lock_kind;
using redlock::lock_options;
using redlock::master_status;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;
using clock_type = redlock::clock;
using ms = std::chrono::milliseconds;

// "a,b,c" -> {"a", "b", "c"} (GCC 12 cannot build braced lists of strings inside coroutines).
std::vector<std::string> names(const std::string& list) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const auto comma = std::min(list.find(',', pos), list.size());
    out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// "r0" .. "r<n-1>".
std::vector<std::string> numbered(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("r" + std::to_string(i));
  return out;
}

lock_options fenced() {
  lock_options o;
  o.fence = true;
  return o;
}

lock_options owned_by(std::string owner) {
  lock_options o;
  o.owner = std::move(owner);
  return o;
}

std::string holds_of(const std::string& key) { return key + std::string{redlock::detail::holds_suffix}; }
std::string counter_of(const std::string& key) { return key + std::string{redlock::detail::fence_suffix}; }

using redlock::test::bulk_of;
using redlock::test::integer_of;

struct kinds : ::testing::Test {
  redlock::test::master_set servers{5};

  // One attempt per lock (a failure shows at once).
  redlock::client_config config() {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.max_attempts = 1;
    return cfg;
  }
  // Retries with short random delays for up to `max_wait`: for contention and take-overs.
  redlock::client_config retrying(ms max_wait = 10s) {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.max_attempts = 0;
    cfg.retry.max_wait = max_wait;
    cfg.retry.base_delay = 5ms;
    cfg.retry.jitter = 20ms;
    return cfg;
  }

  // What master `i` holds.
  std::optional<std::string> get(std::size_t i, const std::string& key) {
    return bulk_of(servers[i].command({"GET", key}));
  }
  std::int64_t pttl(std::size_t i, const std::string& key) {
    return integer_of(servers[i].command({"PTTL", key})).value();
  }
  std::int64_t hlen(std::size_t i, const std::string& key) {
    return integer_of(servers[i].command({"HLEN", key})).value();
  }
  bool hexists(std::size_t i, const std::string& key, const std::string& field) {
    return integer_of(servers[i].command({"HEXISTS", key, field})).value() == 1;
  }
  std::int64_t dbsize(std::size_t i) { return integer_of(servers[i].command({"DBSIZE"})).value(); }
  std::string all_keys(std::size_t i) { return servers[i].command({"KEYS", "*"}); }
  void set(std::size_t i, const std::string& key, const std::string& value) { servers[i].command({"SET", key, value}); }
  void set_px(std::size_t i, const std::string& key, const std::string& value, ms ttl) {
    servers[i].command({"SET", key, value, "PX", std::to_string(ttl.count())});
  }
  // The plain Redlock release script, as any Redlock client sends it, on master `i`.
  std::string plain_release(std::size_t i, const std::string& key, const std::string& token) {
    return servers[i].command({"EVAL", redlock::detail::release_script.body, "3", key,
                               key + std::string{redlock::detail::queue_suffix},
                               key + std::string{redlock::detail::expiry_suffix}, token});
  }
  // Whether master `i` has run script `s` (it is in its cache: a fresh server has none).
  bool ran(std::size_t i, const redlock::detail::script& s) {
    return servers[i].command({"SCRIPT", "EXISTS", s.sha1}) == "*1\r\n:1\r\n";
  }
  // A master that answers (neither killed nor stopped).
  bool up(std::size_t i) { return servers[i].running() && !servers[i].paused(); }
  // Keys (of any kind) left on the masters that answer, together.
  std::int64_t keys_left() {
    std::int64_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) n += up(i) ? dbsize(i) : 0;
    return n;
  }
  // How many of the masters that answer hold `key` with `value`.
  std::size_t holding(const std::string& key, const std::string& value) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) n += up(i) && get(i, key) == value;
    return n;
  }
  // Master `i`'s fencing counter of `key` (0 when it has none).
  std::int64_t counter(std::size_t i, const std::string& key) {
    const auto v = get(i, counter_of(key));
    return v ? std::stoll(*v) : 0;
  }
};

// Runs `body()` as its own coroutine beside the test's; `done` counts it finished, `failure` keeps
// what it threw.
void spawn(asio::io_context& io, std::function<asio::awaitable<void>()> body, int& done, std::exception_ptr& failure) {
  asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
    if (e && !failure) failure = e;
    ++done;
  });
}

// ==== multi-resource ================================================================================

// "b" is held by someone else on masters 1 and 2 only. Locking {a, b, c} is granted by masters 3-5;
// on 1 and 2 the script finds "b" and writes nothing at all, although "a" (checked before "b") and
// "c" were free there. An implementation that SET NX'd the keys one by one would leave "a" (and,
// without stopping, "c") of ours on masters 1 and 2 while the lock is held.
TEST_F(kinds, lock_all_writes_nothing_on_a_master_where_one_resource_is_held) {
  for (std::size_t i = 0; i < 2; ++i) set_px(i, "b", "someone-else", 30s);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    auto [ec, l] = co_await a.async_lock_all(names("a,b,c"), 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (ec) co_return;
    // Masters 1 and 2 answered, or will: the quorum may have decided before.
    const auto answers = l.masters();
    const bool ran_there = co_await until(
        [&] { return ran(0, redlock::detail::multi_acquire_script) && ran(1, redlock::detail::multi_acquire_script); });
    EXPECT_TRUE(ran_there) << "the acquire script never ran on masters 1 and 2";
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_NE(answers[i].status, master_status::granted) << "master " << i + 1;
      if (answers[i].status == master_status::taken) {
        EXPECT_EQ(answers[i].value, 2) << "master " << i + 1 << ": the first held key is the second";
      }
      EXPECT_EQ(get(i, "a"), std::nullopt) << "master " << i + 1;
      EXPECT_EQ(get(i, "b"), "someone-else") << "master " << i + 1;
      EXPECT_EQ(get(i, "c"), std::nullopt) << "master " << i + 1;
      EXPECT_EQ(dbsize(i), 1) << "master " << i + 1 << ": " << all_keys(i);
    }
    co_await until([&, &l = l] { return holding("a", l.token()) == 3; });  // the quorum may have decided before the 3rd
    for (const auto& r : names("a,b,c")) EXPECT_EQ(holding(r, l.token()), 3u) << r;

    auto [eu, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_GE(held, 1u);  // counted among the first majority to answer, which may include masters 1 and 2
    EXPECT_TRUE(co_await until([&] { return keys_left() == 2; })) << "left: " << keys_left();
    for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(get(i, "b"), "someone-else") << "master " << i + 1;
  });
}

// "e" is held by someone else on a majority (masters 1-3): locking {d, e, f} fails, though masters
// 4 and 5 may have set all three. The failed round's background release clears them: after it,
// no key of the set is left anywhere but the other holder's three. An implementation that
// released only the first key of a failed set (or nothing) leaves "e" and "f" of ours behind
// on masters 4 and 5 until their ttl (30 s here, far beyond the wait).
TEST_F(kinds, a_failed_lock_all_leaves_none_of_its_keys_anywhere) {
  for (std::size_t i = 0; i < 3; ++i) set_px(i, "e", "someone-else", 30s);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    auto [ec, l] = co_await a.async_lock_all(names("d,e,f"), 30s, use_tuple);
    EXPECT_EQ(ec, error::not_acquired) << ec.message();
    EXPECT_FALSE(l.owns_lock());
    const bool clean = co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (dbsize(i) != (i < 3 ? 1 : 0)) return false;
      return true;
    });
    EXPECT_TRUE(clean);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(dbsize(i), i < 3 ? 1 : 0) << "master " << i + 1 << ": " << all_keys(i);
      EXPECT_EQ(get(i, "e"), i < 3 ? std::optional<std::string>{"someone-else"} : std::nullopt);
    }
  });
}

// Four clients lock overlapping sets ({a,b}, {b,c}, {c,a}, {a,b,c}) in a loop, many times. An
// in-process log counts the holders of each resource: it never sees two at once (an
// implementation that locked only the first resource of a set, say, would let {a,b} and {b,c}
// share b). And every client gets its set again and again: nobody holds part of a set while
// waiting for the rest, so there is no deadlock, and random retry delays leave no livelock.
TEST_F(kinds, overlapping_sets_never_share_a_resource_and_every_client_progresses) {
  const std::vector<std::vector<std::string>> sets{names("a,b"), names("b,c"), names("c,a"), names("a,b,c")};
  constexpr std::size_t goal = 10;  // acquisitions each
  std::map<std::string, int> holders;
  std::size_t overlaps = 0, failures = 0;
  std::vector<std::size_t> acquired(sets.size(), 0);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    std::vector<std::unique_ptr<redlock::client>> clients;
    for (std::size_t k = 0; k < sets.size(); ++k)
      clients.push_back(std::make_unique<redlock::client>(io.get_executor(), retrying(5s)));
    const auto stop_at = clock_type::now() + 30s;
    int done = 0;
    std::exception_ptr failure;
    for (std::size_t k = 0; k < sets.size(); ++k) {
      spawn(
          io,
          [&, k]() -> asio::awaitable<void> {
            while (acquired[k] < goal && clock_type::now() < stop_at) {
              auto [ec, l] = co_await clients[k]->async_lock_all(sets[k], 2s, use_tuple);
              if (ec) {
                ++failures;  // gave up after its max_wait: contention, try again
                continue;
              }
              for (const auto& r : sets[k]) overlaps += holders[r]++ != 0;
              co_await sleep_for(3ms);
              for (const auto& r : sets[k]) --holders[r];
              ++acquired[k];
              co_await l.async_unlock(use_tuple);
            }
          },
          done, failure);
    }
    EXPECT_TRUE(co_await until([&] { return done == static_cast<int>(sets.size()); }, 40s));
    if (failure) std::rethrow_exception(failure);
  });
  EXPECT_EQ(overlaps, 0u);
  for (std::size_t k = 0; k < sets.size(); ++k) EXPECT_EQ(acquired[k], goal) << "client " << k;
  std::printf("overlapping sets: %zu acquisitions each, %zu lock calls gave up\n", goal, failures);
}

// Sixteen resources as one lock: every key is written on every master, `async_extend` re-arms
// every one of them (PTTL), `keep_alive` keeps every one of them past its ttl, and the unlock
// removes them all. An implementation extending only the first key (the lock's `resource()`)
// would let the other fifteen expire under a holder that believes it holds them.
TEST_F(kinds, sixteen_resources_are_extended_kept_alive_and_released_together) {
  const auto set = numbered(16);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client c{io.get_executor(), config()};
    // Whether every key on every master holds `token` with a PTTL in [min_pttl, max_pttl].
    const auto every_key = [&](const std::string& token, std::int64_t min_pttl, std::int64_t max_pttl,
                               bool report = false) {
      std::size_t bad = 0;
      for (std::size_t i = 0; i < servers.size(); ++i) {
        for (const auto& r : set) {
          const auto t = pttl(i, r);
          if (get(i, r) != token || t < min_pttl || t > max_pttl) {
            ++bad;
            if (report)
              ADD_FAILURE() << "master " << i + 1 << ", " << r << ": " << get(i, r).value_or("(none)") << ", pttl "
                            << t;
          }
        }
      }
      return bad == 0;
    };

    auto [ec, l] = co_await c.async_lock_all(set, 1500ms, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (ec) co_return;
    EXPECT_EQ(l.resources(), set);
    // The quorum decides at three masters; the other two's answers follow.
    if (!co_await until([&, &l = l] { return every_key(l.token(), 1, 1500); }, 1s)) every_key(l.token(), 1, 1500, true);
    auto [ex] = co_await l.async_extend(20s, use_tuple);
    EXPECT_FALSE(ex) << ex.message();
    if (!co_await until([&, &l = l] { return every_key(l.token(), 15000, 20000); }, 1s))
      every_key(l.token(), 15000, 20000, true);
    auto [eu, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();

    // Kept alive with a 600 ms ttl for 2 s: every key outlives its ttl three times over.
    auto [ek, k] = co_await c.async_lock_all(set, 600ms, use_tuple);
    EXPECT_FALSE(ek) << ek.message();
    if (ek) co_return;
    k.keep_alive();
    co_await sleep_for(2s);
    EXPECT_FALSE(k.lost()) << k.loss_reason().message();
    EXPECT_GE(k.extensions(), 3u);
    EXPECT_TRUE(every_key(k.token(), 1, 600, true));
    auto [eu2, held2] = co_await k.async_unlock(use_tuple);
    EXPECT_FALSE(eu2) << eu2.message();
    EXPECT_GE(held2, 1u);  // among the first majority to answer
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();
  });
}

// Bad sets are refused before anything is sent: an empty list, a resource named twice, more than
// `max_resources` (4 here; exactly 4 is fine), an empty name among others. Nothing is written on
// any master and no attempt is counted.
TEST_F(kinds, invalid_resource_sets_are_refused_and_write_nothing) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.max_resources = 4;
    redlock::client c{io.get_executor(), cfg};
    const std::vector<std::vector<std::string>> bad{{}, names("a,b,a"), names("a,b,c,d,e"), names("a,,b"), names("")};
    for (const auto& set : bad) {
      auto [ec, l] = co_await c.async_lock_all(set, 5s, use_tuple);
      EXPECT_EQ(ec, error::invalid_argument) << set.size() << " resources";
      EXPECT_FALSE(l.owns_lock());
      auto [et, lt] = co_await c.async_try_lock_all(set, 5s, use_tuple);
      EXPECT_EQ(et, error::invalid_argument) << set.size() << " resources";
    }
    EXPECT_EQ(c.stats().lock_attempts, 0u);
    EXPECT_EQ(keys_left(), 0);

    auto [ec, l] = co_await c.async_lock_all(names("a,b,c,d"), 5s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    co_await l.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; }));
  });
}

// Master 1 is killed and master 2 stopped (SIGSTOP: connected, never answering). The three left
// are a majority: sets are still locked (granted by masters 3-5 only), unlocked, and locked again
// by another client. Once master 2 runs again, what it was sent meanwhile (the acquisitions, then
// the releases behind them) leaves no key of ours there.
TEST_F(kinds, lock_all_works_with_a_master_killed_and_one_stopped) {
  const std::vector<std::string> lists{"a,b", "c,d,e"};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    servers[0].kill();
    servers[1].pause();
    for (const auto& list : lists) {
      auto [ec, l] = co_await a.async_lock_all(names(list), 10s, use_tuple);
      EXPECT_FALSE(ec) << list << ": " << ec.message();
      if (ec) continue;
      const auto answers = l.masters();
      EXPECT_NE(answers[0].status, master_status::granted);
      EXPECT_NE(answers[1].status, master_status::granted);
      for (const auto& r : names(list)) EXPECT_EQ(holding(r, l.token()), 3u) << r;
      auto [ex] = co_await l.async_extend(10s, use_tuple);
      EXPECT_FALSE(ex) << ex.message();
      auto [eu, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(eu) << eu.message();
      EXPECT_EQ(held, 3u);
      for (const auto& r : names(list)) EXPECT_EQ(holding(r, l.token()), 0u) << r;
      auto [eb, lb] = co_await b.async_try_lock_all(names(list), 10s, use_tuple);
      EXPECT_FALSE(eb) << list << ": " << eb.message();
      co_await lb.async_unlock(use_tuple);
    }
    servers[1].resume();
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; }, 10s)) << "master 2: " << all_keys(1);
  });
}

// ==== reentrancy ====================================================================================

// Three holds of one owner (from two clients) on one key: every master holds the owner as the
// key's value and one hash field per hold. Another owner and a plain lock are excluded, and a
// plain Redlock release, even one signed with a hold's own token, deletes nothing. Releasing holds
// one by one keeps the key until the last one is gone; then a plain lock gets it.
TEST_F(kinds, reentrant_holds_are_counted_on_the_masters_and_the_last_release_frees) {
  const std::string owner = "host-1/4242/task-7";
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    auto [e1, h1] = co_await a.async_lock("r", 10s, owned_by(owner), use_tuple);
    auto [e2, h2] = co_await b.async_lock("r", 10s, owned_by(owner), use_tuple);
    auto [e3, h3] = co_await a.async_lock("r", 10s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e1 || e2 || e3) << e1.message() << e2.message() << e3.message();
    EXPECT_NE(h1.token(), h2.token());
    EXPECT_TRUE(co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (hlen(i, holds_of("r")) != 3) return false;
      return true;
    }));
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(get(i, "r"), owner) << "master " << i + 1;
      EXPECT_EQ(hlen(i, holds_of("r")), 3) << "master " << i + 1;
      for (const auto* h : {&h1, &h2, &h3}) EXPECT_TRUE(hexists(i, holds_of("r"), h->token())) << "master " << i + 1;
    }
    // The third hold counts 3 where the second had landed first, 2 on a master still behind (the
    // second lock returned at its quorum, and two connections do not order the masters' work).
    // The second's quorum and the third's share a master, which counted 3.
    int threes = 0;
    for (const auto& m : h3.masters()) {
      if (m.status != master_status::granted) continue;
      EXPECT_TRUE(m.value == 2 || m.value == 3) << m.value;
      threes += m.value == 3;
    }
    EXPECT_GE(threes, 1);

    // Excluded: another owner, and a plain lock.
    auto [eo, other] = co_await b.async_lock("r", 10s, owned_by("host-2/1/task-1"), use_tuple);
    EXPECT_EQ(eo, error::not_acquired);
    auto [ep, plain] = co_await b.async_lock("r", 10s, use_tuple);
    EXPECT_EQ(ep, error::not_acquired);
    // A plain Redlock release with a hold's own token: the key holds the owner, not a token.
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(plain_release(i, "r", h1.token()), ":0\r\n");

    auto [u2, n2] = co_await h2.async_unlock(use_tuple);
    EXPECT_FALSE(u2) << u2.message();
    EXPECT_GE(n2, 3u);
    EXPECT_TRUE(co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (hlen(i, holds_of("r")) != 2) return false;
      return true;
    }));
    EXPECT_EQ(holding("r", owner), servers.size());
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_FALSE(hexists(i, holds_of("r"), h2.token()));
    auto [u1, n1] = co_await h1.async_unlock(use_tuple);
    EXPECT_FALSE(u1) << u1.message();
    auto [ep2, plain2] = co_await b.async_lock("r", 10s, use_tuple);
    EXPECT_EQ(ep2, error::not_acquired) << "one hold is left";
    auto [u3, n3] = co_await h3.async_unlock(use_tuple);
    EXPECT_FALSE(u3) << u3.message();
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();
    auto [ep3, plain3] = co_await b.async_lock("r", 10s, use_tuple);
    EXPECT_FALSE(ep3) << ep3.message();
    co_await plain3.async_unlock(use_tuple);
  });
}

// A hold's handle dropped while it still holds is released in the background: its own hash field
// goes, the other hold's stays, and so does the key (an implementation that deleted the key, as a
// plain release does, would let the next owner in under the first hold).
TEST_F(kinds, a_dropped_reentrant_handle_releases_only_its_own_hold) {
  const std::string owner = "worker-9";
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    auto [e1, h1] = co_await a.async_lock("r", 10s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    std::string dropped;
    {
      auto [e2, h2] = co_await a.async_lock("r", 10s, owned_by(owner), use_tuple);
      EXPECT_FALSE(e2) << e2.message();
      dropped = h2.token();
    }  // h2 goes out of scope still holding
    const bool gone = co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (hexists(i, holds_of("r"), dropped)) return false;
      return true;
    });
    EXPECT_TRUE(gone);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(get(i, "r"), owner) << "master " << i + 1;
      EXPECT_EQ(hlen(i, holds_of("r")), 1) << "master " << i + 1;
      EXPECT_TRUE(hexists(i, holds_of("r"), h1.token())) << "master " << i + 1;
    }
    auto [eo, other] = co_await b.async_lock("r", 10s, owned_by("worker-10"), use_tuple);
    EXPECT_EQ(eo, error::not_acquired);
    co_await h1.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();
  });
}

// The key lives as long as the longest hold: a hold joining with a longer ttl lengthens it, one
// with a shorter ttl (or extended by a shorter ttl) does not shorten it, and the holds' hash lives
// as long as the key (else the key would outlive its holds and nobody could release it). After the
// long hold is released, the short one still holds the key.
TEST_F(kinds, a_reentrant_hold_never_shortens_the_key) {
  const std::string owner = "job-3";
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    const auto all_pttl_at_least = [&](std::int64_t min, bool report = true) {
      bool ok = true;
      for (std::size_t i = 0; i < servers.size(); ++i) {
        const auto k = pttl(i, "r"), h = pttl(i, holds_of("r"));
        if (k < min || h < min) {
          ok = false;
          if (report)
            ADD_FAILURE() << "master " << i + 1 << ": key pttl " << k << ", holds pttl " << h << ", want >= " << min;
        }
      }
      return ok;
    };
    auto [e1, short1] = co_await a.async_lock("r", 1s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    auto [e2, long2] = co_await a.async_lock("r", 20s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    // The quorum decides at three masters; the other two's answers follow.
    co_await until([&] { return all_pttl_at_least(15000, false); }, 1s);
    EXPECT_TRUE(all_pttl_at_least(15000)) << "the longer hold lengthens the key";
    auto [e3, short3] = co_await a.async_lock("r", 1s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e3) << e3.message();
    auto [x1] = co_await short1.async_extend(1s, use_tuple);
    EXPECT_FALSE(x1) << x1.message();
    co_await until([&, &short3 = short3] {  // short3's hold landed everywhere
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (!hexists(i, holds_of("r"), short3.token())) return false;
      return true;
    });
    EXPECT_TRUE(all_pttl_at_least(15000)) << "shorter holds and extensions do not shorten it";
    co_await long2.async_unlock(use_tuple);
    co_await short1.async_unlock(use_tuple);
    co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (hlen(i, holds_of("r")) != 1) return false;
      return true;
    });
    EXPECT_EQ(holding("r", owner), servers.size()) << "short3 still holds it";
    co_await short3.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();
  });
}

// `keep_alive` on a reentrant hold (600 ms ttl) keeps the key, and that hold, for 2 s; another
// owner is still excluded then. Without the keep-alive the key would have expired twice over.
TEST_F(kinds, keep_alive_keeps_a_reentrant_hold) {
  const std::string owner = "svc/leader";
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    auto [e1, h1] = co_await a.async_lock("r", 600ms, owned_by(owner), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    if (e1) co_return;
    h1.keep_alive();
    co_await sleep_for(2s);
    EXPECT_FALSE(h1.lost()) << h1.loss_reason().message();
    EXPECT_GE(h1.extensions(), 3u);
    EXPECT_GT(h1.validity_deadline(), clock_type::now());
    EXPECT_GE(holding("r", owner), 3u);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      if (get(i, "r") == owner) {
        EXPECT_TRUE(hexists(i, holds_of("r"), h1.token())) << "master " << i + 1;
      }
    }
    auto [eo, other] = co_await b.async_lock("r", 5s, owned_by("svc/other"), use_tuple);
    EXPECT_EQ(eo, error::not_acquired);
    auto [u1, n1] = co_await h1.async_unlock(use_tuple);
    EXPECT_FALSE(u1) << u1.message();
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; })) << "left: " << keys_left();
  });
}

// Reentrancy with a minority of masters down: one killed, one stopped. Two holds of one owner
// still stand on the three live masters (both recorded there), another owner is excluded, the
// first release keeps the key, the second frees it; once the stopped master resumes, nothing of
// ours is left on it either.
TEST_F(kinds, reentrant_holds_work_with_a_master_killed_and_one_stopped) {
  const std::string owner = "svc/batch-9";
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    servers[0].kill();
    servers[1].pause();
    auto [e1, h1] = co_await a.async_lock("rf", 10s, owned_by(owner), use_tuple);
    auto [e2, h2] = co_await b.async_lock("rf", 10s, owned_by(owner), use_tuple);
    EXPECT_FALSE(e1 || e2) << e1.message() << " / " << e2.message();
    if (e1 || e2) co_return;
    for (std::size_t i = 2; i < servers.size(); ++i) {
      EXPECT_EQ(get(i, "rf"), owner) << "master " << i + 1;
      EXPECT_EQ(hlen(i, holds_of("rf")), 2) << "master " << i + 1;
    }
    auto [eo, other] = co_await b.async_try_lock("rf", 5s, owned_by("svc/other"), use_tuple);
    EXPECT_EQ(eo, error::not_acquired);
    auto [x1] = co_await h1.async_extend(10s, use_tuple);
    EXPECT_FALSE(x1) << x1.message();
    auto [u1, n1] = co_await h1.async_unlock(use_tuple);
    EXPECT_FALSE(u1) << u1.message();
    EXPECT_EQ(holding("rf", owner), 3u);  // h2 still holds it
    auto [ep, plain] = co_await b.async_try_lock("rf", 5s, use_tuple);
    EXPECT_EQ(ep, error::not_acquired);
    auto [u2, n2] = co_await h2.async_unlock(use_tuple);
    EXPECT_FALSE(u2) << u2.message();
    EXPECT_EQ(n2, 3u);
    EXPECT_EQ(holding("rf", owner), 0u);
    servers[1].resume();
    EXPECT_TRUE(co_await until([&] { return keys_left() == 0; }, 10s)) << "master 2: " << all_keys(1);
  });
}

// Owners that cannot be stored as they are (257 bytes; blanks; control characters) and options
// that do not go together are refused before anything is sent. A 256-byte owner is fine.
TEST_F(kinds, invalid_owners_and_option_mixes_are_refused_and_write_nothing) {
  std::vector<lock_options> bad;
  for (const auto* o : {"a b", "a\tb", "a\nb", "a\x01", "\x7f", "x\x1f"}) bad.push_back(owned_by(o));
  bad.push_back(owned_by(std::string(257, 'o')));
  {
    auto o = owned_by("me");
    o.fence = true;
    bad.push_back(o);
    o.fence = false;
    for (const auto k : {lock_kind::read, lock_kind::write, lock_kind::semaphore}) {
      o.kind = k;
      bad.push_back(o);
    }
    auto f = fenced();
    for (const auto k : {lock_kind::read, lock_kind::write, lock_kind::semaphore}) {
      f.kind = k;
      bad.push_back(f);
    }
    lock_options p;
    p.permits = 2;  // without the semaphore kind
    bad.push_back(p);
    p.owner = "me";
    bad.push_back(p);
  }
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client c{io.get_executor(), config()};
    for (std::size_t n = 0; n < bad.size(); ++n) {
      auto [ec, l] = co_await c.async_lock("r", 5s, bad[n], use_tuple);
      EXPECT_EQ(ec, error::invalid_argument) << "case " << n << ", owner '" << bad[n].owner << "'";
      EXPECT_FALSE(l.owns_lock());
      auto [et, lt] = co_await c.async_try_lock("r", 5s, bad[n], use_tuple);
      EXPECT_EQ(et, error::invalid_argument) << "case " << n;
    }
    EXPECT_EQ(c.stats().lock_attempts, 0u);
    EXPECT_EQ(keys_left(), 0);

    const std::string longest(256, 'o');
    auto [ec, l] = co_await c.async_lock("r", 5s, owned_by(longest), use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_GE(holding("r", longest), 3u);
    co_await l.async_unlock(use_tuple);
  });
}

// ==== fencing =======================================================================================

// Three clients hand one fenced lock over and over (30 acquisitions). In the order of holding, the
// fences strictly increase; and a majority of masters' counters are at least the last fence.
TEST_F(kinds, fences_strictly_increase_across_many_hand_overs) {
  constexpr std::size_t per_client = 10;
  std::vector<std::uint64_t> fences;  // in the order of holding
  int holders = 0;
  std::size_t overlaps = 0;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    std::vector<std::unique_ptr<redlock::client>> clients;
    for (int k = 0; k < 3; ++k) clients.push_back(std::make_unique<redlock::client>(io.get_executor(), retrying()));
    int done = 0;
    std::exception_ptr failure;
    for (auto& c : clients) {
      spawn(
          io,
          [&, cl = c.get()]() -> asio::awaitable<void> {
            for (std::size_t n = 0; n < per_client;) {
              auto [ec, l] = co_await cl->async_lock("f", 2s, fenced(), use_tuple);
              if (ec) continue;
              overlaps += holders++ != 0;
              fences.push_back(l.fence());
              co_await sleep_for(2ms);
              --holders;
              ++n;
              co_await l.async_unlock(use_tuple);
            }
          },
          done, failure);
    }
    EXPECT_TRUE(co_await until([&] { return done == 3; }, 40s));
    if (failure) std::rethrow_exception(failure);
  });
  EXPECT_EQ(overlaps, 0u);
  ASSERT_EQ(fences.size(), 3 * per_client);
  EXPECT_GT(fences.front(), 0u);
  for (std::size_t n = 1; n < fences.size(); ++n)
    EXPECT_GT(fences[n], fences[n - 1]) << "acquisition " << n << " of " << fences.size();
  std::size_t at_least_last = 0;
  for (std::size_t i = 0; i < servers.size(); ++i)
    at_least_last += counter(i, "f") >= static_cast<std::int64_t>(fences.back());
  EXPECT_GE(at_least_last, 3u);
}

// The masters' counters diverge: two of them run far ahead (as after grants that reached only
// them). With master 5 stopped, the next fenced lock is granted by three of masters 1-4, so by one
// or both of those ahead: its largest answer comes from fewer than a majority, and a second round
// raises the others to it before success (`fence_confirmations` + 1); afterwards the granting
// masters agree. Then the two ahead are stopped and master 5 runs again: masters 3-5, two of which
// never saw the jump, grant the next lock alone, and its fence is still larger than every earlier
// one. Without the confirmation round, they could have answered about the first fence + 2.
TEST_F(kinds, diverged_fence_counters_are_confirmed_so_any_majority_gives_a_larger_fence) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    redlock::client c{io.get_executor(), config()};
    const auto opts = fenced();
    auto [e0, l0] = co_await a.async_lock("f", 5s, opts, use_tuple);
    EXPECT_FALSE(e0) << e0.message();
    const auto f0 = static_cast<std::int64_t>(l0.fence());
    co_await l0.async_unlock(use_tuple);

    const std::int64_t ahead = f0 + 1'000'000;
    for (std::size_t i = 0; i < 2; ++i) set(i, counter_of("f"), std::to_string(ahead));
    servers[4].pause();
    const auto before = b.stats().fence_confirmations;
    auto [e1, l1] = co_await b.async_lock("f", 5s, opts, use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    EXPECT_EQ(static_cast<std::int64_t>(l1.fence()), ahead + 1);
    EXPECT_EQ(b.stats().fence_confirmations, before + 1);
    // Every master that granted it (the answers that decided) now holds the fence. (A master whose
    // grant came after the decision was not asked; its counter may stay behind: harmless, since
    // any majority meets the granting one.)
    const auto granted = l1.masters();
    std::size_t granting = 0;
    for (const auto& m : granted) granting += m.status == master_status::granted;
    EXPECT_GE(granting, 3u);
    const bool agree = co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (granted[i].status == master_status::granted && counter(i, "f") != ahead + 1) return false;
      return true;
    });
    EXPECT_TRUE(agree);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      if (granted[i].status == master_status::granted) {
        EXPECT_EQ(counter(i, "f"), ahead + 1) << "master " << i + 1;
      }
    }
    co_await l1.async_unlock(use_tuple);

    servers[0].pause();
    servers[1].pause();
    servers[4].resume();
    auto [e2, l2] = co_await c.async_lock("f", 5s, opts, use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_GT(l2.fence(), l1.fence());
    const auto answers = l2.masters();
    EXPECT_NE(answers[0].status, master_status::granted);
    EXPECT_NE(answers[1].status, master_status::granted);
    co_await l2.async_unlock(use_tuple);
    servers[0].resume();
    servers[1].resume();
  });
}

// A majority of masters (1-3) restart without persistence: their counters are gone. With the two
// others stopped, the next fenced lock is granted by the restarted three alone, and its fence is
// still above every earlier one: a missing counter is seeded from the server's clock in
// microseconds (one restarted at 0 would answer 1). Once all five answer again, fences go on
// increasing.
TEST_F(kinds, fences_still_increase_after_a_majority_of_masters_lost_their_counters) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), retrying()};
    const auto opts = fenced();
    std::uint64_t last = 0;
    for (int n = 0; n < 3; ++n) {
      auto [ec, l] = co_await a.async_lock("f", 5s, opts, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_GT(l.fence(), last);
      last = l.fence();
      co_await l.async_unlock(use_tuple);
    }
    for (std::size_t i = 0; i < 3; ++i) {
      servers[i].restart();
      EXPECT_EQ(counter(i, "f"), 0) << "master " << i + 1 << " kept its counter";
    }
    servers[3].pause();
    servers[4].pause();
    // The client has reconnected to the restarted three (a second handshake each).
    const bool reconnected = co_await until([&] {
      const auto s = a.masters();
      for (std::size_t i = 0; i < 3; ++i)
        if (s[i].state != redlock::connection_state::up || s[i].connects < 2) return false;
      return true;
    });
    EXPECT_TRUE(reconnected);
    {
      auto [ec, l] = co_await a.async_lock("f", 5s, opts, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_GT(l.fence(), last) << "granted by the restarted masters alone";
      last = l.fence();
      const auto answers = l.masters();
      for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(answers[i].status, master_status::granted) << "master " << i + 1;
      co_await l.async_unlock(use_tuple);
    }
    servers[3].resume();
    servers[4].resume();
    for (int n = 0; n < 3; ++n) {
      auto [ec, l] = co_await a.async_lock("f", 5s, opts, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_GT(l.fence(), last) << "after the restart, lock " << n;
      last = l.fence();
      co_await l.async_unlock(use_tuple);
    }
  });
}

// ---- the stale holder -------------------------------------------------------------------------------

// A resource guarded by the lock, kept in the test: it stores the last value written, and when it
// checks fences, refuses a write whose fence is not above the largest it has accepted.
struct guarded_store {
  bool checks_fences = true;
  std::uint64_t highest = 0;
  std::string value;
  bool write(std::uint64_t fence, std::string v) {
    if (checks_fences) {
      if (fence <= highest) return false;
      highest = fence;
    }
    value = std::move(v);
    return true;
  }
};

struct stale_run {
  std::uint64_t fence_a = 0, fence_b = 0;
  bool a_wrote = false, b_wrote = false, stale_accepted = false;
  bool a_past_validity = false;     // A's clock says its lock had run out when it wrote again
  bool b_after_a_deadline = false;  // B got the lock only after A's validity deadline
};

// Holder A locks with a 500 ms ttl and writes. Then it "pauses" (a GC pause, a page fault, a
// SIGSTOP): its coroutine sleeps past its validity deadline without touching anything. Meanwhile
// B, waiting on the lock, gets it once A's keys expired and writes. A wakes and writes again with
// what it still has: its old lock.
asio::awaitable<void> stale_holder_scenario(asio::io_context& io, redlock::client& a, redlock::client& b,
                                            const lock_options& opts, guarded_store& store, stale_run& run) {
  int done = 0;
  std::exception_ptr failure;
  bool a_holds = false;
  clock_type::time_point a_deadline{};
  spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, l] = co_await a.async_lock("account", 500ms, opts, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        if (ec) co_return;
        run.fence_a = l.fence();
        a_deadline = l.validity_deadline();
        run.a_wrote = store.write(l.fence(), "A");
        a_holds = true;
        // The pause: nothing is touched until well after the deadline and B's write.
        co_await sleep_for(l.validity_deadline() - clock_type::now() + 100ms);
        EXPECT_TRUE(co_await until([&] { return run.b_wrote; }, 10s)) << "B never wrote";
        run.a_past_validity = clock_type::now() > l.validity_deadline();
        run.stale_accepted = store.write(l.fence(), "A, stale");
      },
      done, failure);
  spawn(
      io,
      [&]() -> asio::awaitable<void> {
        EXPECT_TRUE(co_await until([&] { return a_holds; }, 5s, 1ms));
        auto [ec, l] = co_await b.async_lock("account", 5s, opts, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        if (ec) co_return;
        run.b_after_a_deadline = clock_type::now() > a_deadline;
        run.fence_b = l.fence();
        run.b_wrote = store.write(l.fence(), "B");
        co_await l.async_unlock(use_tuple);
      },
      done, failure);
  EXPECT_TRUE(co_await until([&] { return done == 2; }, 20s));
  if (failure) std::rethrow_exception(failure);
}

// THE case fencing exists for: the stale holder's write carries its old fence, which the resource
// has already seen surpassed by B's, and is refused. B's write stands.
TEST_F(kinds, a_stale_holder_write_is_refused_by_its_fence) {
  guarded_store store;
  stale_run run;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), retrying(5s)};
    const auto opts = fenced();  // named: GCC 12 mishandles temporaries bound to a coroutine's parameters
    co_await stale_holder_scenario(io, a, b, opts, store, run);
  });
  EXPECT_TRUE(run.a_wrote);
  EXPECT_TRUE(run.b_wrote);
  EXPECT_TRUE(run.b_after_a_deadline);
  EXPECT_TRUE(run.a_past_validity);
  EXPECT_GT(run.fence_a, 0u);
  EXPECT_GT(run.fence_b, run.fence_a);
  EXPECT_FALSE(run.stale_accepted) << "the stale holder's write went through";
  EXPECT_EQ(store.value, "B");
  EXPECT_EQ(store.highest, run.fence_b);
}

// The same story with plain locks and a resource that cannot check fences: the lock alone does
// not stop the stale holder, whose write lands after B's and overwrites it. So it is the fence,
// not the lock, that protected the resource above.
TEST_F(kinds, without_fences_the_same_stale_holder_write_goes_through) {
  guarded_store store;
  store.checks_fences = false;
  stale_run run;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), retrying(5s)};
    const lock_options plain;  // named: GCC 12 mishandles temporaries bound to a coroutine's parameters
    co_await stale_holder_scenario(io, a, b, plain, store, run);
  });
  EXPECT_TRUE(run.a_wrote);
  EXPECT_TRUE(run.b_wrote);
  EXPECT_TRUE(run.b_after_a_deadline);
  EXPECT_TRUE(run.a_past_validity);
  EXPECT_EQ(run.fence_a, 0u);
  EXPECT_EQ(run.fence_b, 0u);
  EXPECT_TRUE(run.stale_accepted);
  EXPECT_EQ(store.value, "A, stale") << "B's write was lost to the stale holder";
}

// ==== every kind, briefly ===========================================================================

TEST_F(kinds, smoke_every_kind_locks_excludes_and_releases) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};

    // Multi-resource: overlapping sets exclude each other; disjoint ones do not.
    auto [e1, m1] = co_await a.async_lock_all(names("x,y,z"), 5s, use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    auto [e2, m2] = co_await b.async_try_lock_all(names("z,w"), 5s, use_tuple);
    EXPECT_EQ(e2, error::not_acquired);
    auto [e2b, m2b] = co_await b.async_try_lock("y", 5s, use_tuple);
    EXPECT_EQ(e2b, error::not_acquired);
    auto [e3, m3] = co_await b.async_try_lock_all(names("v,w"), 5s, use_tuple);
    EXPECT_FALSE(e3);
    auto [u1, n1] = co_await m1.async_unlock(use_tuple);
    EXPECT_FALSE(u1);
    EXPECT_GE(n1, 1u);  // the first majority to answer meets the granting one
    auto [u3, n3] = co_await m3.async_unlock(use_tuple);
    EXPECT_FALSE(u3);

    // Fencing: strictly increasing from one holder to the next.
    auto [f1, l1] = co_await a.async_lock("f", 5s, fenced(), use_tuple);
    EXPECT_FALSE(f1);
    EXPECT_GT(l1.fence(), 0u);
    co_await l1.async_unlock(use_tuple);
    auto [f2, l2] = co_await b.async_lock("f", 5s, fenced(), use_tuple);
    EXPECT_FALSE(f2);
    EXPECT_GT(l2.fence(), l1.fence());
    co_await l2.async_unlock(use_tuple);

    // Reentrancy: the same owner enters twice; someone else waits for the last release.
    auto [r1, h1] = co_await a.async_lock("r", 5s, owned_by("owner-1"), use_tuple);
    EXPECT_FALSE(r1);
    auto [r2, h2] = co_await b.async_try_lock("r", 5s, owned_by("owner-1"), use_tuple);
    EXPECT_FALSE(r2);
    auto [r3, h3] = co_await b.async_try_lock("r", 5s, use_tuple);
    EXPECT_EQ(r3, error::not_acquired);
    co_await h1.async_unlock(use_tuple);
    auto [r4, h4] = co_await b.async_try_lock("r", 5s, use_tuple);
    EXPECT_EQ(r4, error::not_acquired);
    co_await h2.async_unlock(use_tuple);
    auto [r5, h5] = co_await b.async_try_lock("r", 5s, use_tuple);
    EXPECT_FALSE(r5);
    co_await h5.async_unlock(use_tuple);

    // Read/write: readers share, a writer excludes them.
    lock_options reader, writer;
    reader.kind = lock_kind::read;
    writer.kind = lock_kind::write;
    auto [w1, rd1] = co_await a.async_lock("rw", 5s, reader, use_tuple);
    EXPECT_FALSE(w1);
    auto [w2, rd2] = co_await b.async_lock("rw", 5s, reader, use_tuple);
    EXPECT_FALSE(w2);
    auto [w3, wr1] = co_await b.async_try_lock("rw", 5s, writer, use_tuple);
    EXPECT_EQ(w3, error::not_acquired);
    auto [w3b, pl] = co_await b.async_try_lock("rw", 5s, use_tuple);
    EXPECT_EQ(w3b, error::not_acquired);
    co_await rd1.async_unlock(use_tuple);
    co_await rd2.async_unlock(use_tuple);
    auto [w4, wr2] = co_await b.async_try_lock("rw", 5s, writer, use_tuple);
    EXPECT_FALSE(w4);
    auto [w5, rd3] = co_await a.async_try_lock("rw", 5s, reader, use_tuple);
    EXPECT_EQ(w5, error::not_acquired);
    co_await wr2.async_unlock(use_tuple);

    // Semaphore: two permits, the third waits.
    lock_options sem;
    sem.kind = lock_kind::semaphore;
    sem.permits = 2;
    auto [s1, p1] = co_await a.async_lock("s", 5s, sem, use_tuple);
    EXPECT_FALSE(s1);
    auto [s2, p2] = co_await b.async_lock("s", 5s, sem, use_tuple);
    EXPECT_FALSE(s2);
    auto [s3, p3] = co_await b.async_try_lock("s", 5s, sem, use_tuple);
    EXPECT_EQ(s3, error::not_acquired);
    auto [x1] = co_await p1.async_extend(5s, use_tuple);
    EXPECT_FALSE(x1);
    co_await p1.async_unlock(use_tuple);
    auto [s4, p4] = co_await b.async_try_lock("s", 5s, sem, use_tuple);
    EXPECT_FALSE(s4);
    co_await p2.async_unlock(use_tuple);
    co_await p4.async_unlock(use_tuple);
    // The releases reach every master (the unlocks complete at a majority).
    co_await until([&] {
      for (std::size_t i = 0; i < servers.size(); ++i)
        if (dbsize(i) != (counter(i, "f") > 0 ? 1 : 0)) return false;
      return true;
    });
  });
  // Only the fencing counters stay behind: on a majority at least (a master whose answers to both
  // fenced locks came after their release was sent never ran them).
  std::size_t counters = 0;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    const auto has_counter = counter(i, "f") > 0;
    counters += has_counter;
    EXPECT_EQ(dbsize(i), has_counter ? 1 : 0) << "master " << i + 1 << ": " << all_keys(i);
  }
  EXPECT_GE(counters, 3u);
}

}  // namespace
