// SPDX-License-Identifier: BSL-1.0
// Demonstration: six workers, each with its own Redlock client, contend for one lock over five
// Redis masters. A master is killed mid-way (and restarted after more than one ttl, as Redlock's
// delayed-restart rule asks); the others carry on, and no two workers ever hold the lock at once.
//
// Usage: demo [host:port,host:port,...]     (or REDLOCK_NODES=...). With no masters given, it
// starts five local redis-server processes of its own and stops them at the end (the local-nodes
// library of the `redlock` tool, which `redlock nodes up` uses too).

#include "local_nodes.hpp"
#include <redlock/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

asio::awaitable<void> sleep_for(clock_type::duration d) {
  asio::steady_timer t{co_await asio::this_coro::executor, d};
  co_await t.async_wait(use_tuple);
}

std::string votes(const redlock::lock& l) {
  std::string s;
  for (const auto& n : l.masters()) {
    switch (n.status) {
      case redlock::master_status::granted:
        s += "+";
        break;
      case redlock::master_status::pending:
        s += "?";
        break;
      case redlock::master_status::unreachable:
        s += "x";
        break;
      default:
        s += "-";
        break;
    }
  }
  return s;
}

struct shared {
  clock_type::time_point t0 = clock_type::now();
  int inside = 0;
  int overlaps = 0;
  bool stop = false;
  std::vector<int> sections;
  double ms() const { return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count(); }
};

asio::awaitable<void> worker(int id, redlock::client_config cfg, shared& s) {
  redlock::client locks{co_await asio::this_coro::executor, std::move(cfg)};
  co_await sleep_for(50ms);
  while (!s.stop) {
    auto [ec, lock] = co_await locks.async_lock("demo:job", 1000ms, use_tuple);
    if (ec) {
      fmt::print("{:7.0f} ms  worker {} gave up: {} [{}]\n", s.ms(), id, ec.message(), votes(lock));
      continue;
    }
    if (++s.inside > 1) ++s.overlaps;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(lock.validity_deadline() - clock_type::now());
    fmt::print("{:7.0f} ms  worker {} holds demo:job  token {}..  masters [{}]  validity {} ms\n", s.ms(), id,
               lock.token().substr(0, 8), votes(lock), left.count());
    co_await sleep_for(60ms);  // the guarded work, well within the validity
    --s.inside;
    ++s.sections[static_cast<std::size_t>(id)];
    co_await lock.async_unlock(use_tuple);
    co_await sleep_for(10ms);  // let the others in
  }
  locks.close();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string list = argc > 1 ? argv[1] : (std::getenv("REDLOCK_NODES") ? std::getenv("REDLOCK_NODES") : "");
    std::optional<redlock::local::node_set> local;
    redlock::client_config cfg;
    if (list.empty()) {
      local.emplace(5);
      for (std::size_t i = 0; i < local->size(); ++i) {
        redlock::connection_config m;
        m.host = (*local)[i].host();
        m.port = (*local)[i].port();
        cfg.masters.push_back(m);
      }
      // Masters this demo started itself have held no lock: no restart to guard against (with
      // the guard on, the first lock would wait out the restart quarantine, about a minute).
      cfg.guard.restarts = redlock::restart_detection::off;
      fmt::print("started {} local redis-server masters\n", cfg.masters.size());
    } else {
      std::string what;
      if (redlock::parse_masters(list, cfg.masters, &what)) throw std::invalid_argument(what);
    }
    for (auto& m : cfg.masters) {
      fmt::print("  master {}:{}\n", m.host, m.port);
      m.reconnect = {20ms, 200ms, 0.5};
    }
    cfg.request_timeout = 100ms;
    cfg.retry.max_wait = 5s;
    cfg.retry.base_delay = 10ms;
    cfg.retry.jitter = 40ms;
    fmt::print(
        "\nsix workers, each with its own client, contend for 'demo:job' (ttl 1 s); masters: + granted, "
        "x unreachable, ? not needed for the decision\n\n");

    asio::io_context ioc;
    shared s;
    constexpr int workers = 6;
    s.sections.assign(workers, 0);
    for (int w = 0; w < workers; ++w) asio::co_spawn(ioc, worker(w, cfg, s), asio::detached);
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          co_await sleep_for(800ms);
          if (local) {
            (*local)[1].kill();
            fmt::print("{:7.0f} ms  *** kill -9 master 2: the other four carry on\n", s.ms());
            co_await sleep_for(1500ms);  // down for longer than the ttl before it comes back empty
            (*local)[1].restart();
            fmt::print("{:7.0f} ms  *** master 2 restarted (empty, after more than one ttl)\n", s.ms());
          }
          co_await sleep_for(800ms);
          s.stop = true;
        },
        asio::detached);
    ioc.run();

    fmt::print("\ncritical sections per worker:");
    int total = 0;
    for (int n : s.sections) {
      fmt::print(" {}", n);
      total += n;
    }
    fmt::print("  (total {}); overlapping holders seen: {}\n", total, s.overlaps);
    return s.overlaps == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "demo: {}\n", e.what());
    return 1;
  }
}
