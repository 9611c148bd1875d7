// SPDX-License-Identifier: BSL-1.0
// The read poller (src/detail/read_poller.hpp) against the kernel: socket pairs, no server. What it
// must never lose is bytes that no new edge announces: those a read left behind, and a hang-up.
#include "detail/read_poller.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redlock::detail::read_poller;

// One end of a socket pair, read through the poller `chunk` bytes at a time, as a stream reads
// into the free space of its buffer.
class pair_reader final : public read_poller::reader {
 public:
  pair_reader(std::shared_ptr<read_poller> p, std::size_t chunk) : poller_(std::move(p)), chunk_(chunk) {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_) != 0) {
      fds_[0] = fds_[1] = -1;
      return;
    }
    // The read end is non-blocking, as a stream's socket; the writer blocks while the reader lags.
    ::fcntl(fds_[0], F_SETFL, ::fcntl(fds_[0], F_GETFL) | O_NONBLOCK);
  }
  ~pair_reader() {
    if (key_ != 0) poller_->remove(key_, fds_[0], true);
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  pair_reader(const pair_reader&) = delete;
  pair_reader& operator=(const pair_reader&) = delete;

  bool open() const { return fds_[0] >= 0; }
  // On the strand.
  void start() {
    key_ = poller_->add(fds_[0], this);
    poller_->want();
  }
  // From any thread: the peer writes.
  void send(const std::string& bytes) const {
    ASSERT_EQ(::write(fds_[1], bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }

  bool on_readable() override {
    ++tells;
    std::array<char, 4096> buf;
    const auto n = ::read(fds_[0], buf.data(), chunk_);
    if (n == 0) hung_up = true;
    if (n <= 0) {
      // At the end of the stream the socket leaves the set, as a stream's does.
      if (n == 0) poller_->remove(std::exchange(key_, 0), fds_[0], true);
      return false;
    }
    got.append(buf.data(), static_cast<std::size_t>(n));
    received.store(got.size(), std::memory_order_release);
    poller_->want();  // the next read, as a stream asks for it
    // A completion run inline that throws (on a strand of the user's), after the read.
    if (std::exchange(throw_once, false)) throw std::runtime_error("a completion threw");
    return static_cast<std::size_t>(n) == chunk_;  // a full read may have left bytes behind
  }
  // From any thread: the peer hangs up.
  void hang_up() { ::shutdown(fds_[1], SHUT_WR); }

  std::string got;
  std::atomic<std::size_t> received{0};
  std::size_t tells = 0;
  bool hung_up = false;
  bool throw_once = false;
  std::uint64_t key_ = 0;

 private:
  std::shared_ptr<read_poller> poller_;
  std::size_t chunk_;
  int fds_[2];
};

// Runs `ctx` (on `threads` threads) until `done()` or `limit`.
template <typename Done>
bool run_until(asio::io_context& ctx, Done done, std::chrono::milliseconds limit, int threads = 1) {
  const auto end = std::chrono::steady_clock::now() + limit;
  asio::steady_timer check{ctx};
  std::function<void()> poll = [&] {
    if (done() || std::chrono::steady_clock::now() >= end) return ctx.stop();
    check.expires_after(1ms);
    check.async_wait([&](boost::system::error_code) { poll(); });
  };
  asio::post(ctx, poll);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { ctx.run(); });
  ctx.run();
  for (auto& t : pool) t.join();
  ctx.restart();
  return done();
}

// `n` readers of `chunk` bytes each on `poller`, started on `strand` once the io_context runs;
// none when a socket pair cannot be made.
template <typename Strand>
std::vector<std::unique_ptr<pair_reader>> started_readers(const Strand& strand,
                                                          const std::shared_ptr<read_poller>& poller, int n,
                                                          std::size_t chunk) {
  std::vector<std::unique_ptr<pair_reader>> rs;
  for (int i = 0; i < n; ++i) {
    rs.push_back(std::make_unique<pair_reader>(poller, chunk));
    if (!rs.back()->open()) return {};
  }
  for (auto& r : rs) asio::post(strand, [p = r.get()] { p->start(); });
  return rs;
}

// Starts `r` on `strand` and runs `ctx` until it has: its wait is armed, and nothing was told yet.
template <typename Strand>
bool start_and_wait(asio::io_context& ctx, const Strand& strand, pair_reader& r) {
  bool started = false;
  asio::post(strand, [&] {
    r.start();
    started = true;
  });
  return run_until(
      ctx, [&] { return started; }, 2000ms);
}

// Bytes left behind by a read that filled its buffer bring no new edge: the next wait must see
// them, or the reader waits for data that is already there.
TEST(read_poller, bytes_left_by_a_full_read_are_told_again_without_new_data) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx.get_executor());
  auto poller = std::make_shared<read_poller>(strand);
  ASSERT_TRUE(poller->usable());
  pair_reader r{poller, 1};
  ASSERT_TRUE(r.open());
  asio::post(strand, [&] { r.start(); });
  r.send(std::string(64, 'x'));
  EXPECT_TRUE(run_until(
      ctx, [&] { return r.received.load() == 64; }, 2000ms))
      << r.received.load() << " of 64 bytes read, " << r.tells << " wake-ups";
  EXPECT_EQ(r.got, std::string(64, 'x'));
}

