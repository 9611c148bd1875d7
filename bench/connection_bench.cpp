// SPDX-License-Identifier: BSL-1.0
// One connection's speed against one local redis-server, next to redis-benchmark on the same
// server in the same run, so the figure that matters is a ratio measured under the same noise.
//
// Usage: connection_bench [--json FILE] [--seconds S]
// Prints a table; writes JSON (default: connection_bench.json in the working directory).

#include "bench_util.hpp"
#include <redlock/connection.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

using redlock::bench::cpu_seconds;
using redlock::bench::summarize;

struct throughput_result {
  int concurrency;
  double requests_per_s;
  double p50_us, p99_us;
  double cpu_us_per_request;
  long errors;
};

// `concurrency` coroutines each send SET on their own key back to back for `seconds`.
throughput_result measure_set(asio::io_context& ioc, redlock::connection& conn, int concurrency, double seconds) {
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(concurrency));
  long total = 0, errors = 0;
  int running = concurrency;
  const auto until =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  for (int c = 0; c < concurrency; ++c) {
    asio::co_spawn(
        ioc,
        [&, c]() -> asio::awaitable<void> {
          const std::string key = fmt::format("bench:{}", c);
          auto& mine = lat[static_cast<std::size_t>(c)];
          while (clock_type::now() < until) {
            redlock::resp::request req;
            req.push("SET", key, "value-of-some-twenty-bytes");
            const auto s = clock_type::now();
            auto [ec, r] = co_await conn.async_exec(std::move(req), 5s, use_tuple);
            mine.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - s).count());
            ++total;
            errors += ec ? 1 : 0;
          }
          --running;
        },
        asio::detached);
  }
  while (running > 0) ioc.run_one();
  const double elapsed = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  const auto st = summarize(std::move(all));
  return {concurrency, static_cast<double>(total) / elapsed,   st.p50,
          st.p99,      cpu / static_cast<double>(total) * 1e6, errors};
}

std::vector<double> measure_ping(asio::io_context& ioc, redlock::connection& conn, int count) {
  std::vector<double> lat;
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < count; ++i) {
          redlock::resp::request req;
          req.push("PING");
          const auto s = clock_type::now();
          co_await conn.async_exec(std::move(req), 5s, use_tuple);
          lat.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - s).count());
        }
        done = true;
      },
      asio::detached);
  while (!done) ioc.run_one();
  return lat;
}

// redis-benchmark's SET throughput with pipelining, parsed from its CSV output.
double redis_benchmark_set(std::uint16_t port, int pipeline, int clients, int requests) {
  const auto cmd = fmt::format("redis-benchmark -h 127.0.0.1 -p {} -t set -P {} -c {} -n {} --csv 2>/dev/null", port,
                               pipeline, clients, requests);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe{popen(cmd.c_str(), "r"), pclose};
  if (!pipe) return 0;
  std::array<char, 512> line{};
  while (fgets(line.data(), static_cast<int>(line.size()), pipe.get())) {
    std::string s{line.data()};
    if (s.rfind("\"SET\"", 0) == 0) {
      const auto a = s.find(",\"") + 2;
      return std::stod(s.substr(a, s.find('"', a) - a));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "connection_bench.json";
  double seconds = 3.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--json") json_path = argv[i + 1];
    if (a == "--seconds") seconds = std::stod(argv[i + 1]);
  }

  redlock::test::master_set servers{1};
  auto& node = servers[0];
  asio::io_context ioc{1};
  redlock::connection_config cfg;
  cfg.host = node.host();
  cfg.port = node.port();
  redlock::connection conn{ioc.get_executor(), cfg};
  conn.async_run(asio::detached);
  while (conn.status().state != redlock::connection_state::up) ioc.run_one_for(10ms);

  measure_ping(ioc, conn, 2000);  // warm-up
  auto ping = measure_ping(ioc, conn, 20000);
  const auto ping_stats = summarize(ping);
  const double ping_p50 = ping_stats.p50, ping_p99 = ping_stats.p99;

  std::vector<throughput_result> results;
  for (int c : {1, 16, 64, 256}) results.push_back(measure_set(ioc, conn, c, seconds));
  const double rb = redis_benchmark_set(node.port(), 16, 1, 1'000'000);
  const auto at64 = *std::find_if(results.begin(), results.end(), [](auto& r) { return r.concurrency == 64; });

  fmt::print("one connection to one local redis-server, {} s per row\n\n", seconds);
  fmt::print("PING round trip, sequential: p50 {:.1f} us, p99 {:.1f} us\n\n", ping_p50, ping_p99);
  fmt::print("{:>12} {:>14} {:>10} {:>10} {:>14} {:>8}\n", "coroutines", "SET/s", "p50 us", "p99 us", "CPU us/req",
             "errors");
  for (const auto& r : results) {
    fmt::print("{:>12} {:>14.0f} {:>10.1f} {:>10.1f} {:>14.2f} {:>8}\n", r.concurrency, r.requests_per_s, r.p50_us,
               r.p99_us, r.cpu_us_per_request, r.errors);
  }
  fmt::print("\nredis-benchmark -t set -P 16 -c 1: {:.0f} SET/s\n", rb);
  fmt::print("ratio (64 coroutines on one connection / redis-benchmark -P 16 -c 1): {:.2f}\n",
             rb > 0 ? at64.requests_per_s / rb : 0.0);

  std::ofstream out{json_path};
  out << "{\n  \"ping_us\": {\"p50\": " << ping_p50 << ", \"p99\": " << ping_p99 << "},\n  \"set\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    out << fmt::format(
        "    {{\"concurrency\": {}, \"requests_per_s\": {:.1f}, \"p50_us\": {:.2f}, \"p99_us\": {:.2f}, "
        "\"cpu_us_per_request\": {:.3f}, \"errors\": {}}}{}\n",
        r.concurrency, r.requests_per_s, r.p50_us, r.p99_us, r.cpu_us_per_request, r.errors,
        i + 1 < results.size() ? "," : "");
  }
  out << fmt::format(
      "  ],\n  \"redis_benchmark_set_P16_c1\": {:.1f},\n  \"ratio_c64_vs_redis_benchmark\": {:.4f}\n}}\n", rb,
      rb > 0 ? at64.requests_per_s / rb : 0.0);
  fmt::print("wrote {}\n", json_path);
  conn.close();
  ioc.run_for(100ms);
  return 0;
}
