// SPDX-License-Identifier: BSL-1.0
// Read/write locks and counting semaphores (docs/design.md, "Lock kinds") against five real
// redis-server masters: who shares, who is excluded, who waits, what each master holds (readers,
// the writer's claim, the semaphore's holders, read from the masters themselves), and how both
// kinds behave with masters killed, stopped and restarted.
//
// No test asserts speed. Where a test bounds how long something takes (a writer behind a stream
// of readers), a control shows that the same situation without the mechanism under test does not
// finish within that bound; where a key must vanish "at once", it is given a lifetime far beyond
// the bound, so that only the mechanism can remove it in time.

#include <redlock/client.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// ---- options (built outside coroutine bodies) -----------------------------------------------------

lock_options kind_opts(lock_kind k, std::size_t permits = 1) {
  lock_options o;
  o.kind = k;
  o.permits = permits;
  return o;
}
lock_options reader() { return kind_opts(lock_kind::read); }
lock_options writer() { return kind_opts(lock_kind::write); }
lock_options sem(std::size_t permits) { return kind_opts(lock_kind::semaphore, permits); }

// ---- reading raw RESP2 replies of redis_node::command ---------------------------------------------

using redlock::test::bulk_of;
using redlock::test::integer_of;
using redlock::test::nil;

std::string with(const std::string& key, std::string_view suffix) { return key + std::string{suffix}; }
std::string readers_of(const std::string& key) { return with(key, redlock::detail::readers_suffix); }
std::string claim_of(const std::string& key) { return with(key, redlock::detail::writer_suffix); }
std::string permits_of(const std::string& key) { return with(key, redlock::detail::permits_suffix); }

// ---- waiting -------------------------------------------------------------------------------------

// An async_lock with options started with a callback, so that a test can do other things (read the
// masters, cancel it) while it waits.
struct pending_lock {
  bool done = false;
  error_code ec;
  redlock::lock lock;
  clock_type::time_point at{};
  asio::cancellation_signal cancel;
};

std::shared_ptr<pending_lock> start_lock(redlock::client& c, const std::string& resource, ms ttl,
                                         const lock_options& opts) {
  auto p = std::make_shared<pending_lock>();
  c.async_lock(resource, ttl, opts, asio::bind_cancellation_slot(p->cancel.slot(), [p](error_code ec, redlock::lock l) {
                 p->ec = ec;
                 p->lock = std::move(l);
                 p->at = clock_type::now();
                 p->done = true;
               }));
  return p;
}

std::size_t count_status(const redlock::lock& l, master_status s) {
  const auto m = l.masters();
  return static_cast<std::size_t>(std::count_if(m.begin(), m.end(), [s](const auto& r) { return r.status == s; }));
}

// ---- the fixture ---------------------------------------------------------------------------------

struct rw_semaphore : ::testing::Test {
  redlock::test::master_set servers{5};
  std::vector<bool> down = std::vector<bool>(5, false);  // masters this test killed or stopped

  // The kinds' scripts go by EVALSHA; on a master that has not seen one yet, the first answer is
  // NOSCRIPT and the client sends the body again, but only while the round is undecided: one that
  // comes after the quorum leaves that master without the reader or holder. The scripts are loaded
  // beforehand, so that every master ends up holding what every acquisition sent it, and the
  // tests can wait for that.
  void SetUp() override {
    namespace d = redlock::detail;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      for (const auto* s :
           {&d::release_script, &d::extend_script, &d::fair_acquire_script, &d::read_acquire_script,
            &d::read_release_script, &d::read_extend_script, &d::write_acquire_script, &d::write_leave_script,
            &d::semaphore_acquire_script, &d::semaphore_release_script, &d::semaphore_extend_script}) {
        ASSERT_EQ(servers[i].command({"SCRIPT", "LOAD", s->body}), "$40\r\n" + std::string{s->sha1} + "\r\n");
      }
    }
  }

  // Tests' defaults (short connect and request timeouts); `max_wait` the longest async_lock.
  redlock::client_config config(ms max_wait = 2000ms) {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.max_wait = max_wait;
    return cfg;
  }

  void kill(std::size_t i) {
    servers[i].kill();
    down[i] = true;
  }
  void pause(std::size_t i) {
    servers[i].pause();
    down[i] = true;
  }

  // How many live masters answer `cmd` with exactly `raw`.
  std::size_t masters_answering(std::initializer_list<std::string_view> cmd, const std::string& raw) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) n += !down[i] && servers[i].command(cmd) == raw;
    return n;
  }
  // How many live masters hold `n` members in the sorted set `key`.
  std::size_t zcard_is(const std::string& key, std::int64_t n) {
    return masters_answering({"ZCARD", key}, ":" + std::to_string(n) + "\r\n");
  }
  // How many live masters hold the string `value` at `key`.
  std::size_t get_is(const std::string& key, const std::string& value) {
    return masters_answering({"GET", key}, "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n");
  }
  std::string value(std::size_t i, const std::string& key) {
    return bulk_of(servers[i].command({"GET", key})).value_or("<none>");
  }
  std::string set_nx(std::size_t i, const std::string& key) {
    return servers[i].command({"SET", key, "someone", "NX", "PX", "10000"});
  }
  // Two holders of another client on master `i`, alive for a minute, of a semaphore of 2 permits.
  void fill_semaphore(std::size_t i, const std::string& key) {
    const auto later = std::to_string(
        std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch() + 60s).count());
    servers[i].command({"ZADD", key, later, "other-1", later, "other-2"});
    servers[i].command({"SET", permits_of(key), "2", "PX", "60000"});
  }
  void zrem(std::size_t i, const std::string& key, const std::string& member) {
    servers[i].command({"ZREM", key, member});
  }
  // How many live masters hold `key` (of any type).
  std::size_t having(const std::string& key) { return masters_answering({"EXISTS", key}, ":1\r\n"); }
  std::int64_t zcard(std::size_t i, const std::string& key) {
    return integer_of(servers[i].command({"ZCARD", key})).value_or(-1);
  }
  std::int64_t pttl(std::size_t i, const std::string& key) {
    return integer_of(servers[i].command({"PTTL", key})).value_or(-3);
  }
  // A member's score (its expiry in server milliseconds), or -1 if absent.
  double zscore(std::size_t i, const std::string& key, const std::string& member) {
    const auto v = bulk_of(servers[i].command({"ZSCORE", key, member}));
    return v ? std::stod(*v) : -1.0;
  }
  // The largest holder count on any live master.
  std::int64_t max_zcard(const std::string& key) {
    std::int64_t m = 0;
    for (std::size_t i = 0; i < servers.size(); ++i)
      if (!down[i]) m = std::max(m, zcard(i, key));
    return m;
  }
  // Waits until every live master answers `cmd` with `raw`: an acquisition is decided by a quorum,
  // and its requests to the other masters must have landed before another client's race them.
  // `matching()` counts the live masters in the awaited state.
  asio::awaitable<void> settle(std::function<std::size_t()> matching, std::string what) {
    std::size_t live = 0;
    for (bool d : down) live += !d;
    if (!co_await until([&] { return matching() == live; }, 2s))
      ADD_FAILURE() << "only " << matching() << " of " << live << " masters: " << what;
  }
  std::size_t keys_on_live_masters() {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i)
      if (!down[i]) n += static_cast<std::size_t>(integer_of(servers[i].command({"DBSIZE"})).value_or(0));
    return n;
  }
};

