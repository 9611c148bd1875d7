// SPDX-License-Identifier: BSL-1.0
#include "run_on.hpp"
#include <redlock_test/fault_proxy.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <deque>
#include <exception>
#include <future>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

namespace redlock::test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Errors come back as values: a closed or reset peer is normal here, not exceptional.
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t read_size = 16 * 1024;
// Beyond this many bytes waiting in one direction, stop reading: a slow reader then pushes
// back on the sender through TCP, as without the proxy.
constexpr std::size_t max_queued_bytes = 4 * 1024 * 1024;

// A coroutine that throws has a bug; let it end the proxy thread (and the test) loudly.
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

// Waits until `until` or until someone cancels the timer (used as a wake-up signal).
asio::awaitable<void> sleep_until(asio::steady_timer& timer, clock_type::time_point until) {
  timer.expires_at(until);
  co_await timer.async_wait(nothrow);
}

}  // namespace

class fault_proxy::impl {
 public:
  impl(const std::string& upstream_host, std::uint16_t upstream_port);
  ~impl();
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  void set_latency(std::chrono::milliseconds one_way);
  void set_blackhole(bool on);
  void set_refuse(bool on);
  void reset_all();

  const std::string host_ = "127.0.0.1";
  std::uint16_t port_ = 0;
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::size_t> accepted_{0};

 private:
  class session;

  template <class F>
  void run_on_proxy_thread(F&& f);
  void listen();
  asio::awaitable<void> accept_loop(std::shared_ptr<tcp::acceptor> acceptor);
  void close_all(bool reset);

  // Declared first so that it is destroyed last: sockets and timers below belong to it.
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::resolver::results_type upstream_;
  tcp::socket port_holder_;                  // bound, never listening: keeps port_ ours
  std::shared_ptr<tcp::acceptor> acceptor_;  // null while refusing
  std::unordered_set<std::shared_ptr<session>> sessions_;
  // Modes, read and written on the proxy thread only (the setters run there).
  clock_type::duration latency_{};
  bool blackhole_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

/// One client connection and its upstream connection, with a pump per direction.
class fault_proxy::impl::session : public std::enable_shared_from_this<session> {
 public:
  session(impl& owner, tcp::socket client)
      : owner_(owner),
        client_(std::move(client)),
        upstream_(client_.get_executor()),
        to_upstream_(client_.get_executor(), false),
        to_client_(client_.get_executor(), true) {}

  void start() { asio::co_spawn(client_.get_executor(), run(shared_from_this()), rethrow); }

  /// Wakes the writers so that they re-check the modes.
  void poke() {
    to_upstream_.data_ready.cancel();
    to_client_.data_ready.cancel();
  }

  /// Closes both sides; with `reset`, the client side with an RST instead of a FIN.
  void close(bool reset) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    if (reset) client_.set_option(tcp::socket::linger(true, 0), ignored);
    client_.close(ignored);
    upstream_.close(ignored);
    for (auto* d : {&to_upstream_, &to_client_}) {
      d->data_ready.cancel();
      d->space_ready.cancel();
      d->queue.clear();
    }
    --owner_.connections_;
    owner_.sessions_.erase(shared_from_this());
  }

 private:
  struct chunk {
    std::string bytes;
    clock_type::time_point due;  // when it may be forwarded
  };

  struct direction {
    direction(const asio::any_io_executor& ex, bool from_upstream_side)
        : from_upstream(from_upstream_side), data_ready(ex), space_ready(ex) {}
    const bool from_upstream;
    std::deque<chunk> queue;
    std::size_t queued_bytes = 0;
    bool source_done = false;        // the reading side hit EOF or an error
    asio::steady_timer data_ready;   // the writer waits here (for data, or a chunk's due time)
    asio::steady_timer space_ready;  // the reader waits here while the queue is full
  };

