// SPDX-License-Identifier: BSL-1.0
// Cluster masters against real Redis Clusters on loopback (local::cluster_set): routing by slot
// for every lock kind, helper keys in the lock key's slot, MOVED after a slot moved under a held
// lock, ASK and TRYAGAIN during a migration, and a killed shard costing its master's vote only.

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/core/key_slot.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::error;
using redlock::master_status;
using redlock::core::key_slot;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;

redlock::client_config config_for(redlock::test::cluster_set& set) {
  redlock::client_config cfg;
  std::string what;
  EXPECT_FALSE(redlock::parse_masters(set.masters(), cfg.masters, &what)) << what;
  for (auto& m : cfg.masters) {
    m.connect_timeout = 300ms;
    m.reconnect = {10ms, 100ms, 0.5};
  }
  cfg.request_timeout = 250ms;
  cfg.guard.restarts = redlock::restart_detection::off;  // fresh servers (see hazard_test)
  return cfg;
}

// The primary of cluster `c` that holds `key` (by asking each, with ASKING: a node importing the
// slot answers too), or -1.
int holder_of(redlock::test::cluster_set& set, std::size_t c, const std::string& key) {
  int found = -1;
  for (std::size_t s = 0; s < set.shards(); ++s) {
    if (!set.primary(c, s).running()) continue;
    auto session = set.primary(c, s).open();
    (void)session.command({"ASKING"});
    if (session.command({"EXISTS", key}) == ":1\r\n") found = static_cast<int>(s);
  }
  return found;
}

// Waits until `key` is on shard `shard` of a majority of the clusters (-1: absent there): a lock
// completes with a quorum, and the last cluster's answer may still be on its way.
// A majority of clusters is what a lock needs; a loaded machine (sanitizers, parallel tests) may
// leave the last cluster's request timed out, which is not a failure of the lock.
asio::awaitable<bool> settled(redlock::test::cluster_set& set, const std::string& key, int shard) {
  co_return co_await until([&] {
    std::size_t n = 0;
    for (std::size_t c = 0; c < set.size(); ++c) n += holder_of(set, c, key) == shard;
    return n >= set.size() / 2 + 1;
  });
}

// The shard of a 2-shard cluster (as started) that owns `key`'s slot.
std::size_t shard_of(const std::string& key, std::size_t shards = 2) {
  return key_slot(key) * shards / redlock::core::slot_count;
}

class cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_ = new redlock::test::cluster_set(3, 2); }
  static void TearDownTestSuite() {
    delete set_;
    set_ = nullptr;
  }
  void SetUp() override {
    for (std::size_t c = 0; c < set_->size(); ++c)
      for (std::size_t s = 0; s < set_->shards(); ++s) set_->primary(c, s).command({"FLUSHALL"});
  }
  static redlock::test::cluster_set* set_;
};
redlock::test::cluster_set* cluster::set_ = nullptr;

struct kind_case {
  const char* what;
  redlock::lock_options o;
  const char* helper;  // a helper key the acquisition leaves, or null
};

std::vector<kind_case> kind_cases() {
  redlock::lock_options fenced, reader, writer, semaphore, reentrant;
  fenced.fence = true;
  reader.kind = redlock::lock_kind::read;
  writer.kind = redlock::lock_kind::write;
  semaphore.kind = redlock::lock_kind::semaphore;
  semaphore.permits = 2;
  reentrant.owner = "worker-1";
  return {
      {"fenced", fenced, "{k:fenced}:redlock-fence"},
      {"reader", reader, "{k:reader}:redlock-readers"},
      {"writer", writer, nullptr},
      {"semaphore", semaphore, nullptr},
      {"reentrant", reentrant, "{k:reentrant}:redlock-holds"},
  };
}