// ---- read/write ----------------------------------------------------------------------------------

TEST_F(rw_semaphore, many_readers_share_the_lock_at_once) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    redlock::client c{io.get_executor(), config()};
    redlock::client* clients[] = {&a, &b, &c};
    std::vector<redlock::lock> held;
    for (int i = 0; i < 6; ++i) {
      auto [ec, l] = co_await clients[i % 3]->async_try_lock("rw", 10s, reader(), use_tuple);
      EXPECT_FALSE(ec) << "reader " << i << ": " << ec.message();
      EXPECT_EQ(l.kind(), lock_kind::read);
      held.push_back(std::move(l));
    }
    // Every master lists the six readers, by token, and the key marks them for plain clients.
    EXPECT_TRUE(co_await until([&] { return zcard_is(readers_of("rw"), 6) == 5; }))
        << "readers listed: " << max_zcard(readers_of("rw"));
    for (std::size_t m = 0; m < servers.size(); ++m) {
      EXPECT_EQ(value(m, "rw"), redlock::detail::readers_marker);
      for (const auto& l : held) EXPECT_GT(zscore(m, readers_of("rw"), l.token()), 0.0) << "master " << m + 1;
    }
    EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](const auto& l) { return l.owns_lock(); }));

    // The last reader's release deletes the key; until then it stays.
    for (std::size_t i = 0; i + 1 < held.size(); ++i) {
      auto [ec, n] = co_await held[i].async_unlock(use_tuple);
      EXPECT_FALSE(ec);
      EXPECT_GE(n, 3u);
    }
    EXPECT_TRUE(co_await until([&] { return zcard_is(readers_of("rw"), 1) == 5; }));
    EXPECT_EQ(having("rw"), 5u);
    co_await held.back().async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }))
        << keys_on_live_masters() << " key(s) left";
  });
}

TEST_F(rw_semaphore, writer_waits_for_readers_and_holds_new_readers_off) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config(10000ms)};
    auto [e1, r1] = co_await a.async_lock("rw", 10s, reader(), use_tuple);
    auto [e2, r2] = co_await b.async_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e1);
    EXPECT_FALSE(e2);
    co_await settle([&] { return zcard_is(readers_of("rw"), 2); }, "2 readers of rw");

    auto w = start_lock(b, "rw", 10s, writer());
    // The waiting writer claims its place on every master; no new reader enters meanwhile, from
    // either client, while the two readers already in keep their hold.
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 5; })) << having(claim_of("rw"));
    for (int i = 0; i < 3; ++i) {
      auto [e3, r3] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
      EXPECT_EQ(e3, error::not_acquired) << "a new reader entered while a writer waits";
      co_await sleep_for(100ms);
    }
    EXPECT_FALSE(w->done) << w->ec.message();
    EXPECT_TRUE(r1.owns_lock() && r2.owns_lock());
    EXPECT_EQ(zcard_is(readers_of("rw"), 2), 5u);

    co_await r1.async_unlock(use_tuple);
    co_await sleep_for(200ms);
    EXPECT_FALSE(w->done) << "the writer got in while a reader held";
    co_await r2.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return w->done; }));
    EXPECT_FALSE(w->ec) << w->ec.message();
    EXPECT_EQ(w->lock.kind(), lock_kind::write);
    EXPECT_GT(w->lock.attempts(), 1u);
    // Held, a writer is a plain token key: a majority has its token.
    EXPECT_GE(get_is("rw", w->lock.token()), 3u);

    // While it holds: readers, other writers and plain locks are refused.
    auto [e4, r4] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_EQ(e4, error::not_acquired);
    auto [e5, w5] = co_await a.async_try_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e5, error::not_acquired);
    auto [e6, p6] = co_await a.async_try_lock("rw", 10s, use_tuple);
    EXPECT_EQ(e6, error::not_acquired);

    auto [u, n] = co_await w->lock.async_unlock(use_tuple);
    EXPECT_FALSE(u);
    EXPECT_GE(n, 3u);
    auto [e7, r7] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e7) << "a reader is refused after the writer left: " << e7.message();
    co_await r7.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }))
        << keys_on_live_masters() << " key(s) left";
  });
}

