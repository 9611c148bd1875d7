// SPDX-License-Identifier: BSL-1.0
// What the hazard guards cost in availability, on five local masters, one client with the
// library's defaults but for `max_ttl` (--max-ttl-ms, 5 s by default: the quarantine then is
// max_ttl + drift + 1 s = 6.05 s; with the default 60 s it is 61.6 s, by the same arithmetic):
//
//  (fleet)    every master killed and restarted at once: the time from the restart to the first
//             lock, against the quarantine;
//  (minority) two of five killed and restarted while a loop takes and releases a lock: the
//             attempts that failed and the longest gap between two locks, during the quarantine;
//  (jump)     one master's wall clock jumped forward by 10 s (clock shim): the same loop.
//
// Prints one line per scenario and writes JSON (--json FILE).
// Usage: hazard_liveness [--max-ttl-ms N] [--json FILE]

#include <redlock/client.hpp>
#include <redlock/timer.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

double ms(clock_type::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

redlock::client_config config(redlock::test::master_set& servers, std::chrono::milliseconds max_ttl) {
  redlock::client_config cfg;  // the defaults: the restart guard and the clock checks on
  for (std::size_t i = 0; i < servers.size(); ++i) {
    redlock::connection_config m;
    m.host = servers[i].host();
    m.port = servers[i].port();
    cfg.masters.push_back(m);
  }
  cfg.max_ttl = max_ttl;
  return cfg;
}

asio::awaitable<void> pause(std::chrono::milliseconds d) {
  redlock::timer t{co_await asio::this_coro::executor, d};
  co_await t.async_wait(tuple);
}

// Lock and unlock in a loop for `length`: attempts that failed, and the longest time without a
// lock taken.
struct loop_result {
  long locks = 0;
  long failures = 0;
  double longest_gap_ms = 0;
};

asio::awaitable<loop_result> loop(redlock::client& c, clock_type::duration length) {
  loop_result r;
  const auto end = clock_type::now() + length;
  auto last = clock_type::now();
  while (clock_type::now() < end) {
    auto [ec, l] = co_await c.async_try_lock("liveness", 1s, tuple);
    if (ec) {
      ++r.failures;
      co_await pause(10ms);
      continue;
    }
    ++r.locks;
    r.longest_gap_ms = std::max(r.longest_gap_ms, ms(clock_type::now() - last));
    last = clock_type::now();
    co_await l.async_unlock(tuple);
  }
  r.longest_gap_ms = std::max(r.longest_gap_ms, ms(clock_type::now() - last));
  co_return r;
}

bool all_count(const redlock::client& c) {
  const auto h = c.hazards();
  return std::all_of(h.begin(), h.end(), [](const auto& m) { return m.cause == redlock::hazard_cause::none; });
}

}  // namespace

int main(int argc, char** argv) {
  std::chrono::milliseconds max_ttl = 5s;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--max-ttl-ms") {
      max_ttl = std::chrono::milliseconds{std::atol(argv[i + 1])};
    } else if (a == "--json") {
      json_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  redlock::test::master_set servers{5, redlock::test::with_clock_shim()};
  const auto cfg = config(servers, max_ttl);
  const auto quarantine = redlock::restart_quarantine(cfg);
  double fleet_ms = 0;
  loop_result minority, jump;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), cfg};
        // Fresh masters are quarantined too: wait it out first.
        while (!all_count(c)) co_await pause(20ms);

        // (fleet) every master restarted at once.
        for (std::size_t i = 0; i < servers.size(); ++i) servers[i].kill();
        for (std::size_t i = 0; i < servers.size(); ++i) servers[i].restart();
        const auto restarted = clock_type::now();
        for (;;) {
          auto [ec, l] = co_await c.async_try_lock("liveness", 1s, tuple);
          if (!ec) {
            fleet_ms = ms(clock_type::now() - restarted);
            co_await l.async_unlock(tuple);
            break;
          }
          co_await pause(20ms);
        }
        while (!all_count(c)) co_await pause(20ms);

        // (minority) two of five restarted while locking.
        servers[0].kill();
        servers[1].kill();
        servers[0].restart();
        servers[1].restart();
        minority = co_await loop(c, quarantine + 500ms);
        while (!all_count(c)) co_await pause(20ms);

        // (jump) one master's wall clock 10 s forward.
        redlock::test::master_clock clock{servers[2]};
        clock.shift(10s);
        jump = co_await loop(c, quarantine + 500ms);
        c.close();
      },
      asio::detached);
  io.run();

  const double q = ms(quarantine);
  std::printf("quarantine %.0f ms (max_ttl %lld ms)\n", q, static_cast<long long>(max_ttl.count()));
  std::printf("(fleet)    first lock %.0f ms after the restart (%.3f x the quarantine)\n", fleet_ms, fleet_ms / q);
  std::printf("(minority) %ld locks, %ld failed attempts, longest gap %.1f ms\n", minority.locks, minority.failures,
              minority.longest_gap_ms);
  std::printf("(jump)     %ld locks, %ld failed attempts, longest gap %.1f ms\n", jump.locks, jump.failures,
              jump.longest_gap_ms);
  if (!json_path.empty()) {
    std::ofstream{json_path} << fmt::format(
        "{{\"quarantine_ms\": {:.0f}, \"max_ttl_ms\": {}, \"fleet_first_lock_ms\": {:.0f}, "
        "\"minority\": {{\"locks\": {}, \"failures\": {}, \"longest_gap_ms\": {:.1f}}}, "
        "\"jump\": {{\"locks\": {}, \"failures\": {}, \"longest_gap_ms\": {:.1f}}}}}\n",
        q, max_ttl.count(), fleet_ms, minority.locks, minority.failures, minority.longest_gap_ms, jump.locks,
        jump.failures, jump.longest_gap_ms);
  }
  return 0;
}