TEST_F(cluster, every_kind_lives_on_the_shard_that_owns_its_slot) {
  auto& set = *set_;
  const auto cases = kind_cases();
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    auto [er, report] = co_await a.async_wait_ready(5s, use_tuple);
    EXPECT_FALSE(er) << er.message();
    // Names on both shards: plain locks spread over them by slot.
    std::vector<std::string> on_shard(2);
    for (int i = 0; on_shard[0].empty() || on_shard[1].empty(); ++i) {
      const auto name = "orders:" + std::to_string(i);
      if (on_shard[shard_of(name)].empty()) on_shard[shard_of(name)] = name;
    }
    for (const auto& name : on_shard) {
      auto [ec, l] = co_await a.async_lock(name, 10s, use_tuple);
      EXPECT_FALSE(ec) << name << ": " << ec.message();
      if (ec) co_return;
      EXPECT_TRUE(co_await settled(set, name, static_cast<int>(shard_of(name)))) << name;
      auto [eu, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(eu) << eu.message();
      EXPECT_GE(held, 2u);
      EXPECT_TRUE(co_await settled(set, name, -1)) << name;
    }
    // Every kind, with helper keys renamed into the lock key's slot (no CROSSSLOT).
    for (const auto& k : cases) {
      const std::string name = std::string{"k:"} + k.what;
      auto [ec, l] = co_await a.async_lock(name, 10s, k.o, use_tuple);
      EXPECT_FALSE(ec) << k.what << ": " << ec.message();
      if (ec) continue;
      for (const auto& m : l.masters())
        EXPECT_NE(m.status, master_status::server_error) << k.what << " " << m.server_text;
      if (k.helper) {
        EXPECT_TRUE(co_await settled(set, k.helper, static_cast<int>(shard_of(name)))) << k.helper;
      }
      auto [ee] = co_await l.async_extend(10s, use_tuple);
      EXPECT_FALSE(ee) << k.what << ": " << ee.message();
      auto [eu, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(eu) << k.what << ": " << eu.message();
      EXPECT_GE(held, 2u) << k.what;
    }
    // Several resources in one slot (a common tag): one script on one node.
    const std::vector<std::string> accounts = {"{acct}:42", "{acct}:99"};
    auto [em, multi] = co_await a.async_lock_all(accounts, 10s, use_tuple);
    EXPECT_FALSE(em) << em.message();
    if (!em) (void)co_await multi.async_unlock(use_tuple);
    a.close();
  });
}

TEST_F(cluster, several_resources_over_several_slots_are_taken_per_slot_group) {
  auto& set = *set_;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    redlock::client b{io.get_executor(), config_for(set)};
    // Every cluster connected, not only a quorum: a's request to a cluster not yet connected is
    // refused there (not sent), and b's could then be granted there (see below).
    co_await redlock::test::wait_connected(a, 5s);
    co_await redlock::test::wait_connected(b, 5s);
    // "foo" lives on shard 1, "bar" and "baz" on shard 0 (slots 12182, 5061, 4813).
    EXPECT_EQ(shard_of("foo"), 1u);
    EXPECT_EQ(shard_of("bar"), 0u);
    const std::vector<std::string> first = {"foo", "bar"};
    auto [ea, la] = co_await a.async_lock_all(first, 30s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    if (ea) co_return;
    // On every cluster, not only a majority: the two clients' requests go over different
    // connections, so b's could otherwise overtake a's on the cluster that had not answered yet (a
    // refused there, b granted), and a's release would find nothing of its own there.
    EXPECT_TRUE(co_await until([&] {
      for (std::size_t c = 0; c < set.size(); ++c) {
        if (holder_of(set, c, "foo") != 1 || holder_of(set, c, "bar") != 0) return false;
      }
      return true;
    }));
    // Another client wants "baz" and "foo": its part on shard 0 ("baz") is granted, the one on
    // shard 1 ("foo") is refused, so no cluster votes yes, and what it set is released.
    const std::vector<std::string> second = {"baz", "foo"};
    auto [eb, lb] = co_await b.async_try_lock_all(second, 10s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << eb.message();
    for (const auto& m : lb.masters()) {
      if (m.status == master_status::taken) {
        EXPECT_EQ(m.value, 2) << "the first held key is the second, 'foo'";
      }
    }
    EXPECT_TRUE(co_await settled(set, "baz", -1)) << "the refused acquisition's granted part was released";
    // The holder extends and releases over both slots.
    auto [ee] = co_await la.async_extend(40s, use_tuple);
    EXPECT_FALSE(ee) << ee.message();
    auto [eu, held] = co_await la.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_GE(held, 2u);
    EXPECT_TRUE(co_await settled(set, "foo", -1));
    EXPECT_TRUE(co_await settled(set, "bar", -1));
    a.close();
    b.close();
  });
}

