// SPDX-License-Identifier: BSL-1.0
// The lock scripts' safety rules on real masters (docs/safety.md, "What each script guarantees"):
// no script moves an expiry earlier, an error reply means the script wrote nothing, helper keys
// cannot be named by users, fences increase even when masters' clocks disagree, the readers' keys
// live exactly as long as the last reader, and every master orders fair waiters alike.
//
// Each rule is shown twice where it can be: on one master, by running the script byte for byte as
// the client sends it and reading the master's state; and through the public API, by the two
// holders the broken rule let in. Each test names what a wrong script or client would do.

#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace scripts = redlock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::lock_kind;
using redlock::lock_options;
using redlock::test::bulk_of;
using redlock::test::integer_of;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;
using redlock::test::wait_connected;
using clock_type = redlock::clock;
using ms = std::chrono::milliseconds;

std::string suffixed(const std::string& key, std::string_view suffix) { return key + std::string{suffix}; }

using redlock::test::strings_of;

lock_options of_kind(lock_kind k, std::size_t permits = 1) {
  lock_options o;
  o.kind = k;
  o.permits = permits;
  return o;
}

lock_options fenced() {
  lock_options o;
  o.fence = true;
  return o;
}

struct script_safety : ::testing::Test {
  // Each master's wall clock can be shifted or stopped (master_clock); it runs real unless told.
  redlock::test::master_set servers{5, redlock::test::with_clock_shim()};

  // One attempt per lock: a refusal shows at once. (So each test waits for its clients' connections
  // first: under load a first lock could otherwise time out on a connection still coming up.)
  redlock::client_config config() {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.max_attempts = 1;
    return cfg;
  }

  // ---- one master, byte for byte ----------------------------------------------------------------

  // `EVAL body numkeys keys... args...` on master `i`: the raw reply.
  std::string eval(std::size_t i, const scripts::script& s, const std::vector<std::string>& keys,
                   const std::vector<std::string>& args) {
    std::vector<std::string> cmd{"EVAL", std::string{s.body}, std::to_string(keys.size())};
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return servers[i].command(cmd);
  }
  std::string run(std::size_t i, std::initializer_list<std::string_view> cmd) { return servers[i].command(cmd); }
  std::int64_t pttl(std::size_t i, const std::string& key) { return integer_of(run(i, {"PTTL", key})).value(); }
  std::optional<std::string> get(std::size_t i, const std::string& key) { return bulk_of(run(i, {"GET", key})); }
  // A sorted-set member's score (server ms), or -1 when absent.
  std::int64_t score(std::size_t i, const std::string& key, const std::string& member) {
    const auto s = bulk_of(run(i, {"ZSCORE", key, member}));
    return s ? static_cast<std::int64_t>(std::stod(*s)) : -1;
  }
  // The master's clock in ms.
  std::int64_t server_ms(std::size_t i) {
    const auto t = strings_of(run(i, {"TIME"}));
    return std::stoll(t.at(0)) * 1000 + std::stoll(t.at(1)) / 1000;
  }
  std::int64_t server_us(std::size_t i) {
    const auto t = strings_of(run(i, {"TIME"}));
    return std::stoll(t.at(0)) * 1000000 + std::stoll(t.at(1));
  }
  bool up(std::size_t i) { return servers[i].running() && !servers[i].paused(); }
  // PUBLISH calls master `i` ran so far, scripts' included (`INFO commandstats`).
  std::int64_t publishes(std::size_t i) {
    const auto info = bulk_of(run(i, {"INFO", "commandstats"})).value_or("");
    const auto at = info.find("cmdstat_publish:calls=");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 22));
  }
  // A connection to master `i` subscribed to the channel of the client whose inbox is `inbox`, as
  // a live client's is (a release hands the key only to a waiter whose client receives it).
  std::vector<redlock::local::session> subscribers;
  void subscribe(std::size_t i, const std::string& inbox) {
    subscribers.push_back(servers[i].open());
    subscribers.back().command({"SUBSCRIBE", "redlock:wake:" + inbox});
  }
  std::size_t holding(const std::string& key, const std::string& value) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) n += up(i) && get(i, key) == value;
    return n;
  }
};

// ==== 1. No script moves an expiry earlier =========================================================

// Each kind's key is taken with a 10 s ttl, then extended with 200 ms: the expiry must stay where
// it was (and a longer ttl must still move it later, so that a script doing nothing would fail
// too). A script that re-arms to the new ttl moves it to 200 ms: if that extension then fails or
// is cancelled, its holder trusts a deadline the masters no longer keep.
TEST_F(script_safety, no_extend_script_moves_an_expiry_earlier) {
  const std::string tok = "aaaa1111", owner = "owner-1";
  // plain (and a writer's held key)
  run(0, {"SET", "p", tok, "PX", "10000"});
  EXPECT_EQ(eval(0, scripts::extend_script, {"p"}, {tok, "200"}), ":1\r\n");
  EXPECT_GT(pttl(0, "p"), 9000) << "plain extend moved the expiry earlier";
  EXPECT_EQ(eval(0, scripts::extend_script, {"p"}, {tok, "20000"}), ":1\r\n");
  EXPECT_GT(pttl(0, "p"), 15000) << "a longer ttl must still extend";

  // multi-resource
  EXPECT_EQ(eval(0, scripts::multi_acquire_script, {"m1", "m2"}, {tok, "10000"}), "*2\r\n:1\r\n:2\r\n");
  EXPECT_EQ(eval(0, scripts::multi_extend_script, {"m1", "m2"}, {tok, "200"}), ":1\r\n");
  EXPECT_GT(pttl(0, "m1"), 9000);
  EXPECT_GT(pttl(0, "m2"), 9000);
  EXPECT_EQ(eval(0, scripts::multi_extend_script, {"m1", "m2"}, {tok, "20000"}), ":1\r\n");
  EXPECT_GT(pttl(0, "m2"), 15000);

  // reentrant
  const std::vector<std::string> rk{"r", suffixed("r", scripts::holds_suffix)};
  EXPECT_EQ(eval(0, scripts::reentrant_acquire_script, rk, {owner, "10000", tok}), "*2\r\n:1\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::reentrant_extend_script, rk, {owner, "200", tok}), ":1\r\n");
  EXPECT_GT(pttl(0, "r"), 9000);
  EXPECT_GT(pttl(0, rk[1]), 9000);

  // reader: its own entry (its expiry on this master) and the marker
  const std::vector<std::string> wk{"w", suffixed("w", scripts::readers_suffix), suffixed("w", scripts::writer_suffix)};
  EXPECT_EQ(eval(0, scripts::read_acquire_script, wk, {tok, "10000"}), "*2\r\n:1\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::read_extend_script, {wk[0], wk[1]}, {tok, "200"}), ":1\r\n");
  EXPECT_GT(score(0, wk[1], tok) - server_ms(0), 9000) << "the reader's entry moved earlier";
  EXPECT_GT(pttl(0, "w"), 9000);
  EXPECT_EQ(eval(0, scripts::read_extend_script, {wk[0], wk[1]}, {tok, "20000"}), ":1\r\n");
  EXPECT_GT(score(0, wk[1], tok) - server_ms(0), 15000);
  EXPECT_GT(pttl(0, "w"), 15000);

  // semaphore holder
  const std::vector<std::string> sk{"s", suffixed("s", scripts::permits_suffix)};
  EXPECT_EQ(eval(0, scripts::semaphore_acquire_script, sk, {tok, "10000", "2"}), "*2\r\n:1\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::semaphore_extend_script, sk, {tok, "200"}), ":1\r\n");
  EXPECT_GT(score(0, "s", tok) - server_ms(0), 9000) << "the holder's entry moved earlier";
  EXPECT_EQ(eval(0, scripts::semaphore_extend_script, sk, {tok, "20000"}), ":1\r\n");
  EXPECT_GT(score(0, "s", tok) - server_ms(0), 15000);
  EXPECT_GT(pttl(0, "s"), 15000);
}

// The keep-alive's batch script: each key judged and extended as `extend_script` alone would,
// with its own token and its own ttl. A script that paired a key with a neighbour's token or ttl,
// stopped at a key of another type, created a missing key, or moved an expiry earlier, fails here.
TEST_F(script_safety, the_batch_extension_treats_each_key_as_the_plain_script_would) {
  run(0, {"SET", "b1", "tok-1", "PX", "10000"});
  run(0, {"SET", "b2", "someone-else", "PX", "3000"});
  run(0, {"HSET", "b4", "f", "v"});
  run(0, {"SET", "b5", "tok-5", "PX", "100"});
  run(0, {"SET", "b6", "tok-6", "PX", "100"});
  const auto reply =
      eval(0, scripts::extend_many_script, {"b1", "b2", "b3", "b4", "b5", "b6"},
           {"tok-1", "200", "tok-2", "9000", "tok-3", "9000", "tok-4", "9000", "tok-5", "5000", "tok-6", "8000"});
  EXPECT_EQ(reply,
            "*6\r\n:1\r\n:0\r\n:0\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
            ":1\r\n:1\r\n");
  EXPECT_GT(pttl(0, "b1"), 9000) << "moved an expiry earlier";
  EXPECT_EQ(get(0, "b2"), "someone-else");
  EXPECT_LE(pttl(0, "b2"), 3000) << "extended another holder's key";
  EXPECT_EQ(run(0, {"EXISTS", "b3"}), ":0\r\n") << "created a missing key";
  EXPECT_EQ(run(0, {"TYPE", "b4"}), "+hash\r\n");
  EXPECT_EQ(run(0, {"PTTL", "b4"}), ":-1\r\n");
  // Each its own ttl: not the first key's (200), nor the next one's.
  EXPECT_GT(pttl(0, "b5"), 4000);
  EXPECT_LE(pttl(0, "b5"), 5000);
  EXPECT_GT(pttl(0, "b6"), 7000);
  // Tokens crossed between two keys extend neither.
  run(0, {"SET", "c1", "tok-a", "PX", "100"});
  run(0, {"SET", "c2", "tok-b", "PX", "100"});
  EXPECT_EQ(eval(0, scripts::extend_many_script, {"c1", "c2"}, {"tok-b", "9000", "tok-a", "9000"}),
            "*2\r\n:0\r\n:0\r\n");
  EXPECT_LE(pttl(0, "c1"), 100);
  // Arguments not in pairs: refused whole, before anything is touched.
  const auto odd = eval(0, scripts::extend_many_script, {"b5", "b6"}, {"tok-5", "20000", "tok-6"});
  EXPECT_EQ(odd.substr(0, 4), "-ERR") << odd;
  EXPECT_LE(pttl(0, "b5"), 5000);
}

// Through the public API: A holds for 10 s, asks for 500 ms more and gives up at once (the
// requests were sent: they run on the masters). Once 500 ms have passed, B must still be refused
// while A's validity lasts. With extend scripts that re-arm to the new ttl, every master drops
// A's key after 500 ms and B takes the lock inside A's validity: two holders.
TEST_F(script_safety, a_cancelled_extension_to_a_shorter_ttl_lets_no_one_else_in) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()}, b{io.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);
    auto [ea, la] = co_await a.async_lock("cx", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    const auto deadline = la.validity_deadline();
    asio::cancellation_signal cancel;
    error_code extended;
    bool done = false;
    la.async_extend(500ms, asio::bind_cancellation_slot(cancel.slot(), [&](error_code e) {
                      extended = e;
                      done = true;
                    }));
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return done; }));
    EXPECT_EQ(extended, asio::error::operation_aborted);
    EXPECT_EQ(la.validity_deadline(), deadline) << "a cancelled extension moves nothing";
    co_await sleep_for(800ms);  // the 500 ms ttl, had it been applied, has run out on every master
    EXPECT_GT(la.validity_deadline(), clock_type::now() + 5s);
    auto [eb, lb] = co_await b.async_try_lock("cx", 10s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << "B was granted the lock A holds until its deadline";
    EXPECT_EQ(holding("cx", la.token()), 5u);
  });
}

