// SPDX-License-Identifier: BSL-1.0
// The Redlock client against five real redis-server masters, with masters killed and stopped for
// real. What the masters hold is checked on the masters themselves, not through the client.

#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

// A completion token whose operation never starts: it only reports the executor associated with
// the initiation object, as completion-token adapters (asio::cancel_after and the like) see it.
struct probe_executor_t {};

template <class Sig>
struct boost::asio::async_result<probe_executor_t, Sig> {
  template <class Initiation, class... Args>
  static boost::asio::any_io_executor initiate(Initiation&& init, probe_executor_t, Args&&...) {
    return boost::asio::get_associated_executor(init, boost::asio::any_io_executor{boost::asio::system_executor()});
  }
};

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::master_status;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;
using redlock::test::wait_connected;
using clock_type = redlock::clock;

// The raw RESP reply a master gives to GET key, e.g. "$40\r\n<token>\r\n" or "$-1\r\n".
std::string bulk(const std::string& v) { return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n"; }
const std::string nil = "$-1\r\n";

struct client_test : ::testing::Test {
  redlock::test::master_set servers{5};

  redlock::client_config config() {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.retry.max_wait = 2s;
    return cfg;
  }

  // How many masters hold `key` with `value` ("" = the key is absent on that many).
  std::size_t holding(const std::string& key, const std::string& value) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      if (!servers[i].running() || servers[i].paused()) continue;
      n += servers[i].command({"GET", key}) == (value.empty() ? nil : bulk(value));
    }
    return n;
  }

  // Waits (bounded) until every running master agrees with `holding(key, value) == want`.
  asio::awaitable<bool> eventually_holding(const std::string& key, const std::string& value, std::size_t want) {
    co_return co_await until([&] { return holding(key, value) == want; }, 1s);
  }

  // Waits (bounded) until the client has seen master `i`'s connection go down.
  static asio::awaitable<void> wait_master_down(redlock::client& c, std::size_t i) {
    const bool down = co_await until([&] { return c.masters().at(i).state != redlock::connection_state::up; });
    if (!down) ADD_FAILURE() << "client did not see master " << i << " go down";
  }

  // Whether master `i` has any value under `key`.
  bool has_key(std::size_t i, const std::string& key) { return servers[i].command({"EXISTS", key}) == ":1\r\n"; }

  void throwing_completion(bool on_a_strand);

  // Requests written so far to each master.
  static std::vector<std::uint64_t> written(const redlock::client& c) {
    std::vector<std::uint64_t> out;
    for (const auto& m : c.stats().masters) out.push_back(m.written);
    return out;
  }
};

TEST_F(client_test, acquire_extend_release_and_exclusion) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client a{ioc.get_executor(), config()};
    redlock::client b{ioc.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);

    const auto before = clock_type::now();
    auto [ec, l] = co_await a.async_lock("orders:42", 10s, use_tuple);
    const auto after = clock_type::now();
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(l.owns_lock());
    EXPECT_EQ(l.resource(), "orders:42");
    EXPECT_EQ(l.token().size(), 40u);
    EXPECT_EQ(l.token().find_first_not_of("0123456789abcdef"), std::string::npos);
    // Start of the attempt + ttl - drift (10 s x 1% + 2 ms), the attempt starting in [before, after].
    EXPECT_GE(l.validity_deadline(), before + 10s - 102ms);
    EXPECT_LE(l.validity_deadline(), after + 10s - 102ms);
    EXPECT_EQ(l.attempts(), 1u);
    EXPECT_EQ(holding("orders:42", l.token()), 5u);  // plain key = resource, value = token

    // Another client cannot get it, and is told why: contention, per master.
    auto [ec2, l2] = co_await b.async_try_lock("orders:42", 10s, use_tuple);
    EXPECT_EQ(ec2, error::not_acquired);
    EXPECT_EQ(ec2, redlock::condition::contention);
    EXPECT_FALSE(l2.owns_lock());
    std::size_t taken = 0;
    for (const auto& n : l2.masters()) {
      // Decided at the third refusal: the rest may not have answered yet.
      EXPECT_TRUE(n.status == master_status::taken || n.status == master_status::pending);
      taken += n.status == master_status::taken;
    }
    EXPECT_GE(taken, 3u);
    EXPECT_EQ(holding("orders:42", l.token()), 5u);  // b's failed attempt removed nothing of a's

    // Extend moves the deadline and the masters' ttl.
    const auto old_deadline = l.validity_deadline();
    co_await sleep_for(20ms);
    auto [eec] = co_await l.async_extend(30s, use_tuple);
    EXPECT_FALSE(eec) << eec.message();
    EXPECT_GT(l.validity_deadline(), old_deadline + 15s);
    std::size_t extended = 0;  // decided by a majority: the rest may still be on their way
    for (std::size_t i = 0; i < 5; ++i)
      extended += std::stol(servers[i].command({"PTTL", "orders:42"}).substr(1)) > 20000;
    EXPECT_GE(extended, 3u);

    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec) << uec.message();
    EXPECT_GE(held, 3u);
    EXPECT_FALSE(l.owns_lock());
    EXPECT_TRUE(co_await eventually_holding("orders:42", "", 5));

    // Now b gets it at once.
    auto [ec3, l3] = co_await b.async_try_lock("orders:42", 10s, use_tuple);
    EXPECT_FALSE(ec3);
    auto [e4, h4] = co_await l3.async_unlock(use_tuple);
    EXPECT_FALSE(e4);
    // Operations on a handle that holds nothing say so.
    auto [e5, h5] = co_await l3.async_unlock(use_tuple);
    EXPECT_EQ(e5, error::not_locked);
    auto [e6] = co_await l3.async_extend(10s, use_tuple);
    EXPECT_EQ(e6, error::not_locked);
  });
}

