// SPDX-License-Identifier: BSL-1.0
#include "run_on.hpp"
#include <redlock/detail/scripts.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock_test/fake_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

namespace redlock::test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

// ---- reply_action ---------------------------------------------------------------------------------

reply_action reply_action::send(std::string bytes, std::chrono::milliseconds delay) {
  reply_action a;
  a.bytes = std::move(bytes);
  a.delay = delay;
  return a;
}

reply_action reply_action::silence() { return {}; }

reply_action reply_action::send_and_close(std::string bytes) {
  reply_action a;
  a.bytes = std::move(bytes);
  a.close = true;
  return a;
}

namespace {

// Errors come back as values: a client closing or resetting is normal here, not exceptional.
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t read_size = 16 * 1024;

// A coroutine that throws has a bug (a responder that throws included); let it end the server
// thread, and with it the test, loudly.
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

std::string upper(std::string_view s) {
  std::string out{s};
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string bulk(std::string_view v) { return "$" + std::to_string(v.size()) + "\r\n" + std::string{v} + "\r\n"; }
std::string integer(long long v) { return ":" + std::to_string(v) + "\r\n"; }
const std::string ok = "+OK\r\n";
const std::string null = "_\r\n";  // the handshake switched the client to RESP3
const std::string not_integer = "-ERR value is not an integer or out of range\r\n";
const std::string syntax_error = "-ERR syntax error\r\n";

std::optional<long long> to_integer(std::string_view s) {
  long long v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string wrong_args(std::string_view name) {
  return "-ERR wrong number of arguments for '" + std::string{name} + "' command\r\n";
}

// A command is a top-level array of strings. Anything else is a protocol error, as for Redis.
bool to_command(const resp::response& nodes, fake_server::command& out) {
  out.clear();
  if (nodes.empty() || nodes.front().data_type != resp::type::array) return false;
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (n.depth != 1 || resp::is_aggregate(n.data_type)) return false;
    out.push_back(n.value);
  }
  return out.size() == nodes.front().aggregate_size;
}

}  // namespace

// ---- the built-in Redis ---------------------------------------------------------------------------

namespace {

// Just enough of Redis to be one master of a lock client, and to answer the tests' probes.
class tiny_redis {
 public:
  std::string execute(const fake_server::command& cmd) {
    if (cmd.empty()) return "-ERR empty command\r\n";
    const std::string name = upper(cmd[0]);
    std::lock_guard guard{mutex_};
    if (name == "HELLO") return hello(cmd);
    if (name == "AUTH" || name == "SELECT") return ok;
    if (name == "CLIENT") return cmd.size() >= 2 ? ok : wrong_args("client");
    if (name == "PING") return cmd.size() >= 2 ? bulk(cmd[1]) : "+PONG\r\n";
    if (name == "ECHO") return cmd.size() == 2 ? bulk(cmd[1]) : wrong_args("echo");
    if (name == "FLUSHALL" || name == "FLUSHDB") {
      data_.clear();
      return ok;
    }
    if (name == "GET") {
      if (cmd.size() != 2) return wrong_args("get");
      const auto* e = find(cmd[1]);
      return e ? bulk(e->value) : null;
    }
    if (name == "SET") return set(cmd);
    if (name == "DEL") {
      if (cmd.size() < 2) return wrong_args("del");
      long long n = 0;
      for (std::size_t i = 1; i < cmd.size(); ++i) n += find(cmd[i]) != nullptr && data_.erase(cmd[i]) == 1;
      return integer(n);
    }
    if (name == "PEXPIRE") {
      if (cmd.size() != 3) return wrong_args("pexpire");
      const auto ms = to_integer(cmd[2]);
      if (!ms) return not_integer;
      return integer(pexpire(cmd[1], *ms) ? 1 : 0);
    }
    if (name == "PTTL") {
      if (cmd.size() != 2) return wrong_args("pttl");
      const auto* e = find(cmd[1]);
      if (!e) return integer(-2);
      if (!e->expires) return integer(-1);
      return integer(std::chrono::duration_cast<std::chrono::milliseconds>(*e->expires - clock_type::now()).count());
    }
    if (name == "SCRIPT") {
      if (cmd.size() == 3 && upper(cmd[1]) == "LOAD") {
        for (const auto* s :
             {&detail::release_script, &detail::extend_script, &detail::fair_acquire_script, &detail::dequeue_script}) {
          if (cmd[2] == s->body) return bulk(s->sha1);
        }
        return "-ERR the fake server runs only the lock client's scripts\r\n";
      }
      return syntax_error;
    }
    if (name == "EVALSHA" || name == "EVAL") return eval(name, cmd);
    std::string text = "-ERR unknown command '" + cmd[0] + "', with args beginning with: ";
    for (std::size_t i = 1; i < cmd.size() && i < 4; ++i) text += "'" + cmd[i] + "' ";
    return text + "\r\n";
  }

