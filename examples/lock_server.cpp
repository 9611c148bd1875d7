// SPDX-License-Identifier: BSL-1.0
// lock_server: a TCP server whose request handlers take a Redlock lock around a read-modify-write.
//
// Each client connection gets its own coroutine. The protocol is one command per line:
//
//   INCR <name>   ->  OK <new value>     read the counter <name>, add one, write it back, under
//                                        the distributed lock on <name>
//   GET <name>    ->  VALUE <value>      read the counter (no lock needed to read)
//   QUIT          ->  (closes the connection)
//
// The counters live in Redis (the first master, for convenience: in a real system, your
// database), the locks on the Redlock masters. So any number of server instances, on any number of
// machines, may serve the same counters: the lock makes each GET-then-SET atomic across all of them,
// and no increment is lost. Run with --no-lock to watch increments being lost without it.
//
// Usage: lock_server [options] [host:port,host:port,...]
//   masters from the argument or REDLOCK_NODES; password (if any) from REDLOCK_PASSWORD
//   --port P         listen on 127.0.0.1:P (default: a free port, printed)
//   --for D          stop after D (e.g. 30s); default: run until killed
//   --self-test N    start --servers instances and N client sessions that all increment one
//                    counter --requests times; check the total, print it, exit 0 when no
//                    increment was lost (1 otherwise)
//   --servers K      server instances in the self-test (default 2), each with its own client
//   --requests R     increments per client session in the self-test (default 10)
//   --ttl D          lock ttl (default 2s)
//   --work D         time a handler spends between its read and its write (default 5ms)
//   --no-lock        do not lock (to see the race)

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/timer.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/core.h>

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
using boost::system::error_code;

// With as_tuple an operation's error is returned as a value instead of thrown: right for outcomes
// we expect and handle (a busy lock, a client hanging up).
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

struct options {
  std::string masters;
  std::uint16_t port = 0;
  std::chrono::milliseconds run_for{0};
  int self_test = 0;  // client sessions; 0: plain server
  int servers = 2;
  int requests = 10;
  std::chrono::milliseconds ttl{2000};
  std::chrono::milliseconds work{5};
  bool use_lock = true;
};

// ---------------------------------------------------------------------------------------------
// The server

// One server instance: its own Redlock client (as a separate process would have) and its own
// connection to the store that holds the counters.
struct server {
  server(asio::any_io_executor ex, int n, const redlock::client_config& cfg, const options& o)
      : id(n), locks(ex, cfg), store(ex, cfg.masters.front()), acceptor(ex), opts(o) {
    store.async_run(asio::detached);  // connects, and reconnects after failures, until close()
  }
  void close() {
    acceptor.close();
    locks.close();
    store.close();
  }

  int id;
  redlock::client locks;
  redlock::connection store;
  tcp::acceptor acceptor;
  const options& opts;
};

// For an error such as quorum_unavailable: which masters are not up, and why (e.g. a wrong password).
std::string masters_down(const redlock::client& locks) {
  std::string text;
  const auto status = locks.masters();
  for (std::size_t i = 0; i < status.size(); ++i) {
    if (status[i].state == redlock::connection_state::up) continue;
    const auto& m = locks.config().masters[i];
    text += fmt::format("; {} is down ({})", redlock::address_of(m),
                        status[i].last_error ? status[i].last_error.message() : "not connected yet");
  }
  return text;
}

asio::awaitable<void> sleep_for(clock_type::duration d) {
  redlock::timer t{co_await asio::this_coro::executor, d};
  co_await t.async_wait(use_tuple);
}

std::string counter_key(std::string_view name) { return fmt::format("example:counter:{}", name); }

// Reads a counter (a missing key reads as 0).
asio::awaitable<std::tuple<error_code, long long>> read_counter(redlock::connection& store, std::string_view name) {
  redlock::resp::request req;
  req.push("GET", counter_key(name));
  auto [ec, reply] = co_await store.async_exec(std::move(req), 1s, use_tuple);
  if (ec) co_return std::tuple{ec, 0LL};
  long long value = 0;
  const auto* v = redlock::resp::reply_value(reply);
  if (v && v->data_type == redlock::resp::type::blob_string) {
    std::from_chars(v->value.data(), v->value.data() + v->value.size(), value);
  }
  co_return std::tuple{error_code{}, value};
}

asio::awaitable<error_code> write_counter(redlock::connection& store, std::string_view name, long long value) {
  redlock::resp::request req;
  req.push("SET", counter_key(name), value);
  auto [ec, reply] = co_await store.async_exec(std::move(req), 1s, use_tuple);
  co_return ec;
}