// Each of several ready sockets is told, a later write to one of them is told again, and a peer's
// hang-up after the sockets went quiet is told too (a master killed between two requests; a wait
// re-armed without the kernel looking again lost it now and then: docs/benchmarks.md).
TEST(read_poller, every_ready_socket_is_told_and_later_bytes_too) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx.get_executor());
  auto poller = std::make_shared<read_poller>(strand);
  auto rs = started_readers(strand, poller, 5, 4096);
  ASSERT_EQ(rs.size(), 5u);
  for (auto& r : rs) r->send("+OK\r\n");
  auto all = [&](std::size_t n) {
    return [&rs, n] {
      for (auto& r : rs) {
        if (r->received.load() != n) return false;
      }
      return true;
    };
  };
  EXPECT_TRUE(run_until(ctx, all(5), 2000ms));
  for (int round = 0; round < 50; ++round) {
    rs[round % 5]->send("+OK\r\n");
    const std::size_t want = 5 + 5 * (round / 5 + 1);
    if (round % 5 == 4) {
      EXPECT_TRUE(run_until(ctx, all(want), 2000ms)) << "round " << round;
    }
  }
  for (auto& r : rs) EXPECT_EQ(r->got.size(), 55u);
  for (auto& r : rs) r->hang_up();
  EXPECT_TRUE(run_until(
      ctx,
      [&] {
        for (auto& r : rs) {
          if (!r->hung_up) return false;
        }
        return true;
      },
      2000ms));
}

// Bytes and the peer's hang-up that arrive together are told in one event; the read takes the
// bytes (a short read) and leaves the end of the stream, which no later arrival announces. The
// poller must look again (a master killed right after its reply: without the look, the
// connection never heard of the hang-up).
TEST(read_poller, a_hang_up_that_came_with_the_last_bytes_is_told_too) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx.get_executor());
  auto poller = std::make_shared<read_poller>(strand);
  ASSERT_TRUE(poller->usable());
  for (int round = 0; round < 20; ++round) {
    pair_reader r{poller, 4096};
    ASSERT_TRUE(r.open());
    ASSERT_TRUE(start_and_wait(ctx, strand, r)) << round;
    EXPECT_EQ(r.tells, 0u);
    // Both before the reactor looks again: one event for the two.
    r.send("reply\r\n");
    r.hang_up();
    EXPECT_TRUE(run_until(
        ctx, [&] { return r.hung_up; }, 2000ms))
        << "round " << round << ": " << r.tells << " tells, got \"" << r.got << "\"";
    EXPECT_EQ(r.got, "reply\r\n");
  }
}

// What a reader throws after its read leaves the rest unannounced just the same (bytes of a full
// read, a hang-up that came with them): the exception leaves the wake-up, and the rest is still
// told after it.
TEST(read_poller, what_a_throwing_reader_left_is_told_after_the_exception) {
  // Bytes left by a full read (1 byte at a time), then bytes that came with the hang-up.
  for (const bool hang_up : {false, true}) {
    asio::io_context ctx;
    auto strand = asio::make_strand(ctx.get_executor());
    auto poller = std::make_shared<read_poller>(strand);
    ASSERT_TRUE(poller->usable());
    pair_reader r{poller, hang_up ? std::size_t{4096} : std::size_t{1}};
    ASSERT_TRUE(r.open());
    ASSERT_TRUE(start_and_wait(ctx, strand, r));
    r.throw_once = true;
    r.send("reply\r\n");
    if (hang_up) r.hang_up();
    const auto done = [&] { return hang_up ? r.hung_up : r.got.size() == 7; };
    bool threw = false;
    try {
      run_until(ctx, done, 2000ms);
    } catch (const std::runtime_error&) {
      threw = true;
      ctx.restart();
    }
    EXPECT_TRUE(threw) << "hang-up " << hang_up;
    EXPECT_TRUE(run_until(ctx, done, 2000ms)) << "hang-up " << hang_up << ": got \"" << r.got << "\"";
    EXPECT_EQ(r.got, "reply\r\n") << "hang-up " << hang_up;
  }
}

// The wait completes on whichever thread runs the reactor and enters the strand from there: with
// a pool of threads and a writer racing the re-arms, every byte arrives (the thread sanitizer
// build runs this one).
TEST(read_poller, threaded_pool_and_a_racing_writer_lose_no_bytes) {
  asio::io_context ctx;
  auto strand = asio::make_strand(ctx.get_executor());
  auto poller = std::make_shared<read_poller>(strand);
  auto rs = started_readers(strand, poller, 4, 3);  // reads smaller than the messages
  ASSERT_EQ(rs.size(), 4u);
  constexpr std::size_t messages = 2000;
  std::thread writer([&] {
    for (std::size_t i = 0; i < messages; ++i) {
      rs[i % rs.size()]->send("+OK\r\n");
      if (i % 64 == 0) std::this_thread::sleep_for(100us);
    }
  });
  const std::size_t each = messages / rs.size() * 5;
  const bool ok = run_until(
      ctx,
      [&] {
        for (auto& r : rs) {
          if (r->received.load(std::memory_order_acquire) != each) return false;
        }
        return true;
      },
      10000ms, 2);
  writer.join();
  EXPECT_TRUE(ok);
  for (auto& r : rs) EXPECT_EQ(r->received.load(), each);
  // Removed on the strand, as streams do.
  std::atomic<bool> removed{false};
  asio::post(strand, [&] {
    rs.clear();
    removed = true;
  });
  EXPECT_TRUE(run_until(
      ctx, [&] { return removed.load(); }, 2000ms));
}

}  // namespace