// A successful extension to a shorter ttl keeps both the masters' expiry and the deadline.
TEST_F(script_safety, an_extension_to_a_shorter_ttl_keeps_the_expiry_and_the_deadline) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [ea, la] = co_await a.async_lock("sx", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    const auto deadline = la.validity_deadline();
    auto [ee] = co_await la.async_extend(500ms, use_tuple);
    EXPECT_FALSE(ee) << ee.message();
    EXPECT_EQ(la.validity_deadline(), deadline);
    co_await until([&, &la = la] { return holding("sx", la.token()) == 5; });
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_GT(pttl(i, "sx"), 8000) << "master " << i + 1;
    // A longer one still moves it later.
    auto [el] = co_await la.async_extend(20s, use_tuple);
    EXPECT_FALSE(el) << el.message();
    EXPECT_GT(la.validity_deadline(), deadline + 5s);
  });
}

// The keep-alive with a ttl shorter than the time left (renewing early on purpose) never moves the
// masters' expiry earlier either; and with nothing to gain from extending again at once, it waits
// its retry interval instead of extending in a loop.
TEST_F(script_safety, keep_alive_with_a_shorter_ttl_never_shortens_the_lock) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [ea, la] = co_await a.async_lock("kx", 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    const auto deadline = la.validity_deadline();
    redlock::keep_alive_options opts;
    opts.ttl = 500ms;
    opts.renew_below = 20s;  // due at once, and again after every extension
    la.keep_alive(opts);
    EXPECT_TRUE(co_await until([&, &la = la] { return la.extensions() >= 1; }));
    co_await until([&, &la = la] { return holding("kx", la.token()) == 5; });
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_GT(pttl(i, "kx"), 8000) << "master " << i + 1;
    EXPECT_GE(la.validity_deadline(), deadline);
    co_await sleep_for(300ms);
    // The retry interval (a tenth of 500 ms) paces it: a few extensions, not thousands.
    EXPECT_LE(la.extensions(), 12u);
    EXPECT_FALSE(la.lost());
  });
}

// A semaphore of one permit: A's shortened-then-cancelled extension must not free its permit on
// the masters while A still holds it.
TEST_F(script_safety, a_cancelled_shorter_semaphore_extension_admits_no_extra_holder) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()}, b{io.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);
    auto [ea, la] = co_await a.async_lock("sem", 10s, of_kind(lock_kind::semaphore), use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    asio::cancellation_signal cancel;
    bool done = false;
    la.async_extend(500ms, asio::bind_cancellation_slot(cancel.slot(), [&](error_code) { done = true; }));
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return done; }));
    co_await sleep_for(800ms);
    EXPECT_GT(la.validity_deadline(), clock_type::now() + 5s);
    auto [eb, lb] = co_await b.async_try_lock("sem", 10s, of_kind(lock_kind::semaphore), use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << "two holders of a semaphore of one permit";
  });
}

// Readers A and B; A's shortened-then-cancelled extension; B leaves. A writer must still be
// refused while A's validity lasts. With a reader entry moved earlier, B's release sweeps A's
// entry as expired, deletes the marker, and the writer joins a reader.
TEST_F(script_safety, a_cancelled_shorter_reader_extension_lets_no_writer_in) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()}, b{io.get_executor(), config()}, w{io.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);
    co_await wait_connected(w);
    auto [ea, la] = co_await a.async_lock("rw", 10s, of_kind(lock_kind::read), use_tuple);
    auto [eb, lb] = co_await b.async_lock("rw", 10s, of_kind(lock_kind::read), use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    EXPECT_FALSE(eb) << eb.message();
    asio::cancellation_signal cancel;
    bool done = false;
    la.async_extend(500ms, asio::bind_cancellation_slot(cancel.slot(), [&](error_code) { done = true; }));
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return done; }));
    co_await sleep_for(800ms);
    auto [eu, held] = co_await lb.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_GT(la.validity_deadline(), clock_type::now() + 5s);
    auto [ew, lw] = co_await w.async_try_lock("rw", 10s, of_kind(lock_kind::write), use_tuple);
    EXPECT_EQ(ew, error::not_acquired) << "a writer was granted while reader A holds the lock";
  });
}

// A lock on two resources: the same for each of them.
TEST_F(script_safety, a_cancelled_shorter_multi_extension_lets_no_one_take_a_resource) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()}, b{io.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);
    const std::vector<std::string> set{"ma", "mb"};
    auto [ea, la] = co_await a.async_lock_all(set, 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    asio::cancellation_signal cancel;
    bool done = false;
    la.async_extend(500ms, asio::bind_cancellation_slot(cancel.slot(), [&](error_code) { done = true; }));
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return done; }));
    co_await sleep_for(800ms);
    EXPECT_GT(la.validity_deadline(), clock_type::now() + 5s);
    auto [eb, lb] = co_await b.async_try_lock("mb", 10s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << "B took a resource of A's set";
  });
}

