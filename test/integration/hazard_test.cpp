// SPDX-License-Identifier: BSL-1.0
// The hazard guards on real masters: a restarted master is quarantined (INFO's run_id), a master
// whose wall clock jumps is quarantined at the next vote (TIME behind the vote), a master that
// refuses INFO counts no vote, holders hear of a hazard on a master that granted their lock, and
// a suspend (the library's clock counts it) ends a lock's validity.

#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redlock::error;
using redlock::hazard_cause;
using redlock::lock_event;
using redlock::restart_detection;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;
using clock_type = redlock::clock;

// The guard on, with a short quarantine: max_ttl 2 s, so a restarted master is out for 3 s.
redlock::client_config guarded(redlock::test::master_set& servers) {
  auto cfg = redlock::test::client_config_for(servers);
  cfg.guard.restarts = restart_detection::run_id;
  cfg.max_ttl = 2s;
  cfg.guard.quarantine = 3s;
  return cfg;
}

bool all_count(const redlock::client& c) {
  const auto h = c.hazards();
  return std::all_of(h.begin(), h.end(), [](const auto& m) { return m.cause == hazard_cause::none; });
}

TEST(hazard, fresh_masters_are_quarantined_until_they_have_been_up_long_enough) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), guarded(servers)};
    co_await redlock::test::wait_connected(c);
    // Just started: up for less than the quarantine, so each may have restarted empty.
    const auto h = c.hazards();
    if (h.size() != 3u) {
      ADD_FAILURE() << "hazards of " << h.size() << " masters";
      co_return;
    }
    for (const auto& m : h) {
      EXPECT_EQ(m.cause, hazard_cause::restarted);
      EXPECT_FALSE(m.run_id.empty());
      EXPECT_GE(m.uptime_seconds, 0);
      EXPECT_GT(m.quarantined_until, clock_type::now());
      EXPECT_LE(m.quarantined_until, clock_type::now() + 3s);
    }
    auto [ec, l] = co_await c.async_try_lock("h:fresh", 1s, use_tuple);
    EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
    // Decided by the first two answers (the third may still be pending).
    const auto results = l.masters();
    EXPECT_GE(std::count_if(results.begin(), results.end(),
                            [](const auto& r) { return r.error == error::master_quarantined; }),
              2);
    EXPECT_GT(c.stats().votes_quarantined, 0u);
    // Once their uptime covers the quarantine, they count.
    EXPECT_TRUE(co_await until([&] { return all_count(c); }, 5s));
    auto [ec2, l2] = co_await c.async_try_lock("h:fresh", 1s, use_tuple);
    EXPECT_FALSE(ec2) << ec2.message();
  });
}