TEST_F(rw_semaphore, plain_lock_and_readers_exclude_each_other) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    // Readers hold: a plain lock (what any Redlock client does: SET NX) is refused.
    auto [e1, r1] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e1);
    co_await settle([&] { return zcard_is(readers_of("rw"), 1); }, "1 reader of rw");
    auto [e2, p2] = co_await b.async_try_lock("rw", 10s, use_tuple);
    EXPECT_EQ(e2, error::not_acquired);
    // Decided once a majority said "taken": the rest may not have answered yet.
    EXPECT_GE(count_status(p2, master_status::taken), 3u);
    EXPECT_EQ(count_status(p2, master_status::granted), 0u);
    for (std::size_t m = 0; m < servers.size(); ++m) {
      EXPECT_EQ(set_nx(m, "rw"), nil) << "master " << m + 1;
    }
    co_await r1.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return having("rw") == 0; }));

    // A plain lock holds: readers and writers are refused, and the plain key is left alone.
    auto [e3, p3] = co_await b.async_try_lock("rw", 10s, use_tuple);
    EXPECT_FALSE(e3);
    co_await settle([&, &p3 = p3] { return get_is("rw", p3.token()); }, "the plain lock's key");
    auto [e4, r4] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_EQ(e4, error::not_acquired);
    auto [e5, w5] = co_await a.async_try_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e5, error::not_acquired);
    EXPECT_EQ(get_is("rw", p3.token()), 5u) << "the plain key was touched";
    EXPECT_EQ(having(readers_of("rw")), 0u);
    co_await p3.async_unlock(use_tuple);
    auto [e6, r6] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e6);
    co_await r6.async_unlock(use_tuple);
  });
}

// A stream of overlapping readers: `readers` coroutines, each re-acquiring a read lock as soon as
// it released the last, holding `hold`, started `hold / readers` apart, so that some reader always
// holds. They stop when `stop` is set.
struct reader_stream {
  bool stop = false;
  int holding = 0;   // readers holding right now (between acquisition and release)
  int acquired = 0;  // read locks acquired so far
  int finished = 0;  // coroutines that ended
  bool writer_in = false;
  int overlaps = 0;  // readers that acquired while the writer held
};

asio::awaitable<void> stream_reader(redlock::client& c, reader_stream& s, ms delay, ms hold) {
  co_await sleep_for(delay);
  while (!s.stop) {
    auto [ec, l] = co_await c.async_lock("rw", 10s, reader(), use_tuple);
    if (ec) continue;  // refused for all of max_wait: try again
    ++s.acquired;
    if (s.writer_in) ++s.overlaps;
    ++s.holding;
    co_await sleep_for(hold);
    --s.holding;
    co_await l.async_unlock(use_tuple);
  }
  ++s.finished;
}

// Runs a stream of four readers on "rw" and, once it flows, `contender`: a lock of the kind given
// (writer or plain), asked for with a bound of `bound`. Returns the contender's outcome.
asio::awaitable<error_code> contend_with_stream(asio::io_context& io, redlock::client_config cfg,
                                                std::optional<lock_options> contender, reader_stream& s, ms bound) {
  redlock::client c1{io.get_executor(), cfg};
  redlock::client c2{io.get_executor(), cfg};
  redlock::client cw{io.get_executor(), [&] {
                       auto w = cfg;
                       w.retry.max_wait = bound;
                       return w;
                     }()};
  constexpr int n = 4;
  constexpr ms hold{120};
  for (int i = 0; i < n; ++i) {
    asio::co_spawn(io, stream_reader(i % 2 ? c1 : c2, s, i * hold / n, hold), asio::detached);
  }
  EXPECT_TRUE(co_await until([&] { return s.acquired >= 2 * n; })) << "the reader stream does not flow";

  error_code out;
  redlock::lock l;
  if (contender) {
    std::tie(out, l) = co_await cw.async_lock("rw", 10s, *contender, use_tuple);
  } else {
    std::tie(out, l) = co_await cw.async_lock("rw", 10s, use_tuple);
  }
  if (!out) {
    // Granted: no reader may hold, now or while the writer holds.
    EXPECT_EQ(s.holding, 0) << "the contender got in while readers held";
    s.writer_in = true;
    for (int i = 0; i < 10; ++i) {
      co_await sleep_for(20ms);
      EXPECT_EQ(s.holding, 0);
    }
    s.writer_in = false;
    co_await l.async_unlock(use_tuple);
    // The stream flows again afterwards: the writer's claim is gone.
    const int before = s.acquired;
    EXPECT_TRUE(co_await until([&] { return s.acquired >= before + n; }, 3s)) << "readers stay refused";
  }
  s.stop = true;
  EXPECT_TRUE(co_await until([&] { return s.finished == n; }, 15s));
  co_return out;
}