// ==== 2. Fences increase when masters' clocks disagree =============================================

// Master 1's clock runs an hour ahead (for real: the clock shim). The resource's first use hears
// every master, none with a counter, and fences above every clock: near that hour, and the
// confirmation creates the counters there. A is granted by masters 1-3 (4 and 5 hold someone
// else's key). Master 3 restarts without its data. B is granted by masters 3-5: 4 and 5 answer
// counters one below A's fence, 3 none. B must hear masters 1 and 2 (they refuse, and answer A's
// fence) before fixing its own. Seeding master 3's counter from its own (correct) clock and taking
// the largest of the granting masters gives B the same fence as A: a fence-checking resource would
// refuse B, the rightful holder.
TEST_F(script_safety, fences_increase_after_a_restart_when_another_masters_clock_was_ahead) {
  const std::string key = "fx", counter = suffixed("fx", scripts::fence_suffix);
  redlock::test::master_clock fast{servers[0]};
  fast.shift(std::chrono::hours{1});
  const auto ahead = server_us(0);
  std::uint64_t fence_a = 0;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [e0, l0] = co_await a.async_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(e0) << e0.message();
    EXPECT_GT(l0.fence(), static_cast<std::uint64_t>(ahead)) << "the first use fences above every clock";
    co_await l0.async_unlock(use_tuple);
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(get(i, counter), std::to_string(l0.fence()));
    for (std::size_t i : {3u, 4u}) run(i, {"SET", key, "someone-else", "PX", "60000"});
    auto [ea, la] = co_await a.async_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    fence_a = la.fence();
    EXPECT_EQ(fence_a, l0.fence() + 1);
    co_await la.async_unlock(use_tuple);
    EXPECT_EQ(a.stats().fences_unverified, 0u);
  });
  for (std::size_t i : {3u, 4u}) run(i, {"DEL", key});
  servers[2].restart();
  for (std::size_t i : {0u, 1u}) run(i, {"SET", key, "someone-else", "PX", "60000"});
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.retry.max_attempts = 0;  // until master 3's new connection is up
    cfg.retry.max_wait = 5s;
    redlock::client b{io.get_executor(), cfg};
    auto [eb, lb] = co_await b.async_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(eb) << eb.message();
    EXPECT_GT(lb.fence(), fence_a) << "B's fence is not above A's: a fence-checking resource would refuse B";
    EXPECT_EQ(b.stats().fences_unverified, 0u) << "4 of 5 masters answered a counter";
    // Master 3's counter was created at B's fence, the others raised to it.
    for (std::size_t i : {2u, 3u, 4u}) EXPECT_EQ(get(i, counter), std::to_string(lb.fence())) << "master " << i + 1;
  });
}

// A new resource with one master stopped: the granting masters have no counter and the stopped one
// cannot be heard. The lock is still granted (a new resource must stay lockable while a master is
// down), but its fence rests on the masters' clocks: counted, logged, and creating no counter
// (a later round would take such a counter for proof). So the next holder is in the same case,
// until every master can be heard again: then it is a first use, fenced above every clock, and
// its counters make the following holders verified.
TEST_F(script_safety, a_fence_that_rests_on_clocks_is_counted_and_creates_no_counter) {
  const std::string counter = suffixed("new-2", scripts::fence_suffix);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [e1, l1] = co_await a.async_lock("new-1", 5s, fenced(), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    EXPECT_EQ(a.stats().fences_unverified, 0u) << "a first use with every master heard";
    EXPECT_GT(l1.fence(), static_cast<std::uint64_t>(server_us(0) - 60000000)) << "above the masters' clocks";
    servers[4].pause();
    auto [e2, l2] = co_await a.async_lock("new-2", 5s, fenced(), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_EQ(a.stats().fences_unverified, 1u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(get(i, counter), std::nullopt) << "master " << i + 1;
    co_await l2.async_unlock(use_tuple);
    auto [e3, l3] = co_await a.async_lock("new-2", 5s, fenced(), use_tuple);
    EXPECT_FALSE(e3) << e3.message();
    EXPECT_GT(l3.fence(), l2.fence()) << "clocks moved on";
    EXPECT_EQ(a.stats().fences_unverified, 2u);
    co_await l3.async_unlock(use_tuple);
    servers[4].resume();
    // Until its overdue replies come, the client treats it as down: wait until it answers a lock.
    bool answers = false;
    for (int i = 0; i < 200 && !answers; ++i) {
      auto [ep, probe] = co_await a.async_try_lock("probe", 5s, use_tuple);
      if (!ep) {
        auto [eu, r] = co_await probe.async_unlock(redlock::unlock_options{.wait_for_all = true}, use_tuple);
        answers = !eu && r.unreachable == 0;
      }
      if (!answers) co_await sleep_for(20ms);
    }
    EXPECT_TRUE(answers) << "master 5 never answered again";
    auto [e4, l4] = co_await a.async_lock("new-2", 5s, fenced(), use_tuple);
    EXPECT_FALSE(e4) << e4.message();
    EXPECT_GT(l4.fence(), l3.fence());
    EXPECT_EQ(a.stats().fences_unverified, 2u) << "every master heard, none with a counter: a first use";
    co_await until([&] { return get(4, counter).has_value(); });
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(get(i, counter), std::to_string(l4.fence()));
    co_await l4.async_unlock(use_tuple);
    auto [e5, l5] = co_await a.async_lock("new-2", 5s, fenced(), use_tuple);
    EXPECT_FALSE(e5) << e5.message();
    EXPECT_EQ(l5.fence(), l4.fence() + 1);
    EXPECT_EQ(a.stats().fences_unverified, 2u);
  });
}

// The confirmation creates a missing counter only when told the fence was checked; it always
// raises one that exists, and never lowers it.
TEST_F(script_safety, a_confirmation_creates_a_counter_only_for_a_checked_fence) {
  const std::vector<std::string> k{"cf", suffixed("cf", scripts::fence_suffix)};
  run(0, {"SET", "cf", "tok", "PX", "10000"});
  EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"tok", "50", "0"}), ":1\r\n");
  EXPECT_EQ(get(0, k[1]), std::nullopt);
  EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"tok", "50", "1"}), ":1\r\n");
  EXPECT_EQ(get(0, k[1]), "50");
  EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"tok", "60", "0"}), ":1\r\n");
  EXPECT_EQ(get(0, k[1]), "60");
  EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"tok", "55", "1"}), ":1\r\n");
  EXPECT_EQ(get(0, k[1]), "60");
  EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"other", "99", "1"}), ":0\r\n") << "not our key";
  EXPECT_EQ(get(0, k[1]), "60");
  // A counter that is not one is refused before anything is written (double precision ends at 2^53).
  for (const std::string junk : {"nan", "inf", "1e400", "-5", "9007199254740993", "12abc"}) {
    run(0, {"SET", k[1], junk});
    EXPECT_EQ(eval(0, scripts::fence_confirm_script, k, {"tok", "70", "1"}).substr(0, 7), "-REDLOC") << junk;
    EXPECT_EQ(eval(0, scripts::fence_acquire_script, {"cf2", k[1]}, {"tok2", "10000", "0"}).substr(0, 7), "-REDLOC")
        << junk;
    EXPECT_EQ(get(0, k[1]), junk);
    EXPECT_EQ(get(0, "cf2"), std::nullopt);
  }
}