TEST(hazard, a_restarted_master_is_quarantined_and_its_holders_are_told) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    // A lock long enough to outlast a restart on a loaded machine, held without extensions (so
    // that its per-master results stay those of its grant; the event reader watches it).
    auto cfg = guarded(servers);
    cfg.max_ttl = 5s;
    cfg.guard.quarantine = 6s;
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    EXPECT_TRUE(co_await until([&] { return all_count(c); }, 8s));
    auto [ec, got] = co_await c.async_lock("h:held", 5s, use_tuple);
    if (ec) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    redlock::lock held = std::move(got);  // a named variable: clang's lambdas cannot capture bindings
    // A master that granted it (the decision may have come before a third answer).
    std::size_t k = 0;
    while (k < 3 && held.masters()[k].status != redlock::master_status::granted) ++k;
    if (k == 3) {
      ADD_FAILURE() << "no granting master";
      co_return;
    }
    const std::size_t other_down = k == 0 ? 1 : 0;  // another master, for the quorum check below
    const auto before = c.hazards()[k].run_id;
    std::vector<lock_event> events;  // every event of the held lock, from before the restart on
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          for (;;) {
            auto [eec, e] = co_await held.async_wait_event(use_tuple);
            if (eec) co_return;
            events.push_back(e);
            if (e.is_final()) co_return;
          }
        },
        asio::detached);
    co_await sleep_for(10ms);

    // That master restarts at once, empty: its key of our lock is gone.
    servers[k].kill();
    servers[k].restart();
    EXPECT_TRUE(co_await until([&] { return c.hazards()[k].restarts == 1; }, 5s));
    const auto h = c.hazards()[k];
    EXPECT_EQ(h.cause, hazard_cause::restarted);
    EXPECT_NE(h.run_id, before);
    EXPECT_GT(h.quarantined_until, clock_type::now() + 2s);  // the full quarantine: it restarted just now

    // The holder hears of it, with the master and the facts; its lock is not given up.
    auto hazard_event = [&] {
      return std::find_if(events.begin(), events.end(),
                          [](const auto& e) { return e.what == lock_event::type::master_hazard; });
    };
    EXPECT_TRUE(co_await until([&] { return hazard_event() != events.end(); }, 2s));
    if (hazard_event() == events.end()) co_return;
    const auto e = *hazard_event();
    EXPECT_EQ(e.master, k);
    EXPECT_EQ(e.error, error::master_quarantined);
    EXPECT_NE(e.detail.find("restarted"), std::string::npos) << e.detail;
    EXPECT_EQ(held.masters()[k].error, error::master_quarantined);
    EXPECT_TRUE(held.owns_lock());

    // Another lock counts the two other masters only: a quorum of 3, still. The restarted
    // master's grant is set there (it lowers the risk for clients that do not quarantine) but
    // not counted; its answer may also come after the decision, which the other two made.
    auto [ec2, other] = co_await c.async_try_lock("h:other", 1s, use_tuple);
    EXPECT_FALSE(ec2) << ec2.message();
    if (other.masters()[k].status != redlock::master_status::pending) {
      EXPECT_EQ(other.masters()[k].error, error::master_quarantined);
    }
    // With another master down as well, no quorum: the quarantined vote does not make one.
    servers[other_down].kill();
    auto [ec3, none] = co_await c.async_try_lock("h:third", 1s, use_tuple);
    EXPECT_EQ(ec3, error::quorum_unavailable) << ec3.message();
    servers[other_down].restart();
  });
}

TEST(hazard, a_reconnect_to_the_same_process_is_not_a_restart) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), guarded(servers)};
    co_await redlock::test::wait_connected(c);
    EXPECT_TRUE(co_await until([&] { return all_count(c); }, 5s));
    const auto connects = c.masters()[0].connects;
    servers[0].command({"CLIENT", "KILL", "TYPE", "normal"});
    EXPECT_TRUE(co_await until([&] { return c.masters()[0].connects > connects; }, 5s));
    EXPECT_EQ(c.hazards()[0].cause, hazard_cause::none);
    EXPECT_EQ(c.hazards()[0].restarts, 0u);
    auto [ec, l] = co_await c.async_try_lock("h:same", 1s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
  });
}