TEST_F(rw_semaphore, writer_is_not_starved_by_a_stream_of_readers) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    reader_stream s;
    const auto ec = co_await contend_with_stream(io, config(10000ms), writer(), s, 3000ms);
    EXPECT_FALSE(ec) << "the writer starved: " << ec.message();
    EXPECT_EQ(s.overlaps, 0);
  });
}

// The control of the test above: the same stream keeps a plain lock out for the same bound, so
// that bound is earned by the writer's claim.
TEST_F(rw_semaphore, the_same_stream_of_readers_starves_a_plain_lock) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    reader_stream s;
    const auto ec = co_await contend_with_stream(io, config(10000ms), std::nullopt, s, 3000ms);
    EXPECT_EQ(ec, error::not_acquired) << "the stream of readers has gaps; the writer test proves nothing";
    EXPECT_GT(s.acquired, 20);
  });
}

TEST_F(rw_semaphore, writer_claim_is_dropped_when_its_acquisition_ends) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    // Claims live 30 s unless dropped: only the writer's own leaving removes them within the bounds.
    auto cfg = config(10000ms);
    cfg.fairness.entry_timeout = 30s;
    redlock::client a{io.get_executor(), cfg};
    auto short_cfg = cfg;
    short_cfg.retry.max_wait = 400ms;
    redlock::client b{io.get_executor(), short_cfg};

    auto [e1, r1] = co_await a.async_lock("rw", 20s, reader(), use_tuple);
    EXPECT_FALSE(e1);

    // Failure: the writer gives up after its max_wait, and leaves.
    auto [e2, w2] = co_await b.async_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e2, error::not_acquired);
    EXPECT_GT(w2.attempts(), 1u);
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 0; }, 2s))
        << "claims left after failure: " << having(claim_of("rw"));
    auto [e3, r3] = co_await a.async_try_lock("rw", 20s, reader(), use_tuple);
    EXPECT_FALSE(e3) << "readers are still held off: " << e3.message();

    // Cancellation: a waiting writer cancelled leaves too.
    auto w = start_lock(a, "rw", 10s, writer());
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 5; }));
    EXPECT_FALSE(w->done);
    w->cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return w->done; }));
    EXPECT_EQ(w->ec, asio::error::operation_aborted);
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 0; }, 2s))
        << "claims left after cancellation: " << having(claim_of("rw"));

    // Success: the claim goes with the acquisition.
    auto w3 = start_lock(a, "rw", 10s, writer());
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 5; }));
    co_await r1.async_unlock(use_tuple);
    co_await r3.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return w3->done; }));
    EXPECT_FALSE(w3->ec) << w3->ec.message();
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 0; }, 2s))
        << "claims left after success: " << having(claim_of("rw"));
    co_await w3->lock.async_unlock(use_tuple);
    auto [e4, r4] = co_await a.async_try_lock("rw", 20s, reader(), use_tuple);
    EXPECT_FALSE(e4);
    co_await r4.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }))
        << keys_on_live_masters() << " key(s) left";
  });
}