TEST_F(cluster, a_slot_moved_under_a_held_lock_is_followed) {
  auto& set = *set_;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    (void)co_await a.async_wait_ready(5s, use_tuple);
    const std::string name = "moving:1";
    auto [ec, l] = co_await a.async_lock(name, 30s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (ec) co_return;
    EXPECT_TRUE(co_await settled(set, name, static_cast<int>(shard_of(name))));
    // Reshard: the slot (and the key, with its ttl) goes to the other shard of every cluster.
    const auto from = shard_of(name);
    std::vector<std::size_t> holding;  // the clusters whose key was set (a majority at least)
    for (std::size_t c = 0; c < set.size(); ++c)
      if (holder_of(set, c, name) == static_cast<int>(from)) holding.push_back(c);
    for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(name), set.primary(c, 1 - from));
    EXPECT_GE(holding.size(), 2u);
    for (const auto c : holding) {
      EXPECT_EQ(holder_of(set, c, name), static_cast<int>(1 - from)) << "cluster " << c;
      const auto ttl = redlock::test::integer_of(set.primary(c, 1 - from).command({"PTTL", name}));
      EXPECT_TRUE(ttl && *ttl > 5000) << "MIGRATE keeps the ttl";
    }
    // The extension meets MOVED on every cluster and follows it.
    auto [ee] = co_await l.async_extend(40s, use_tuple);
    EXPECT_FALSE(ee) << ee.message();
    for (const auto& m : l.masters()) EXPECT_NE(m.status, master_status::server_error) << m.server_text;
    // (The extension completed with a quorum; the last cluster's answer may still be on its way.)
    const bool extended = co_await until([&] {
      std::size_t n = 0;
      for (const auto c : holding) {
        const auto ttl = redlock::test::integer_of(set.primary(c, 1 - from).command({"PTTL", name}));
        n += ttl && *ttl > 35000;
      }
      return n >= 2;
    });
    EXPECT_TRUE(extended) << "the extension reached the new owners";
    // Every cluster's old owner answers MOVED, whether it held the key or not; the slowest answer
    // may come after the quorum did.
    EXPECT_TRUE(co_await until([&] {
      const auto st = a.stats();
      for (const auto& m : st.masters)
        if (m.redirects < 1) return false;
      return true;
    })) << "the extension met MOVED on every cluster";
    // Another client cannot take it meanwhile.
    redlock::client b{io.get_executor(), config_for(set)};
    (void)co_await b.async_wait_ready(5s, use_tuple);
    auto [eb, lb] = co_await b.async_try_lock(name, 10s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << eb.message();
    auto [eu, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    EXPECT_GE(held, 2u);
    EXPECT_TRUE(co_await settled(set, name, -1));
    // Put the slot back for the other tests.
    for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(name), set.primary(c, from));
    a.close();
    b.close();
  });
}

TEST_F(cluster, ask_and_tryagain_during_a_migration_are_followed) {
  auto& set = *set_;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    (void)co_await a.async_wait_ready(5s, use_tuple);
    const std::string name = "migrating:7";
    const auto from = shard_of(name);
    const auto slot = std::to_string(key_slot(name));
    // The slot is half-way: MIGRATING on its owner, IMPORTING on the other; the key is nowhere.
    for (std::size_t c = 0; c < set.size(); ++c) {
      auto& src = set.primary(c, from);
      auto& dst = set.primary(c, 1 - from);
      EXPECT_EQ(dst.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", redlock::test::cluster_set::id_of(src)}),
                "+OK\r\n");
      EXPECT_EQ(src.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", redlock::test::cluster_set::id_of(dst)}),
                "+OK\r\n");
    }
    // SET on the owner, where the key is absent: ASK, then ASKING + SET on the importing node.
    auto [ec, l] = co_await a.async_lock(name, 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(co_await settled(set, name, static_cast<int>(1 - from))) << "not set on the importing node";
    // The release names helper keys that do not exist: TRYAGAIN while the slot migrates. It
    // goes through once the migration ends, within the release's deadline.
    asio::steady_timer finish{io, 30ms};
    finish.async_wait([&](error_code) {
      for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(name), set.primary(c, 1 - from));
    });
    auto [eu, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    for (const auto& m : l.masters())
      EXPECT_NE(m.status, master_status::server_error) << m.server_text << " " << m.error.message();
    EXPECT_GE(held, 2u);
    EXPECT_TRUE(co_await settled(set, name, -1));
    for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(name), set.primary(c, from));
    a.close();
  });
}