TEST(hazard, a_master_whose_clock_jumps_forward_is_quarantined_at_the_next_vote) {
  redlock::test::master_set servers{3, redlock::test::with_clock_shim()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.guard.clock_probe_interval = 0ms;  // only the votes sample the clocks
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    auto [ec, l] = co_await c.async_try_lock("h:jump", 1s, use_tuple);
    if (ec) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    co_await l.async_unlock(use_tuple);

    redlock::test::master_clock clock{servers[1]};
    clock.shift(5s);  // master 2's keys now expire 5 s early
    auto [ec2, l2] = co_await c.async_try_lock("h:jump", 1s, use_tuple);
    EXPECT_FALSE(ec2) << ec2.message();  // masters 1 and 3 make the quorum
    // Master 2's answer may come after the decision: its sample is taken then.
    EXPECT_TRUE(co_await until([&] { return c.hazards()[1].cause == hazard_cause::clock_jumped; }, 2s));
    if (l2.masters()[1].status != redlock::master_status::pending) {
      EXPECT_EQ(l2.masters()[1].error, error::master_quarantined);
    }
    const auto h = c.hazards()[1];
    EXPECT_EQ(h.cause, hazard_cause::clock_jumped);
    EXPECT_EQ(h.clock_jumps, 1u);
    EXPECT_GE(h.last_jump, 4500ms);  // less the round trips, which a loaded machine makes long
    EXPECT_LE(h.last_jump, 5100ms);
    EXPECT_EQ(c.hazards()[0].cause, hazard_cause::none);
    // A clock that runs steadily at its new offset makes no second jump.
    co_await l2.async_unlock(use_tuple);
    auto [ec3, l3] = co_await c.async_try_lock("h:jump", 1s, use_tuple);
    EXPECT_FALSE(ec3);
    EXPECT_EQ(c.hazards()[1].clock_jumps, 1u);
  });
}

TEST(hazard, a_probe_catches_a_jump_on_an_idle_client) {
  redlock::test::master_set servers{3, redlock::test::with_clock_shim()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.guard.clock_probe_interval = 100ms;
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    co_await sleep_for(250ms);  // a probe or two
    redlock::test::master_clock clock{servers[2]};
    clock.shift(3s);
    EXPECT_TRUE(co_await until([&] { return c.hazards()[2].cause == hazard_cause::clock_jumped; }, 2s));
  });
}

// Calls of `command` a master counted since its last CONFIG RESETSTAT.
long command_calls(redlock::test::redis_node& node, const std::string& command) {
  const auto info = node.command({"INFO", "commandstats"});
  const auto key = "cmdstat_" + command + ":calls=";
  const auto at = info.find(key);
  return at == std::string::npos ? 0 : std::stol(info.substr(at + key.size()));
}

// One of kept_locks' locks (a function, not a lambda: GCC 12 mishandles a coroutine lambda's
// captures).
asio::awaitable<void> keep_one(redlock::client& c, std::string name, std::shared_ptr<std::vector<redlock::lock>> held,
                               std::shared_ptr<int> done) {
  auto [ec, l] = co_await c.async_lock(name, 2048ms, use_tuple);
  if (ec) {
    ADD_FAILURE() << name << ": " << ec.message();
  } else {
    l.keep_alive();
    held->push_back(std::move(l));
  }
  ++*done;
}

// Kept-alive locks whose renewals come due together: taken at once, with a ttl of 2048 ms, which
// renews on an 8 ms grid.
asio::awaitable<std::vector<redlock::lock>> kept_locks(redlock::client& c, const char* prefix, int n) {
  auto held = std::make_shared<std::vector<redlock::lock>>();
  auto done = std::make_shared<int>(0);
  const auto ex = co_await asio::this_coro::executor;
  for (int k = 0; k < n; ++k) asio::co_spawn(ex, keep_one(c, prefix + std::to_string(k), held, done), asio::detached);
  EXPECT_TRUE(co_await until([&] { return *done == n; }, 5s));
  co_return std::move(*held);
}