TEST_F(client_test, minority_down_still_locks_majority_down_fails_and_leaves_nothing) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    servers[0].kill();
    servers[1].kill();
    co_await wait_master_down(c, 0);
    co_await wait_master_down(c, 1);
    auto [ec, l] = co_await c.async_try_lock("res", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(l.masters().at(0).status, master_status::unreachable);
    EXPECT_EQ(l.masters().at(2).status, master_status::granted);
    co_await l.async_unlock(use_tuple);

    servers[2].kill();
    co_await wait_master_down(c, 2);
    auto [ec2, l2] = co_await c.async_try_lock("res2", 10s, use_tuple);
    EXPECT_EQ(ec2, error::quorum_unavailable);
    EXPECT_EQ(ec2, redlock::condition::master_failure);
    EXPECT_FALSE(l2.owns_lock());
    std::size_t unreachable = 0;
    for (const auto& n : l2.masters()) unreachable += n.status == master_status::unreachable;
    EXPECT_EQ(unreachable, 3u);  // decided on the three dead masters alone, without waiting
    // The two live masters may have granted (before or after the decision): released at once.
    EXPECT_TRUE(co_await eventually_holding("res2", "", 2));
  });
}

TEST_F(client_test, stalled_minority_does_not_delay_the_decision) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.request_timeout = 3s;
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    servers[3].pause();
    servers[4].pause();
    const auto start = clock_type::now();
    auto [ec, l] = co_await c.async_try_lock("stalled", 10s, use_tuple);
    const auto took = clock_type::now() - start;
    EXPECT_FALSE(ec) << ec.message();
    // Decided by the three live masters, not after the stalled ones' 3 s deadline.
    EXPECT_LT(took, 1500ms);
    const auto nodes = l.masters();
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(nodes.at(i).status, master_status::granted) << i;
    for (std::size_t i = 3; i < 5; ++i) EXPECT_EQ(nodes.at(i).status, master_status::pending) << i;
    auto [uec, held] = co_await l.async_unlock(use_tuple);  // also decided by the live majority
    EXPECT_FALSE(uec);
    servers[3].resume();
    servers[4].resume();
    // The stalled masters run the late SET and then the release queued behind it: nothing is left.
    EXPECT_TRUE(co_await until([&] { return holding("stalled", "") == 5; }, 2s)) << "a late SET stayed behind";
    EXPECT_EQ(holding("stalled", ""), 5u);
  });
}