// Slots move back and forth between the shards of every cluster (a reshard, with MIGRATE) while
// two clients contend for a few resources and keep their locks alive: no two holders at once, no
// lock lost.
TEST_F(cluster, a_reshard_under_contention_and_keep_alive_loses_nothing) {
  auto& set = *set_;
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) names.push_back("rs:" + std::to_string(i));
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::string reshard_failure;
  std::thread resharder([&] {
    try {
      for (int round = 0; !stop; ++round) {
        for (const auto& n : names) {
          for (std::size_t c = 0; c < set.size() && !stop; ++c) {
            set.move_slot(c, key_slot(n), set.primary(c, (shard_of(n) + 1 + round) % 2));
            ++moves;
            // A reshard's pace: Redis settles each move by gossip before the next one.
            std::this_thread::sleep_for(20ms);
          }
        }
      }
      for (const auto& n : names)  // home again for the other tests
        for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(n), set.primary(c, shard_of(n)));
    } catch (const std::exception& e) {
      reshard_failure = e.what();
    }
  });
  std::map<std::string, int> holders;
  int overlaps = 0, lost = 0, cycles = 0, failures = 0;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    redlock::client b{io.get_executor(), config_for(set)};
    // Every cluster connected, not only a quorum (see several_resources_over_several_slots...).
    co_await redlock::test::wait_connected(a, 5s);
    co_await redlock::test::wait_connected(b, 5s);
    auto worker = [&](redlock::client& c, int seed) -> asio::awaitable<void> {
      std::minstd_rand rng(static_cast<unsigned>(seed));
      const auto end = redlock::clock::now() + 4s;
      while (redlock::clock::now() < end) {
        const auto& name = names[rng() % names.size()];
        auto [ec, got] = co_await c.async_lock(name, 1s, use_tuple);
        if (ec) {
          ++failures;
          continue;
        }
        redlock::lock l = std::move(got);
        l.keep_alive();
        if (holders[name]++ != 0) ++overlaps;
        co_await sleep_for(std::chrono::milliseconds{10 + rng() % (seed % 2 ? 40 : 1500)});  // some outlive the ttl
        --holders[name];
        if (l.lost()) ++lost;
        (void)co_await l.async_unlock(use_tuple);
        ++cycles;
      }
    };
    int done = 0;
    for (int w = 0; w < 4; ++w) {
      asio::co_spawn(io, worker(w % 2 ? a : b, w + 1), [&](std::exception_ptr) { ++done; });
    }
    co_await until([&] { return done == 4; }, 20s);
    stop = true;
    a.close();
    b.close();
  });
  stop = true;
  resharder.join();
  EXPECT_EQ(reshard_failure, "");
  EXPECT_EQ(overlaps, 0);
  EXPECT_EQ(lost, 0);
  EXPECT_GT(moves.load(), 10) << "the slots hardly moved";
  EXPECT_GT(cycles, 10);
  std::printf("reshard: %d slot moves, %d lock cycles, %d failed acquisitions (contention)\n", moves.load(), cycles,
              failures);
}

// Fair hand-over on clusters: the release script publishes the wake-up on the shard that owns the
// lock key; Redis Cluster carries a PUBLISH to every node, so the waiter's subscription (on any
// node of each cluster) hears it, and the waiter holds the lock long before its 3 s retry tick.
TEST_F(cluster, a_release_wakes_the_fair_waiter_through_the_cluster) {
  auto& set = *set_;
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    auto cfg = config_for(set);
    cfg.retry.base_delay = 3000ms;
    cfg.retry.jitter = 0ms;
    cfg.retry.max_wait = 20s;
    redlock::client a{io.get_executor(), cfg};
    redlock::client b{io.get_executor(), cfg};
    // Every cluster connected, not only a quorum (see several_resources_over_several_slots...).
    co_await redlock::test::wait_connected(a, 5s);
    co_await redlock::test::wait_connected(b, 5s);
    // A name on the shard that is not the subscription's first choice: the message must cross.
    std::string name;
    for (int i = 0; name.empty(); ++i)
      if (shard_of("wake:" + std::to_string(i)) == 1) name = "wake:" + std::to_string(i);
    auto [ea, la] = co_await a.async_lock(name, 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    if (ea) co_return;
    EXPECT_TRUE(co_await settled(set, name, 1));
    bool done = false;
    error_code eb;
    redlock::lock lb;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto [e, l] = co_await b.async_lock(name, 10s, use_tuple);
          eb = e;
          lb = std::move(l);
          done = true;
        },
        asio::detached);
    EXPECT_TRUE(co_await until([&] { return b.stats().locks_queued == 1; }, 5s)) << "b did not queue";
    const auto released = redlock::clock::now();
    (void)co_await la.async_unlock(use_tuple);
    EXPECT_TRUE(co_await until([&] { return done; }, 10s));
    EXPECT_FALSE(eb) << eb.message();
    EXPECT_LT(redlock::clock::now() - released, 1s) << "woken, not by its retry tick";
    EXPECT_GE(b.stats().lock_wakeups, 1u);
    if (!eb) (void)co_await lb.async_unlock(use_tuple);
    a.close();
    b.close();
  });
}