TEST(hazard, renewals_due_together_share_one_clock_sample_per_master_and_its_verdict) {
  redlock::test::master_set servers{3, redlock::test::with_clock_shim()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.guard.clock_probe_interval = 0ms;  // only the votes sample the clocks
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    // 65: two full batches of 32 votes (each sent as soon as it is full) and a lone vote after
    // them, each batch's extensions in one script call with one TIME behind it.
    auto held = co_await kept_locks(c, "h:batch:", 65);
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"CONFIG", "RESETSTAT"});
    // Each lock renews about a second after its grant: every one once, and some twice.
    co_await sleep_for(1600ms);
    long renewals = 0;
    for (const auto& l : held) renewals += static_cast<long>(l.extensions());
    EXPECT_GE(renewals, 65);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const auto calls = command_calls(servers[i], "evalsha");
      const auto times = command_calls(servers[i], "time");
      // One TIME and one script call behind each batch, not behind each renewal.
      EXPECT_LE(times * 4, renewals) << "master " << i << ": " << times << " TIME for " << renewals << " renewals";
      EXPECT_LE(calls * 4, renewals) << "master " << i << ": " << calls << " calls for " << renewals << " renewals";
      EXPECT_GE(calls, 3) << "master " << i;
    }
    // Every answer reached its own lock, and every extension its own key: past the grant's ttl,
    // each lock counts an extension and its key is on every master (EXISTS expires a key due).
    co_await sleep_for(600ms);
    for (const auto& l : held) {
      EXPECT_GE(l.extensions(), 1u) << l.resource();
      EXPECT_FALSE(l.lost()) << l.resource();
      for (std::size_t i = 0; i < servers.size(); ++i) {
        EXPECT_EQ(servers[i].command({"EXISTS", l.resource()}), ":1\r\n") << l.resource() << " on master " << i;
      }
    }
    // That one sample still judges the batch: a forward jump is caught at the next renewals...
    redlock::test::master_clock clock{servers[1]};
    clock.shift(5s);
    EXPECT_TRUE(co_await until([&] { return c.hazards()[1].cause == hazard_cause::clock_jumped; }, 3s));
    EXPECT_EQ(c.hazards()[1].clock_jumps, 1u);
    EXPECT_EQ(c.hazards()[0].cause, hazard_cause::none);
  });
}

TEST(hazard, a_lone_backward_reading_behind_a_batch_withholds_its_votes) {
  // Two masters: a round waits for both, so every vote is judged (with three, a round decided by
  // two leaves the third's answer unread).
  redlock::test::master_set servers{2, redlock::test::with_clock_shim()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.guard.clock_probe_interval = 0ms;
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    auto held = co_await kept_locks(c, "h:back:", 16);
    co_await sleep_for(1200ms);  // a round of renewals with the clocks as they were
    const auto before = c.stats().votes_quarantined;
    EXPECT_EQ(before, 0u);
    // Master 2's clock goes 3 s back: its next reading is a lone backward one, and none of the
    // renewals it came behind may count there (its keys would expire early if the clock came back).
    redlock::test::master_clock clock{servers[1]};
    clock.shift(-3s);
    EXPECT_TRUE(co_await until([&] { return c.stats().votes_quarantined > before; }, 3s))
        << c.stats().votes_quarantined;
    // A second backward reading in a row moves the estimate: the renewals, tried again, count.
    co_await sleep_for(1200ms);
    const auto settled = c.stats().votes_quarantined;
    co_await sleep_for(1200ms);
    EXPECT_EQ(c.stats().votes_quarantined, settled);
    EXPECT_EQ(c.hazards()[1].cause, hazard_cause::none);
    for (const auto& l : held) EXPECT_FALSE(l.lost()) << l.resource();
  });
}

// ---- the plain extensions of a batch in one script call (docs/safety.md, "Extensions in one
// script"): each lock is told its own answer, whatever happened to the others or to the call.

// Whether every lock in `held` is still held and its key on every master, after `extensions` each.
void expect_all_kept(const std::vector<redlock::lock>& held, redlock::test::master_set& servers,
                     std::size_t extensions) {
  for (const auto& l : held) {
    EXPECT_GE(l.extensions(), extensions) << l.resource();
    EXPECT_FALSE(l.lost()) << l.resource() << ": " << l.loss_reason().message();
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(servers[i].command({"EXISTS", l.resource()}), ":1\r\n") << l.resource() << " on master " << i;
    }
  }
}