TEST_F(client_test, fifty_contenders_on_a_multithreaded_context_never_overlap_and_all_get_it) {
  std::atomic<int> inside{0}, max_inside{0}, got{0}, failed{0};
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = config();
        cfg.retry.max_wait = 30s;
        cfg.retry.base_delay = 5ms;
        cfg.retry.jitter = 20ms;
        redlock::client c{ioc.get_executor(), cfg};
        co_await wait_connected(c);
        constexpr int contenders = 50;
        std::atomic<int> done{0};
        for (int k = 0; k < contenders; ++k) {
          asio::co_spawn(
              ioc,
              [&]() -> asio::awaitable<void> {
                auto [ec, l] = co_await c.async_lock("contended", 2s, use_tuple);
                if (ec) {
                  ++failed;
                } else {
                  const int now_inside = ++inside;
                  int m = max_inside.load();
                  while (now_inside > m && !max_inside.compare_exchange_weak(m, now_inside)) {
                  }
                  co_await sleep_for(2ms);
                  EXPECT_LT(clock_type::now(), l.validity_deadline());  // finished within validity
                  --inside;
                  ++got;
                  co_await l.async_unlock(use_tuple);
                }
                ++done;
              },
              asio::detached);
        }
        EXPECT_TRUE(co_await until([&] { return done == contenders; }, 110s)) << done << " contenders finished";
      },
      /*threads=*/4, 120s);
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_EQ(got.load(), 50);
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(client_test, release_never_deletes_another_clients_lock_and_extend_fails_once_lost) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client a{ioc.get_executor(), config()};
    redlock::client b{ioc.get_executor(), config()};
    co_await wait_connected(a);
    co_await wait_connected(b);
    auto [ec, la] = co_await a.async_lock("handover", 300ms, use_tuple);
    EXPECT_FALSE(ec);
    co_await sleep_for(350ms);  // a's lock expires on the masters
    auto [e2, lb] = co_await b.async_try_lock("handover", 10s, use_tuple);
    EXPECT_FALSE(e2) << e2.message();

    auto [ext] = co_await la.async_extend(10s, use_tuple);
    EXPECT_EQ(ext, error::validity_expired);  // too late: never extend past the validity
    auto [rel, held] = co_await la.async_unlock(use_tuple);
    EXPECT_FALSE(rel);                               // releasing an expired lock is not an error storm...
    EXPECT_EQ(held, 0u);                             // ...it says nobody held our token any more
    EXPECT_EQ(holding("handover", lb.token()), 5u);  // b's lock untouched

    // The key changes hands behind b's back while b's validity still runs: extend refuses.
    for (std::size_t i = 0; i < 5; ++i) servers[i].command({"SET", "handover", "intruder"});
    auto [ext2] = co_await lb.async_extend(10s, use_tuple);
    EXPECT_EQ(ext2, error::not_owner);
    auto [rel2, held2] = co_await lb.async_unlock(use_tuple);
    EXPECT_FALSE(rel2);
    EXPECT_EQ(held2, 0u);
    EXPECT_EQ(holding("handover", "intruder"), 5u);
  });
}

TEST_F(client_test, release_and_extend_survive_an_empty_script_cache) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    // Our EVALSHA digests are the ones Redis computes.
    EXPECT_EQ(servers[0].command({"SCRIPT", "LOAD", redlock::detail::release_script.body}),
              bulk(std::string{redlock::detail::release_script.sha1}));
    EXPECT_EQ(servers[0].command({"SCRIPT", "LOAD", redlock::detail::extend_script.body}),
              bulk(std::string{redlock::detail::extend_script.sha1}));
    EXPECT_EQ(servers[0].command({"SCRIPT", "LOAD", redlock::detail::fair_acquire_script.body}),
              bulk(std::string{redlock::detail::fair_acquire_script.sha1}));
    auto [ec, l] = co_await c.async_lock("scripts", 10s, use_tuple);
    EXPECT_FALSE(ec);
    for (std::size_t i = 0; i < 5; ++i) servers[i].command({"SCRIPT", "FLUSH"});
    auto [eec] = co_await l.async_extend(20s, use_tuple);
    EXPECT_FALSE(eec) << eec.message();
    for (std::size_t i = 0; i < 5; ++i) servers[i].command({"SCRIPT", "FLUSH"});
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec) << uec.message();
    EXPECT_GE(held, 3u);
    EXPECT_TRUE(co_await eventually_holding("scripts", "", 5));
  });
}

TEST_F(client_test, cancellation_mid_acquire_leaves_no_key_behind) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.request_timeout = 5s;
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    for (std::size_t i = 2; i < 5; ++i) servers[i].pause();  // the decision hangs on them
    asio::cancellation_signal sig;
    bool finished = false;
    error_code got;
    c.async_lock("cancelled", 10s, asio::bind_cancellation_slot(sig.slot(), [&](error_code e, redlock::lock l) {
                   got = e;
                   finished = true;
                   EXPECT_FALSE(l.owns_lock());
                 }));
    // The two answering masters have granted; the decision still waits for the paused three.
    EXPECT_TRUE(co_await until([&] { return has_key(0, "cancelled") && has_key(1, "cancelled"); }));
    EXPECT_FALSE(finished);
    sig.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return finished; }, 1s)) << "cancellation did not complete the lock";
    EXPECT_TRUE(finished);
    EXPECT_EQ(got, asio::error::operation_aborted);
    // The two answering masters granted, and are released at once.
    EXPECT_TRUE(co_await eventually_holding("cancelled", "", 2));
    // The stalled three run the SET late, then the release queued behind it.
    for (std::size_t i = 2; i < 5; ++i) servers[i].resume();
    EXPECT_TRUE(co_await eventually_holding("cancelled", "", 5));
  });
}