// A failed fenced round's release takes back the one counter step its grant made, only where the
// key still holds its token; it never creates a counter, leaves one that is not a counter as the
// grants write them alone, reads the counter before it writes anything, and wakes the first waiter
// as the plain release does.
TEST_F(script_safety, a_failed_fenced_round_gives_back_only_its_own_counter_step) {
  const std::vector<std::string> k{"fa", suffixed("fa", scripts::queue_suffix), suffixed("fa", scripts::expiry_suffix),
                                   suffixed("fa", scripts::offer_suffix), suffixed("fa", scripts::fence_suffix)};
  const auto abandon = [&](const std::string& token) { return eval(0, scripts::fence_abandon_script, k, {token}); };
  run(0, {"SET", k[4], "41"});
  EXPECT_EQ(eval(0, scripts::fence_acquire_script, {k[0], k[4]}, {"tok", "10000", "0"}), "*2\r\n:1\r\n:42\r\n");
  EXPECT_EQ(abandon("other"), ":0\r\n") << "not our key";
  EXPECT_EQ(get(0, k[4]), "42") << "the counter step of whoever holds the key is not ours to take";
  EXPECT_EQ(get(0, k[0]), "tok");
  EXPECT_EQ(abandon("tok"), ":1\r\n");
  EXPECT_EQ(get(0, k[4]), "41") << "back to where the grant found it";
  EXPECT_EQ(get(0, k[0]), std::nullopt);
  EXPECT_EQ(abandon("tok"), ":0\r\n") << "sent again: the key is gone";
  EXPECT_EQ(get(0, k[4]), "41") << "a release sent twice takes one step back, not two";
  // From a floor above the counter: back to the floor, not below it.
  EXPECT_EQ(eval(0, scripts::fence_acquire_script, {k[0], k[4]}, {"tok2", "10000", "90"}), "*2\r\n:1\r\n:91\r\n");
  EXPECT_EQ(abandon("tok2"), ":1\r\n");
  EXPECT_EQ(get(0, k[4]), "90");
  // No counter: none is made. One the grants never write stays as it is.
  run(0, {"DEL", k[4]});
  run(0, {"SET", k[0], "tok", "PX", "10000"});
  EXPECT_EQ(abandon("tok"), ":1\r\n");
  EXPECT_EQ(get(0, k[4]), std::nullopt);
  for (const std::string odd : {"0", "007", " 5", "5.0", "abc", "-5", "9007199254740000", "9007199254740993"}) {
    run(0, {"SET", k[4], odd});
    run(0, {"SET", k[0], "tok", "PX", "10000"});
    EXPECT_EQ(abandon("tok"), ":1\r\n") << odd;
    EXPECT_EQ(get(0, k[4]), odd);
    EXPECT_EQ(get(0, k[0]), std::nullopt) << odd;
  }
  run(0, {"SET", k[4], "9007199254739999"});
  run(0, {"SET", k[0], "tok", "PX", "10000"});
  EXPECT_EQ(abandon("tok"), ":1\r\n");
  EXPECT_EQ(get(0, k[4]), "9007199254739998") << "the largest counter a grant can write";
  // A counter key of another type: an error reply, and nothing was written (the key is still ours).
  run(0, {"DEL", k[4]});
  run(0, {"HSET", k[4], "f", "1"});
  run(0, {"SET", k[0], "tok", "PX", "10000"});
  EXPECT_EQ(abandon("tok").substr(0, 1), "-");
  EXPECT_EQ(get(0, k[0]), "tok");
  run(0, {"DEL", k[4]});
  // A queued waiter is woken, as by the plain release.
  run(0, {"SET", k[4], "7"});
  run(0, {"SET", k[0], "tok", "PX", "10000"});
  run(0, {"ZADD", k[1], "1", "0123456789abcdef:1"});
  run(0, {"ZADD", k[2], std::to_string(server_ms(0) + 60000), "0123456789abcdef:1"});
  EXPECT_EQ(abandon("tok"), ":2\r\n");
  EXPECT_EQ(get(0, k[4]), "6");
  // An expired waiter leaves the queues with its offer, as in the plain release.
  run(0, {"SET", k[0], "tok", "PX", "10000"});
  run(0, {"ZADD", k[1], "0", "fedcba9876543210:1"});
  run(0, {"ZADD", k[2], std::to_string(server_ms(0) - 1), "fedcba9876543210:1"});
  run(0, {"HSET", k[3], "fedcba9876543210:1", "5000:3:tok-gone", "0123456789abcdef:1", "5000:2:tok-next"});
  EXPECT_EQ(abandon("tok"), ":2\r\n");
  EXPECT_EQ(run(0, {"ZSCORE", k[1], "fedcba9876543210:1"}), "$-1\r\n");
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "fedcba9876543210:1"}), ":0\r\n") << "the expired waiter's offer stayed";
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "0123456789abcdef:1"}), ":1\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt) << "a failed round's release hands nothing over";
}

// Masters 1-3 hold someone else's key; a fenced attempt is granted by masters 4 and 5 only, and
// fails. Its release gives their counter step back: the counters are as before, and the next
// holder's masters agree on its fence at once. Kept, the step would leave masters 4 and 5 one
// ahead, and the next lock would need a confirmation round to raise the others to its fence.
TEST_F(script_safety, a_failed_fenced_round_leaves_the_counters_as_it_found_them) {
  const std::string key = "fr", counter = suffixed("fr", scripts::fence_suffix);
  for (std::size_t i = 0; i < servers.size(); ++i) run(i, {"SET", counter, "100"});
  for (std::size_t i : {0u, 1u, 2u}) run(i, {"SET", key, "someone-else", "PX", "60000"});
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [e1, l1] = co_await a.async_try_lock(key, 5s, fenced(), use_tuple);
    EXPECT_EQ(e1, error::not_acquired) << e1.message();
    // The release goes in the background: wait until masters 4 and 5 no longer hold the key.
    const bool released = co_await until([&] { return !get(3, key) && !get(4, key); }, 2s);
    EXPECT_TRUE(released);
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(get(i, counter), "100") << "master " << i + 1;
    for (std::size_t i : {0u, 1u, 2u}) run(i, {"DEL", key});
    auto [e2, l2] = co_await a.async_try_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    // Counted on from the largest number the failed attempt heard: 100 (refusals), or 101 if the
    // grants of masters 4 and 5 came before it failed.
    EXPECT_TRUE(l2.fence() == 101u || l2.fence() == 102u) << l2.fence();
    EXPECT_EQ(a.stats().fence_confirmations, 0u) << "the masters agreed on the fence without a confirmation";
    co_await l2.async_unlock(use_tuple);
  });
}

// A holder granted by masters 1-3 left masters 4 and 5 one behind. The client remembers the fence
// it last saw on the resource; its next attempt, granted by masters 3-5 (1 and 2 hold someone
// else's key), counts on from it, so the three agree and no confirmation round is needed. Counting
// from each master's own counter gives 101, 100, 100: the fence 101 is held by one master, and
// the other two must be raised to it first.
TEST_F(script_safety, a_client_counts_on_from_the_last_fence_it_saw) {
  const std::string key = "fh", counter = suffixed("fh", scripts::fence_suffix);
  for (std::size_t i = 0; i < servers.size(); ++i) run(i, {"SET", counter, "99"});
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config()};
    co_await wait_connected(a);
    auto [e1, l1] = co_await a.async_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    EXPECT_EQ(l1.fence(), 100u);
    co_await l1.async_unlock(redlock::unlock_options{.wait_for_all = true}, use_tuple);
    for (std::size_t i : {3u, 4u}) run(i, {"SET", counter, "99"});
    for (std::size_t i : {0u, 1u}) run(i, {"SET", key, "someone-else", "PX", "60000"});
    auto [e2, l2] = co_await a.async_lock(key, 5s, fenced(), use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_EQ(l2.fence(), 101u);
    EXPECT_EQ(a.stats().fence_confirmations, 0u) << "granted 101, 100, 100: the fence needed confirming";
    co_await l2.async_unlock(use_tuple);
  });
}

// ==== 3. Helper keys are not the users' to name ======================================================

// A plain lock on "x:redlock-holds" would be overwritten by a reentrant lock on "x" (and its holder
// would keep trusting it); a fenced lock on "x" would block a plain lock on "x:redlock-fence"
// forever. Such names are refused before anything is sent, also when the key prefix supplies
// part of the suffix.
TEST_F(script_safety, resource_names_that_end_like_a_helper_key_are_refused) {
  auto cfg = config();
  for (const auto suffix : scripts::helper_suffixes) {
    std::string what;
    const auto name = "x" + std::string{suffix};
    EXPECT_EQ(redlock::validate_lock(cfg, name, 10s, {}, &what), error::invalid_argument) << name;
    EXPECT_NE(what.find(std::string{suffix}), std::string::npos) << what;
    EXPECT_FALSE(redlock::validate_lock(cfg, name + "s", 10s, {}, &what)) << "only the exact suffix is reserved";
  }
  cfg.key_prefix = "app:redlock-";
  std::string what;
  EXPECT_EQ(redlock::validate_lock(cfg, "fence", 10s, {}, &what), error::invalid_argument);
  EXPECT_NE(what.find("key prefix"), std::string::npos) << what;
  EXPECT_FALSE(redlock::validate_lock(cfg, "fenc", 10s, {}, &what)) << what;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client c{io.get_executor(), config()};
    co_await wait_connected(c);
    auto [e1, l1] = co_await c.async_lock("x:redlock-holds", 10s, use_tuple);
    EXPECT_EQ(e1, error::invalid_argument);
    const std::vector<std::string> set{"a", "b:redlock-queue"};
    auto [e2, l2] = co_await c.async_lock_all(set, 10s, use_tuple);
    EXPECT_EQ(e2, error::invalid_argument);
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(run(i, {"DBSIZE"}), ":0\r\n");
  });
}

