// SPDX-License-Identifier: BSL-1.0
// TLS next to plain TCP: the same client and the same five redis-server processes, each
// serving a plain port and a TLS port (certificates made at start with the `openssl` tool), so the
// only difference between the two configurations is the TLS layer.
//
// Usage:
//   tls_bench latency [--rounds R] [--cycles N] [--json FILE] [--floor-bench BIN]
//       Sequential lock+unlock, as redlock_bench's (a): R rounds, each running N cycles over plain
//       TCP and N over TLS (in alternating order, so that drift of the machine hits both alike),
//       after 200 warm-up cycles each. Prints each round's p50/p99 and the medians over rounds.
//       --floor-bench: each round also runs the independent floor (bench/floor_bench.cpp: bare
//       sockets, and OpenSSL for TLS) over plain TCP and over TLS against the same masters, so
//       that TLS's cost to us is set beside its cost to a client with no code of ours.
//   tls_bench cost CYCLES plain|tls
//       As cycle_cost_bench: CYCLES lock+unlock cycles after a warm-up, printing
//       "cycles=N allocations=A failures=F" (heap allocations counted by this binary's operator
//       new). Run twice under `valgrind --tool=callgrind` with different CYCLES and divide the
//       difference for instructions per cycle (bench/report.py tls-cost does, next to
//       tls_floor_bench's bare OpenSSL floor). Callgrind's counts are zeroed after the warm-up.

#include "counting_new.hpp"
#include <redlock/client.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

// Under callgrind the counts start after the warm-up (connection setup, whose retries under the
// tool's slowness vary from run to run, is no part of a cycle's cost).
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define REDLOCK_BENCH_ZERO_STATS() CALLGRIND_ZERO_STATS
#else
#define REDLOCK_BENCH_ZERO_STATS() ((void)0)
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

using bench::allocations;
using bench::counting;

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t masters = 5;

// A private CA and a server certificate for 127.0.0.1, made with the openssl tool.
struct certificates {
  fs::path dir;
  certificates() {
    dir = fs::temp_directory_path() / fmt::format("redlock-tls-bench-{}", ::getpid());
    fs::create_directories(dir);
    const auto cmd = fmt::format(
        "cd '{}' && ( set -e;"
        " openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj '/CN=bench CA';"
        " openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj '/CN=127.0.0.1';"
        " printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext;"
        " openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2"
        " -extfile san.ext ) > openssl.log 2>&1",
        dir.string());
    if (std::system(cmd.c_str()) != 0)
      throw std::runtime_error("openssl failed; see " + (dir / "openssl.log").string());
  }
  ~certificates() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::string file(const char* name) const { return (dir / name).string(); }
};

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a{io, {asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();
}

// One server per set: each needs its own --tls-port.
struct server {
  std::uint16_t tls_port;
  std::unique_ptr<redlock::test::master_set> set;
  explicit server(const certificates& c) : tls_port(free_port()) {
    redlock::test::redis_options o;
    o.extra_args = {
        "--tls-port",         std::to_string(tls_port), "--tls-cert-file", c.file("server.crt"), "--tls-key-file",
        c.file("server.key"), "--tls-ca-cert-file",     c.file("ca.crt"),  "--tls-auth-clients", "no"};
    set = std::make_unique<redlock::test::master_set>(1, o);
  }
};

redlock::client_config config_for(std::vector<server>& servers, const certificates& c, bool tls) {
  redlock::client_config cfg;
  for (auto& s : servers) {
    redlock::connection_config m;
    m.host = "127.0.0.1";
    m.port = tls ? s.tls_port : (*s.set)[0].port();
    m.tls.enabled = tls;
    if (tls) m.tls.ca_file = c.file("ca.crt");
    cfg.masters.push_back(m);
  }
  cfg.guard.restarts = redlock::restart_detection::off;  // masters this run just started: no restart to guard
  return cfg;
}

// Runs `cycles` sequential lock+unlock cycles (after `warmup`) and returns each cycle's time in µs.
std::vector<double> run_cycles(const redlock::client_config& cfg, int warmup, int cycles, long& failures,
                               bool count_allocations) {
  asio::io_context ioc{1};
  redlock::client c{ioc.get_executor(), cfg};
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(cycles));
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < warmup; ++i) {
          auto [ec, l] = co_await c.async_lock("tls-bench", 10s, tuple);
          if (!ec) co_await l.async_unlock(tuple);
        }
        if (count_allocations) {
          REDLOCK_BENCH_ZERO_STATS();
          counting = true;
        }
        for (int i = 0; i < cycles; ++i) {
          const auto t0 = clock_type::now();
          auto [ec, l] = co_await c.async_lock("tls-bench", 10s, tuple);
          if (ec) {
            ++failures;
            continue;
          }
          co_await l.async_unlock(tuple);
          us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        }
        counting = false;
        done = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  while (!done) ioc.run_one();
  c.close();
  ioc.run_for(50ms);
  return us;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// The independent floor's lock+unlock p50 (µs) against `servers`, over TLS or not; 0 on failure.
