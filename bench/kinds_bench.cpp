// SPDX-License-Identifier: BSL-1.0
// The lock kinds next to the plain lock, on five local masters started here:
//
//  (k1) uncontended acquire+release latency of each kind (one client, one lock at a time), the
//       kinds interleaved round by round so that machine noise falls on all of them alike; p50,
//       p90 and the ratio of each p50 to the plain lock's from the same run;
//  (k2) async_lock_all of 1, 4 and 16 resources (part of k1: multi1, multi4, multi16);
//  (k3) hand-overs per second of a semaphore with P permits among C contenders (coroutines spread
//       over 4 clients, each locking, holding for --hold-us, releasing, again), next to an
//       exclusive lock with the same contenders; and the largest number of holders seen at once
//       (it must never exceed P). All three poll (fairness off); then the exclusive and fenced
//       locks again with the defaults' fairness (each release hands the lock to the first waiter).
//
// Prints a table and writes JSON (--json FILE). Instructions and allocations per kind (noise-free)
// come from cycle_cost_bench under callgrind: `bench/report.py cycle-cost-kinds`.
//
// Usage: kinds_bench [--rounds R] [--cycles C] [--contenders N] [--permits P] [--seconds S]
//                    [--hold-us U] [--json FILE]

#include "bench_util.hpp"
#include <redlock/client.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

struct kind_spec {
  std::string name;
  redlock::lock_options opts;
  std::vector<std::string> set;  // async_lock_all when not empty
  bool plain = false;
};

std::vector<kind_spec> kinds() {
  std::vector<kind_spec> out;
  out.push_back({"plain", {}, {}, true});
  kind_spec k;
  k = {"fence", {}, {}, false};
  k.opts.fence = true;
  out.push_back(k);
  k = {"reentrant", {}, {}, false};
  k.opts.owner = "kinds-bench";
  out.push_back(k);
  k = {"read", {}, {}, false};
  k.opts.kind = redlock::lock_kind::read;
  out.push_back(k);
  k = {"write", {}, {}, false};
  k.opts.kind = redlock::lock_kind::write;
  out.push_back(k);
  k = {"semaphore", {}, {}, false};
  k.opts.kind = redlock::lock_kind::semaphore;
  k.opts.permits = 4;
  out.push_back(k);
  for (int n : {1, 4, 16}) {
    k = {fmt::format("multi{}", n), {}, {}, false};
    for (int i = 0; i < n; ++i) k.set.push_back(fmt::format("multi:{}", i));
    out.push_back(k);
  }
  return out;
}

auto acquire(redlock::client& c, const kind_spec& k, const std::string& resource) {
  if (!k.set.empty()) return c.async_lock_all(k.set, 10s, tuple);
  if (k.plain) return c.async_lock(resource, 10s, tuple);
  return c.async_lock(resource, 10s, k.opts, tuple);
}

