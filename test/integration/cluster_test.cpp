// SPDX-License-Identifier: BSL-1.0
// Cluster masters against real Redis Clusters on loopback (local::cluster_set): routing by slot
// for every lock kind, helper keys in the lock key's slot, MOVED after a slot moved under a held
// lock, ASK and TRYAGAIN during a migration, and a killed shard costing its master's vote only.

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/core/key_slot.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/co_spawn.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

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
using redlock::core::key_slot;

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
    auto session = set.primary(c, s).open();
    (void)session.command({"ASKING"});
    if (session.command({"EXISTS", key}) == ":1\r\n") found = static_cast<int>(s);
  }
  return found;
}

// Waits until `key` is on shard `shard` of every cluster (-1: on none): a lock completes with a
// quorum, and the last cluster's answer may still be on its way.
asio::awaitable<bool> settled(redlock::test::cluster_set& set, const std::string& key, int shard) {
  co_return co_await until([&] {
    for (std::size_t c = 0; c < set.size(); ++c)
      if (holder_of(set, c, key) != shard) return false;
    return true;
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
      for (const auto& m : l.masters()) EXPECT_NE(m.status, master_status::server_error) << k.what << " " << m.server_text;
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
    (void)co_await a.async_wait_ready(5s, use_tuple);
    (void)co_await b.async_wait_ready(5s, use_tuple);
    // "foo" lives on shard 1, "bar" and "baz" on shard 0 (slots 12182, 5061, 4813).
    EXPECT_EQ(shard_of("foo"), 1u);
    EXPECT_EQ(shard_of("bar"), 0u);
    const std::vector<std::string> first = {"foo", "bar"};
    auto [ea, la] = co_await a.async_lock_all(first, 10s, use_tuple);
    EXPECT_FALSE(ea) << ea.message();
    if (ea) co_return;
    EXPECT_TRUE(co_await settled(set, "foo", 1));
    EXPECT_TRUE(co_await settled(set, "bar", 0));
    // Another client wants "baz" and "foo": its part on shard 0 ("baz") is granted, the one on
    // shard 1 ("foo") is refused, so no cluster votes yes, and what it set is released.
    const std::vector<std::string> second = {"baz", "foo"};
    auto [eb, lb] = co_await b.async_lock_all(second, 10s, use_tuple);
    EXPECT_EQ(eb, error::not_acquired) << eb.message();
    for (const auto& m : lb.masters()) {
      if (m.status == master_status::taken) {
        EXPECT_EQ(m.value, 2) << "the first held key is the second, 'foo'";
      }
    }
    EXPECT_TRUE(co_await settled(set, "baz", -1)) << "the refused acquisition's granted part was released";
    // The holder extends and releases over both slots.
    auto [ee] = co_await la.async_extend(20s, use_tuple);
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
    auto [ec, l] = co_await a.async_lock(name, 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (ec) co_return;
    EXPECT_TRUE(co_await settled(set, name, static_cast<int>(shard_of(name))));
    // Reshard: the slot (and the key, with its ttl) goes to the other shard of every cluster.
    const auto from = shard_of(name);
    for (std::size_t c = 0; c < set.size(); ++c) set.move_slot(c, key_slot(name), set.primary(c, 1 - from));
    for (std::size_t c = 0; c < set.size(); ++c) {
      EXPECT_EQ(holder_of(set, c, name), static_cast<int>(1 - from)) << "cluster " << c;
      const auto ttl = redlock::test::integer_of(set.primary(c, 1 - from).command({"PTTL", name}));
      EXPECT_TRUE(ttl && *ttl > 5000) << "MIGRATE keeps the ttl";
    }
    // The extension meets MOVED on every cluster and follows it.
    auto [ee] = co_await l.async_extend(20s, use_tuple);
    EXPECT_FALSE(ee) << ee.message();
    for (const auto& m : l.masters()) EXPECT_NE(m.status, master_status::server_error) << m.server_text;
    // (The extension completed with a quorum; the last cluster's answer may still be on its way.)
    for (std::size_t c = 0; c < set.size(); ++c) {
      const bool extended = co_await until([&] {
        const auto ttl = redlock::test::integer_of(set.primary(c, 1 - from).command({"PTTL", name}));
        return ttl && *ttl > 10000;
      });
      EXPECT_TRUE(extended) << "cluster " << c << ": the extension reached the new owner";
    }
    // Another client cannot take it meanwhile.
    redlock::client b{io.get_executor(), config_for(set)};
    (void)co_await b.async_wait_ready(5s, use_tuple);
    auto [eb, lb] = co_await b.async_lock(name, 10s, use_tuple);
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
      EXPECT_EQ(dst.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", redlock::test::cluster_set::id_of(src)}), "+OK\r\n");
      EXPECT_EQ(src.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", redlock::test::cluster_set::id_of(dst)}), "+OK\r\n");
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
    co_await until([&, &l1 = l1] {
      std::size_t granted = 0;
      for (const auto& r : l1.masters()) granted += r.status == master_status::granted;
      return granted == 3;
    });
    (void)co_await l0.async_unlock(use_tuple);
    (void)co_await l1.async_unlock(use_tuple);
    a.close();
  });
}

TEST(cluster_config, masters_lists_name_clusters_by_their_seeds) {
  std::vector<redlock::connection_config> out;
  std::string what;
  ASSERT_FALSE(redlock::parse_masters("redis-cluster://10.0.0.1:7000+10.0.0.2:7001, 10.0.0.3:6379", out, &what)) << what;
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