// ==== 4. The readers' marker is no owner id ==========================================================

// An owner equal to the readers' marker would join the readers, and its release would delete the
// marker while they hold it. Owner ids in the library's "redlock:" namespace are refused.
TEST_F(script_safety, an_owner_id_in_the_librarys_namespace_is_refused) {
  const auto cfg = config();
  for (const std::string& owner : {std::string{scripts::readers_marker}, std::string{"redlock:anything"}}) {
    lock_options o;
    o.owner = owner;
    std::string what;
    EXPECT_EQ(redlock::validate_lock(cfg, "k", 10s, o, &what), error::invalid_argument) << owner;
    EXPECT_NE(what.find("redlock:"), std::string::npos) << what;
  }
  lock_options fine;
  fine.owner = "my-redlock:owner";
  EXPECT_FALSE(redlock::validate_lock(cfg, "k", 10s, fine));
}

// ==== 5. The readers' keys live exactly as long as the last reader ==================================

// Reader A (10 s) and reader B (300 ms); A leaves. The marker must now expire with B, not keep A's
// 10 s: a writer would otherwise wait for a reader that left. After B has expired too, reader C
// (3 s) finds the keys gone; its set must get a ttl. A set recreated without one (after the sweep
// emptied it while a long marker lived on) stays forever if C then crashes.
TEST_F(script_safety, the_readers_keys_live_as_long_as_the_last_reader_and_always_expire) {
  const std::vector<std::string> k{"rd", suffixed("rd", scripts::readers_suffix),
                                   suffixed("rd", scripts::writer_suffix)};
  EXPECT_EQ(eval(0, scripts::read_acquire_script, k, {"tok-a", "10000"}), "*2\r\n:1\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::read_acquire_script, k, {"tok-b", "300"}), "*2\r\n:1\r\n:2\r\n");
  EXPECT_GT(pttl(0, "rd"), 9000);
  EXPECT_EQ(eval(0, scripts::read_release_script, {k[0], k[1]}, {"tok-a"}), ":1\r\n");
  EXPECT_LE(pttl(0, "rd"), 300) << "the marker kept the ttl of a reader that left";
  EXPECT_LE(pttl(0, k[1]), 300);
  std::this_thread::sleep_for(400ms);  // B's entry expires (a master's clock, not a state to wait on)
  EXPECT_EQ(eval(0, scripts::read_acquire_script, k, {"tok-c", "3000"}), "*2\r\n:1\r\n:1\r\n");
  EXPECT_GT(pttl(0, k[1]), 0) << "the readers' set has no ttl";
  EXPECT_LE(pttl(0, k[1]), 3000);
  EXPECT_GT(pttl(0, "rd"), 0);
  // The last reader leaving removes both at once.
  EXPECT_EQ(eval(0, scripts::read_release_script, {k[0], k[1]}, {"tok-c"}), ":1\r\n");
  EXPECT_EQ(run(0, {"EXISTS", k[0], k[1]}), ":0\r\n");
}

// ==== 6. An error reply means the script wrote nothing ===============================================

// Every script that acquires (or confirms a fence) runs against states where one of its keys holds
// a value of the wrong type (or a counter that is not a number). Whenever it answers an error, no
// key it names may have changed: the client takes an error reply for "nothing happened there" and
// sends no release. A script that writes first and fails after (SET, then a GET that raises
// WRONGTYPE) leaves a key no release will remove.
TEST_F(script_safety, an_error_reply_means_the_script_wrote_nothing) {
  struct call {
    std::string name;
    const scripts::script* s;
    std::vector<std::string> keys;
    std::vector<std::string> args;
    std::function<void(script_safety&)> setup;  // the state before the wrong-typed key is put in
  };
  const std::string tok = "token-1";
  const auto none = [](script_safety&) {};
  const std::vector<call> calls{
      {"fair acquire",
       &scripts::fair_acquire_script,
       {"k", "k:redlock-queue", "k:redlock-expiry", "k:redlock-offer"},
       {tok, "10000", "inbox:1", "0", "5000", "1"},
       none},
      {"fair acquire after a hand-over",
       &scripts::fair_acquire_script,
       {"k", "k:redlock-queue", "k:redlock-expiry", "k:redlock-offer"},
       {tok, "10000", "inbox:1", "3", "5000", "2"},
       [](script_safety& t) {
         t.run(0, {"SET", "k", "tok-0", "PX", "10000"});
         t.run(0, {"HSET", "k:redlock-offer", "inbox:1", "10000:1:tok-0"});
       }},
      {"fence acquire", &scripts::fence_acquire_script, {"k", "k:redlock-fence"}, {tok, "10000", "0"}, none},
      {"fence confirm",
       &scripts::fence_confirm_script,
       {"k", "k:redlock-fence"},
       {tok, "99"},
       [tok](script_safety& t) {
         t.run(0, {"SET", "k", tok, "PX", "10000"});
       }},
      {"multi acquire", &scripts::multi_acquire_script, {"k", "k2"}, {tok, "10000"}, none},
      {"reentrant acquire", &scripts::reentrant_acquire_script, {"k", "k:redlock-holds"}, {"own", "10000", tok}, none},
      {"reentrant join",
       &scripts::reentrant_acquire_script,
       {"k", "k:redlock-holds"},
       {"own", "10000", tok},
       [](script_safety& t) {
         t.run(0, {"SET", "k", "own", "PX", "1000"});
       }},
      {"read acquire",
       &scripts::read_acquire_script,
       {"k", "k:redlock-readers", "k:redlock-writer"},
       {tok, "10000"},
       none},
      {"write acquire",
       &scripts::write_acquire_script,
       {"k", "k:redlock-readers", "k:redlock-writer"},
       {tok, "10000", "writer-1", "5000"},
       none},
      {"write claim",
       &scripts::write_acquire_script,
       {"k", "k:redlock-readers", "k:redlock-writer"},
       {tok, "10000", "writer-1", "5000"},
       [](script_safety& t) {
         t.run(0, {"SET", "k", std::string{scripts::readers_marker}, "PX", "10000"});
       }},
      {"semaphore acquire",
       &scripts::semaphore_acquire_script,
       {"k", "k:redlock-permits"},
       {tok, "10000", "2"},
       [](script_safety& t) {
         t.run(0, {"ZADD", "k", "1", "an-expired-holder"});
       }},
  };
  // Wrong values for one key: "junk" is a string where a number or a set is expected.
  const std::vector<std::vector<std::string>> wrong{
      {"SET", "@", "junk"}, {"RPUSH", "@", "x"}, {"HSET", "@", "f", "v"}, {"SADD", "@", "x"}, {"ZADD", "@", "5", "x"}};
  std::size_t errors = 0;
  for (const auto& c : calls) {
    for (std::size_t pos = 0; pos < c.keys.size(); ++pos) {
      for (const auto& w : wrong) {
        run(0, {"FLUSHALL"});
        c.setup(*this);
        auto put = w;
        put[1] = c.keys[pos];
        run(0, {"DEL", c.keys[pos]});
        servers[0].command(put);
        std::vector<std::string> before;
        for (const auto& k : c.keys) before.push_back(run(0, {"DUMP", k}) + run(0, {"PTTL", k}));
        const auto reply = eval(0, *c.s, c.keys, c.args);
        if (reply.empty() || reply[0] != '-') continue;
        ++errors;
        for (std::size_t j = 0; j < c.keys.size(); ++j) {
          const auto after = run(0, {"DUMP", c.keys[j]}) + run(0, {"PTTL", c.keys[j]});
          // PTTL may have ticked down by a millisecond or so: compare the values, then the ttl roughly.
          const auto dump_before = before[j].substr(0, before[j].rfind(':'));
          const auto dump_after = after.substr(0, after.rfind(':'));
          EXPECT_EQ(dump_after, dump_before)
              << c.name << ": key " << c.keys[j] << " changed although the script "
              << "answered " << reply << " (wrong " << w[0] << " in " << c.keys[pos] << ")";
          const auto ttl_before = std::stoll(before[j].substr(before[j].rfind(':') + 1));
          const auto ttl_after = std::stoll(after.substr(after.rfind(':') + 1));
          EXPECT_LE(ttl_after, ttl_before) << c.name << ": key " << c.keys[j] << " got a longer ttl";
          EXPECT_GE(ttl_after, ttl_before - 200) << c.name << ": key " << c.keys[j];
        }
      }
    }
  }
  EXPECT_GT(errors, 20u) << "the wrong types must make the scripts answer errors";
}

// ==== 7. Every master orders fair waiters alike ======================================================

// On this master W1 was queued with ticket 1 and W2 with 2; another master gave W1 ticket 3, the
// largest, which W1 now sends everywhere. Ordered by the ticket sent, W2 (2) comes first here, as
// it does where W1's ticket is 3: this master must not grant W1. Ordered by the ticket stored here
// (1), it grants W1 while another master grants W2: a split round.
TEST_F(script_safety, fair_rounds_order_waiters_by_the_ticket_they_send) {
  const std::vector<std::string> k{"q", suffixed("q", scripts::queue_suffix), suffixed("q", scripts::expiry_suffix),
                                   suffixed("q", scripts::offer_suffix)};
  const auto later = std::to_string(server_ms(0) + 60000);
  run(0, {"ZADD", k[1], "1", "inbox-1:1", "2", "inbox-2:1"});
  run(0, {"ZADD", k[2], later, "inbox-1:1", later, "inbox-2:1"});
  EXPECT_EQ(eval(0, scripts::fair_acquire_script, k, {"tok-1", "10000", "inbox-1:1", "3", "5000", "1"}),
            "*2\r\n:-1\r\n:3\r\n")
      << "W1 was granted ahead of W2 by its stale ticket";
  EXPECT_EQ(get(0, "q"), std::nullopt);
  EXPECT_EQ(eval(0, scripts::fair_acquire_script, k, {"tok-2", "10000", "inbox-2:1", "2", "5000", "1"}),
            "*2\r\n:1\r\n:2\r\n");
  EXPECT_EQ(get(0, "q"), "tok-2");
}

// Dead waiters do not pile up while a holder keeps the key: every call that adds an entry (a new
// waiter, ticket 0, or one moving to the back, -1) first drops up to 100 expired ones. And at a
// free key, expired entries before a live waiter with a ticket do not hold it up: it drops them
// and is granted in the same call.
TEST_F(script_safety, dead_fair_waiters_are_dropped_by_arrivals_and_never_stand_first) {
  const std::vector<std::string> k{"q", suffixed("q", scripts::queue_suffix), suffixed("q", scripts::expiry_suffix),
                                   suffixed("q", scripts::offer_suffix)};
  run(0, {"SET", "q", "holder", "PX", "60000"});
  const auto past = std::to_string(server_ms(0) - 1000);
  for (int i = 0; i < 250; ++i) {
    run(0, {"ZADD", k[1], std::to_string(i + 1), fmt::format("dead-{}:1", i)});
    run(0, {"ZADD", k[2], past, fmt::format("dead-{}:1", i)});
  }
  // "*2\r\n:<status>\r\n:<ticket>\r\n" -> {status, ticket}
  const auto answer = [](const std::string& r) {
    std::int64_t status = 0, ticket = 0;
    EXPECT_EQ(std::sscanf(r.c_str(), "*2\r\n:%" SCNd64 "\r\n:%" SCNd64, &status, &ticket), 2) << r;
    return std::pair{status, ticket};
  };
  const auto w = answer(eval(0, scripts::fair_acquire_script, k, {"tok-w", "10000", "w:1", "0", "60000", "1"}));
  EXPECT_EQ(w.first, 0);
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":151\r\n") << "the arrival dropped 100 dead entries";
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-x", "10000", "x:1", "0", "60000", "1"})).first, 0);
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-y", "10000", "y:1", "-1", "60000", "1"})).first, 0);
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":3\r\n") << "dead entries were left behind by arrivals";
  EXPECT_EQ(run(0, {"ZCARD", k[2]}), ":3\r\n");
  // A waiter with a ticket but no entry on this master (its first round was lost here) adds one
  // too, and drops the dead first; one renewing its own entry needs not.
  for (int i = 0; i < 120; ++i) {
    run(0, {"ZADD", k[1], std::to_string(i + 1), fmt::format("gone-{}:1", i)});
    run(0, {"ZADD", k[2], past, fmt::format("gone-{}:1", i)});
  }
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-z", "10000", "z:1", "500", "60000", "1"})).first, 0);
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":24\r\n") << "an arrival with a ticket dropped no dead entries";
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-z", "10000", "z:1", "500", "60000", "1"})).first, 0);
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":24\r\n") << "a renewal needs not drop them";
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-v", "10000", "v:1", "501", "60000", "1"})).first, 0);
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":5\r\n");
  run(0, {"ZREM", k[1], "z:1", "v:1"});
  run(0, {"ZREM", k[2], "z:1", "v:1"});
  // The holder's key goes; dead entries that came back with smaller tickets must not hold w up.
  run(0, {"DEL", "q"});
  for (int i = 0; i < 5; ++i) {
    run(0, {"ZADD", k[1], std::to_string(i + 1), fmt::format("late-{}:1", i)});
    run(0, {"ZADD", k[2], past, fmt::format("late-{}:1", i)});
  }
  const auto sent = std::to_string(w.second);
  EXPECT_EQ(answer(eval(0, scripts::fair_acquire_script, k, {"tok-w", "10000", "w:1", sent, "60000", "1"})),
            (std::pair<std::int64_t, std::int64_t>{1, w.second}));
  EXPECT_EQ(get(0, "q"), "tok-w");
  EXPECT_EQ(run(0, {"ZCARD", k[1]}), ":2\r\n") << "x and y wait on";
}