TEST_F(client_test, dropped_handle_releases_in_the_background) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.key_prefix = "app:";
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    std::string token;
    {
      auto [ec, l] = co_await c.async_lock("dropped", 10s, use_tuple);
      EXPECT_FALSE(ec);
      token = l.token();
      EXPECT_EQ(holding("app:dropped", token), 5u);  // the prefix is part of the key
    }
    EXPECT_TRUE(co_await eventually_holding("app:dropped", "", 5));
  });
}

TEST_F(client_test, binary_safe_resource_names_and_distinct_tokens) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    const std::string name("bin\0ary\r\n🔒", 14);
    auto [e1, l1] = co_await c.async_lock(name, 10s, use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    auto [e2, l2] = co_await c.async_lock("other", 10s, use_tuple);
    EXPECT_FALSE(e2);
    EXPECT_NE(l1.token(), l2.token());
    EXPECT_EQ(l1.resource(), name);
    auto [e3, l3] = co_await c.async_try_lock(name, 10s, use_tuple);
    EXPECT_EQ(e3, error::not_acquired);
    co_await l1.async_unlock(use_tuple);
    co_await l2.async_unlock(use_tuple);
  });
}

TEST_F(client_test, invalid_input_gets_specific_errors_and_never_reaches_the_masters) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    auto [e1, l1] = co_await c.async_lock("", 10s, use_tuple);
    EXPECT_EQ(e1, error::invalid_argument);
    auto [e2, l2] = co_await c.async_lock(std::string(64 * 1024 + 1, 'x'), 10s, use_tuple);
    EXPECT_EQ(e2, error::invalid_argument);
    auto [e3, l3] = co_await c.async_lock("r", 0ms, use_tuple);
    EXPECT_EQ(e3, error::invalid_argument);
    auto [e4, l4] = co_await c.async_lock("r", 200ms, use_tuple);  // not above drift + request_timeout
    EXPECT_EQ(e4, error::invalid_argument);
    auto [e5, l5] = co_await c.async_lock("r", -5s, use_tuple);
    EXPECT_EQ(e5, error::invalid_argument);

    auto none = config();
    none.masters.clear();
    redlock::client n{ioc.get_executor(), none};
    auto [e6, l6] = co_await n.async_lock("r", 10s, use_tuple);
    EXPECT_EQ(e6, error::invalid_config);

    auto dup = config();
    dup.masters.push_back(dup.masters.front());
    std::string what;
    EXPECT_EQ(redlock::validate(dup, &what), error::invalid_config);
    EXPECT_NE(what.find("twice"), std::string::npos) << what;
    redlock::client d{ioc.get_executor(), dup};
    auto [e7, l7] = co_await d.async_lock("r", 10s, use_tuple);
    EXPECT_EQ(e7, error::invalid_config);

    auto bad_drift = config();
    bad_drift.drift.factor = 1.5;
    EXPECT_EQ(redlock::validate(bad_drift), error::invalid_config);
    EXPECT_EQ(holding("r", ""), 5u);
  });
}

TEST_F(client_test, close_aborts_waiting_lock_operations) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = config();
    cfg.retry.max_wait = 30s;
    redlock::client holder{ioc.get_executor(), config()};
    auto [ec, l] = co_await holder.async_lock("busy", 10s, use_tuple);
    EXPECT_FALSE(ec);
    auto waiter = std::make_unique<redlock::client>(ioc.get_executor(), cfg);
    co_await wait_connected(*waiter);
    bool finished = false;
    error_code got;
    waiter->async_lock("busy", 10s, [&](error_code e, redlock::lock) {
      got = e;
      finished = true;
    });
    // Retrying against the holder.
    EXPECT_TRUE(co_await until([&] { return waiter->stats().lock_attempts >= 2; })) << "the waiter did not retry";
    EXPECT_FALSE(finished);
    waiter->close();
    EXPECT_TRUE(co_await until([&] { return finished; }, 1s)) << "close did not abort the waiting lock";
    EXPECT_TRUE(finished);
    EXPECT_EQ(got, asio::error::operation_aborted);
    EXPECT_EQ(holding("busy", l.token()), 5u);
  });
}