  std::optional<std::string> value(std::string_view key) {
    std::lock_guard guard{mutex_};
    const auto* e = find(key);
    return e ? std::optional<std::string>{e->value} : std::nullopt;
  }

  std::optional<std::chrono::milliseconds> ttl(std::string_view key) {
    std::lock_guard guard{mutex_};
    const auto* e = find(key);
    if (!e || !e->expires) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(*e->expires - clock_type::now());
  }

 private:
  struct entry {
    std::string value;
    std::optional<clock_type::time_point> expires;
  };

  // The live entry for `key`, dropping it when it has expired (Redis's lazy expiry).
  entry* find(std::string_view key) {
    const auto it = data_.find(key);
    if (it == data_.end()) return nullptr;
    if (it->second.expires && *it->second.expires <= clock_type::now()) {
      data_.erase(it);
      return nullptr;
    }
    return &it->second;
  }

  bool pexpire(const std::string& key, long long ms) {
    auto* e = find(key);
    if (!e) return false;
    if (ms <= 0) {
      data_.erase(key);
    } else {
      e->expires = clock_type::now() + std::chrono::milliseconds{ms};
    }
    return true;
  }

  static std::string hello(const fake_server::command& cmd) {
    if (cmd.size() >= 2 && cmd[1] != "2" && cmd[1] != "3") return "-NOPROTO unsupported protocol version\r\n";
    // Always RESP3 replies: the lock client only ever asks for version 3.
    return "%3\r\n" + bulk("server") + bulk("fake") + bulk("version") + bulk("7.0.0") + bulk("proto") + integer(3);
  }

  std::string set(const fake_server::command& cmd) {
    if (cmd.size() < 3) return wrong_args("set");
    bool nx = false, xx = false;
    std::optional<clock_type::duration> expire;
    for (std::size_t i = 3; i < cmd.size(); ++i) {
      const std::string opt = upper(cmd[i]);
      if (opt == "NX") {
        nx = true;
      } else if (opt == "XX") {
        xx = true;
      } else if ((opt == "PX" || opt == "EX") && i + 1 < cmd.size() && !expire) {
        const auto n = to_integer(cmd[++i]);
        if (!n) return not_integer;
        if (*n <= 0) return "-ERR invalid expire time in 'set' command\r\n";
        expire = opt == "PX" ? clock_type::duration{std::chrono::milliseconds{*n}}
                             : clock_type::duration{std::chrono::seconds{*n}};
      } else {
        return syntax_error;
      }
    }
    if (nx && xx) return syntax_error;
    const bool exists = find(cmd[1]) != nullptr;
    if ((nx && exists) || (xx && !exists)) return null;
    auto& e = data_[cmd[1]];
    e.value = cmd[2];
    e.expires.reset();
    if (expire) e.expires = clock_type::now() + *expire;
    return ok;
  }