double us(clock_type::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  int rounds = 10, cycles = 300, contenders = 16, permits = 4;
  double seconds = 5.0;
  long hold_us = 1000;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--cycles")
      cycles = std::atoi(argv[i + 1]);
    else if (a == "--contenders")
      contenders = std::atoi(argv[i + 1]);
    else if (a == "--permits")
      permits = std::atoi(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--hold-us")
      hold_us = std::atol(argv[i + 1]);
    else if (a == "--json")
      json_path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }

  redlock::test::master_set servers{5};
  redlock::client_config cfg;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    redlock::connection_config m;
    m.host = servers[i].host();
    m.port = servers[i].port();
    cfg.masters.push_back(m);
  }
  cfg.guard.restarts = redlock::restart_detection::off;  // masters this run just started: no restart to guard

  // ---- (k1)/(k2): uncontended latency per kind ---------------------------------------------------
  const auto specs = kinds();
  std::map<std::string, std::vector<double>> samples;
  long failures = 0;
  {
    asio::io_context ioc{1};
    redlock::client c{ioc.get_executor(), cfg};
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          for (const auto& k : specs) {  // warm-up: connections up, scripts cached
            for (int i = 0; i < 50; ++i) {
              auto [ec, l] = co_await acquire(c, k, "k1:" + k.name);
              if (!ec) co_await l.async_unlock(tuple);
            }
          }
          for (int r = 0; r < rounds; ++r) {
            for (const auto& k : specs) {
              auto& v = samples[k.name];
              for (int i = 0; i < cycles; ++i) {
                const auto t0 = clock_type::now();
                auto [ec, l] = co_await acquire(c, k, "k1:" + k.name);
                if (ec) {
                  ++failures;
                  continue;
                }
                co_await l.async_unlock(tuple);
                v.push_back(us(clock_type::now() - t0));
              }
            }
          }
          c.close();
        },
        asio::detached);
    ioc.run();
  }
  const double plain_p50 = redlock::bench::summarize(samples["plain"]).p50;
  std::printf("(k1) uncontended acquire+release, 5 masters, %d rounds x %d cycles per kind (interleaved)\n", rounds,
              cycles);
  std::printf("  %-10s %9s %9s %9s %8s\n", "kind", "p50 us", "p90 us", "p99 us", "p50/plain");
  std::string k1_json;
  for (const auto& k : specs) {
    const auto s = redlock::bench::summarize(samples[k.name]);
    std::printf("  %-10s %9.1f %9.1f %9.1f %8.2f\n", k.name.c_str(), s.p50, s.p90, s.p99, s.p50 / plain_p50);
    k1_json +=
        fmt::format("{}\"{}\": {{\"p50_us\": {:.1f}, \"p90_us\": {:.1f}, \"p99_us\": {:.1f}, \"vs_plain\": {:.3f}}}",
                    k1_json.empty() ? "" : ", ", k.name, s.p50, s.p90, s.p99, s.p50 / plain_p50);
  }

  // ---- (k3): semaphore hand-overs with more contenders than permits -----------------------------
  struct contention {
    long acquired = 0;  // counted: after the first 500 ms
    long all = 0;       // from the start, as the clients' counters below
    long failed = 0;
    int holders = 0;
    int most = 0;
    std::uint64_t confirmations = 0;
    std::uint64_t handovers = 0;  // acquisitions granted by a release's hand-over (fairness on)
  };
  enum class mode { semaphore, exclusive, fenced };
  // `fair`: the client's fairness (queue and hand-over) on, as by default; off, every contender polls.
  const auto contend = [&](mode m, bool fair) {
    const bool semaphore = m == mode::semaphore;
    contention out;
    asio::io_context ioc{1};
    std::vector<std::unique_ptr<redlock::client>> clients;
    auto ccfg = cfg;
    ccfg.retry.base_delay = 2ms;  // both contenders poll alike: only the kind differs
    ccfg.retry.jitter = 3ms;
    ccfg.retry.max_wait = 10s;
    ccfg.fairness.enabled = fair;
    for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<redlock::client>(ioc.get_executor(), ccfg));
    redlock::lock_options opts;
    if (semaphore) {
      opts.kind = redlock::lock_kind::semaphore;
      opts.permits = static_cast<std::size_t>(permits);
    }
    opts.fence = m == mode::fenced;
    const auto end = clock_type::now() +
                     std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds + 0.5));
    const auto start_counting = clock_type::now() + 500ms;  // connections up, scripts cached
    int running = contenders;
    for (int i = 0; i < contenders; ++i) {
      asio::co_spawn(
          ioc,
          [&, i]() -> asio::awaitable<void> {
            auto& c = *clients[static_cast<std::size_t>(i) % clients.size()];
            asio::steady_timer t{co_await asio::this_coro::executor};
            while (clock_type::now() < end) {
              auto [ec, l] = co_await c.async_lock("k3", 10s, opts, tuple);
              if (ec) {
                ++out.failed;
                continue;
              }
              if (clock_type::now() >= start_counting) ++out.acquired;
              ++out.all;
              out.most = std::max(out.most, ++out.holders);
              if (hold_us > 0) {
                t.expires_after(std::chrono::microseconds{hold_us});
                co_await t.async_wait(tuple);
              }
              --out.holders;
              co_await l.async_unlock(tuple);
            }
            if (--running == 0) {
              for (auto& cl : clients) {
                out.confirmations += cl->stats().fence_confirmations;
                out.handovers += cl->stats().lock_handovers;
                cl->close();
              }
            }
          },
          asio::detached);
    }
    ioc.run();
    return out;
  };
  const auto sem = contend(mode::semaphore, false);
  const auto excl = contend(mode::exclusive, false);
  const auto fenced = contend(mode::fenced, false);
  // The same two with the defaults' fairness: each release hands the lock to the first waiter.
  const auto excl_fair = contend(mode::exclusive, true);
  const auto fenced_fair = contend(mode::fenced, true);
  std::printf("(k3) %d contenders on 4 clients, hold %ld us, %.1f s, retry 2-5 ms, fairness off\n", contenders, hold_us,
              seconds);
  std::printf("  semaphore P=%d (quorum %zu of 5): %8.0f hand-overs/s, at most %d holders at once, %ld failed\n",
              permits, redlock::core::semaphore_quorum(5, static_cast<std::size_t>(permits)),
              static_cast<double>(sem.acquired) / seconds, sem.most, sem.failed);
  std::printf("  exclusive lock:              %8.0f hand-overs/s, at most %d holders at once, %ld failed\n",
              static_cast<double>(excl.acquired) / seconds, excl.most, excl.failed);
  std::printf("  fenced exclusive lock:       %8.0f hand-overs/s; %.1f%% of them needed the fence confirmed\n",
              static_cast<double>(fenced.acquired) / seconds,
              100.0 * static_cast<double>(fenced.confirmations) / static_cast<double>(std::max(1L, fenced.all)));
  std::printf("(k3) the same with fairness on (queue and hand-over, the defaults)\n");
  std::printf(
      "  exclusive lock:              %8.0f hand-overs/s, %.1f%% by a release's hand-over, at most %d holders\n",
      static_cast<double>(excl_fair.acquired) / seconds,
      100.0 * static_cast<double>(excl_fair.handovers) / static_cast<double>(std::max(1L, excl_fair.all)),
      excl_fair.most);
  std::printf(
      "  fenced exclusive lock:       %8.0f hand-overs/s, %.1f%% by a release's hand-over; %.1f%% needed the fence "
      "confirmed\n",
      static_cast<double>(fenced_fair.acquired) / seconds,
      100.0 * static_cast<double>(fenced_fair.handovers) / static_cast<double>(std::max(1L, fenced_fair.all)),
      100.0 * static_cast<double>(fenced_fair.confirmations) / static_cast<double>(std::max(1L, fenced_fair.all)));
  if (failures) std::printf("(k1) %ld acquisitions failed\n", failures);

  if (!json_path.empty()) {
    std::ofstream j{json_path};
    j << fmt::format(
        "{{\"k1\": {{\"rounds\": {}, \"cycles\": {}, \"kinds\": {{{}}}, \"failures\": {}}},\n"
        " \"k3\": {{\"contenders\": {}, \"permits\": {}, \"quorum\": {}, \"seconds\": {}, \"hold_us\": {},\n"
        "  \"semaphore_per_s\": {:.1f}, \"semaphore_most_holders\": {}, \"exclusive_per_s\": {:.1f}, "
        "\"exclusive_most_holders\": {}, \"fenced_per_s\": {:.1f}, \"fenced_confirmations\": {}, "
        "\"fenced_acquired\": {}, \"fenced_all\": {},\n"
        "  \"fair\": {{\"exclusive_per_s\": {:.1f}, \"exclusive_all\": {}, \"exclusive_handovers\": {}, "
        "\"exclusive_most_holders\": {}, \"fenced_per_s\": {:.1f}, \"fenced_all\": {}, \"fenced_handovers\": {}, "
        "\"fenced_confirmations\": {}, \"fenced_most_holders\": {}}}}}}}\n",
        rounds, cycles, k1_json, failures, contenders, permits,
        redlock::core::semaphore_quorum(5, static_cast<std::size_t>(permits)), seconds, hold_us,
        static_cast<double>(sem.acquired) / seconds, sem.most, static_cast<double>(excl.acquired) / seconds, excl.most,
        static_cast<double>(fenced.acquired) / seconds, fenced.confirmations, fenced.acquired, fenced.all,
        static_cast<double>(excl_fair.acquired) / seconds, excl_fair.all, excl_fair.handovers, excl_fair.most,
        static_cast<double>(fenced_fair.acquired) / seconds, fenced_fair.all, fenced_fair.handovers,
        fenced_fair.confirmations, fenced_fair.most);
  }
  return sem.most <= permits && excl.most <= 1 && excl_fair.most <= 1 && fenced_fair.most <= 1 ? 0 : 1;
}