// INCR <name>: the read-modify-write that would race without the lock.
asio::awaitable<std::string> increment(server& s, const std::string& name) {
  redlock::lock held;
  if (s.opts.use_lock) {
    // async_lock retries (per client_config::retry) while someone else holds the lock. Not getting
    // it is an expected outcome, so it is a value here, mapped to a reply the client understands.
    auto [ec, l] = co_await s.locks.async_lock(name, s.opts.ttl, use_tuple);
    if (ec == redlock::error::not_acquired) co_return "BUSY " + name + " is locked by someone else; try again";
    if (ec == redlock::error::quorum_unavailable) {
      fmt::print("[server {}] no quorum{}\n", s.id, masters_down(s.locks));  // for the operator, not the client
      co_return "UNAVAILABLE too few lock masters answer; try again";
    }
    if (ec) co_return "ERR lock: " + ec.message();
    held = std::move(l);
  }
  auto [rec, value] = co_await read_counter(s.store, name);
  // An early co_return is fine: a lock handle that still holds its lock releases it when destroyed.
  if (rec) co_return "ERR store: " + rec.message();

  co_await sleep_for(s.opts.work);  // the "business logic" (a real handler computes, calls services...)

  // The lock protects us only until its validity deadline: past it, another holder may be writing.
  // (Redlock cannot stop a write that is delayed after this check; a store that checks a fencing
  // token, or a conditional write, closes that gap. See docs/safety.md.)
  if (held && clock_type::now() >= held.validity_deadline()) {
    co_return "ERR the lock expired before the write; nothing changed";
  }
  if (auto wec = co_await write_counter(s.store, name, value + 1)) co_return "ERR store: " + wec.message();
  fmt::print("[server {}] INCR {}: read {}, wrote {}{}\n", s.id, name, value, value + 1,
             held ? fmt::format("  (lock after {} attempt(s))", held.attempts()) : std::string{});
  if (held) {
    // Release at once, so that the next waiter need not wait for the ttl. Its result does not
    // matter to the client: the write is done, and an unreleased key expires with its ttl.
    co_await held.async_unlock(use_tuple);
  }
  co_return fmt::format("OK {}", value + 1);
}

// One command line in, one reply line out. An empty reply closes the connection.
asio::awaitable<std::string> handle(server& s, std::string_view line) {
  const auto space = line.find(' ');
  const std::string_view command = line.substr(0, space);
  const std::string name{space == std::string_view::npos ? std::string_view{} : line.substr(space + 1)};
  if (command == "QUIT") co_return std::string{};
  if (name.empty() || name.find(' ') != std::string::npos) co_return "ERR usage: INCR <name> | GET <name> | QUIT";
  if (command == "GET") {
    auto [ec, value] = co_await read_counter(s.store, name);
    co_return ec ? "ERR store: " + ec.message() : fmt::format("VALUE {}", value);
  }
  if (command == "INCR") {
    std::string reply = co_await increment(s, name);
    if (!reply.starts_with("OK")) fmt::print("[server {}] INCR {}: {}\n", s.id, name, reply);
    co_return reply;
  }
  co_return "ERR unknown command";
}

// One connection: read a line, answer it, until the client hangs up.
asio::awaitable<void> session(server& s, tcp::socket socket) {
  std::string buffer;
  for (;;) {
    // The buffer's limit (1 KiB) bounds what a client can make us hold: a longer line ends the session.
    auto [ec, n] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer, 1024), '\n', use_tuple);
    if (ec) break;  // eof (the client hung up), or a line too long
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // accept telnet-style line ends

    std::string reply = co_await handle(s, line);
    if (reply.empty()) break;
    reply += '\n';
    if (auto [wec, written] = co_await asio::async_write(socket, asio::buffer(reply), use_tuple); wec) break;
  }
}

asio::awaitable<void> accept_loop(server& s) {
  for (;;) {
    auto [ec, socket] = co_await s.acceptor.async_accept(use_tuple);
    if (ec) co_return;  // the acceptor was closed: we are shutting down
    // One coroutine per connection; `s` outlives them all (it lives until the io_context stops).
    asio::co_spawn(s.acceptor.get_executor(), session(s, std::move(socket)), asio::detached);
  }
}

void listen(server& s, std::uint16_t port) {
  const tcp::endpoint where{asio::ip::make_address("127.0.0.1"), port};
  s.acceptor.open(where.protocol());
  s.acceptor.set_option(tcp::acceptor::reuse_address(true));
  s.acceptor.bind(where);
  s.acceptor.listen();
  asio::co_spawn(s.acceptor.get_executor(), accept_loop(s), asio::detached);
}

