// Uncontended lock+unlock latency against five local masters, next to the round-trip floor
// measured on the same masters in the same run.
//
// Usage: lock_bench [--json FILE] [--cycles N]

#include <redlock/client.hpp>
#include <redlock_test/redis_cluster.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/core.h>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

using redlock::bench::cpu_seconds;
using redlock::bench::stats;
using redlock::bench::summarize;

template <class F>
void run(asio::io_context& ioc, F f) {
  bool done = false;
  asio::co_spawn(ioc, f(), [&](std::exception_ptr e) {
    done = true;
    if (e) std::rethrow_exception(e);
  });
  while (!done) ioc.run_one();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "lock_bench.json";
  int cycles = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--json") json_path = argv[i + 1];
    if (a == "--cycles") cycles = std::stoi(argv[i + 1]);
  }
  redlock::test::redis_cluster cluster{5};
  asio::io_context ioc{1};

  redlock::client_config cfg;
  std::vector<std::unique_ptr<redlock::connection>> pings;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    redlock::connection_config m;
    m.host = cluster[i].host();
    m.port = cluster[i].port();
    cfg.masters.push_back(m);
    pings.push_back(std::make_unique<redlock::connection>(ioc.get_executor(), m));
    pings.back()->async_run(asio::detached);
  }
  redlock::client client{ioc.get_executor(), cfg};
  while (true) {
    std::size_t up = 0;
    for (const auto& s : client.masters()) up += s.state == redlock::connection_state::up;
    for (const auto& p : pings) up += p->status().state == redlock::connection_state::up;
    if (up == 10) break;
    ioc.run_one_for(10ms);
  }

  // Floor: one PING to one master; and one PING to all five at once, waiting for a majority
  // (what one quorum round trip costs when nothing else is done).
  std::vector<double> ping_one, ping_quorum, lock_unlock, lock_only;
  long failures = 0;
  run(ioc, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < cycles + 500; ++i) {
      redlock::resp::request r;
      r.push("PING");
      const auto s = clock_type::now();
      co_await pings[0]->async_exec(std::move(r), 1s, use_tuple);
      if (i >= 500) ping_one.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - s).count());
    }
  });
  run(ioc, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < cycles + 500; ++i) {
      int answered = 0;
      const auto s = clock_type::now();
      double at_majority = 0;
      for (auto& p : pings) {
        redlock::resp::request r;
        r.push("PING");
        p->async_exec(std::move(r), 1s, [&](boost::system::error_code, redlock::resp::response) {
          if (++answered == 3) at_majority = std::chrono::duration<double, std::micro>(clock_type::now() - s).count();
        });
      }
      while (answered < 5) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      if (i >= 500) ping_quorum.push_back(at_majority);
    }
  });
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  run(ioc, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < cycles + 500; ++i) {
      const auto s = clock_type::now();
      auto [ec, l] = co_await client.async_lock("bench:uncontended", 10s, use_tuple);
      const auto locked = clock_type::now();
      if (ec) {
        ++failures;
        continue;
      }
      co_await l.async_unlock(use_tuple);
      if (i >= 500) {
        lock_unlock.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - s).count());
        lock_only.push_back(std::chrono::duration<double, std::micro>(locked - s).count());
      }
    }
  });
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double cpu_per_cycle_us = (cpu_seconds() - cpu0) / (cycles + 500) * 1e6;

  const auto p1 = summarize(ping_one), pq = summarize(ping_quorum), lu = summarize(lock_unlock),
             lo = summarize(lock_only);
  fmt::print("5 local masters, {} sequential cycles (after 500 warm-up), one client thread\n\n", cycles);
  fmt::print("{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "latency (us)", "p50", "p90", "p99", "p99.9", "max");
  auto row = [](const char* name, const stats& s) {
    fmt::print("{:<34} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", name, s.p50, s.p90, s.p99, s.p999, s.max);
  };
  row("PING, one master", p1);
  row("PING to all 5, majority answered", pq);
  row("lock", lo);
  row("lock + unlock", lu);
  fmt::print("\nlock+unlock p50 / (2 x quorum PING p50) = {:.2f}   (1.0 = the round-trip floor)\n",
             lu.p50 / (2 * pq.p50));
  fmt::print("cycles/s sequential: {:.0f}; client CPU per cycle: {:.1f} us; failures: {}\n",
             (cycles + 500) / wall, cpu_per_cycle_us, failures);

  std::ofstream out{json_path};
  auto obj = [](const stats& s) {
    return fmt::format("{{\"p50\": {:.2f}, \"p90\": {:.2f}, \"p99\": {:.2f}, \"p99_9\": {:.2f}, \"max\": {:.2f}}}", s.p50,
                       s.p90, s.p99, s.p999, s.max);
  };
  out << fmt::format(
      "{{\n  \"masters\": 5,\n  \"cycles\": {},\n  \"ping_one_us\": {},\n  \"ping_quorum_us\": {},\n"
      "  \"lock_us\": {},\n  \"lock_unlock_us\": {},\n  \"ratio_p50_vs_floor\": {:.3f},\n"
      "  \"cpu_us_per_cycle\": {:.2f},\n  \"failures\": {}\n}}\n",
      cycles, obj(p1), obj(pq), obj(lo), obj(lu), lu.p50 / (2 * pq.p50), cpu_per_cycle_us, failures);
  fmt::print("wrote {}\n", json_path);
  client.close();
  for (auto& p : pings) p->close();
  ioc.run_for(100ms);
  return failures == 0 ? 0 : 1;
}