TEST(hazard, batched_renewals_survive_a_flushed_script_cache) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), redlock::test::client_config_for(servers)};
    co_await redlock::test::wait_connected(c);
    auto held = co_await kept_locks(c, "h:flush:", 40);
    // Every master forgets its scripts before the first renewals: their batch call meets NOSCRIPT.
    for (std::size_t i = 0; i < servers.size(); ++i) {
      servers[i].command({"SCRIPT", "FLUSH"});
      servers[i].command({"CONFIG", "RESETSTAT"});
    }
    // Two rounds of renewals (about 1 s and 2 s after the grants), each lock's key past its ttl.
    co_await sleep_for(2500ms);
    expect_all_kept(held, servers, 2);
    const std::string many{redlock::detail::extend_many_script.sha1};
    // The first batch call's extensions went again one by one with EVAL (once each: the EVAL
    // caches the script), the scripts were loaded again, and this connection extends one by one
    // from then on. How many went by EVAL varies: renewals due on two grid points make two
    // batches, and only the first meets NOSCRIPT; a master whose NOSCRIPT comes after the other
    // two decided the round is not asked again (the round is over). A quorum of masters ran some.
    std::size_t by_eval = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const auto evals = command_calls(servers[i], "eval");
      EXPECT_LE(evals, 40) << "master " << i;
      by_eval += evals > 0 ? 1 : 0;
      EXPECT_EQ(servers[i].command({"SCRIPT", "EXISTS", many}), "*1\r\n:1\r\n") << "master " << i;
      EXPECT_GE(command_calls(servers[i], "evalsha"), 40) << "master " << i;
    }
    EXPECT_GE(by_eval, 2u);
    EXPECT_EQ(c.stats().extension_failures, 0u);
  });
}

// A vote whose EVALSHA met NOSCRIPT goes again with EVAL, and TIME behind it: its yes is judged
// by a clock sample read after it ran, not by the one that came with NOSCRIPT a round trip before.
TEST(hazard, a_vote_sent_again_by_eval_has_a_clock_sample_of_its_own) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.guard.clock_probe_interval = 0ms;  // only the votes sample the clocks
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    const auto flushed = [&] {
      for (std::size_t i = 0; i < servers.size(); ++i) {
        servers[i].command({"SCRIPT", "FLUSH"});
        servers[i].command({"CONFIG", "RESETSTAT"});
      }
    };
    // Every master ran the EVAL (the step completes at a quorum, the last master may be later).
    const auto all_ran_eval = [&] {
      for (std::size_t i = 0; i < servers.size(); ++i) {
        if (command_calls(servers[i], "eval") == 0) return false;
      }
      return true;
    };
    // TIME on each master beyond what the scripts themselves call, for a step whose EVALSHA met
    // NOSCRIPT: one behind the EVALSHA, one behind the EVAL.
    const auto expect_times = [&](const char* what, long by_scripts, long expected) {
      for (std::size_t i = 0; i < servers.size(); ++i) {
        EXPECT_EQ(command_calls(servers[i], "evalsha"), 1) << what << ", master " << i;
        EXPECT_EQ(command_calls(servers[i], "eval"), 1) << what << ", master " << i;
        EXPECT_EQ(command_calls(servers[i], "time") - by_scripts, expected) << what << ", master " << i;
      }
    };
    // An extension of a plain lock (extend_script calls no TIME).
    auto [ec, l] = co_await c.async_lock("h:eval-time", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    flushed();
    auto [eec] = co_await l.async_extend(10s, use_tuple);
    EXPECT_FALSE(eec) << eec.message();
    EXPECT_TRUE(co_await until(all_ran_eval, 2s));
    expect_times("extension", 0, 2);
    // A release is no vote: its EVAL goes alone.
    flushed();
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec) << uec.message();
    EXPECT_TRUE(co_await until(all_ran_eval, 2s));
    expect_times("release", 0, 0);
    // An acquisition by script: a reader's (its script calls TIME once, in the EVAL's run).
    redlock::lock_options reader;
    reader.kind = redlock::lock_kind::read;
    flushed();
    auto [rec, r] = co_await c.async_lock("h:eval-time-r", 10s, reader, use_tuple);
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_TRUE(co_await until(all_ran_eval, 2s));
    expect_times("acquisition", 1, 2);
    co_await r.async_unlock(use_tuple);
  });
}