TEST_F(rw_semaphore, reader_and_writer_extensions_reach_the_masters) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    // A reader: its entry's expiry (the score) and the key's ttl grow with an extension.
    auto [e1, r1] = co_await a.async_lock("rw", 1000ms, reader(), use_tuple);
    EXPECT_FALSE(e1);
    co_await settle([&] { return zcard_is(readers_of("rw"), 1); }, "1 reader of rw");
    std::vector<double> before;
    for (std::size_t m = 0; m < servers.size(); ++m) before.push_back(zscore(m, readers_of("rw"), r1.token()));
    const auto deadline = r1.validity_deadline();
    auto [x1] = co_await r1.async_extend(8000ms, use_tuple);
    EXPECT_FALSE(x1) << x1.message();
    EXPECT_GT(r1.validity_deadline(), deadline + 5s);
    co_await settle(
        [&, &r1 = r1] {
          std::size_t n = 0;
          for (std::size_t m = 0; m < servers.size(); ++m) {
            n += zscore(m, readers_of("rw"), r1.token()) > before[m] + 5000 && pttl(m, "rw") > 5000 &&
                 pttl(m, readers_of("rw")) > 5000;
          }
          return n;
        },
        "the reader's entry, the key and the readers' set extended");
    co_await r1.async_unlock(use_tuple);

    // A writer: its plain key's ttl grows.
    auto [e2, w2] = co_await a.async_lock("rw", 1000ms, writer(), use_tuple);
    EXPECT_FALSE(e2);
    co_await settle([&, &w2 = w2] { return get_is("rw", w2.token()); }, "the writer's key");
    auto [x2] = co_await w2.async_extend(8000ms, use_tuple);
    EXPECT_FALSE(x2) << x2.message();
    co_await settle(
        [&] {
          std::size_t n = 0;
          for (std::size_t m = 0; m < servers.size(); ++m) n += pttl(m, "rw") > 5000;
          return n;
        },
        "the writer's key extended");
    co_await w2.async_unlock(use_tuple);

    // Keep-alive, both kinds: held well past the ttl they were taken with.
    auto [e3, r3] = co_await a.async_lock("r-alive", 600ms, reader(), use_tuple);
    auto [e4, w4] = co_await a.async_lock("w-alive", 600ms, writer(), use_tuple);
    EXPECT_FALSE(e3);
    EXPECT_FALSE(e4);
    co_await settle([&] { return zcard_is(readers_of("r-alive"), 1); }, "1 reader of r-alive");
    const double first_score = zscore(0, readers_of("r-alive"), r3.token());
    r3.keep_alive();
    w4.keep_alive();
    co_await sleep_for(1500ms);
    EXPECT_FALSE(r3.lost()) << r3.loss_reason().message();
    EXPECT_FALSE(w4.lost()) << w4.loss_reason().message();
    EXPECT_GE(r3.extensions(), 2u);
    EXPECT_GE(w4.extensions(), 2u);
    EXPECT_GT(r3.validity_deadline(), clock_type::now());
    EXPECT_GT(zscore(0, readers_of("r-alive"), r3.token()), first_score + 500);
    EXPECT_EQ(get_is("r-alive", std::string{redlock::detail::readers_marker}), 5u);
    EXPECT_EQ(get_is("w-alive", w4.token()), 5u);
    // Kept alive, a reader still keeps the writer out; a writer keeps readers out.
    auto [e5, w5] = co_await a.async_try_lock("r-alive", 600ms, writer(), use_tuple);
    EXPECT_EQ(e5, error::not_acquired);
    auto [e6, r6] = co_await a.async_try_lock("w-alive", 600ms, reader(), use_tuple);
    EXPECT_EQ(e6, error::not_acquired);
    co_await r3.async_unlock(use_tuple);
    co_await w4.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, reader_that_stops_renewing_expires_and_lets_a_writer_in) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config(5000ms)};
    // The reader keeps its handle (no release) but never extends.
    auto [e1, r1] = co_await a.async_lock("rw", 700ms, reader(), use_tuple);
    EXPECT_FALSE(e1);
    auto [e2, w2] = co_await b.async_try_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e2, error::not_acquired);
    auto [e3, w3] = co_await b.async_lock("rw", 10s, writer(), use_tuple);
    const auto got = clock_type::now();
    EXPECT_FALSE(e3) << "the expired reader still keeps the writer out: " << e3.message();
    // Never before the reader's validity ended (mutual exclusion), whatever the timing.
    EXPECT_GE(got, r1.validity_deadline());
    EXPECT_TRUE(r1.owns_lock());  // the handle does not know; the masters do
    co_await w3.async_unlock(use_tuple);
    // The expired reader's own release finds nothing of it.
    auto [u, n] = co_await r1.async_unlock(use_tuple);
    EXPECT_FALSE(u);
    EXPECT_EQ(n, 0u);

    // An expired reader beside a live one: when the live one leaves, the key goes with it (the
    // expired entry does not count), though the key would live 20 s by its ttl.
    auto [e4, r4] = co_await a.async_lock("rw2", 600ms, reader(), use_tuple);
    auto [e5, r5] = co_await a.async_lock("rw2", 20s, reader(), use_tuple);
    EXPECT_FALSE(e4);
    EXPECT_FALSE(e5);
    co_await settle([&] { return zcard_is(readers_of("rw2"), 2); }, "2 readers of rw2");
    while (clock_type::now() < r4.validity_deadline() + 100ms) co_await sleep_for(20ms);
    EXPECT_GT(pttl(0, "rw2"), 10000);
    co_await r5.async_unlock(use_tuple);
    co_await settle([&] { return masters_answering({"EXISTS", "rw2"}, ":0\r\n"); }, "rw2 deleted");
    auto [e6, w6] = co_await b.async_try_lock("rw2", 10s, writer(), use_tuple);
    EXPECT_FALSE(e6) << e6.message();
    co_await w6.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, readers_and_writers_exclude_each_other_with_masters_down) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    // One master killed, one stopped (connects succeed, nothing is answered): three of five left.
    kill(1);
    pause(3);
    redlock::client a{io.get_executor(), config(3000ms)};
    redlock::client b{io.get_executor(), config(3000ms)};
    auto [e1, r1] = co_await a.async_lock("rw", 10s, reader(), use_tuple);
    auto [e2, r2] = co_await b.async_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    EXPECT_FALSE(e2) << e2.message();
    co_await settle([&] { return zcard_is(readers_of("rw"), 2); }, "2 readers of rw");

    auto [e3, w3] = co_await b.async_try_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e3, error::not_acquired);
    auto [e4, p4] = co_await b.async_try_lock("rw", 10s, use_tuple);
    EXPECT_EQ(e4, error::not_acquired);

    auto w = start_lock(b, "rw", 10s, writer());
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 3; }));
    auto [e5, r5] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_EQ(e5, error::not_acquired);
    co_await r1.async_unlock(use_tuple);
    co_await r2.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return w->done; }));
    EXPECT_FALSE(w->ec) << w->ec.message();
    EXPECT_EQ(get_is("rw", w->lock.token()), 3u);
    EXPECT_TRUE(co_await until([&] { return having(claim_of("rw")) == 0; }, 2s));

    auto [e6, r6] = co_await a.async_try_lock("rw", 10s, reader(), use_tuple);
    EXPECT_EQ(e6, error::not_acquired);
    auto [e7, w7] = co_await a.async_try_lock("rw", 10s, writer(), use_tuple);
    EXPECT_EQ(e7, error::not_acquired);
    auto [u, n] = co_await w->lock.async_unlock(use_tuple);
    EXPECT_FALSE(u) << u.message();
    auto [e8, r8] = co_await a.async_lock("rw", 10s, reader(), use_tuple);
    EXPECT_FALSE(e8) << e8.message();
    co_await r8.async_unlock(use_tuple);
  });
}