TEST_F(client_test, per_master_results_tell_contention_from_outage) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    // Master 1 refuses writes with an error reply (out of memory), master 2 is dead, masters 3
    // and 4 hang: only master 5 grants, and the decision has to wait for a deadline.
    servers[0].command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    servers[0].command({"CONFIG", "SET", "maxmemory", "1"});
    servers[1].kill();
    servers[2].pause();
    servers[3].pause();
    co_await wait_master_down(c, 1);
    auto [ec, l] = co_await c.async_try_lock("diagnosed", 10s, use_tuple);
    EXPECT_EQ(ec, error::quorum_unavailable);
    const auto nodes = l.masters();
    EXPECT_EQ(nodes.at(0).status, master_status::server_error);
    EXPECT_EQ(nodes.at(0).server_text.rfind("OOM", 0), 0u) << nodes.at(0).server_text;
    EXPECT_EQ(nodes.at(1).status, master_status::unreachable);
    // Masters 3 and 4 share one deadline: whichever timed out first made a quorum impossible, and
    // the decision did not wait for the other.
    const bool third_first = nodes.at(2).status == master_status::timeout;
    const auto& first = nodes.at(third_first ? 2 : 3);
    EXPECT_EQ(first.status, master_status::timeout);
    EXPECT_EQ(first.error, error::master_timeout);
    EXPECT_EQ(nodes.at(third_first ? 3 : 2).status, master_status::pending);
    EXPECT_EQ(nodes.at(4).status, master_status::granted);
    servers[2].resume();
    servers[3].resume();
    servers[0].command({"CONFIG", "SET", "maxmemory", "0"});
    EXPECT_TRUE(co_await eventually_holding("diagnosed", "", 4));  // released everywhere, late SETs too
  });
}

TEST_F(client_test, every_completion_token_kind_works_with_the_context_on_another_thread) {
  asio::io_context ioc;
  redlock::client c{ioc.get_executor(), config()};
  // The client's connections keep the context busy until close() has ended them.
  std::thread runner{[&] { ioc.run_for(30s); }};
  // Every master connected first (masters() may be read from any thread). A release queued while
  // its master was still connecting goes out before the scripts are loaded there, meets NOSCRIPT
  // and is sent again behind what came after it: the next lock's SET then finds the old key on
  // that master, and an unlock decided by the first three answers counts two holders, not three.
  for (const auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
    const auto ms = c.masters();
    if (std::all_of(ms.begin(), ms.end(), [](const auto& m) { return m.state == redlock::connection_state::up; }))
      break;
    std::this_thread::sleep_for(2ms);
  }
  // use_future: from a plain thread, no coroutine.
  auto fut = c.async_lock("tokens", 10s, asio::use_future);
  redlock::lock l = fut.get();  // throws on error
  EXPECT_TRUE(l.owns_lock());
  // Callback.
  std::promise<std::pair<error_code, std::size_t>> p;
  l.async_unlock([&](error_code ec, std::size_t held) { p.set_value({ec, held}); });
  auto [uec, held] = p.get_future().get();
  EXPECT_FALSE(uec);
  EXPECT_GE(held, 3u);  // completes once a majority released
  // deferred: an operation object, launched later with another token.
  auto op = c.async_try_lock("tokens", 10s, asio::deferred);
  std::promise<std::pair<error_code, redlock::lock>> dp;
  std::move(op)([&](error_code ec, redlock::lock got) { dp.set_value({ec, std::move(got)}); });
  auto [dec, dl] = dp.get_future().get();
  EXPECT_FALSE(dec);
  EXPECT_TRUE(dl.owns_lock());
  EXPECT_GE(dl.async_unlock(asio::use_future).get(), 3u);
  // use_future reports errors as exceptions carrying our error code.
  try {
    c.async_lock("", 10s, asio::use_future).get();
    ADD_FAILURE() << "expected an exception";
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), error::invalid_argument);
  }
  // Closed, and the context run until the close has completed everything: stopping it first
  // would leave the releases still on their way to the last masters undone.
  c.close();
  runner.join();
  EXPECT_TRUE(ioc.stopped()) << "the context ran out of work once the client closed";
}

// The clients connected to master `i` (the test bed's own probe connection included).
int clients_on(redlock::test::master_set& servers, std::size_t i) {
  const auto info = servers[i].command({"INFO", "clients"});
  const auto at = info.find("connected_clients:");
  return at == std::string::npos ? -1 : std::atoi(info.c_str() + at + 18);
}

// A context stopped for good while releases are still unanswered (two masters paused), then the
// client and the context destroyed: the client's connections are freed with it, their sockets
// closed. Before, the operations waiting in the connections' queues kept the client, and so the
// connections, alive: the sockets stayed open (and LeakSanitizer reported the memory).
TEST_F(client_test, a_context_destroyed_with_releases_in_flight_frees_the_client) {
  const int before = clients_on(servers, 0);
  {
    asio::io_context ioc;
    auto c = std::make_unique<redlock::client>(ioc.get_executor(), config());
    std::optional<redlock::lock> held;
    c->async_lock("stopped-context", 10s, [&](error_code ec, redlock::lock l) {
      EXPECT_FALSE(ec) << ec.message();
      held = std::move(l);
    });
    while (!held && ioc.run_one_for(5s) > 0) {
    }
    ASSERT_TRUE(held && held->owns_lock());
    EXPECT_EQ(clients_on(servers, 0), before + 1) << "the client's connection to master 1";
    servers[3].pause();
    servers[4].pause();
    bool unlocked = false;
    held->async_unlock([&](error_code, std::size_t) { unlocked = true; });
    while (!unlocked && ioc.run_one_for(5s) > 0) {
    }
    ASSERT_TRUE(unlocked) << "a majority answered the release";
    held.reset();
    c.reset();  // close() is posted to a context that will never run again
  }
  servers[3].resume();
  servers[4].resume();
  const auto deadline = clock_type::now() + 3s;
  int now = clients_on(servers, 0);
  while (now != before && clock_type::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    now = clients_on(servers, 0);
  }
  EXPECT_EQ(now, before) << "the client's connection to master 1 is still open";
}