double floor_p50(const std::string& bin, std::vector<server>& servers, const certificates& c, bool tls, int cycles) {
  std::string list;
  for (auto& s : servers)
    list += fmt::format("{}127.0.0.1:{}", list.empty() ? "" : ",", tls ? s.tls_port : (*s.set)[0].port());
  const auto json = c.dir / (tls ? "floor_tls.json" : "floor_plain.json");
  const auto cmd =
      fmt::format("'{}' --masters {} --cycles {} --warmup 200 --json '{}' {} > /dev/null", bin, list, cycles,
                  json.string(), tls ? fmt::format("--tls-ca '{}'", c.file("ca.crt")) : std::string{});
  if (std::system(cmd.c_str()) != 0) return 0;
  std::ifstream in{json};
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  const auto at = text.find("\"p50\": ", text.find("\"lock_unlock_us\""));
  return at == std::string::npos ? 0 : std::atof(text.c_str() + at + 7);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: tls_bench latency [--rounds R] [--cycles N] [--json FILE] | cost CYCLES plain|tls\n");
    return 2;
  }
  certificates certs;
  std::vector<server> servers;
  servers.reserve(masters);
  for (std::size_t i = 0; i < masters; ++i) servers.emplace_back(certs);

  if (args[0] == "cost") {
    const int cycles = args.size() > 1 ? std::atoi(args[1].c_str()) : 1000;
    const bool tls = args.size() > 2 && args[2] == "tls";
    long failures = 0;
    run_cycles(config_for(servers, certs, tls), 50, cycles, failures, true);
    std::printf("cycles=%d allocations=%lu failures=%ld\n", cycles, allocations.load(), failures);
    return failures == 0 ? 0 : 1;
  }

  int rounds = 6, cycles = 3000;
  std::string json, floor_bin;
  for (std::size_t i = 1; i + 1 < args.size(); i += 2) {
    if (args[i] == "--floor-bench") floor_bin = args[i + 1];
    if (args[i] == "--rounds") rounds = std::atoi(args[i + 1].c_str());
    if (args[i] == "--cycles") cycles = std::atoi(args[i + 1].c_str());
    if (args[i] == "--json") json = args[i + 1];
  }
  std::vector<double> p50_plain, p50_tls, p99_plain, p99_tls, ratio, floor_plain, floor_tls, tls_vs_floor;
  long failures = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> plain, tls;
    for (int k = 0; k < 2; ++k) {
      const bool use_tls = (k == 0) == (r % 2 == 1);  // plain first in even rounds
      auto us = run_cycles(config_for(servers, certs, use_tls), 200, cycles, failures, false);
      (use_tls ? tls : plain) = std::move(us);
    }
    p50_plain.push_back(percentile(plain, 0.5));
    p50_tls.push_back(percentile(tls, 0.5));
    p99_plain.push_back(percentile(plain, 0.99));
    p99_tls.push_back(percentile(tls, 0.99));
    ratio.push_back(p50_tls.back() / p50_plain.back());
    fmt::print("round {}: plain p50 {:.1f} p99 {:.1f} us; TLS p50 {:.1f} p99 {:.1f} us; TLS / plain p50 {:.3f}\n",
               r + 1, p50_plain.back(), p99_plain.back(), p50_tls.back(), p99_tls.back(), ratio.back());
    if (!floor_bin.empty()) {
      // Plain and TLS in the order ours ran this round.
      for (int k = 0; k < 2; ++k) {
        const bool use_tls = (k == 0) == (r % 2 == 1);
        (use_tls ? floor_tls : floor_plain).push_back(floor_p50(floor_bin, servers, certs, use_tls, cycles));
      }
      tls_vs_floor.push_back(floor_tls.back() > 0 ? p50_tls.back() / floor_tls.back() : 0);
      fmt::print(
          "         floor: plain p50 {:.1f} us, TLS p50 {:.1f} us (TLS / plain {:.3f}); our TLS / floor's TLS {:.3f}\n",
          floor_plain.back(), floor_tls.back(), floor_tls.back() / floor_plain.back(), tls_vs_floor.back());
    }
  }
  fmt::print(
      "median of {} rounds x {} cycles: plain p50 {:.1f} us (p99 {:.1f}); TLS p50 {:.1f} us (p99 {:.1f}); TLS / plain "
      "p50 {:.3f} (paired per round); failures {}\n",
      rounds, cycles, median(p50_plain), median(p99_plain), median(p50_tls), median(p99_tls), median(ratio), failures);
  if (!floor_bin.empty())
    fmt::print("floor: plain p50 {:.1f} us, TLS p50 {:.1f} us; our TLS / floor's TLS p50 {:.3f}\n", median(floor_plain),
               median(floor_tls), median(tls_vs_floor));
  if (!json.empty()) {
    auto list = [](const std::vector<double>& v) {
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.2f}", i ? ", " : "", v[i]);
      return s + "]";
    };
    std::ofstream out{json};
    out << fmt::format(
        "{{\n  \"masters\": {},\n  \"rounds\": {},\n  \"cycles\": {},\n  \"p50_plain_us\": {},\n  \"p50_tls_us\": {},\n"
        "  \"floor_p50_plain_us\": {},\n  \"floor_p50_tls_us\": {},\n  \"tls_over_floor_tls_p50\": {},\n"
        "  \"p99_plain_us\": {},\n  \"p99_tls_us\": {},\n  \"tls_over_plain_p50\": {},\n  \"median_p50_plain_us\": "
        "{:.2f},\n  \"median_p50_tls_us\": {:.2f},\n  \"median_tls_over_plain_p50\": {:.3f},\n  \"failures\": {}\n}}\n",
        masters, rounds, cycles, list(p50_plain), list(p50_tls), list(floor_plain), list(floor_tls), list(tls_vs_floor),
        list(p99_plain), list(p99_tls), list(ratio), median(p50_plain), median(p50_tls), median(ratio), failures);
  }
  return failures == 0 ? 0 : 1;
}