// ---- semaphores ----------------------------------------------------------------------------------

TEST(semaphore_quorum, needs_more_than_a_majority_for_more_than_one_permit) {
  EXPECT_EQ(redlock::core::semaphore_quorum(5, 1), 3u);
  EXPECT_EQ(redlock::core::semaphore_quorum(5, 2), 4u);
  EXPECT_EQ(redlock::core::semaphore_quorum(5, 4), 5u);
  EXPECT_EQ(redlock::core::semaphore_quorum(7, 2), 5u);
}

// Contenders for a semaphore of `permits`: each takes it `rounds` times, holding it briefly, and
// counts in `s` how many hold at once.
struct contention {
  int holding = 0;
  int most = 0;
  int finished = 0;
  std::int64_t most_on_a_master = 0;
  std::map<int, int> acquired;          // per contender
  std::map<std::string, int> failures;  // by error message
};

asio::awaitable<void> contender(redlock::client& c, rw_semaphore& t, contention& s, int id, std::size_t permits,
                                int rounds) {
  for (int r = 0; r < rounds; ++r) {
    auto [ec, l] = co_await c.async_lock("sem", 5s, sem(permits), use_tuple);
    if (ec) {
      ++s.failures[ec.message()];
      continue;
    }
    ++s.holding;
    s.most = std::max(s.most, s.holding);
    ++s.acquired[id];
    s.most_on_a_master = std::max(s.most_on_a_master, t.max_zcard("sem"));
    co_await sleep_for(15ms);
    --s.holding;
    co_await l.async_unlock(use_tuple);
  }
  ++s.finished;
}

asio::awaitable<void> contend(asio::io_context& io, rw_semaphore& t, contention& s, int contenders, int rounds) {
  redlock::client a{io.get_executor(), t.config(20000ms)};
  redlock::client b{io.get_executor(), t.config(20000ms)};
  redlock::client c{io.get_executor(), t.config(20000ms)};
  redlock::client* clients[] = {&a, &b, &c};
  for (int i = 0; i < contenders; ++i)
    asio::co_spawn(io, contender(*clients[i % 3], t, s, i, 2, rounds), asio::detached);
  EXPECT_TRUE(co_await until([&] { return s.finished == contenders; }, 40s)) << s.finished << " finished";
}

void check(const contention& s, int contenders, const char* phase) {
  EXPECT_LE(s.most, 2) << phase << ": more holders than permits at once";
  EXPECT_EQ(s.most, 2) << phase << ": the permits were never used together";
  EXPECT_LE(s.most_on_a_master, 2) << phase;
  EXPECT_EQ(static_cast<int>(s.acquired.size()), contenders) << phase << ": some contender never acquired";
  for (const auto& [what, n] : s.failures) ADD_FAILURE() << phase << ": " << n << " acquisition(s) failed: " << what;
}

TEST_F(rw_semaphore, at_most_permits_holders_among_many_contenders) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    contention s;
    co_await contend(io, *this, s, 10, 4);
    check(s, 10, "all masters up");
  });
  EXPECT_EQ(keys_on_live_masters(), 0u);
}

TEST_F(rw_semaphore, at_most_permits_holders_with_a_master_down_and_back) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    // q = 4 of 5: with one master killed, every grant takes all four others.
    kill(2);
    contention s1;
    co_await contend(io, *this, s1, 10, 3);
    check(s1, 10, "master 3 down");
    // Back with an empty dataset: holders granted while it was down are not there.
    servers[2].restart();
    down[2] = false;
    contention s2;
    co_await contend(io, *this, s2, 10, 3);
    check(s2, 10, "master 3 back");
  });
}