TEST_F(client_test, cancelled_unlock_still_releases) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    // No clock probes: a probe written to a master just before it is paused becomes overdue while
    // the others are paused one by one (each pause waits for the stop), and an overdue request
    // makes the link refuse the release, which this test needs written.
    auto cfg = config();
    cfg.guard.clock_probe_interval = 0ms;
    redlock::client c{ioc.get_executor(), cfg};
    auto [ec, l] = co_await c.async_lock("unlock-cancel", 10s, use_tuple);
    EXPECT_FALSE(ec);
    // Every master has answered the lock: the lock is decided by the fastest three, and a SET still
    // in flight when its master is paused becomes overdue (the same refusal as a probe's).
    EXPECT_TRUE(co_await until([&] {
      for (const auto& m : c.stats().masters)
        if (m.in_progress() != 0) return false;
      return true;
    }));
    for (std::size_t i = 0; i < 5; ++i) servers[i].pause();  // the release cannot be answered yet
    asio::cancellation_signal sig;
    error_code got;
    bool finished = false;
    const auto before = written(c);
    l.async_unlock(asio::bind_cancellation_slot(sig.slot(), [&](error_code e, std::size_t) {
      got = e;
      finished = true;
    }));
    // The release is on its way to every master.
    EXPECT_TRUE(co_await until([&] {
      const auto now = written(c);
      for (std::size_t i = 0; i < now.size(); ++i)
        if (now[i] <= before.at(i)) return false;
      return true;
    })) << "the release was not written to every master";
    sig.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(co_await until([&] { return finished; }, 1s)) << "cancellation did not complete the unlock";
    EXPECT_EQ(got, asio::error::operation_aborted);  // the caller stops waiting...
    for (std::size_t i = 0; i < 5; ++i) servers[i].resume();
    EXPECT_TRUE(co_await eventually_holding("unlock-cancel", "", 5));  // ...the release does not
  });
}