TEST(hazard, a_lock_lost_or_refused_within_its_batch_is_told_alone) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), redlock::test::client_config_for(servers)};
    co_await redlock::test::wait_connected(c);
    auto held = co_await kept_locks(c, "h:among:", 40);
    if (held.size() != 40) co_return;
    std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.resource() < b.resource(); });
    // Before the first renewals: one lock's key is deleted everywhere, another's is made a hash.
    auto gone = std::move(held[7]);
    auto wrong = std::move(held[20]);
    held.erase(held.begin() + 20);
    held.erase(held.begin() + 7);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      servers[i].command({"DEL", gone.resource()});
      servers[i].command({"DEL", wrong.resource()});
      servers[i].command({"HSET", wrong.resource(), "f", "v"});
      servers[i].command({"CONFIG", "RESETSTAT"});
    }
    co_await sleep_for(2500ms);
    EXPECT_TRUE(gone.lost());
    EXPECT_EQ(gone.extensions(), 0u);
    EXPECT_TRUE(wrong.lost());
    EXPECT_EQ(wrong.extensions(), 0u);
    expect_all_kept(held, servers, 2);
    // A key's own error is not the call's: the batches stayed whole.
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_LE(command_calls(servers[i], "evalsha") * 4, 2 * 40) << "master " << i;
      EXPECT_EQ(command_calls(servers[i], "eval"), 0) << "master " << i;
    }
  });
}

TEST(hazard, a_master_that_refuses_the_batch_call_gets_each_renewal_on_its_own) {
  // An ACL that lets the client's user reach some keys only: a call naming one key it may not
  // touch is refused whole (NOPERM), which renewals one by one would not be for the others.
  redlock::test::redis_options with_user;
  with_user.user = redlock::test::acl_user{"locker", "locker-pw"};
  redlock::test::master_set servers{3, with_user};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    for (auto& m : cfg.masters) {
      m.username = "locker";
      m.password = "locker-pw";
    }
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    auto held = co_await kept_locks(c, "h:acl:", 20);
    auto [ec, denied] = co_await c.async_lock("h:deny", 2048ms, use_tuple);
    if (ec || held.size() != 20) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    denied.keep_alive();
    for (std::size_t i = 0; i < servers.size(); ++i) {
      servers[i].command({"ACL", "SETUSER", "locker", "resetkeys", "~h:acl:*"});
    }
    co_await sleep_for(2600ms);
    // The refused round failed on every master and was retried one by one, in time.
    expect_all_kept(held, servers, 2);
    EXPECT_TRUE(denied.lost());
    EXPECT_GE(c.stats().extension_failures, 1u);
  });
}

TEST(hazard, a_batch_refused_by_a_master_is_retried_in_time) {
  // The batch goes out after the timer pass: a master that refuses it (its connection is down)
  // fails the renewal there and then, and the retry it schedules must still wake the timer.
  redlock::test::master_set servers{2};
  redlock::test::fault_proxy proxy{servers[1].host(), servers[1].port()};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers);
    cfg.masters[1].host = proxy.host();
    cfg.masters[1].port = proxy.port();
    redlock::client c{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(c);
    auto [ec, l] = co_await c.async_lock("h:refused", 2000ms, use_tuple);
    if (ec) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    l.keep_alive();  // renews about 1000 ms in, retries every 200 ms; the loss point is near 1900 ms
    co_await sleep_for(700ms);
    proxy.set_refuse(true);  // master 2 down: its link refuses the renewal at once
    proxy.reset_all();
    co_await sleep_for(450ms);  // the renewal at about 1000 ms failed on the refusal
    proxy.set_refuse(false);    // back: a retry succeeds
    co_await sleep_for(1500ms);
    EXPECT_GE(c.stats().extension_failures, 1u);
    EXPECT_GE(l.extensions(), 1u);
    EXPECT_FALSE(l.lost()) << l.loss_reason().message();
  });
}