TEST_F(rw_semaphore, quorum_larger_than_a_majority_is_required) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    // Masters 1 and 2 are full (two live holders of another client, P = 2); the three others would
    // admit us: a majority, but not q = 4.
    for (std::size_t m = 0; m < 2; ++m) fill_semaphore(m, "sem");
    auto [e1, l1] = co_await a.async_try_lock("sem", 10s, sem(2), use_tuple);
    // Decided by the two full masters (a majority quorum would still wait for three grants).
    EXPECT_EQ(e1, error::not_acquired);
    EXPECT_EQ(count_status(l1, master_status::taken), 2u);
    // The partial grants are released at once (not left to their 10 s ttl).
    EXPECT_TRUE(co_await until([&] { return masters_answering({"EXISTS", "sem"}, ":0\r\n") == 3; }, 2s));

    // One master freed: four admit us.
    zrem(0, "sem", "other-1");
    auto [e2, l2] = co_await a.async_try_lock("sem", 10s, sem(2), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_EQ(count_status(l2, master_status::granted), 4u);
    EXPECT_EQ(zcard(0, "sem"), 2);
    co_await l2.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, all_masters_quorum_fails_fast_with_one_master_down) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    // P = 4 on N = 5: q = 5. With every master up, four permits are there to take.
    {
      redlock::client a{io.get_executor(), config()};
      std::vector<redlock::lock> held;
      for (int i = 0; i < 4; ++i) {
        auto [ec, l] = co_await a.async_try_lock("sem", 10s, sem(4), use_tuple);
        EXPECT_FALSE(ec) << "holder " << i << ": " << ec.message();
        held.push_back(std::move(l));
      }
      auto [e5, l5] = co_await a.async_try_lock("sem", 10s, sem(4), use_tuple);
      EXPECT_EQ(e5, error::not_acquired);
      for (auto& l : held) co_await l.async_unlock(use_tuple);
    }
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }));

    kill(4);
    redlock::client b{io.get_executor(), config(1000ms)};
    auto [e1, l1] = co_await b.async_try_lock("sem", 10s, sem(4), use_tuple);
    EXPECT_EQ(e1, error::quorum_unavailable) << e1.message();
    EXPECT_EQ(count_status(l1, master_status::taken), 0u);
    // With retries it ends with its max_wait, not later, and leaves nothing behind.
    auto p = start_lock(b, "sem", 10s, sem(4));
    EXPECT_TRUE(co_await until([&] { return p->done; }, 10s)) << "the acquisition hangs";
    EXPECT_EQ(p->ec, error::quorum_unavailable) << p->ec.message();
    EXPECT_GT(p->lock.attempts(), 1u);
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }, 2s))
        << keys_on_live_masters() << " key(s) left by failed rounds";
    // One permit fewer needs only four masters: still available.
    auto [e2, l2] = co_await b.async_try_lock("sem3", 10s, sem(3), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    co_await l2.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, permits_mismatch_is_refused_by_the_masters) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config(500ms)};
    auto [e1, l1] = co_await a.async_lock("sem", 10s, sem(2), use_tuple);
    EXPECT_FALSE(e1);
    co_await settle([&] { return zcard_is("sem", 1); }, "ZCARD sem = 1");
    auto [e2, l2] = co_await b.async_try_lock("sem", 10s, sem(3), use_tuple);
    EXPECT_EQ(e2, error::quorum_unavailable) << e2.message();
    // Decided once two masters refused (q = 4 of 5); the others had not answered yet, or refused too.
    EXPECT_GE(count_status(l2, master_status::server_error), 2u);
    for (const auto& m : l2.masters()) {
      EXPECT_TRUE(m.status == master_status::server_error || m.status == master_status::pending) << to_string(m.status);
      if (m.status == master_status::server_error) {
        EXPECT_NE(m.server_text.find("permits"), std::string::npos) << m.server_text;
      }
    }
    auto [e3, l3] = co_await b.async_lock("sem", 10s, sem(3), use_tuple);
    EXPECT_TRUE(e3);
    EXPECT_EQ(zcard_is("sem", 1), 5u) << "a mismatched client got in";
    EXPECT_EQ(get_is(permits_of("sem"), "2"), 5u);
    // Once no holder lives, the other number is accepted.
    // The release and the acquisition are each decided by a quorum: wait for the rest to land.
    co_await l1.async_unlock(use_tuple);
    co_await settle([&] { return zcard_is("sem", 0); }, "ZCARD sem = 0");
    auto [e4, l4] = co_await b.async_try_lock("sem", 10s, sem(3), use_tuple);
    EXPECT_FALSE(e4) << e4.message();
    co_await settle([&] { return get_is(permits_of("sem"), "3"); }, "permits of sem = 3");
    co_await l4.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, semaphore_extensions_need_its_quorum) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    auto [e1, l1] = co_await a.async_lock("sem", 1000ms, sem(2), use_tuple);
    EXPECT_FALSE(e1);
    co_await settle([&] { return zcard_is("sem", 1); }, "ZCARD sem = 1");
    std::vector<double> before;
    for (std::size_t m = 0; m < servers.size(); ++m) before.push_back(zscore(m, "sem", l1.token()));
    auto [x1] = co_await l1.async_extend(8000ms, use_tuple);
    EXPECT_FALSE(x1) << x1.message();
    co_await settle(
        [&, &l1 = l1] {
          std::size_t n = 0;
          for (std::size_t m = 0; m < servers.size(); ++m) {
            n += zscore(m, "sem", l1.token()) > before[m] + 5000 && pttl(m, "sem") > 5000 &&
                 pttl(m, permits_of("sem")) > 5000;
          }
          return n;
        },
        "the holder's entry, the holders' set and the permit count extended");

    // Keep-alive: held past its ttl.
    auto [e2, l2] = co_await a.async_lock("sem", 600ms, sem(2), use_tuple);
    EXPECT_FALSE(e2);
    co_await settle([&] { return zcard_is("sem", 2); }, "ZCARD sem = 2");
    const double first = zscore(0, "sem", l2.token());
    l2.keep_alive();
    co_await sleep_for(1500ms);
    EXPECT_FALSE(l2.lost()) << l2.loss_reason().message();
    EXPECT_GE(l2.extensions(), 2u);
    EXPECT_GT(zscore(0, "sem", l2.token()), first + 500);
    co_await l2.async_unlock(use_tuple);

    // Three masters left: a majority, but fewer than q = 4; the extension fails.
    kill(0);
    kill(1);
    const auto deadline = l1.validity_deadline();
    auto [x2] = co_await l1.async_extend(8000ms, use_tuple);
    EXPECT_EQ(x2, error::quorum_unavailable) << x2.message();
    EXPECT_EQ(l1.validity_deadline(), deadline);
  });
}

