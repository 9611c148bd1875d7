// SPDX-License-Identifier: BSL-1.0
// Noise-free cost of one lock+unlock cycle in the client: heap allocations per cycle (counted by
// this binary's operator new) and, when run under `valgrind --tool=callgrind`, instructions per
// cycle. Both are taken as the difference between two runs of different lengths, so start-up and
// connection set-up cancel out.
//
// Scheduler passes: the handlers the io_context executes per cycle (the sum of what run_one()
// returns, read at the first and the last cycle), so per reply = per cycle / (2 x masters). A
// strand's queue drained in one go counts as one pass; handlers on other executors (the system
// executor some error paths use) are not counted. Exact, no need for two runs.
//
// Usage: cycle_cost_bench CYCLES [KIND]  (prints "cycles=N allocations=A failures=F handlers=H
//                                  handlers_per_cycle=X handlers_per_reply=Y")
//        KIND: plain (default), fence, reentrant, read, write, semaphore (2 permits), multi1,
//        multi4, multi16 (async_lock_all of 1, 4, 16 resources): the lock kinds; noclock: plain
//        without the hazard guard's TIME behind each vote (its cost, against plain); cluster: plain
//        on five one-shard Redis Clusters (what routing by slot costs, against plain).
//        bench/run.sh runs it twice under callgrind and divides.

#include "counting_new.hpp"
#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using bench::allocations;
using bench::counting;

namespace {
unsigned long handlers_run = 0;  // handlers the io_context finished so far (main loop)
}  // namespace

int main(int argc, char** argv) {
  namespace asio = boost::asio;
  using namespace std::chrono_literals;
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 1000;
  const std::string_view kind = argc > 2 ? argv[2] : "plain";
  redlock::lock_options opts;
  std::vector<std::string> set;
  if (kind == "fence") {
    opts.fence = true;
  } else if (kind == "reentrant") {
    opts.owner = "cycle-cost-owner";
  } else if (kind == "read") {
    opts.kind = redlock::lock_kind::read;
  } else if (kind == "write") {
    opts.kind = redlock::lock_kind::write;
  } else if (kind == "semaphore") {
    opts.kind = redlock::lock_kind::semaphore;
    opts.permits = 2;
  } else if (kind.starts_with("multi")) {
    const int n = std::atoi(kind.substr(5).data());
    for (int i = 0; i < n; ++i) set.push_back("cost:" + std::to_string(i));
  } else if (kind != "plain" && kind != "noclock" && kind != "cluster") {
    std::fprintf(stderr, "unknown kind %.*s\n", static_cast<int>(kind.size()), kind.data());
    return 2;
  }
  // cluster: the same five masters, each a Redis Cluster of one shard (no redirect ever): what
  // routing by slot costs next to plain.
  std::optional<redlock::test::master_set> servers;
  std::optional<redlock::test::cluster_set> clusters;
  asio::io_context ioc{1};
  redlock::client_config cfg;
  if (kind == "cluster") {
    clusters.emplace(5, 1);
    (void)redlock::parse_masters(clusters->masters(), cfg.masters);
  } else {
    servers.emplace(5);
    for (std::size_t i = 0; i < servers->size(); ++i) {
      redlock::connection_config m;
      m.host = (*servers)[i].host();
      m.port = (*servers)[i].port();
      cfg.masters.push_back(m);
    }
  }
  cfg.guard.restarts = redlock::restart_detection::off;  // masters this run just started: no restart to guard
  cfg.guard.clock_jumps = kind != "noclock";
  redlock::client c{ioc.get_executor(), cfg};
  long failures = 0;
  bool done = false;
  unsigned long handlers_at_start = 0, handlers_at_end = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
        const auto acquire = [&]() {
          if (!set.empty()) return c.async_lock_all(set, 10s, tuple);
          if (kind == "plain" || kind == "cluster") return c.async_lock("cost", 10s, tuple);
          return c.async_lock("cost", 10s, opts, tuple);
        };
        for (int i = 0; i < 50; ++i) {  // warm-up: connections up, scripts cached, pools filled
          auto [ec, l] = co_await acquire();
          if (!ec) co_await l.async_unlock(tuple);
        }
        counting = true;
        handlers_at_start = handlers_run;  // this handler is added when it returns: counted
        for (int i = 0; i < cycles; ++i) {
          auto [ec, l] = co_await acquire();
          if (ec) {
            ++failures;
            continue;
          }
          co_await l.async_unlock(tuple);
        }
        counting = false;
        handlers_at_end = handlers_run;  // this one is not: the count spans exactly the cycles
        done = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  while (!done) handlers_run += ioc.run_one();
  const unsigned long handlers = handlers_at_end - handlers_at_start;
  const double replies_per_cycle = 2.0 * static_cast<double>(cfg.masters.size());  // SET + release per master
  std::printf("cycles=%d allocations=%lu failures=%ld handlers=%lu handlers_per_cycle=%.2f handlers_per_reply=%.2f\n",
              cycles, allocations.load(), failures, handlers, static_cast<double>(handlers) / cycles,
              static_cast<double>(handlers) / cycles / replies_per_cycle);
  if (kind == "fence")
    std::printf("fence_confirmations=%lu\n", static_cast<unsigned long>(c.stats().fence_confirmations));
  c.close();
  ioc.run_for(50ms);
  return failures == 0 ? 0 : 1;
}