  asio::awaitable<void> run(std::shared_ptr<session> self) {
    auto [ec, endpoint] = co_await asio::async_connect(upstream_, owner_.upstream_, nothrow);
    if (closed_) co_return;
    if (ec) {
      close(false);  // the client sees the upstream's absence as an immediate EOF
      co_return;
    }
    boost::system::error_code ignored;
    client_.set_option(tcp::no_delay(true), ignored);
    upstream_.set_option(tcp::no_delay(true), ignored);
    const auto ex = client_.get_executor();
    asio::co_spawn(ex, read_pump(self, client_, to_upstream_), rethrow);
    asio::co_spawn(ex, write_pump(self, upstream_, to_upstream_), rethrow);
    asio::co_spawn(ex, read_pump(self, upstream_, to_client_), rethrow);
    asio::co_spawn(ex, write_pump(std::move(self), client_, to_client_), rethrow);
  }

  // `self` keeps the session alive while the coroutine runs.
  asio::awaitable<void> read_pump(std::shared_ptr<session> self, tcp::socket& from, direction& d) {
    [[maybe_unused]] const auto keep_alive = std::move(self);
    std::array<char, read_size> buffer;
    for (;;) {
      while (!closed_ && d.queued_bytes >= max_queued_bytes) {
        co_await sleep_until(d.space_ready, clock_type::time_point::max());
      }
      if (closed_) co_return;
      auto [ec, n] = co_await from.async_read_some(asio::buffer(buffer), nothrow);
      if (closed_) co_return;
      if (ec) {
        // EOF or a reset: the writer forwards what is queued, then closes the session.
        d.source_done = true;
        d.data_ready.cancel();
        co_return;
      }
      if (owner_.blackhole_) continue;  // swallowed for good
      d.queue.push_back({std::string(buffer.data(), n), clock_type::now() + owner_.latency_});
      d.queued_bytes += n;
      d.data_ready.cancel();
    }
  }

  asio::awaitable<void> write_pump(std::shared_ptr<session> self, tcp::socket& to, direction& d) {
    [[maybe_unused]] const auto keep_alive = std::move(self);
    for (;;) {
      if (closed_) co_return;
      if (d.queue.empty()) {
        // A black hole hides the upstream's close too; the client's close always ends it.
        if (d.source_done && !(d.from_upstream && owner_.blackhole_)) {
          close(false);
          co_return;
        }
        co_await sleep_until(d.data_ready, clock_type::time_point::max());
        continue;
      }
      if (const auto due = d.queue.front().due; clock_type::now() < due) {
        co_await sleep_until(d.data_ready, due);
        continue;
      }
      chunk next = std::move(d.queue.front());
      d.queue.pop_front();
      d.queued_bytes -= next.bytes.size();
      d.space_ready.cancel();
      if (owner_.blackhole_) continue;  // also swallows what was read before the switch
      auto [ec, n] = co_await asio::async_write(to, asio::buffer(next.bytes), nothrow);
      if (closed_) co_return;
      if (ec) {
        close(false);
        co_return;
      }
    }
  }

  impl& owner_;
  tcp::socket client_;
  tcp::socket upstream_;
  direction to_upstream_;
  direction to_client_;
  bool closed_ = false;
};