// ---------------------------------------------------------------------------------------------
// The self-test: clients of the protocol above

struct tally {
  int ok = 0;    // increments confirmed by a server
  int busy = 0;  // BUSY or UNAVAILABLE answers, retried
  int failed = 0;
};

// A client session: `requests` increments of the counter `name` through the server at `where`.
asio::awaitable<void> client_session(tcp::endpoint where, std::string name, int requests, tally& t) {
  tcp::socket socket{co_await asio::this_coro::executor};
  co_await socket.async_connect(where, asio::use_awaitable);  // throws: failing here would be a bug
  std::string buffer;
  int busy_in_a_row = 0;
  for (int done = 0; done < requests;) {
    const std::string command = "INCR " + name + "\n";
    co_await asio::async_write(socket, asio::buffer(command), asio::use_awaitable);
    const auto n =
        co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer, 1024), '\n', asio::use_awaitable);
    const std::string reply = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (reply.starts_with("OK ")) {
      ++t.ok;
      ++done;
      busy_in_a_row = 0;
    } else if ((reply.starts_with("BUSY") || reply.starts_with("UNAVAILABLE")) && ++busy_in_a_row < 20) {
      ++t.busy;  // the request did nothing: try again a little later
      co_await sleep_for(20ms);
    } else {
      ++t.failed;
      ++done;
      fmt::print("client: {}\n", reply);
    }
  }
  co_await asio::async_write(socket, asio::buffer(std::string_view{"QUIT\n"}), use_tuple);
}

asio::awaitable<int> self_test(std::list<server>& servers, const options& o) {
  auto ex = co_await asio::this_coro::executor;
  // A name of our own, so that concurrent self-tests on the same masters do not mix their counts.
  const std::string name = fmt::format("account:selftest-{}", ::getpid());
  redlock::resp::request reset;
  reset.push("DEL", counter_key(name));
  co_await servers.front().store.async_exec(std::move(reset), 1s, use_tuple);

  fmt::print("self-test: {} client sessions x {} INCR {} through {} server instances{}\n", o.self_test, o.requests,
             name, servers.size(), o.use_lock ? "" : " WITHOUT the lock");
  tally t;
  int running = o.self_test;
  redlock::timer all_done{ex, clock_type::time_point::max()};
  for (int i = 0; i < o.self_test; ++i) {
    auto& s = *std::next(servers.begin(), i % static_cast<int>(servers.size()));  // spread over the instances
    asio::co_spawn(ex, client_session(s.acceptor.local_endpoint(), name, o.requests, t), [&](std::exception_ptr e) {
      if (e) {
        ++t.failed;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          fmt::print("client session failed: {}\n", x.what());
        }
      }
      if (--running == 0) all_done.cancel();  // the last one wakes us
    });
  }
  while (running > 0) co_await all_done.async_wait(use_tuple);

  auto [ec, final_value] = co_await read_counter(servers.front().store, name);
  for (auto& s : servers) s.close();
  if (ec) {
    fmt::print("self-test: cannot read the counter: {}\n", ec.message());
    co_return 1;
  }
  fmt::print("self-test: {} increments confirmed ({} busy answers retried, {} failed)\n", t.ok, t.busy, t.failed);
  if (final_value == t.ok && t.failed == 0) {
    fmt::print("self-test: final value {}, expected {}: no lost update\n", final_value, t.ok);
    co_return 0;
  }
  fmt::print("self-test: final value {}, expected {}: {} LOST UPDATES\n", final_value, t.ok, t.ok - final_value);
  co_return 1;
}

// ---------------------------------------------------------------------------------------------
// Command line

[[noreturn]] void usage(std::string_view problem) {
  fmt::print(stderr,
             "lock_server: {}\n"
             "usage: lock_server [--port P] [--for D] [--self-test N [--servers K] [--requests R]]\n"
             "                   [--ttl D] [--work D] [--no-lock] [host:port,host:port,...]\n"
             "  masters from the argument or REDLOCK_NODES, password from REDLOCK_PASSWORD;\n"
             "  durations such as 500ms, 2s\n",
             problem);
  std::exit(2);
}

// "500ms", "2s", "1.5s" -> milliseconds.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit{end, static_cast<std::size_t>(text.data() + text.size() - end)};
  if (ec != std::errc{} || value < 0) return std::nullopt;
  if (unit == "ms") return std::chrono::milliseconds{static_cast<long long>(value)};
  if (unit == "s") return std::chrono::milliseconds{static_cast<long long>(value * 1000)};
  return std::nullopt;
}