TEST_F(cluster, a_killed_shard_costs_its_master_one_vote) {
  // A set of its own: the shard is killed for good.
  redlock::test::cluster_set set{3, 2};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), config_for(set)};
    (void)co_await a.async_wait_ready(5s, use_tuple);
    set.primary(0, 0).kill();
    std::vector<std::string> on_shard(2);
    for (int i = 0; on_shard[0].empty() || on_shard[1].empty(); ++i) {
      const auto name = "jobs:" + std::to_string(i);
      if (on_shard[shard_of(name)].empty()) on_shard[shard_of(name)] = name;
    }
    // On the dead shard's slots: cluster 0 cannot vote, clusters 1 and 2 make the quorum.
    auto [e0, l0] = co_await a.async_lock(on_shard[0], 10s, use_tuple);
    EXPECT_FALSE(e0) << e0.message();
    const auto m = l0.masters();
    if (m.size() == 3) {
      EXPECT_NE(m[0].status, master_status::granted);
      EXPECT_EQ(m[1].status, master_status::granted);
      EXPECT_EQ(m[2].status, master_status::granted);
    }
    // On the live shard of cluster 0: all three.
    auto [e1, l1] = co_await a.async_lock(on_shard[1], 10s, use_tuple);
    EXPECT_FALSE(e1) << e1.message();
    EXPECT_TRUE(co_await settled(set, on_shard[1], 1)) << "a majority of clusters set it";
    (void)co_await l0.async_unlock(use_tuple);
    (void)co_await l1.async_unlock(use_tuple);
    a.close();
  });
}

// The restart guard on, with a short quarantine (max_ttl 4 s: out for 5 s).
redlock::client_config guarded(redlock::test::cluster_set& set) {
  auto cfg = config_for(set);
  cfg.guard.restarts = redlock::restart_detection::run_id;
  cfg.max_ttl = 4s;
  cfg.guard.quarantine = 5s;
  return cfg;
}

// Every cluster identified (its nodes' INFO read) and counting.
bool all_count(const redlock::client& c) {
  const auto h = c.hazards();
  return std::all_of(h.begin(), h.end(),
                     [](const auto& m) { return !m.run_id.empty() && m.cause == redlock::hazard_cause::none; });
}