// ==== 8. A holder's release hands the key to the first live waiter, and only it =======================

// The release of a held lock sets the key for the first live waiter, with the token and ttl of the
// offer its last fair round left, and takes it out of the queue; the release of a failed round
// (ARGV[2] "0") hands nothing over. A wrong release that hands the key to a dead waiter, or on a
// failed round's release, or a dequeue that keeps a key its waiter gave up, leaves a key nobody
// knows it holds.
TEST_F(script_safety, a_holders_release_hands_the_key_to_the_first_live_waiter_only) {
  const std::vector<std::string> k{"h", suffixed("h", scripts::queue_suffix), suffixed("h", scripts::expiry_suffix),
                                   suffixed("h", scripts::offer_suffix)};
  const auto fair = [&](const std::string& tok, const std::string& me, const std::string& ticket,
                        const std::string& round, const std::string& timeout = "60000") {
    return eval(0, scripts::fair_acquire_script, k, {tok, "5000", me, ticket, timeout, round});
  };
  // Two live waiters, and before them a dead one (its entry expired) that still has an offer.
  for (const auto* inbox : {"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "dddddddddddddddd", "eeeeeeeeeeeeeeee"})
    subscribe(0, inbox);
  run(0, {"SET", "h", "tok-holder", "PX", "10000"});
  EXPECT_EQ(fair("tok-a7", "aaaaaaaaaaaaaaaa:1", "0", "7"), "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(fair("tok-b2", "bbbbbbbbbbbbbbbb:1", "0", "2"), "*2\r\n:0\r\n:2\r\n");
  run(0, {"ZADD", k[1], "0", "dddddddddddddddd:1"});
  run(0, {"ZADD", k[2], std::to_string(server_ms(0) - 1000), "dddddddddddddddd:1"});
  run(0, {"HSET", k[3], "dddddddddddddddd:1", "5000:3:tok-dead"});
  EXPECT_EQ(run(0, {"HGET", k[3], "aaaaaaaaaaaaaaaa:1"}), redlock::test::bulk("5000:7:tok-a7"));
  // Another client's token releases nothing and hands nothing over.
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-other", "1"}), ":0\r\n");
  EXPECT_EQ(get(0, "h"), "tok-holder");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-holder", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "h"), "tok-a7") << "the key went to the dead waiter, or to nobody";
  EXPECT_GT(pttl(0, "h"), 4000);
  EXPECT_LE(pttl(0, "h"), 5000) << "the hand-over must use the waiter's ttl";
  // It keeps its place until its acquisition ends: a round of it that does not count the key
  // must not lose it to a newcomer's ticket.
  EXPECT_EQ(score(0, k[1], "aaaaaaaaaaaaaaaa:1"), 1) << "the waiter handed the key lost its place";
  EXPECT_EQ(score(0, k[1], "dddddddddddddddd:1"), -1) << "the dead waiter was not dropped";
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "dddddddddddddddd:1"}), ":0\r\n") << "the dead waiter's offer stayed";
  // The offer stays until the waiter's acquisition ends: its dequeue must find the token.
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "aaaaaaaaaaaaaaaa:1"}), ":1\r\n");

  // A failed round's release ("0") deletes its key and hands nothing to the next waiter.
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-a7", "0"}), ":2\r\n");
  EXPECT_EQ(get(0, "h"), std::nullopt) << "a failed round's release handed the key over";
  EXPECT_EQ(score(0, k[1], "bbbbbbbbbbbbbbbb:1"), 2);
  // A gives up: its dequeue takes it out of the queue (and finds no key of its own to give back).
  EXPECT_EQ(eval(0, scripts::dequeue_script, k, {"aaaaaaaaaaaaaaaa:1", ""}), ":0\r\n");

  // B is handed the key and its acquisition succeeds: its dequeue keeps the key. One that gives
  // up gives the key back.
  run(0, {"SET", "h", "tok-holder2", "PX", "10000"});
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-holder2", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "h"), "tok-b2");
  EXPECT_EQ(eval(0, scripts::dequeue_script, k, {"bbbbbbbbbbbbbbbb:1", "tok-b2"}), ":0\r\n");
  EXPECT_EQ(get(0, "h"), "tok-b2") << "the dequeue of the granted lock deleted its key";
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "bbbbbbbbbbbbbbbb:1"}), ":0\r\n");
  EXPECT_EQ(eval(0, scripts::dequeue_script, k, {"bbbbbbbbbbbbbbbb:1", ""}), ":0\r\n");
  EXPECT_EQ(get(0, "h"), "tok-b2") << "a second dequeue must find no offer";
  run(0, {"DEL", "h"});
  EXPECT_EQ(fair("tok-c1", "cccccccccccccccc:1", "0", "1"), "*2\r\n:1\r\n:0\r\n");  // nobody queued
  EXPECT_EQ(get(0, "h"), "tok-c1");
  EXPECT_EQ(fair("tok-e1", "eeeeeeeeeeeeeeee:1", "0", "1"), "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-c1", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "h"), "tok-e1");
  EXPECT_EQ(eval(0, scripts::dequeue_script, k, {"eeeeeeeeeeeeeeee:1", ""}), ":1\r\n");
  EXPECT_EQ(get(0, "h"), std::nullopt) << "a waiter that gave up kept the key it was handed";
  // A waiter whose client has no connection to receive the message (its process died; or its
  // master speaks RESP2) is handed nothing: it would hold the key for its whole ttl.
  EXPECT_EQ(fair("tok-f1", "ffffffffffffffff:1", "0", "1"), "*2\r\n:1\r\n:0\r\n");
  EXPECT_EQ(fair("tok-g1", "9999999999999999:1", "0", "1"), "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-f1", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "h"), std::nullopt) << "the key was handed to a waiter nobody listens for";
  EXPECT_EQ(score(0, k[1], "9999999999999999:1"), 1) << "the waiter not handed the key stays first";
}

