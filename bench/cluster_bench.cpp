// SPDX-License-Identifier: BSL-1.0
// Cluster masters, scale-out: lock+unlock on distinct resources against 3 plain masters and
// against 3 Redis Clusters of 1, 2 and 3 shards, on this machine. For each: cycles per second,
// the client's CPU per cycle, each shard's CPU per cycle (its server processes, from /proc), how
// evenly the cycles spread over the shards (commands each shard served), and the uncontended
// lock+unlock latency. The throughput on G machines follows from the CPU per cycle (printed as a
// model, see docs/benchmarks.md).
//
// Usage: cluster_bench [--seconds S] [--workers W] [--json FILE]

#include "bench_util.hpp"
#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// User + system CPU seconds of process `pid` so far.
double cpu_of(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/stat", pid)};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // fields 3..13
  unsigned long long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long long commands_of(redlock::local::node& n) {
  const auto raw = n.command({"INFO", "stats"});
  const auto at = raw.find("total_commands_processed:");
  return at == std::string::npos ? 0 : std::stoll(raw.substr(at + 25));
}

struct result {
  std::string name;
  std::size_t shards = 0;  // 0: plain masters
  double cycles_per_s = 0;
  double client_us_per_cycle = 0;
  std::vector<double> shard_us_per_cycle;  // each shard index, summed over the 3 clusters
  double evenness = 1;                     // least / most commands served by a shard
  double p50_us = 0, p99_us = 0;
};

result measure(const std::string& name, std::size_t shards, double seconds, int workers) {
  std::optional<redlock::test::master_set> plain;
  std::optional<redlock::test::cluster_set> clusters;
  redlock::client_config cfg;
  std::vector<std::vector<redlock::local::node*>> by_shard;  // [shard] -> its node in each cluster
  if (shards == 0) {
    plain.emplace(3);
    by_shard.resize(1);
    for (std::size_t i = 0; i < 3; ++i) {
      redlock::connection_config m;
      m.host = (*plain)[i].host();
      m.port = (*plain)[i].port();
      cfg.masters.push_back(m);
      by_shard[0].push_back(&(*plain)[i]);
    }
  } else {
    clusters.emplace(3, shards);
    (void)redlock::parse_masters(clusters->masters(), cfg.masters);
    by_shard.resize(shards);
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t s = 0; s < shards; ++s) by_shard[s].push_back(&clusters->primary(c, s));
  }
  cfg.guard.restarts = redlock::restart_detection::off;  // servers this run just started
  asio::io_context ioc{1};
  redlock::client c{ioc.get_executor(), cfg};
  constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
  result out;
  out.name = name;
  out.shards = shards;
  std::vector<double> cpu_before;
  std::vector<long long> commands_before;
  double client_before = 0;
  long long cycles = 0;
  bool running = true;
  int done = 0;
  clock_type::time_point started;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        (void)co_await c.async_wait_ready(10s, tuple);
        for (int i = 0; i < 200; ++i) {  // warm-up: every shard's connection and scripts
          auto [ec, l] = co_await c.async_lock("warm:" + std::to_string(i), 10s, tuple);
          if (!ec) (void)co_await l.async_unlock(tuple);
        }
        // Uncontended latency: one cycle at a time.
        std::vector<double> us;
        for (int i = 0; i < 2000; ++i) {
          const auto t0 = clock_type::now();
          auto [ec, l] = co_await c.async_lock("lat:" + std::to_string(i % 64), 10s, tuple);
          if (!ec) (void)co_await l.async_unlock(tuple);
          us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        }
        const auto st = redlock::bench::summarize(us);
        out.p50_us = st.p50;
        out.p99_us = st.p99;
        // Throughput on distinct resources.
        for (auto& shard : by_shard)
          for (auto* n : shard) {
            cpu_before.push_back(cpu_of(n->pid()));
            commands_before.push_back(commands_of(*n));
          }
        client_before = redlock::bench::cpu_seconds();
        started = clock_type::now();
        for (int w = 0; w < workers; ++w) {
          asio::co_spawn(
              ioc,
              [&, w]() -> asio::awaitable<void> {
                for (long i = 0; running; ++i) {
                  auto [ec, l] = co_await c.async_lock(fmt::format("t:{}:{}", w, i % 1000), 10s, tuple);
                  if (!ec) {
                    (void)co_await l.async_unlock(tuple);
                    ++cycles;
                  }
                }
                ++done;
              },
              asio::detached);
        }
      },
      asio::detached);
  while (started == clock_type::time_point{} || clock_type::now() - started < std::chrono::duration<double>(seconds))
    ioc.run_one_for(10ms);
  running = false;
  const auto elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  const auto counted = cycles;
  const double client_cpu = redlock::bench::cpu_seconds() - client_before;
  std::vector<double> cpu;
  std::vector<long long> commands;
  for (auto& shard : by_shard)
    for (auto* n : shard) {
      cpu.push_back(cpu_of(n->pid()));
      commands.push_back(commands_of(*n));
    }
  while (done < workers) ioc.run_one_for(10ms);
  c.close();
  ioc.run_for(50ms);
  out.cycles_per_s = static_cast<double>(counted) / elapsed;
  out.client_us_per_cycle = client_cpu / static_cast<double>(counted) * 1e6;
  std::vector<long long> served;
  std::size_t k = 0;
  for (std::size_t s = 0; s < by_shard.size(); ++s) {
    double sum = 0;
    long long n = 0;
    for (std::size_t m = 0; m < by_shard[s].size(); ++m, ++k) {
      sum += cpu[k] - cpu_before[k];
      n += commands[k] - commands_before[k];
    }
    out.shard_us_per_cycle.push_back(sum / 3.0 / static_cast<double>(counted) * 1e6);  // per cluster
    served.push_back(n);
  }
  const auto [lo, hi] = std::minmax_element(served.begin(), served.end());
  out.evenness = *hi > 0 ? static_cast<double>(*lo) / static_cast<double>(*hi) : 1.0;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int workers = 64;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    if (a == "--json") json_path = argv[i + 1];
  }
  std::vector<result> results;
  results.push_back(measure("3 plain masters", 0, seconds, workers));
  for (std::size_t s = 1; s <= 3; ++s)
    results.push_back(measure(fmt::format("3 clusters x {} shards", s), s, seconds, workers));

  std::printf("%-24s %10s %12s %26s %9s %9s %9s\n", "fleet", "cycles/s", "client us/c", "per shard us/cycle",
              "evenness", "p50 us", "p99 us");
  for (const auto& r : results) {
    std::string shards;
    for (auto v : r.shard_us_per_cycle) shards += fmt::format("{}{:.1f}", shards.empty() ? "" : " ", v);
    std::printf("%-24s %10.0f %12.1f %26s %9.2f %9.0f %9.0f\n", r.name.c_str(), r.cycles_per_s, r.client_us_per_cycle,
                shards.c_str(), r.evenness, r.p50_us, r.p99_us);
  }
  // The model: a cluster of S shards on S cores serves 1 / (its busiest shard's CPU per cycle)
  // cycles per second; every lock touches every cluster, so the fleet serves that too, as long as
  // the clients bring (cycles/s x client CPU per cycle) cores.
  std::printf("\nmodel (one core per shard, enough client cores):\n");
  for (const auto& r : results) {
    const double busiest = *std::max_element(r.shard_us_per_cycle.begin(), r.shard_us_per_cycle.end());
    std::printf("  %-24s %9.0f cycles/s; client cores needed %.1f\n", r.name.c_str(), 1e6 / busiest,
                1e6 / busiest * r.client_us_per_cycle / 1e6);
  }
  if (!json_path.empty()) {
    std::ofstream out{json_path};
    out << "{\"benchmark\":\"cluster_scale_out\",\"seconds\":" << seconds << ",\"workers\":" << workers
        << ",\"fleets\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      out << (i ? "," : "") << "{\"name\":\"" << r.name << "\",\"shards\":" << r.shards
          << ",\"cycles_per_s\":" << r.cycles_per_s << ",\"client_us_per_cycle\":" << r.client_us_per_cycle
          << ",\"evenness\":" << r.evenness << ",\"p50_us\":" << r.p50_us << ",\"p99_us\":" << r.p99_us
          << ",\"shard_us_per_cycle\":[";
      for (std::size_t s = 0; s < r.shard_us_per_cycle.size(); ++s) out << (s ? "," : "") << r.shard_us_per_cycle[s];
      out << "]}";
    }
    out << "]}\n";
  }
  return 0;
}