// A failover that loses a lock's key: the replica is cut off while the lock is taken, the primary
// dies, and the replica takes over without the key (asynchronous replication's loss, for real). The cluster is
// quarantined as a restarted master; the majority of clusters still holds the lock, so nobody else gets it.
TEST(cluster_failover, a_promoted_replica_that_lost_the_key_is_quarantined_and_the_majority_holds) {
  redlock::test::cluster_set set{3, 1, {}, 1};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), guarded(set)};
    redlock::client b{io.get_executor(), guarded(set)};
    EXPECT_TRUE(co_await until([&] { return all_count(a) && all_count(b); }, 10s)) << "fresh clusters stay quarantined";
    // The replica is cut off before the lock is taken: stopped, and its replication link
    // dropped by the primary, which keeps the writes after that for a reconnect that never comes.
    set.replica(0, 0).pause();
    EXPECT_EQ(set.primary(0, 0).command({"CLIENT", "KILL", "TYPE", "replica"}), ":1\r\n");
    auto [ec, got] = co_await a.async_lock("f:held", 4s, use_tuple);
    if (ec) {
      set.replica(0, 0).resume();
      ADD_FAILURE() << ec.message();
      co_return;
    }
    redlock::lock held = std::move(got);
    EXPECT_TRUE(co_await settled(set, "f:held", 0));
    set.primary(0, 0).kill();
    set.replica(0, 0).resume();
    EXPECT_EQ(set.replica(0, 0).command({"CLUSTER", "FAILOVER", "TAKEOVER"}), "+OK\r\n");
    EXPECT_EQ(set.replica(0, 0).command({"EXISTS", "f:held"}), ":0\r\n") << "the promoted replica lacks the key";
    // The client sees the promotion (its map, refreshed while the old primary fails) and
    // quarantines that cluster.
    EXPECT_TRUE(co_await until([&] { return a.hazards()[0].cause == redlock::hazard_cause::restarted; }, 5s));
    EXPECT_TRUE(co_await until([&] { return b.hazards()[0].cause == redlock::hazard_cause::restarted; }, 5s));
    // Another client: cluster 0 grants (the key is gone there) but its vote does not count, and
    // clusters 1 and 2 refuse. With the guard off, cluster 0's vote would count and still be one
    // of three: a lock is lost only when a majority of clusters lose its key.
    auto [eb, lb] = co_await b.async_try_lock("f:held", 1s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << eb.message();
    const auto m = lb.masters();
    if (m.size() == 3 && m[0].status != master_status::pending) {
      EXPECT_EQ(m[0].error, error::master_quarantined) << m[0].error.message();
    }
    EXPECT_TRUE(held.owns_lock());
    auto [eu, n] = co_await held.async_unlock(use_tuple);
    EXPECT_FALSE(eu) << eu.message();
    a.close();
    b.close();
  });
}

// A graceful failover (CLUSTER FAILOVER on the replica): the old primary lives on as a replica and
// answers MOVED to the promoted one. The redirect's answer is not counted before a refresh of the
// map has seen the promotion, which quarantines the cluster (its answer waits for that refresh).
TEST(cluster_failover, a_failover_learned_through_moved_quarantines_the_cluster) {
  redlock::test::cluster_set set{3, 1, {}, 1};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), guarded(set)};
    EXPECT_TRUE(co_await until([&] { return all_count(a); }, 10s)) << "fresh clusters stay quarantined";
    auto [ec, got] = co_await a.async_lock("g:held", 4s, use_tuple);
    if (ec) {
      ADD_FAILURE() << ec.message();
      co_return;
    }
    redlock::lock held = std::move(got);
    EXPECT_EQ(set.replica(0, 0).command({"CLUSTER", "FAILOVER"}), "+OK\r\n");
    EXPECT_TRUE(
        co_await until([&] { return set.primary(0, 0).command({"ROLE"}).find("slave") != std::string::npos; }, 5s))
        << "the old primary did not step down";
    EXPECT_EQ(a.hazards()[0].cause, redlock::hazard_cause::none) << "nothing told the client yet";
    // The extension meets MOVED on cluster 0: its answer waits for the refresh, which sees the
    // promotion; cluster 0's vote does not count, clusters 1 and 2 carry it.
    auto [ee] = co_await held.async_extend(4s, use_tuple);
    EXPECT_FALSE(ee) << ee.message();
    EXPECT_TRUE(co_await until([&] { return a.hazards()[0].cause == redlock::hazard_cause::restarted; }, 5s));
    EXPECT_EQ(a.stats().masters[0].failovers, 1u);
    // Another vote on cluster 0 now: quarantined.
    auto [e2, other] = co_await a.async_try_lock("g:other", 2s, use_tuple);
    EXPECT_FALSE(e2) << e2.message();
    const auto m = other.masters();
    if (m.size() == 3 && m[0].status != master_status::pending) {
      EXPECT_EQ(m[0].error, error::master_quarantined) << m[0].error.message();
    }
    (void)co_await held.async_unlock(use_tuple);
    a.close();
  });
}