// A completion that a reply's wake-up runs inline starts its next operation at that wake-up's
// end, not in a scheduler pass of its own. When that completion throws, the work it put off
// must not be lost: it goes out, and run() rethrows. On the io_context's executor Asio keeps the
// exception itself until the handler in progress returns; on a strand of the caller's nothing
// catches it on the way through the client, whose master connection is then replaced.
void client_test::throwing_completion(bool on_a_strand) {
  asio::io_context ioc;
  auto cfg = config();
  cfg.guard.clock_probe_interval = 0ms;
  const asio::any_io_executor ex =
      on_a_strand ? asio::any_io_executor{asio::make_strand(ioc)} : asio::any_io_executor{ioc.get_executor()};
  redlock::client c{ex, cfg};
  auto run_until = [&](const std::function<bool()>& done) {
    const auto end = clock_type::now() + 10s;
    bool thrown = false;
    while (!done() && clock_type::now() < end) {
      try {
        ioc.run_one_for(50ms);
      } catch (const std::runtime_error&) {
        thrown = true;
        ioc.restart();
      }
    }
    return thrown;
  };
  // A first cycle connects every master: from then on replies come through the read poller.
  bool warm = false;
  c.async_lock("warm", 10s, [&](error_code ec, redlock::lock l) {
    EXPECT_FALSE(ec);
    l.async_unlock([&](error_code, std::size_t) { warm = true; });
  });
  EXPECT_FALSE(run_until([&] { return warm; }));
  ASSERT_TRUE(warm);

  bool unlocked = false;
  std::size_t released = 0;
  error_code unlock_ec;
  c.async_lock("throws", 10s, [&](error_code ec, redlock::lock l) {
    EXPECT_FALSE(ec);
    l.async_unlock([&](error_code e, std::size_t n) {
      unlock_ec = e;
      released = n;
      unlocked = true;
    });
    throw std::runtime_error("thrown by a completion");
  });
  EXPECT_TRUE(run_until([&] { return unlocked; })) << "run() did not rethrow";
  EXPECT_TRUE(unlocked) << "the unlock started by the throwing completion never completed";
  EXPECT_FALSE(unlock_ec) << unlock_ec.message();
  EXPECT_GE(released, 3u);
  // Every master serves again, the one whose reply ran the completion too: all five grant. (The
  // lock completes at a quorum: the last masters' grants may still be on their way then.)
  bool all_five = false;
  for (int attempt = 0; attempt < 20 && !all_five; ++attempt) {
    bool granted = false, done = false;
    redlock::lock after;
    c.async_lock("after", 10s, [&](error_code ec, redlock::lock l) {
      granted = !ec;
      after = std::move(l);
      done = true;
    });
    run_until([&] { return done; });
    const auto end = clock_type::now() + 2s;
    while (granted && !all_five && clock_type::now() < end) {
      all_five = holding("after", after.token()) == 5;
      if (!all_five) ioc.run_one_for(20ms);
    }
    done = false;
    after.async_unlock([&](error_code, std::size_t) { done = true; });
    run_until([&] { return done; });
    if (!all_five) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(all_five) << "a master stayed out after the completion threw";
  c.close();
  ioc.restart();
  ioc.run_for(2s);
}

TEST_F(client_test, work_started_by_a_completion_that_throws_still_goes_out) { throwing_completion(false); }

TEST_F(client_test, a_completion_that_throws_on_the_callers_strand_loses_no_master) { throwing_completion(true); }

// An operation that fails at its start (here an invalid resource name), retried at once from its
// own completion, costs a scheduler pass per try: other handlers still run between the tries.
TEST_F(client_test, an_operation_retried_from_its_failed_start_lets_other_handlers_run) {
  asio::io_context ioc;
  redlock::client c{ioc.get_executor(), config()};
  auto run_until = [&](const std::function<bool()>& done) {
    const auto end = clock_type::now() + 20s;
    while (!done() && clock_type::now() < end) ioc.run_one_for(50ms);
    return done();
  };
  bool warm = false;
  c.async_lock("warm", 10s, [&](error_code ec, redlock::lock l) {
    EXPECT_FALSE(ec);
    l.async_unlock([&](error_code, std::size_t) { warm = true; });
  });
  ASSERT_TRUE(run_until([&] { return warm; }));

  bool other_ran = false;
  bool done = false;
  std::size_t tries = 0;
  std::function<void(error_code, redlock::lock)> again = [&](error_code, redlock::lock) {
    if (other_ran || ++tries >= 20000) {
      done = true;
      return;
    }
    c.async_try_lock("", 10s, again);  // invalid_argument, decided in the operation's start
  };
  std::optional<redlock::lock> kept;  // not dropped here: its release would be a post of its own
  c.async_lock("trigger", 10s, [&](error_code ec, redlock::lock l) {
    EXPECT_FALSE(ec);
    kept = std::move(l);
    asio::post(ioc, [&] { other_ran = true; });
    again({}, {});
  });
  ASSERT_TRUE(run_until([&] { return done; }));
  EXPECT_TRUE(other_ran);
  EXPECT_LT(tries, 10u) << "the retries ran in one handler";
  kept.reset();
  c.close();
  ioc.restart();
  ioc.run_for(2s);
}

// Starting at a wake-up's end must not overtake what was posted before: a lock dropped in a
// completion is released before a try-lock of the same resource that the completion starts next
// (Asio's order for a strand: posted first, run first), so the try-lock finds the key gone.
TEST_F(client_test, an_operation_started_in_a_completion_runs_after_what_was_posted_before) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    for (int round = 0; round < 20; ++round) {
      auto taken = co_await c.async_lock("posted-first", 10s, use_tuple);
      EXPECT_FALSE(std::get<0>(taken));
      redlock::lock first = std::move(std::get<1>(taken));  // a lambda may not capture a binding
      std::optional<error_code> retaken;
      c.async_lock("other", 10s, [&](error_code ec, redlock::lock other) {
        EXPECT_FALSE(ec);
        { auto dropped = std::move(first); }  // its release is posted to the client's strand
        c.async_try_lock("posted-first", 10s, [&](error_code e, redlock::lock again) {
          retaken = e;
          // Kept until the next round takes it again: dropped here, it is released in the background.
          (void)again;
        });
        (void)other;
      });
      EXPECT_TRUE(co_await until([&] { return retaken.has_value(); }, 2s));
      EXPECT_TRUE(retaken && !*retaken) << "round " << round << ": " << (retaken ? retaken->message() : "no answer");
      EXPECT_TRUE(co_await eventually_holding("posted-first", "", 5));
      EXPECT_TRUE(co_await eventually_holding("other", "", 5));
    }
  });
}

