// Lock kinds (docs/design.md, "Lock kinds") against five real redis-server masters: what each kind
// excludes, shares and leaves behind, read from the masters themselves.

#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/redis_cluster.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redlock::error;
using redlock::lock_kind;
using redlock::lock_options;
using redlock::test::run_test;
using redlock::test::use_tuple;

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

struct kinds : ::testing::Test {
  redlock::test::redis_cluster cluster{5};
  redlock::client_config config() {
    auto cfg = redlock::test::client_config_for(cluster);
    cfg.retry.max_attempts = 1;
    return cfg;
  }
  // Keys (of any kind) left on any master.
  std::size_t keys_left() {
    std::size_t n = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) n += cluster[i].command({"DBSIZE"}) != ":0\r\n";
    return n;
  }
};

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
    EXPECT_GE(n1, 3u);
    auto [u3, n3] = co_await m3.async_unlock(use_tuple);
    EXPECT_FALSE(u3);

    // Fencing: strictly increasing from one holder to the next.
    lock_options fenced;
    fenced.fence = true;
    auto [f1, l1] = co_await a.async_lock("f", 5s, fenced, use_tuple);
    EXPECT_FALSE(f1);
    EXPECT_GT(l1.fence(), 0u);
    co_await l1.async_unlock(use_tuple);
    auto [f2, l2] = co_await b.async_lock("f", 5s, fenced, use_tuple);
    EXPECT_FALSE(f2);
    EXPECT_GT(l2.fence(), l1.fence());
    co_await l2.async_unlock(use_tuple);

    // Reentrancy: the same owner enters twice; someone else waits for the last release.
    lock_options mine;
    mine.owner = "owner-1";
    auto [r1, h1] = co_await a.async_lock("r", 5s, mine, use_tuple);
    EXPECT_FALSE(r1);
    auto [r2, h2] = co_await b.async_try_lock("r", 5s, mine, use_tuple);
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
    co_await redlock::test::sleep_for(50ms);
  });
  // Only the fencing counters stay behind.
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    EXPECT_EQ(cluster[i].command({"DBSIZE"}), ":1\r\n")
        << "master " << i + 1 << ": " << cluster[i].command({"KEYS", "*"});
  }
}

}  // namespace