int parse_count(std::string_view text, int min, int max, std::string_view option) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    usage(fmt::format("{} wants a number from {} to {}, not '{}'", option, min, max, text));
  }
  return value;
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    auto duration = [&] {
      const auto v = value();
      if (auto d = parse_duration(v)) return *d;
      usage(fmt::format("{} wants a duration such as 500ms or 2s, not '{}'", arg, v));
    };
    if (arg == "--port") {
      o.port = static_cast<std::uint16_t>(parse_count(value(), 0, 65535, arg));
    } else if (arg == "--for") {
      o.run_for = duration();
    } else if (arg == "--self-test") {
      o.self_test = parse_count(value(), 1, 1000, arg);
    } else if (arg == "--servers") {
      o.servers = parse_count(value(), 1, 16, arg);
    } else if (arg == "--requests") {
      o.requests = parse_count(value(), 1, 100000, arg);
    } else if (arg == "--ttl") {
      o.ttl = duration();
    } else if (arg == "--work") {
      o.work = duration();
    } else if (arg == "--no-lock") {
      o.use_lock = false;
    } else if (arg.starts_with("-")) {
      usage(fmt::format("unknown option {}", arg));
    } else if (o.masters.empty()) {
      o.masters = arg;
    } else {
      usage("more than one list of masters");
    }
  }
  return o;
}

// The masters come from the command line or REDLOCK_NODES; a password only from the environment
// (REDLOCK_PASSWORD), so that it shows neither in `ps` nor in the shell's history.
redlock::client_config load_config(std::string list) {
  if (list.empty()) {
    const char* env = std::getenv("REDLOCK_NODES");
    list = env ? env : "";
  }
  if (list.empty()) usage("no masters: give host:port,... or set REDLOCK_NODES");
  redlock::client_config cfg;
  std::string problem;
  if (redlock::parse_masters(list, cfg.masters, &problem)) usage(problem);
  if (const char* password = std::getenv("REDLOCK_PASSWORD"); password && *password) {
    for (auto& m : cfg.masters) m.password = password;
  }
  // REDLOCK_RESTART_GUARD=off for masters that were just started and have held no lock (tests,
  // demos): else the first locks wait out the restart quarantine (docs/safety.md).
  if (const char* guard = std::getenv("REDLOCK_RESTART_GUARD"); guard && *guard) {
    if (!redlock::parse_restart_detection(guard, cfg.guard.restarts))
      throw std::invalid_argument("REDLOCK_RESTART_GUARD: expected run_id, reconnect or off");
  }
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, also into a pipe or a file
  const options o = parse_options(argc, argv);
  redlock::client_config cfg = load_config(o.masters);
  // A server's request waits for a busy lock rather than bouncing the client at once.
  cfg.retry.max_wait = 10s;
  cfg.retry.base_delay = 5ms;
  cfg.retry.jitter = 20ms;
  if (std::string problem; redlock::validate(cfg, &problem)) usage(problem);
  if (o.ttl <= cfg.request_timeout) {
    usage(fmt::format("--ttl must be longer than the per-master request timeout ({} ms)", cfg.request_timeout.count()));
  }

  try {
    asio::io_context ioc;
    std::list<server> servers;  // a list: servers are neither copied nor moved once they run
    int exit_code = 0;
    if (o.self_test > 0) {
      for (int i = 1; i <= o.servers; ++i) listen(servers.emplace_back(ioc.get_executor(), i, cfg, o), 0);
      asio::co_spawn(ioc, self_test(servers, o), [&](std::exception_ptr e, int code) {
        exit_code = e ? 1 : code;
        if (e) fmt::print("self-test failed\n");
      });
    } else {
      auto& s = servers.emplace_back(ioc.get_executor(), 1, cfg, o);
      listen(s, o.port);
      const auto port = s.acceptor.local_endpoint().port();
      fmt::print("lock_server listening on 127.0.0.1:{} ({} masters)\n", port, cfg.masters.size());
      fmt::print("try:  printf 'INCR account:7\\nGET account:7\\nQUIT\\n' | nc 127.0.0.1 {}\n", port);
      if (o.run_for.count() > 0) {
        // Stop after --for: drop the open sessions too (a lock still held expires with its ttl).
        auto stop = std::make_shared<redlock::timer>(ioc, o.run_for);
        stop->async_wait([stop, &ioc](error_code) { ioc.stop(); });
      }
    }
    ioc.run();
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lock_server: {}\n", e.what());
    return 1;
  }
}