  // EVALSHA sha|EVAL body with the lock client's arguments: release (numkeys 4: key, queue,
  // expiries, offers; token, hand over), extend (numkeys 1: key; token, ttl ms), fair acquire
  // (numkeys 4; token, ttl ms, waiter, ticket, entry timeout, round), dequeue (numkeys 4; waiter,
  // token kept). No queue is kept: a fair acquire is a plain SET NX PX here, nothing is handed
  // over, and a dequeue does nothing.
  std::string eval(const std::string& name, const fake_server::command& cmd) {
    if (cmd.size() < 3) return wrong_args(name);
    const detail::script* s = nullptr;
    for (const auto* known :
         {&detail::release_script, &detail::extend_script, &detail::fair_acquire_script, &detail::dequeue_script}) {
      if (name == "EVALSHA" ? cmd[1] == known->sha1 : cmd[1] == known->body) s = known;
    }
    if (!s) {
      return name == "EVALSHA" ? "-NOSCRIPT No matching script. Please use EVAL.\r\n"
                               : "-ERR the fake server runs only the lock client's scripts\r\n";
    }
    const bool extend = s == &detail::extend_script;
    const bool fair = s == &detail::fair_acquire_script;
    const bool dequeue = s == &detail::dequeue_script;
    const auto args = extend ? 6u : fair ? 13u : 9u;
    if (cmd[2] != (extend ? "1" : "4") || cmd.size() != args) return "-ERR wrong arguments for the lock script\r\n";
    if (dequeue) return integer(0);
    if (fair) {
      const auto ms = to_integer(cmd[8]);
      if (!ms || *ms <= 0) return "-ERR invalid expire time\r\n";
      if (find(cmd[3])) return "*2\r\n" + integer(0) + integer(1);
      auto& e = data_[cmd[3]];
      e.value = cmd[7];
      e.expires = clock_type::now() + std::chrono::milliseconds{*ms};
      return "*2\r\n" + integer(1) + integer(0);
    }
    const auto* e = find(cmd[3]);
    const auto& token = extend ? cmd[4] : cmd[7];
    if (!e || e->value != token) return integer(0);
    if (!extend) {
      data_.erase(cmd[3]);
      return integer(1);
    }
    const auto ms = to_integer(cmd[5]);
    if (!ms) return "-ERR value is not an integer or out of range script: " + std::string{s->sha1} + "\r\n";
    // As the real script: the expiry only moves later.
    const auto at = clock_type::now() + std::chrono::milliseconds{*ms};
    if (e->expires && *e->expires >= at) return integer(1);
    return integer(pexpire(cmd[3], *ms) ? 1 : 0);
  }

  std::mutex mutex_;
  std::map<std::string, entry, std::less<>> data_;
};

}  // namespace

// ---- the server ------------------------------------------------------------------------------------

class fake_server::impl {
 public:
  impl();
  ~impl();
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  void set_responder(responder r) {
    std::lock_guard guard{mutex_};
    responder_ = std::move(r);
  }

  void close_connections() {
    run_on_server_thread([this] { close_all(); });
  }

  std::size_t commands_named(std::string_view name) const {
    std::lock_guard guard{mutex_};
    const auto it = seen_by_name_.find(upper(name));
    return it == seen_by_name_.end() ? 0 : it->second;
  }

  const std::string host_ = "127.0.0.1";
  std::uint16_t port_ = 0;
  tiny_redis redis_;
  std::atomic<std::size_t> accepted_{0};
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> seen_{0};

 private:
  class session;

  template <class F>
  void run_on_server_thread(F&& f);
  asio::awaitable<void> accept_loop();
  void close_all();

  // What to do with `cmd`: the responder's choice, or the built-in Redis's answer.
  reply_action decide(const command& cmd) {
    responder r;
    {
      std::lock_guard guard{mutex_};
      ++seen_by_name_[cmd.empty() ? std::string{} : upper(cmd.front())];
      r = responder_;  // a copy: the responder runs unlocked, and may be replaced meanwhile
    }
    ++seen_;
    if (r) {
      if (auto a = r(cmd)) return std::move(*a);
    }
    return reply_action::send(redis_.execute(cmd));
  }

  // Declared first so that it is destroyed last: sockets and timers below belong to it.
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  std::unordered_set<std::shared_ptr<session>> sessions_;  // server thread only
  bool stopping_ = false;                                  // server thread only
  mutable std::mutex mutex_;                               // guards the two below
  responder responder_;
  std::map<std::string, std::size_t, std::less<>> seen_by_name_;
  std::thread thread_;
};

/// One client connection: reads commands and answers them in order.
class fake_server::impl::session : public std::enable_shared_from_this<session> {
 public:
  session(impl& owner, tcp::socket socket)
      : owner_(owner), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  void start() { asio::co_spawn(socket_.get_executor(), run(shared_from_this()), rethrow); }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
    --owner_.open_;
    owner_.sessions_.erase(shared_from_this());
  }