// A cluster node given as a plain master is refused: its helper keys would be named otherwise,
// and its scripts would meet CROSSSLOT.
TEST(cluster_failover, a_cluster_node_given_as_a_plain_master_is_refused) {
  redlock::test::cluster_set set{1, 1};
  redlock::test::master_set plain{2};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client_config cfg;
    EXPECT_FALSE(redlock::parse_masters(set.primary(0, 0).address() + "," + plain.masters(), cfg.masters));
    cfg.guard.restarts = redlock::restart_detection::off;
    redlock::client a{io.get_executor(), cfg};
    auto [ec, l] = co_await a.async_lock("p:1", 4s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();  // the two plain masters
    EXPECT_TRUE(co_await until([&] { return a.masters()[0].state == redlock::connection_state::closed; }, 3s));
    auto [ec2, l2] = co_await a.async_lock("p:2", 4s, use_tuple);
    EXPECT_FALSE(ec2) << ec2.message();
    if (!l2.masters().empty()) {
      EXPECT_NE(l2.masters()[0].status, master_status::granted);
    }
    a.close();
  });
}

// A cluster's nodes keep clocks of their own: one node 5 s ahead of the other from the start is no
// jump (each node has its own baseline), and that node jumping 3 s further is one, which
// quarantines its cluster.
TEST(cluster_failover, each_node_of_a_cluster_has_its_own_clock_baseline) {
  redlock::test::cluster_set set{3, 2, redlock::test::with_clock_shim()};
  redlock::test::master_clock ahead{set.primary(0, 1)};
  ahead.shift(5s);
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    auto cfg = config_for(set);
    cfg.guard.clock_probe_interval = 0ms;  // only the votes sample the clocks
    redlock::client a{io.get_executor(), cfg};
    (void)co_await a.async_wait_ready(5s, use_tuple);
    // Votes on both shards of every cluster, alternately.
    std::vector<std::string> on_shard(2);
    for (int i = 0; on_shard[0].empty() || on_shard[1].empty(); ++i) {
      const auto name = "clk:" + std::to_string(i);
      if (on_shard[shard_of(name)].empty()) on_shard[shard_of(name)] = name;
    }
    for (int round = 0; round < 10; ++round) {
      auto [ec, l] = co_await a.async_lock(on_shard[round % 2], 2s, use_tuple);
      EXPECT_FALSE(ec) << ec.message();
      if (!ec) (void)co_await l.async_unlock(use_tuple);
    }
    EXPECT_EQ(a.hazards()[0].cause, redlock::hazard_cause::none) << "two nodes' offsets taken for a jump";
    EXPECT_EQ(a.hazards()[0].clock_jumps, 0u);
    ahead.shift(8s);  // that node jumps 3 s forward
    auto [ec, l] = co_await a.async_lock(on_shard[1], 2s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();  // clusters 1 and 2
    EXPECT_TRUE(co_await until([&] { return a.hazards()[0].cause == redlock::hazard_cause::clock_jumped; }, 2s));
    EXPECT_EQ(a.hazards()[0].clock_jumps, 1u);
    EXPECT_GE(a.hazards()[0].last_jump, 2500ms);
    EXPECT_EQ(a.hazards()[1].cause, redlock::hazard_cause::none);
    if (!ec) (void)co_await l.async_unlock(use_tuple);
    a.close();
  });
}

// A shard's primary killed and restarted empty (same node id, same slots, no keys): its cluster
// is quarantined, the others count.
TEST(cluster_failover, a_restarted_shard_quarantines_its_cluster) {
  redlock::test::cluster_set set{3, 2};
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client a{io.get_executor(), guarded(set)};
    EXPECT_TRUE(co_await until([&] { return all_count(a); }, 10s));
    set.primary(1, 1).kill();
    set.primary(1, 1).restart();
    EXPECT_TRUE(co_await until([&] { return a.hazards()[1].cause == redlock::hazard_cause::restarted; }, 5s));
    EXPECT_EQ(a.hazards()[0].cause, redlock::hazard_cause::none);
    EXPECT_EQ(a.hazards()[2].cause, redlock::hazard_cause::none);
    auto [ec, l] = co_await a.async_lock("r:1", 4s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (!ec) (void)co_await l.async_unlock(use_tuple);
    a.close();
  });
}