fault_proxy::impl::impl(const std::string& upstream_host, std::uint16_t upstream_port)
    : work_(io_.get_executor()), port_holder_(io_) {
  tcp::resolver resolver(io_);
  upstream_ = resolver.resolve(upstream_host, std::to_string(upstream_port), tcp::resolver::numeric_service);
  // Port 0 picks a port nobody is bound to; holding it with SO_REUSEADDR keeps others' bind(0)
  // and connect() away from it for the proxy's life, while our own acceptor can still listen.
  port_holder_.open(tcp::v4());
  port_holder_.set_option(tcp::socket::reuse_address(true));
  port_holder_.bind(tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  port_ = port_holder_.local_endpoint().port();
  listen();
  thread_ = std::thread([this] { io_.run(); });
}

fault_proxy::impl::~impl() {
  try {
    run_on_proxy_thread([this] {
      stopping_ = true;
      boost::system::error_code ignored;
      if (acceptor_) acceptor_->close(ignored);
      acceptor_.reset();
      port_holder_.close(ignored);
      close_all(false);
    });
  } catch (...) {
    io_.stop();  // could not close gracefully: abandon the pending operations instead
  }
  work_.reset();
  if (thread_.joinable()) thread_.join();
}

template <class F>
void fault_proxy::impl::run_on_proxy_thread(F&& f) {
  run_on_io_thread(io_, std::forward<F>(f));
}

void fault_proxy::impl::listen() {
  auto acceptor = std::make_shared<tcp::acceptor>(io_);
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), port_);
  acceptor->open(endpoint.protocol());
  acceptor->set_option(tcp::acceptor::reuse_address(true));  // shares the port with port_holder_
  acceptor->bind(endpoint);
  acceptor->listen();
  acceptor_ = acceptor;
  asio::co_spawn(io_, accept_loop(std::move(acceptor)), rethrow);
}

asio::awaitable<void> fault_proxy::impl::accept_loop(std::shared_ptr<tcp::acceptor> acceptor) {
  asio::steady_timer backoff(io_);
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(nothrow);
    // A closed or replaced acceptor (refuse mode, shutdown) ends this loop; a connection it
    // accepted just before is dropped with it.
    if (acceptor != acceptor_ || stopping_) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of descriptors, or a handshake aborted by the client: try again shortly.
      co_await sleep_until(backoff, clock_type::now() + 10ms);
      continue;
    }
    ++accepted_;
    ++connections_;
    auto s = std::make_shared<session>(*this, std::move(socket));
    sessions_.insert(s);
    s->start();
  }
}

void fault_proxy::impl::close_all(bool reset) {
  const std::vector<std::shared_ptr<session>> all(sessions_.begin(), sessions_.end());
  for (const auto& s : all) s->close(reset);
}

void fault_proxy::impl::set_latency(std::chrono::milliseconds one_way) {
  run_on_proxy_thread([&] { latency_ = std::max(one_way, std::chrono::milliseconds::zero()); });
}

void fault_proxy::impl::set_blackhole(bool on) {
  run_on_proxy_thread([&] {
    blackhole_ = on;
    for (const auto& s : sessions_) s->poke();  // a held-back upstream close may now pass
  });
}

void fault_proxy::impl::set_refuse(bool on) {
  run_on_proxy_thread([&] {
    if (stopping_) return;
    if (on && acceptor_) {
      boost::system::error_code ignored;
      acceptor_->close(ignored);  // port_holder_ keeps the port: connects get ECONNREFUSED
      acceptor_.reset();
    } else if (!on && !acceptor_) {
      listen();
    }
  });
}

void fault_proxy::impl::reset_all() {
  run_on_proxy_thread([&] { close_all(true); });
}

// ---- fault_proxy --------------------------------------------------------------------------------

fault_proxy::fault_proxy(std::string upstream_host, std::uint16_t upstream_port)
    : impl_(std::make_unique<impl>(upstream_host, upstream_port)) {}

fault_proxy::~fault_proxy() = default;

const std::string& fault_proxy::host() const noexcept { return impl_->host_; }
std::uint16_t fault_proxy::port() const noexcept { return impl_->port_; }
void fault_proxy::set_latency(std::chrono::milliseconds one_way) { impl_->set_latency(one_way); }
void fault_proxy::set_blackhole(bool on) { impl_->set_blackhole(on); }
void fault_proxy::set_refuse(bool on) { impl_->set_refuse(on); }
void fault_proxy::reset_all() { impl_->reset_all(); }
std::size_t fault_proxy::connections() const noexcept { return impl_->connections_.load(); }
std::size_t fault_proxy::accepted_total() const noexcept { return impl_->accepted_.load(); }

}  // namespace redlock::test