TEST(hazard, a_master_that_refuses_info_counts_no_vote_unless_told_otherwise) {
  // An ACL user denied INFO (as `@dangerous` is on managed services).
  redlock::test::redis_options with_user;
  with_user.user = redlock::test::acl_user{"locker", "locker-pw"};
  redlock::test::master_set plain{2};
  redlock::test::master_set limited{1, with_user};
  limited[0].command({"ACL", "SETUSER", "locker", "-info"});
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(plain);
    auto m = redlock::test::client_config_for(limited).masters[0];
    m.username = "locker";
    m.password = "locker-pw";
    cfg.masters.push_back(m);
    cfg.guard.restarts = restart_detection::run_id;
    cfg.max_ttl = 1s;
    cfg.guard.quarantine = 1s;
    {
      redlock::client c{ioc.get_executor(), cfg};
      co_await redlock::test::wait_connected(c);
      // Both plain masters, each freshly started and so quarantined until its own uptime is long
      // enough (waiting for the first alone let the second still be out now and then).
      EXPECT_TRUE(co_await until(
          [&] {
            const auto h = c.hazards();
            return h[0].cause == hazard_cause::none && h[1].cause == hazard_cause::none;
          },
          3s));
      EXPECT_EQ(c.hazards()[2].cause, hazard_cause::info_refused);
      EXPECT_EQ(c.hazards()[2].quarantined_until, clock_type::time_point::max());
      auto [ec, l] = co_await c.async_try_lock("h:info", 1s, use_tuple);
      EXPECT_FALSE(ec) << redlock::to_string(c.report(l));  // masters 1 and 2 (3's answer may come later)
      EXPECT_TRUE(co_await until([&] { return c.stats().votes_quarantined > 0; }, 2s));
      c.close();
    }
    // `reconnect` takes every connect for a restart instead: quarantined for the quarantine.
    cfg.guard.restarts = restart_detection::reconnect;
    redlock::client r{ioc.get_executor(), cfg};
    co_await redlock::test::wait_connected(r);
    EXPECT_EQ(r.hazards()[2].cause, hazard_cause::restarted);
    EXPECT_TRUE(co_await until([&] { return all_count(r); }, 3s));
    auto [ec, l] = co_await r.async_try_lock("h:info", 1s, use_tuple);
    EXPECT_FALSE(ec) << redlock::to_string(r.report(l));
    EXPECT_FALSE(l.masters()[2].error) << l.masters()[2].error.message();
    r.close();
  });
}

TEST(hazard, a_suspend_counts_the_validity_ends_with_it) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), redlock::test::client_config_for(servers)};
    co_await redlock::test::wait_connected(c);
    auto [ec, l] = co_await c.async_lock("h:suspend", 3s, use_tuple);
    if (ec) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    auto [ec2, kept] = co_await c.async_lock("h:kept", 3s, use_tuple);
    if (ec2) {
      ADD_FAILURE() << ec2.message();
      co_return;
    }
    kept.keep_alive();
    EXPECT_GT(l.validity_deadline(), clock_type::now() + 2s);
    // The machine sleeps for 5 s (CLOCK_BOOTTIME counts it; CLOCK_MONOTONIC would not): the masters'
    // keys expired meanwhile, and the locks know it.
    redlock::detail::advance_clock_for_testing(5s);
    EXPECT_LT(l.validity_deadline(), clock_type::now());
    auto [lec] = co_await kept.async_wait_lost(use_tuple);
    EXPECT_FALSE(lec) << lec.message();
    EXPECT_EQ(kept.loss_reason(), error::validity_expired) << kept.loss_reason().message();
  });
}

}  // namespace