// Why no client needs a transition: a client of an earlier version (which names helper keys
// "K:redlock-..." everywhere) could never run a script with helper keys on a cluster node, whose
// slots differ: Redis refuses it with CROSSSLOT, even on a node that owns every slot. Its plain
// SET NX on the same lock key still excludes, and our names cannot meet its names.
TEST(cluster_config, earlier_clients_scripts_with_helper_keys_never_run_on_a_cluster_node) {
  redlock::test::cluster_set set{1, 1};
  auto& node = set.primary(0, 0);
  const std::string k = "legacy:1";
  for (const auto* script : {&redlock::detail::read_acquire_script, &redlock::detail::release_script}) {
    const auto helpers = script == &redlock::detail::release_script
                             ? std::vector<std::string>{k + ":redlock-queue", k + ":redlock-expiry"}
                             : std::vector<std::string>{k + ":redlock-readers", k + ":redlock-writer"};
    std::vector<std::string> args{"EVAL", std::string{script->body}, "3", k, helpers[0], helpers[1], "tok", "1000"};
    const auto reply = node.command(args);
    EXPECT_EQ(reply.rfind("-CROSSSLOT", 0), 0u) << reply;
  }
  EXPECT_EQ(node.command({"SET", k, "old-client", "NX", "PX", "5000"}), "+OK\r\n");
  EXPECT_EQ(node.command({"SET", k, "new-client", "NX", "PX", "5000"}), "$-1\r\n");  // one lock key for both
}

TEST(cluster_config, names_without_a_slotted_form_are_refused_before_any_request) {
  run_test([&](asio::io_context& io) -> asio::awaitable<void> {
    redlock::client_config cfg;
    EXPECT_FALSE(redlock::parse_masters("redis-cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", cfg.masters));
    redlock::client a{io.get_executor(), cfg};
    for (const char* name : {"{orders}", "a}b"}) {
      std::string what;
      EXPECT_EQ(redlock::validate_lock(cfg, name, 10s, {}, &what), error::invalid_argument) << name;
      EXPECT_NE(what.find("hash tag"), std::string::npos) << what;
      auto [ec, l] = co_await a.async_lock(name, 10s, use_tuple);
      EXPECT_EQ(ec, error::invalid_argument) << name;
    }
    a.close();
    // Without a cluster master, both are ordinary names.
    cfg.masters.clear();
    EXPECT_FALSE(redlock::parse_masters("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", cfg.masters));
    std::string what;
    EXPECT_FALSE(redlock::validate_lock(cfg, "{orders}", 10s, {}, &what)) << what;
  });
}

TEST(cluster_config, masters_lists_name_clusters_by_their_seeds) {
  std::vector<redlock::connection_config> out;
  std::string what;
  ASSERT_FALSE(redlock::parse_masters("redis-cluster://10.0.0.1:7000+10.0.0.2:7001, 10.0.0.3:6379", out, &what))
      << what;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].cluster.enabled);
  EXPECT_EQ(out[0].host, "10.0.0.1");
  EXPECT_EQ(out[0].port, 7000);
  ASSERT_EQ(out[0].cluster.seeds.size(), 1u);
  EXPECT_EQ(out[0].cluster.seeds[0], (redlock::node_address{"10.0.0.2", 7001}));
  EXPECT_FALSE(out[1].cluster.enabled);
  EXPECT_EQ(redlock::address_of(out[0]), "redis-cluster://10.0.0.1:7000+10.0.0.2:7001");
  out.clear();
  ASSERT_FALSE(redlock::parse_masters("rediss-cluster://[::1]:7000", out, &what)) << what;
  EXPECT_TRUE(out[0].tls.enabled);
  EXPECT_EQ(redlock::address_of(out[0]), "rediss-cluster://[::1]:7000");
  for (const char* bad : {"redis-cluster://", "redis-cluster://a:1+", "redis-cluster://unix:/x",
                          "redis-cluster://a:1+redis://b:2", "redis-cluster://a:0"}) {
    out.clear();
    EXPECT_EQ(redlock::parse_masters(bad, out, &what), error::invalid_config) << bad;
    EXPECT_NE(what.find("seed"), std::string::npos) << bad << ": " << what;
  }
  redlock::connection_config c;
  c.cluster.enabled = true;
  c.database = 2;
  EXPECT_EQ(redlock::validate(c, &what), error::invalid_config);
  c.database = 0;
  c.cluster.enabled = false;
  c.cluster.seeds.push_back({"h", 1});
  EXPECT_EQ(redlock::validate(c, &what), error::invalid_config);
}

}  // namespace