TEST_F(rw_semaphore, released_permit_frees_a_slot_at_once) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config()};
    // Long ttls: only the release can free the slot within this test.
    auto [e1, l1] = co_await a.async_lock("sem", 60s, sem(2), use_tuple);
    auto [e2, l2] = co_await a.async_lock("sem", 60s, sem(2), use_tuple);
    EXPECT_FALSE(e1);
    EXPECT_FALSE(e2);
    co_await settle([&] { return zcard_is("sem", 2); }, "ZCARD sem = 2");
    auto [e3, l3] = co_await b.async_try_lock("sem", 60s, sem(2), use_tuple);
    EXPECT_EQ(e3, error::not_acquired);
    auto [u, n] = co_await l1.async_unlock(use_tuple);
    EXPECT_FALSE(u);
    EXPECT_GE(n, 3u);
    EXPECT_TRUE(co_await until([&] { return zcard_is("sem", 1) == 5; }, 2s));
    auto [e4, l4] = co_await b.async_try_lock("sem", 60s, sem(2), use_tuple);
    EXPECT_FALSE(e4) << e4.message();
    co_await settle([&] { return zcard_is("sem", 2); }, "ZCARD sem = 2");
    co_await l2.async_unlock(use_tuple);
    co_await l4.async_unlock(use_tuple);
    // The last release takes the permit count with it.
    EXPECT_TRUE(co_await until([&] { return keys_on_live_masters() == 0; }))
        << keys_on_live_masters() << " key(s) left";
  });
}

TEST_F(rw_semaphore, holder_that_stops_renewing_frees_its_slot) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    redlock::client b{io.get_executor(), config(5000ms)};
    // Two holders that keep their handles but never extend: a short one, and a long one that keeps
    // the holders' set alive (its ttl is the set's), so that only the acquire script's dropping of
    // expired holders can free the short one's slot.
    auto [e1, l1] = co_await a.async_lock("sem", 700ms, sem(2), use_tuple);
    auto [e2, l2] = co_await a.async_lock("sem", 20s, sem(2), use_tuple);
    EXPECT_FALSE(e1);
    EXPECT_FALSE(e2);
    co_await settle([&] { return zcard_is("sem", 2); }, "ZCARD sem = 2");
    auto [e3, l3] = co_await b.async_try_lock("sem", 10s, sem(2), use_tuple);
    EXPECT_EQ(e3, error::not_acquired);
    auto [e4, l4] = co_await b.async_lock("sem", 10s, sem(2), use_tuple);
    const auto got = clock_type::now();
    EXPECT_FALSE(e4) << "an expired holder still counts: " << e4.message();
    EXPECT_GE(got, l1.validity_deadline());
    // Where it was admitted, the expired holder is gone and the live one stays.
    co_await settle([&] { return zcard_is("sem", 2); }, "ZCARD sem = 2");
    for (std::size_t m = 0; m < servers.size(); ++m) {
      EXPECT_LT(zscore(m, "sem", l1.token()), 0.0) << "master " << m + 1;
      EXPECT_GT(zscore(m, "sem", l2.token()), 0.0) << "master " << m + 1;
      EXPECT_GT(zscore(m, "sem", l4.token()), 0.0) << "master " << m + 1;
    }
    auto [u1, n1] = co_await l1.async_unlock(use_tuple);
    EXPECT_FALSE(u1);
    EXPECT_EQ(n1, 0u);
    co_await l2.async_unlock(use_tuple);
    co_await l4.async_unlock(use_tuple);
  });
}

TEST_F(rw_semaphore, invalid_options_are_refused_before_any_master_is_asked) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    auto [e1, l1] = co_await a.async_lock("sem", 10s, sem(0), use_tuple);
    EXPECT_EQ(e1, error::invalid_argument);
    for (auto k : {lock_kind::exclusive, lock_kind::read, lock_kind::write}) {
      auto [e2, l2] = co_await a.async_lock("x", 10s, kind_opts(k, 2), use_tuple);
      EXPECT_EQ(e2, error::invalid_argument) << to_string(k);
    }
    auto fenced_reader = reader();
    fenced_reader.fence = true;
    auto [e3, l3] = co_await a.async_lock("x", 10s, fenced_reader, use_tuple);
    EXPECT_EQ(e3, error::invalid_argument);
    auto owned_sem = sem(2);
    owned_sem.owner = "owner-1";
    auto [e4, l4] = co_await a.async_lock("x", 10s, owned_sem, use_tuple);
    EXPECT_EQ(e4, error::invalid_argument);
    EXPECT_FALSE(l4.owns_lock());
    EXPECT_EQ(a.stats().lock_attempts, 0u);
    co_await sleep_for(50ms);
    EXPECT_EQ(keys_on_live_masters(), 0u);
  });
}

}  // namespace