 private:
  // `self` keeps the session alive while the coroutine runs.
  asio::awaitable<void> run(std::shared_ptr<session> self) {
    [[maybe_unused]] const auto keep_alive = std::move(self);
    std::array<char, read_size> buffer;
    resp::parser parser;
    resp::response nodes;
    command cmd;
    for (;;) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buffer), nothrow);
      if (closed_) co_return;
      if (ec) {
        close();  // the client closed or reset: the session ends
        co_return;
      }
      std::string_view data{buffer.data(), n};
      while (!data.empty()) {
        boost::system::error_code perr;
        data.remove_prefix(parser.consume(data, nodes, perr));
        if (!perr && !parser.done()) break;  // all consumed; the command continues in the next read
        parser.reset();
        const bool valid = !perr && to_command(nodes, cmd);
        nodes.clear();
        if (valid && cmd.empty()) continue;  // "*0": Redis ignores it too
        const reply_action action =
            valid ? owner_.decide(cmd) : reply_action::send_and_close("-ERR Protocol error: expected a command\r\n");
        if (action.delay > std::chrono::milliseconds::zero()) {
          timer_.expires_after(action.delay);
          co_await timer_.async_wait(nothrow);
          if (closed_) co_return;
        }
        if (!action.bytes.empty()) {
          auto [wec, written] = co_await asio::async_write(socket_, asio::buffer(action.bytes), nothrow);
          (void)written;
          if (closed_) co_return;
          if (wec) {
            close();
            co_return;
          }
        }
        if (action.close) {
          co_await finish();
          co_return;
        }
      }
    }
  }

  // Closes like a server that means it: FIN after the bytes already written, then waits for the
  // client to close too, reading and discarding what it still sends. Closing at once with unread
  // input would make the kernel send an RST, which may destroy the reply before the client reads it.
  asio::awaitable<void> finish() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    std::array<char, 4096> sink;
    for (;;) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(sink), nothrow);
      (void)n;
      if (closed_) co_return;
      if (ec) break;
    }
    close();
  }

  impl& owner_;
  tcp::socket socket_;
  asio::steady_timer timer_;  // delayed answers
  bool closed_ = false;
};

fake_server::impl::impl() : work_(io_.get_executor()), acceptor_(io_) {
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_loop(), rethrow);
  thread_ = std::thread([this] { io_.run(); });
}

fake_server::impl::~impl() {
  try {
    run_on_server_thread([this] {
      stopping_ = true;
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      close_all();
    });
  } catch (...) {
    io_.stop();  // could not close gracefully: abandon the pending operations instead
  }
  work_.reset();
  if (thread_.joinable()) thread_.join();
}

template <class F>
void fake_server::impl::run_on_server_thread(F&& f) {
  run_on_io_thread(io_, std::forward<F>(f));
}

asio::awaitable<void> fake_server::impl::accept_loop() {
  asio::steady_timer backoff(io_);
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(nothrow);
    if (stopping_) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of descriptors, or a handshake aborted by the client: try again shortly.
      backoff.expires_after(std::chrono::milliseconds{10});
      co_await backoff.async_wait(nothrow);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    ++accepted_;
    ++open_;
    auto s = std::make_shared<session>(*this, std::move(socket));
    sessions_.insert(s);
    s->start();
  }
}

void fake_server::impl::close_all() {
  const std::vector<std::shared_ptr<session>> all(sessions_.begin(), sessions_.end());
  for (const auto& s : all) s->close();
}

// ---- fake_server -------------------------------------------------------------------------------------

fake_server::fake_server() : impl_(std::make_unique<impl>()) {}
fake_server::~fake_server() = default;

const std::string& fake_server::host() const noexcept { return impl_->host_; }
std::uint16_t fake_server::port() const noexcept { return impl_->port_; }
void fake_server::set_responder(responder r) { impl_->set_responder(std::move(r)); }
void fake_server::close_connections() { impl_->close_connections(); }
std::string fake_server::redis_reply(const command& cmd) { return impl_->redis_.execute(cmd); }
std::optional<std::string> fake_server::value(std::string_view key) const { return impl_->redis_.value(key); }
std::optional<std::chrono::milliseconds> fake_server::ttl(std::string_view key) const { return impl_->redis_.ttl(key); }
std::size_t fake_server::connections_accepted() const noexcept { return impl_->accepted_.load(); }
std::size_t fake_server::connections_open() const noexcept { return impl_->open_.load(); }
std::size_t fake_server::commands_seen() const noexcept { return impl_->seen_.load(); }
std::size_t fake_server::commands_seen(std::string_view name) const { return impl_->commands_named(name); }

}  // namespace redlock::test