// A waiter's next round finds the key it was handed in its round before (whose hand-over it did
// not count: the round had failed, and the release of that round was sent before it): the key is
// its own, given up, and judged free. Another waiter's handed key is not.
TEST_F(script_safety, a_waiters_next_round_gives_back_the_key_its_last_round_was_handed) {
  const std::vector<std::string> k{"n", suffixed("n", scripts::queue_suffix), suffixed("n", scripts::expiry_suffix),
                                   suffixed("n", scripts::offer_suffix)};
  const auto fair = [&](const std::string& tok, const std::string& me, const std::string& ticket,
                        const std::string& round) {
    return eval(0, scripts::fair_acquire_script, k, {tok, "5000", me, ticket, "60000", round});
  };
  subscribe(0, "aaaaaaaaaaaaaaaa");
  subscribe(0, "bbbbbbbbbbbbbbbb");
  run(0, {"SET", "n", "tok-holder", "PX", "10000"});
  EXPECT_EQ(fair("tok-a1", "aaaaaaaaaaaaaaaa:1", "0", "1"), "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(fair("tok-b1", "bbbbbbbbbbbbbbbb:1", "0", "1"), "*2\r\n:0\r\n:2\r\n");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-holder", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "n"), "tok-a1");
  // B's round sees A's key: held.
  EXPECT_EQ(fair("tok-b2", "bbbbbbbbbbbbbbbb:1", "2", "2"), "*2\r\n:0\r\n:2\r\n");
  EXPECT_EQ(get(0, "n"), "tok-a1") << "a waiter took the key handed to another";
  // A's next round: its old key goes, and A, first, is granted with the new round's token.
  EXPECT_EQ(fair("tok-a2", "aaaaaaaaaaaaaaaa:1", "1", "2"), "*2\r\n:1\r\n:1\r\n");
  EXPECT_EQ(get(0, "n"), "tok-a2");
  EXPECT_EQ(run(0, {"HEXISTS", k[3], "aaaaaaaaaaaaaaaa:1"}), ":0\r\n") << "a granted waiter's offer stayed";
  // A queues again behind B; B is handed the key and its next round is granted with its new token.
  EXPECT_EQ(fair("tok-a3", "aaaaaaaaaaaaaaaa:1", "9", "3"), "*2\r\n:0\r\n:9\r\n");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-a2", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "n"), "tok-b2");
  EXPECT_EQ(fair("tok-b3", "bbbbbbbbbbbbbbbb:1", "2", "3"), "*2\r\n:1\r\n:2\r\n");
  EXPECT_EQ(get(0, "n"), "tok-b3");
  // B queues again ahead of A (ticket 2 < 9), but its entry is gone here: A is handed the key;
  // A's next round says B comes first: the key handed to A's given-up round is deleted, not kept.
  run(0, {"SET", "n", "tok-x", "PX", "10000"});
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-b3", "1"}), ":0\r\n");
  EXPECT_EQ(eval(0, scripts::release_script, k, {"tok-x", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, "n"), "tok-a3");
  EXPECT_EQ(eval(0, scripts::fair_acquire_script, k, {"tok-b4", "5000", "bbbbbbbbbbbbbbbb:1", "2", "60000", "4"}),
            "*2\r\n:0\r\n:2\r\n");
  const auto wakes = publishes(0);
  EXPECT_EQ(fair("tok-a4", "aaaaaaaaaaaaaaaa:1", "9", "4"), "*2\r\n:-1\r\n:9\r\n")
      << "B's ticket comes first: A's given-up key must go and A must not be granted";
  EXPECT_EQ(get(0, "n"), std::nullopt) << "the key handed to the round given up stayed";
  // The key is free now, and B comes first: B is woken, as by a release, not left to its retry.
  EXPECT_EQ(publishes(0), wakes + 1) << "the first waiter was not woken when the given-up key went";
  EXPECT_EQ(run(0, {"HGET", k[3], "aaaaaaaaaaaaaaaa:1"}), redlock::test::bulk("5000:4:tok-a4"));
}

