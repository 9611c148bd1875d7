// SPDX-License-Identifier: BSL-1.0
// metrics_endpoint: a service's lock counters where operators look, on a Prometheus /metrics page.
//
// A worker takes and releases a lock every 100 ms (standing in for the service's real lock
// traffic), and a minimal HTTP server on the same io_context answers `GET /metrics` with
// redlock::to_prometheus(client): lock outcomes, extensions, losses, releases, the acquire latency
// histogram, and per master its request outcomes, connects, latency and whether it is up. Point a
// Prometheus scrape job at it (or curl it). The HTTP part is deliberately small: one request per
// connection, a bounded header, a short deadline; a real service would use its own HTTP server.
//
// Usage: metrics_endpoint [--listen HOST:PORT] [--for D] [host:port,host:port,...]
//   masters from the argument or REDLOCK_NODES; password (if any) from REDLOCK_PASSWORD
//   --listen HOST:PORT  where to serve (default 127.0.0.1:9464; port 0 picks a free one)
//   --for D             stop after D (default: run until SIGINT/SIGTERM); durations 500ms, 2s
// Prints "listening on HOST:PORT" once serving. Exit status: 0 after a signal or --for; 1 on
// failure; 2 bad usage.

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/prometheus.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/core.h>

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <istream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

struct options {
  std::string masters;
  std::string listen = "127.0.0.1:9464";
  std::optional<milliseconds> run_for;
};

// Stand-in for the service's own lock traffic, so that the counters move. Ends when `pause` is
// cancelled (or, between two pauses, when `stopping` is set).
asio::awaitable<void> worker(redlock::client& locks, asio::steady_timer& pause, const bool& stopping) {
  while (!stopping) {
    auto [ec, held] = co_await locks.async_lock("example:metrics", 2s, use_tuple);
    if (!ec) co_await held.async_unlock(use_tuple);
    if (stopping) co_return;
    pause.expires_after(100ms);
    if (auto [wec] = co_await pause.async_wait(use_tuple); wec) co_return;
  }
}

std::string response(std::string_view status, std::string_view type, std::string_view body) {
  return fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
                     type, body.size(), body);
}

// One request per connection; whatever goes wrong with a client only ends its connection.
asio::awaitable<void> serve(tcp::socket socket, redlock::client& locks) {
  asio::steady_timer deadline{socket.get_executor()};
  deadline.expires_after(5s);  // a client that sends nothing does not keep the socket
  deadline.async_wait([&socket](boost::system::error_code ec) {
    if (!ec) socket.close();
  });
  asio::streambuf header{8192};  // bounded: a larger request is refused
  auto [ec, n] = co_await asio::async_read_until(socket, header, "\r\n\r\n", use_tuple);
  std::string reply;
  if (ec) {
    reply = response("400 Bad Request", "text/plain", "bad request\n");
  } else {
    std::istream in{&header};
    std::string method, target;
    in >> method >> target;
    if (method != "GET") {
      reply = response("405 Method Not Allowed", "text/plain", "only GET\n");
    } else if (target != "/metrics") {
      reply = response("404 Not Found", "text/plain", "see /metrics\n");
    } else {
      reply = response("200 OK", "text/plain; version=0.0.4; charset=utf-8", redlock::to_prometheus(locks));
    }
  }
  co_await asio::async_write(socket, asio::buffer(reply), use_tuple);
  deadline.cancel();
}

asio::awaitable<void> listen(tcp::acceptor& acceptor, redlock::client& locks) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) continue;  // e.g. out of file descriptors for a moment
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket), locks), asio::detached);
  }
}

[[noreturn]] void usage(std::string_view problem) {
  fmt::print(stderr,
             "metrics_endpoint: {}\n"
             "usage: metrics_endpoint [--listen HOST:PORT] [--for D] [host:port,host:port,...]\n"
             "  masters from the argument or REDLOCK_NODES, password from REDLOCK_PASSWORD;\n"
             "  durations such as 500ms, 2s\n",
             problem);
  std::exit(2);
}

std::optional<milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit{end, static_cast<std::size_t>(text.data() + text.size() - end)};
  if (ec != std::errc{} || value < 0) return std::nullopt;
  if (unit == "ms") return milliseconds{static_cast<long long>(value)};
  if (unit == "s") return milliseconds{static_cast<long long>(value * 1000)};
  return std::nullopt;
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", arg));
      return std::string_view{argv[++i]};
    };
    if (arg == "--listen") {
      o.listen = value();
    } else if (arg == "--for") {
      const auto v = value();
      o.run_for = parse_duration(v);
      if (!o.run_for) usage(fmt::format("--for wants a duration such as 500ms or 2s, not '{}'", v));
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

tcp::endpoint listen_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) usage(fmt::format("--listen wants HOST:PORT, not '{}'", text));
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(text.substr(0, colon), ec);
  unsigned port = 0;
  const auto* end = text.data() + text.size();
  const auto [p, pec] = std::from_chars(text.data() + colon + 1, end, port);
  if (ec || pec != std::errc{} || p != end || port > 65535) {
    usage(fmt::format("--listen wants an IP address and a port, not '{}'", text));
  }
  return {address, static_cast<unsigned short>(port)};
}

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
  if (redlock::validate(cfg, &problem)) usage(problem);
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const options o = parse_options(argc, argv);
  const redlock::client_config cfg = load_config(o.masters);
  const tcp::endpoint where = listen_endpoint(o.listen);
  try {
    asio::io_context ioc;
    redlock::client locks{ioc.get_executor(), cfg};
    tcp::acceptor acceptor{ioc, where};
    fmt::print("listening on {}:{}\n", acceptor.local_endpoint().address().to_string(),
               acceptor.local_endpoint().port());

    asio::steady_timer pause{ioc};
    bool stopping = false;
    asio::co_spawn(ioc, worker(locks, pause, stopping), asio::detached);
    asio::co_spawn(ioc, listen(acceptor, locks), asio::detached);

    // Everything winds down by itself: run() returns once the last request was answered.
    asio::signal_set signals{ioc, SIGINT, SIGTERM};
    asio::steady_timer run_for{ioc};
    const auto stop = [&] {
      stopping = true;
      pause.cancel();
      acceptor.close();
      signals.cancel();
      run_for.cancel();
      locks.close();  // completes the worker's lock or unlock in progress
    };
    signals.async_wait([&](boost::system::error_code ec, int) {
      if (!ec) stop();
    });
    if (o.run_for) {
      run_for.expires_after(*o.run_for);
      run_for.async_wait([&](boost::system::error_code ec) {
        if (!ec) stop();
      });
    }
    ioc.run();
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "metrics_endpoint: {}\n", e.what());
    return 1;
  }
}