TEST_F(client_test, operations_carry_the_clients_executor) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    // A strand: distinct from the io_context's own executor, so the probe cannot pass by accident.
    const asio::any_io_executor ex = asio::make_strand(ioc);
    redlock::client c{ex, config()};
    co_await wait_connected(c);
    const asio::any_io_executor system{asio::system_executor()};
    EXPECT_TRUE(c.async_lock("probe", 10s, probe_executor_t{}) == ex);
    EXPECT_TRUE(c.async_try_lock("probe", 10s, probe_executor_t{}) == ex);
    redlock::lock empty;
    EXPECT_TRUE(empty.async_unlock(probe_executor_t{}) == system);
    auto [ec, l] = co_await c.async_lock("probe", 10s, use_tuple);
    EXPECT_FALSE(ec);
    EXPECT_TRUE(l.get_executor() == ex);
    EXPECT_TRUE(l.async_extend(10s, probe_executor_t{}) == ex);
    EXPECT_TRUE(l.async_wait_lost(probe_executor_t{}) == ex);
    EXPECT_TRUE(l.async_unlock(probe_executor_t{}) == ex);
    EXPECT_TRUE(l.owns_lock());  // the probes started nothing
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec);
    EXPECT_GE(held, 3u);  // completes at a majority
  });
}

// A failed round's release must run on each master before the next round's SET, which carries the
// same token. If it went out as EVALSHA and the master's script cache was empty, its EVAL fallback
// was sent only when the NOSCRIPT answer came back: with enough latency, after the retry's SET,
// which it then deleted, leaving a lock the client believed held on no master at all.
TEST_F(client_test, a_failed_rounds_release_never_deletes_the_next_rounds_key) {
  std::vector<std::unique_ptr<redlock::test::fault_proxy>> proxies;
  auto cfg = config();
  for (std::size_t i = 0; i < servers.size(); ++i) {
    servers[i].command({"SCRIPT", "FLUSH"});
    proxies.push_back(std::make_unique<redlock::test::fault_proxy>(servers[i].host(), servers[i].port()));
    cfg.masters[i].host = proxies.back()->host();
    cfg.masters[i].port = proxies.back()->port();
  }
  cfg.request_timeout = 1s;  // above the 200 ms round trip below
  cfg.release_timeout = 2s;
  cfg.retry = {.max_attempts = 0, .max_wait = 5s, .base_delay = 1ms, .jitter = 1ms};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    for (auto& p : proxies) p->set_latency(100ms);
    // Someone else holds it for 150 ms: the first round (its SETs arrive at 100 ms) is refused,
    // the retry (arriving at about 300 ms) is granted.
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"SET", "reorder", "holder", "PX", "150"});
    auto [ec, l] = co_await c.async_lock("reorder", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(l.attempts(), 2u);
    co_await sleep_for(400ms);  // past any fallback of the first round's release
    EXPECT_EQ(holding("reorder", l.token()), 5u);
    for (auto& p : proxies) p->set_latency(0ms);
    co_await l.async_unlock(use_tuple);
  });
}

// A release that a stalled connection swallowed is sent again once the master is reachable, so
// our key does not sit there until its ttl (blocking everyone while another master is down).
TEST_F(client_test, a_release_lost_with_a_stalled_connection_is_sent_again_on_the_new_one) {
  redlock::test::fault_proxy proxy{servers[0].host(), servers[0].port()};
  auto cfg = config();
  cfg.masters[0].host = proxy.host();
  cfg.masters[0].port = proxy.port();
  cfg.masters[0].stall_grace = 200ms;
  cfg.request_timeout = 100ms;
  cfg.release_timeout = 200ms;
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), cfg};
    co_await wait_connected(c);
    auto [ec, l] = co_await c.async_try_lock("swallowed", 30s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(co_await eventually_holding("swallowed", l.token(), 5));
    const std::string token = l.token();
    proxy.set_blackhole(true);  // master 0 goes silent: the release to it is written, never answered
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec) << uec.message();
    EXPECT_TRUE(co_await eventually_holding("swallowed", "", 4));
    // The stall is detected; reconnects time out (the proxy swallows them).
    EXPECT_TRUE(co_await until([&] { return c.stats().masters[0].stalls >= 1; })) << "the stall was not detected";
    EXPECT_EQ(servers[0].command({"GET", "swallowed"}), bulk(token)) << "the release must not have arrived";
    EXPECT_GE(c.stats().masters[0].stalls, 1u);
    proxy.set_blackhole(false);
    const bool gone = co_await until([&] { return servers[0].command({"GET", "swallowed"}) == nil; }, 3s);
    EXPECT_TRUE(gone) << "the deferred release was not re-sent on the new connection";
    EXPECT_GE(c.stats().releases_resent, 1u);
  });
}

}  // namespace