// A fenced lock's release hands the key over as the plain one does, and grants the waiter a fence
// with it: only where the counter is one, one step up, said in the message. Its fair rounds answer
// the fence (or counter, or clock) before the ticket, and its failed round's release takes back
// the step a hand-over made. A release that handed the key over without moving the counter would
// give the next holder a fence no larger than its predecessor's on that master.
TEST_F(script_safety, a_fenced_holders_release_hands_the_key_over_with_the_next_fence) {
  const std::vector<std::string> k{"hf", suffixed("hf", scripts::queue_suffix), suffixed("hf", scripts::expiry_suffix),
                                   suffixed("hf", scripts::offer_suffix), suffixed("hf", scripts::fence_suffix)};
  const auto fair = [&](const std::string& tok, const std::string& me, const std::string& ticket,
                        const std::string& round, const std::string& floor = "0") {
    return eval(0, scripts::fair_acquire_script, k, {tok, "5000", me, ticket, "60000", round, floor});
  };
  const auto release = [&](const std::string& tok) { return eval(0, scripts::release_script, k, {tok, "1"}); };
  // The next message on A's channel, or "(none)": a PING's answer is read after the messages
  // before it (`pongs`: answers of PINGs sent and not read yet).
  subscribe(0, "aaaaaaaaaaaaaaaa");
  auto& inbox = subscribers.back();
  int pongs = 0;
  const auto next_message = [&] {
    for (;;) {
      const bool sent = pongs == 0;
      const auto m = strings_of(sent ? inbox.command({"PING"}) : inbox.raw(""));
      if (m.size() == 3 && m[0] == "message") {
        pongs += sent ? 1 : 0;
        return m[2];
      }
      if (sent) return std::string{"(none)"};
      --pongs;
    }
  };
  run(0, {"SET", k[4], "41"});
  // A grant moves the counter above it and the floor, and answers the fence, then the ticket.
  EXPECT_EQ(fair("tok-h1", "hhhhhhhhhhhhhhhh:1", "0", "0"), "*3\r\n:1\r\n:42\r\n:0\r\n");
  EXPECT_EQ(get(0, k[4]), "42");
  // A waiter is told the counter, and queues with its offer.
  EXPECT_EQ(fair("tok-a3", "aaaaaaaaaaaaaaaa:1", "0", "3"), "*3\r\n:0\r\n:42\r\n:1\r\n");
  EXPECT_EQ(get(0, k[4]), "42") << "a refused round moved the counter";
  EXPECT_EQ(release("tok-h1"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), "tok-a3");
  EXPECT_EQ(get(0, k[4]), "43") << "the hand-over must grant the next fence";
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1:3:");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1:3:43") << "the message must carry the fence";
  // A's round fails (its other masters made no quorum): its release takes the step back, and
  // hands nothing over (A, still first in the queue, is woken).
  EXPECT_EQ(eval(0, scripts::fence_abandon_script, k, {"tok-a3"}), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt);
  EXPECT_EQ(get(0, k[4]), "42");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1");

  // The next round of A is granted from a floor above the counter: the fence counts on from it.
  EXPECT_EQ(fair("tok-a4", "aaaaaaaaaaaaaaaa:1", "1", "4", "90"), "*3\r\n:1\r\n:91\r\n:1\r\n");
  EXPECT_EQ(get(0, k[4]), "91");

  // No counter (a master restarted without its data): the answers carry the clock, negated, and
  // a release hands nothing over (a fence from nothing could be below an earlier one): it wakes.
  run(0, {"DEL", k[4]});
  const auto before = server_us(0);
  const auto raw = fair("tok-a5", "aaaaaaaaaaaaaaaa:1", "1", "5");
  EXPECT_EQ(raw.substr(0, 10), "*3\r\n:0\r\n:-") << raw;
  if (raw.size() > 10) {
    EXPECT_LE(std::stoll(raw.substr(9, raw.find("\r\n", 9) - 9)), -before) << raw;
  }
  EXPECT_EQ(release("tok-a4"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt) << "handed over without a counter";
  EXPECT_EQ(get(0, k[4]), std::nullopt) << "a release created a counter";
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1") << "a wake-up only";

  // A counter that is not one as the grants write it: no hand-over either. Of another type: the
  // fair round is an error reply before anything is written; the release still releases (a held
  // lock can always be let go), and hands nothing over.
  run(0, {"SET", k[0], "tok-h2", "PX", "10000"});
  run(0, {"SET", k[4], "007"});
  EXPECT_EQ(release("tok-h2"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt);
  EXPECT_EQ(get(0, k[4]), "007");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1") << "a wake-up only";
  run(0, {"SET", k[4], "abc"});
  EXPECT_EQ(fair("tok-a6", "aaaaaaaaaaaaaaaa:1", "1", "6").substr(0, 1), "-");
  run(0, {"DEL", k[4]});
  run(0, {"HSET", k[4], "f", "1"});
  run(0, {"SET", k[0], "tok-h3", "PX", "10000"});
  EXPECT_EQ(fair("tok-a6", "aaaaaaaaaaaaaaaa:1", "1", "6").substr(0, 1), "-");
  EXPECT_EQ(score(0, k[1], "aaaaaaaaaaaaaaaa:1"), 1) << "the refused round wrote";
  EXPECT_EQ(release("tok-h3"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt) << "handed over with a counter of another type";
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1") << "a wake-up only";
  run(0, {"DEL", k[4], k[0]});

  // Kinds on one name. A release that names no counter (a plain lock's, or an earlier version's)
  // only wakes a fenced waiter: its hand-over would not move the counter, and the waiter's failed
  // round would then take back a step nobody made.
  run(0, {"SET", k[4], "50"});
  run(0, {"SET", k[0], "tok-p1", "PX", "10000"});
  EXPECT_EQ(fair("tok-a7", "aaaaaaaaaaaaaaaa:1", "1", "7"), "*3\r\n:0\r\n:50\r\n:1\r\n");
  EXPECT_EQ(run(0, {"HGET", k[3], "aaaaaaaaaaaaaaaa:1"}), redlock::test::bulk("f5000:7:tok-a7")) << "not marked";
  const std::vector<std::string> plain_keys{k[0], k[1], k[2], k[3]};
  EXPECT_EQ(eval(0, scripts::release_script, plain_keys, {"tok-p1", "1"}), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt) << "a release without the counter handed a fenced waiter the key";
  EXPECT_EQ(get(0, k[4]), "50");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1") << "a wake-up only";
  EXPECT_EQ(eval(0, scripts::dequeue_script, plain_keys, {"aaaaaaaaaaaaaaaa:1", ""}), ":0\r\n");
  // A fenced release hands a plain waiter the key as the plain release does: no step, no fence.
  run(0, {"SET", k[0], "tok-f1", "PX", "10000"});
  EXPECT_EQ(
      eval(0, scripts::fair_acquire_script, plain_keys, {"tok-a8", "5000", "aaaaaaaaaaaaaaaa:1", "0", "60000", "8"}),
      "*2\r\n:0\r\n:1\r\n");
  EXPECT_EQ(release("tok-f1"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), "tok-a8");
  EXPECT_EQ(get(0, k[4]), "50");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1:8:");
  EXPECT_EQ(next_message(), "aaaaaaaaaaaaaaaa:1:8") << "a plain waiter's message carries no fence";
  // The dequeue and the fair round read a fenced waiter's marked offer: a key handed to a round it
  // gave up is deleted (the counter keeps its step: it only stays higher).
  run(0, {"DEL", k[0], k[1], k[2], k[3]});
  run(0, {"SET", k[0], "tok-f2", "PX", "10000"});
  EXPECT_EQ(fair("tok-a9", "aaaaaaaaaaaaaaaa:1", "0", "9"), "*3\r\n:0\r\n:50\r\n:1\r\n");
  EXPECT_EQ(release("tok-f2"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), "tok-a9");
  EXPECT_EQ(get(0, k[4]), "51");
  EXPECT_EQ(fair("tok-a10", "aaaaaaaaaaaaaaaa:1", "1", "10"), "*3\r\n:1\r\n:52\r\n:1\r\n")
      << "the key handed to the round given up must go, and the next round be granted";
  EXPECT_EQ(get(0, k[0]), "tok-a10");
  run(0, {"SET", k[0], "tok-f3", "PX", "10000"});
  EXPECT_EQ(fair("tok-a11", "aaaaaaaaaaaaaaaa:1", "1", "11"), "*3\r\n:0\r\n:52\r\n:1\r\n");
  EXPECT_EQ(release("tok-f3"), ":2\r\n");
  EXPECT_EQ(get(0, k[0]), "tok-a11");
  EXPECT_EQ(eval(0, scripts::dequeue_script, plain_keys, {"aaaaaaaaaaaaaaaa:1", ""}), ":1\r\n");
  EXPECT_EQ(get(0, k[0]), std::nullopt) << "the dequeue kept a key handed to a fenced waiter that gave up";
  EXPECT_EQ(get(0, k[4]), "53");
}

// ==== digests ========================================================================================

// Every script's digest is the one a real master computes (`SCRIPT LOAD`).
TEST_F(script_safety, every_digest_is_what_script_load_answers) {
  for (const auto* s : scripts::all_scripts) {
    EXPECT_EQ(run(0, {"SCRIPT", "LOAD", s->body}), redlock::test::bulk(std::string{s->sha1})) << s->body.substr(0, 60);
  }
}

}  // namespace
