// SPDX-License-Identifier: BSL-1.0
// The lock client's path to a master (detail::master_link) over TLS, with replies and requests
// far larger than a lock's: values around and across the 16 KiB record size, many records in one
// socket read, a reply larger than the read buffer, and writes the socket does not take at once
// (their records then go out with the asynchronous write). Through the read poller and without,
// on one thread and on two. Catches: plaintext lost or repeated when a record is split across
// reads or when a read decrypts more than its buffer holds (a reply never delivered is a hang
// here), records written out of order, a reply handed to the wrong request.
#include "detail/master_link.hpp"
#include "detail/read_poller.hpp"
#include <redlock/connection.hpp>
#include <redlock/resp/request.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::detail::master_link;
using redlock::detail::read_poller;
using clock_type = redlock::clock;

// A self-signed server certificate, made once for the binary with the `openssl` tool (the client
// verifies nothing here: the certificates' checks are tls_test's).
struct certificate {
  fs::path dir = fs::temp_directory_path() / fmt::format("redlock-tls-link-{}", ::getpid());
  certificate() {
    fs::create_directories(dir);
    const auto cmd = fmt::format(
        "cd '{}' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem "
        "-out cert.pem -days 1 -subj '/CN=127.0.0.1' > openssl.log 2>&1",
        dir.string());
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "openssl failed; see " << (dir / "openssl.log");
  }
  ~certificate() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

std::string encode_one(std::string_view cmd, std::string_view a) {
  redlock::resp::request r;
  r.push(cmd, a);
  return r.payload();
}
std::string encode_two(std::string_view cmd, std::string_view a, std::string_view b) {
  redlock::resp::request r;
  r.push(cmd, a, b);
  return r.payload();
}

// Replies by tag: the first node's value, and the error. Called on the strand, read by the test's
// thread under the lock.
struct replies final : redlock::detail::reply_sink {
  std::mutex m;
  std::map<std::uint64_t, std::pair<error_code, std::string>> got;
  std::atomic<std::size_t> count{0};
  void on_reply(std::uint64_t tag, error_code ec, const redlock::resp::response& r) override {
    std::lock_guard l{m};
    got[tag] = {ec, r.empty() ? std::string{} : std::string{r.front().value}};
    ++count;
  }
};

// A value whose bytes depend on its index, so that a reply given to the wrong request shows.
std::string value_of(std::size_t i, std::size_t size) {
  std::string v(size, 'a');
  for (std::size_t k = 0; k < size; ++k) v[k] = static_cast<char>('a' + (k * 7 + i) % 26);
  return v;
}

bool wait_for(const std::function<bool()>& done, clock_type::duration limit) {
  const auto end = clock_type::now() + limit;
  while (!done()) {
    if (clock_type::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

void exchange_large(bool polled, int threads) {
  static certificate cert;
  redlock::test::redis_options opts;
  opts.tls = redlock::test::tls_options{};
  opts.tls->cert_file = (cert.dir / "cert.pem").string();
  opts.tls->key_file = (cert.dir / "key.pem").string();
  redlock::test::master_set servers{1, opts};

  asio::io_context io{threads};
  master_link::strand_type strand{asio::any_io_executor{io.get_executor()}};
  std::shared_ptr<read_poller> poller;
  if (polled) {
    poller = std::make_shared<read_poller>(strand);
    ASSERT_TRUE(poller->usable());
  }
  redlock::connection_config cfg;
  cfg.host = servers[0].host();
  cfg.port = servers[0].tls_port();
  cfg.tls.enabled = true;
  cfg.tls.insecure_skip_verify = true;
  cfg.connect_timeout = 2000ms;
  auto link = std::make_unique<master_link>(strand, cfg, poller);
  link->run();
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&] { io.run(); });

  ASSERT_TRUE(wait_for([&] { return link->status().state == redlock::connection_state::up; }, 10s));
  const std::vector<std::size_t> sizes = {1, 5000, 16383, 16384, 16390, 33000, 70000, 250000};
  auto sink = std::make_shared<replies>();
  std::uint64_t next_tag = 0;
  std::map<std::uint64_t, std::string> expected;
  auto submit = [&](std::vector<std::pair<std::string, std::string>> batch) {
    std::atomic<bool> queued{false};
    asio::post(strand, [&] {
      for (auto& [payload, want] : batch) {
        expected[next_tag] = want;
        EXPECT_FALSE(link->submit(payload, 1, clock_type::now() + 20s, sink, next_tag++));
      }
      queued = true;
    });
    ASSERT_TRUE(wait_for([&] { return queued.load(); }, 10s));
  };
  std::vector<std::pair<std::string, std::string>> sets;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    sets.push_back({encode_two("SET", fmt::format("k{}", i), value_of(i, sizes[i])), "OK"});
  submit(sets);

  std::mt19937 rng{42};
  for (int round = 0; round < 60; ++round) {
    std::vector<std::pair<std::string, std::string>> batch;
    for (auto k = 1 + rng() % 10; k > 0; --k) {
      const auto which = rng() % (sizes.size() + 1);
      if (which < sizes.size()) {
        batch.push_back({encode_one("GET", fmt::format("k{}", which)), value_of(which, sizes[which])});
      } else {
        // A request larger than the socket takes at once: written in part now, the rest later.
        auto v = value_of(static_cast<std::size_t>(round), 50000 + rng() % 300000);
        batch.push_back({encode_one("ECHO", v), v});
      }
    }
    submit(std::move(batch));
    // Now and then everything answered before the next batch; otherwise they pile up.
    if (rng() % 3 == 0) {
      ASSERT_TRUE(wait_for([&] { return sink->count.load() == next_tag; }, 20s))
          << "round " << round << ": " << sink->count.load() << " of " << next_tag << " replies";
    }
  }
  ASSERT_TRUE(wait_for([&] { return sink->count.load() == next_tag; }, 30s))
      << sink->count.load() << " of " << next_tag << " replies";
  {
    std::lock_guard l{sink->m};
    for (const auto& [tag, want] : expected) {
      const auto& [ec, value] = sink->got[tag];
      EXPECT_FALSE(ec) << "request " << tag << ": " << ec.message();
      EXPECT_EQ(value.size(), want.size()) << "request " << tag;
      EXPECT_TRUE(value == want) << "request " << tag << ": another reply's bytes, or bytes out of order";
    }
  }
  EXPECT_EQ(link->status().connects, 1u) << "the connection was replaced: " << link->status().last_error.message();

  std::atomic<bool> closed{false};
  asio::post(strand, [&] {
    link->close();
    link.reset();
    closed = true;
  });
  EXPECT_TRUE(wait_for([&] { return closed.load(); }, 10s));
  work.reset();
  io.stop();
  for (auto& t : pool) t.join();
}

TEST(tls_link, large_replies_and_requests_arrive_whole_and_in_order_through_the_poller) { exchange_large(true, 1); }
TEST(tls_link, large_replies_and_requests_arrive_whole_and_in_order_without_the_poller) { exchange_large(false, 1); }
TEST(tls_link, large_replies_and_requests_arrive_whole_and_in_order_on_two_threads) { exchange_large(true, 2); }

}  // namespace
