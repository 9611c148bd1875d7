// SPDX-License-Identifier: BSL-1.0
// The cost of holding many auto-extended locks: memory and CPU per lock, and the extension traffic
// the masters see, against five local masters.
//
// Usage: keep_alive_bench [--locks N] [--seconds S] [--ttl-ms T] [--window W=256] [--loop-probe 0|1]
//                         [--json FILE]
// --window W: how many acquisitions run at once while the locks are taken.
// --loop-probe 1: measure how late a 10 ms timer on the same io_context runs. Its wake-ups cost
// CPU of their own (about half a microsecond per lock per second here, with 10,000 locks), so the
// CPU figures come from runs without it.
// Instructions per extension: run it under valgrind --tool=callgrind --collect-atstart=no
// --toggle-collect='*run_slice*' and divide the total by the extensions it prints.

#include "bench_util.hpp"
#include <redlock/client.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

using redlock::bench::cpu_seconds;
using redlock::bench::heap_in_use;
using redlock::bench::rss_kib;
using redlock::bench::system_cpu_seconds;

// Calls of `command` so far on one master, from INFO commandstats.
long command_calls(redlock::test::redis_node& node, std::string_view command) {
  const auto info = node.command({"INFO", "commandstats"});
  const auto key = fmt::format("cmdstat_{}:calls=", command);
  const auto at = info.find(key);
  if (at == std::string::npos) return 0;
  return std::stol(info.substr(at + key.size()));
}

// One slice of the measured window. Not inlined, so that callgrind can count the window's
// instructions alone: --collect-atstart=no --toggle-collect='*run_slice*'.
[[gnu::noinline]] void run_slice(asio::io_context& ioc, clock_type::duration d) { ioc.run_for(d); }

// How long other work on the client's io_context waits behind the library: a timer due 10 ms
// after each run records how late it runs, which is about the longest stretch of handlers the
// loop ran in between (a renewal pass of thousands of locks, say).
class loop_probe {
 public:
  explicit loop_probe(asio::io_context& ioc) : timer_{ioc} {}
  void start() {
    on_ = true;
    arm();
  }
  void stop() {
    on_ = false;
    timer_.cancel();
  }
  /// The lags seen, in milliseconds, sorted.
  std::vector<double> lags_ms() {
    std::sort(lags_.begin(), lags_.end());
    return lags_;
  }

 private:
  void arm() {
    due_ = std::chrono::steady_clock::now() + 10ms;
    timer_.expires_at(due_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !on_) return;
      lags_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - due_).count());
      arm();
    });
  }
  asio::steady_timer timer_;
  std::chrono::steady_clock::time_point due_{};
  std::vector<double> lags_;
  bool on_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  int locks = 10000;
  double seconds = 30;
  long ttl_ms = 10000;
  int window = 256;
  bool probe_loop = false;
  std::string json_path = "keep_alive_bench.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--locks") locks = std::stoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::stod(argv[i + 1]);
    if (a == "--ttl-ms") ttl_ms = std::stol(argv[i + 1]);
    if (a == "--window") window = std::max(1, std::stoi(argv[i + 1]));
    if (a == "--json") json_path = argv[i + 1];
    if (a == "--loop-probe") probe_loop = std::string_view{argv[i + 1]} == "1";
  }
  redlock::test::master_set servers{5};
  asio::io_context ioc{1};
  redlock::client_config cfg;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    redlock::connection_config m;
    m.host = servers[i].host();
    m.port = servers[i].port();
    cfg.masters.push_back(m);
  }
  cfg.guard.restarts = redlock::restart_detection::off;  // masters this run just started: no restart to guard
  redlock::client client{ioc.get_executor(), cfg};
  ioc.run_for(200ms);

  const long rss_before = rss_kib();
  const std::size_t heap_before = heap_in_use();
  std::vector<redlock::lock> held(static_cast<std::size_t>(locks));
  int acquired = 0, failed = 0, started = 0;
  std::string first_failure;
  // At most `window` acquisitions at once, as a service taking its locks would: what (f) measures
  // is holding them. (Ten thousand at once overload five masters on two cores: requests time out
  // behind each other and the retries add to the queue; see docs/benchmarks.md, (f).)
  std::function<void()> start_next = [&] {
    const int k = started++;
    client.async_lock(fmt::format("hold:{}", k), std::chrono::milliseconds{ttl_ms},
                      [&, k](boost::system::error_code ec, redlock::lock l) {
                        if (ec) {
                          if (failed++ == 0) first_failure = to_string(client.report(l));
                        } else {
                          ++acquired;
                          l.keep_alive();
                          held[static_cast<std::size_t>(k)] = std::move(l);
                        }
                        if (started < locks) start_next();
                      });
  };
  for (int k = 0; k < std::min(locks, window); ++k) start_next();
  while (acquired + failed < locks) ioc.run_one();
  ioc.run_for(100ms);
  const long rss_held = rss_kib();
  const std::size_t heap_held = heap_in_use();

  const auto extensions_so_far = [&] {
    std::size_t n = 0;
    for (const auto& l : held) n += l.extensions();
    return n;
  };
  long evalsha0 = 0;
  for (std::size_t i = 0; i < servers.size(); ++i) evalsha0 += command_calls(servers[i], "evalsha");
  // Only the window's extensions count against its CPU (with a short ttl, or slowly taken locks,
  // some were extended while the rest were being taken).
  const std::size_t extensions0 = extensions_so_far();
  // The heap's peak while the locks are kept alive (extensions in flight, the client's queues and
  // batches at their steady size), sampled every 100 ms. mallinfo2 walks the free lists, so the
  // sampling's own CPU is measured and left out of the client's.
  std::size_t heap_peak = heap_held;
  double sampling_cpu = 0;
  const double cpu0 = cpu_seconds();
  const double sys0 = system_cpu_seconds();
  loop_probe probe{ioc};
  if (probe_loop) probe.start();
  const auto t0 = clock_type::now();
  const auto end = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  for (auto now = t0; now < end; now = clock_type::now()) {
    run_slice(ioc, std::min<clock_type::duration>(100ms, end - now));
    const double before = cpu_seconds();
    heap_peak = std::max(heap_peak, heap_in_use());
    sampling_cpu += cpu_seconds() - before;
  }
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0 - sampling_cpu;
  const double sys = system_cpu_seconds() - sys0;  // the heap sampling makes no system calls
  probe.stop();
  const auto lags = probe.lags_ms();
  const double lag_max = lags.empty() ? 0.0 : lags.back();
  const double lag_p99 = lags.empty() ? 0.0 : lags[lags.size() * 99 / 100];
  const auto lag_json = [&](double ms) { return probe_loop ? fmt::format("{:.2f}", ms) : std::string{"null"}; };
  long evalsha1 = 0;
  for (std::size_t i = 0; i < servers.size(); ++i) evalsha1 += command_calls(servers[i], "evalsha");

  const std::size_t extensions = extensions_so_far() - extensions0;
  std::size_t lost = 0;
  std::map<std::string, std::size_t> reasons;  // why locks were lost, should any be
  for (const auto& l : held) {
    lost += l.lost();
    if (l.lost()) ++reasons[l.loss_reason().message()];
  }
  // What the first lost locks' masters say (diagnostics: a lock should never be lost here).
  int shown = 0;
  for (const auto& l : held) {
    if (!l.lost() || shown++ >= 3) continue;
    fmt::print("  lost {} (extensions {}):", l.resource(), l.extensions());
    for (const auto& m : l.masters()) fmt::print(" [{} {} us]", redlock::to_string(m.status), m.latency.count());
    fmt::print("\n   on the masters:");
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const auto v = servers[i].command({"GET", l.resource()});
      fmt::print(" [{} pttl {}]", v.find(l.token()) != std::string::npos ? "ours" : v.substr(0, v.find('\r')),
                 servers[i].command({"PTTL", l.resource()}).substr(0, 8));
    }
    fmt::print("\n");
  }
  for (const auto& [why, n] : reasons) fmt::print("  lost: {} x {}\n", n, why);
  // Heap in use, not RSS: acquiring 10,000 locks at once leaves freed memory that RSS still counts.
  const double per_lock_kib = static_cast<double>(heap_peak - heap_before) / 1024.0 / acquired;
  const double taken_kib = static_cast<double>(heap_held - heap_before) / 1024.0 / acquired;
  const double cpu_us_per_lock_s = cpu / acquired / wall * 1e6;
  const double cpu_us_per_extension = extensions ? cpu / static_cast<double>(extensions) * 1e6 : 0.0;
  const double sys_us_per_extension = extensions ? sys / static_cast<double>(extensions) * 1e6 : 0.0;
  const double commands_per_s = static_cast<double>(evalsha1 - evalsha0) / wall;

  fmt::print("{} locks (ttl {} ms, renewed at half the ttl) held with keep-alive for {:.1f} s on 5 masters\n", acquired,
             ttl_ms, wall);
  fmt::print("  failed to acquire: {}{}, lost while held: {}\n", failed,
             failed > 0 ? fmt::format(" (the first: {})", first_failure) : std::string{}, lost);
  fmt::print(
      "  memory: {:.2f} KiB of heap per held lock at its peak while kept alive ({:.2f} once taken; RSS {} -> {} KiB, "
      "including the acquisition peak)\n",
      per_lock_kib, taken_kib, rss_before, rss_held);
  fmt::print(
      "  CPU: {:.3f} us per lock per second; {:.1f} us per extension, {:.1f} of it in the kernel ({} extensions; "
      "{:.3f} s sampling the heap, left out)\n",
      cpu_us_per_lock_s, cpu_us_per_extension, sys_us_per_extension, extensions, sampling_cpu);
  if (probe_loop) {
    fmt::print(
        "  event loop: a timer due every 10 ms ran up to {:.1f} ms late (p99 {:.1f} ms, {} runs; its CPU is "
        "in the figure above)\n",
        lag_max, lag_p99, lags.size());
  }
  fmt::print("  traffic: {:.0f} extend commands/s to the masters in all ({:.3f} per lock per second)\n", commands_per_s,
             commands_per_s / acquired);

  std::ofstream out{json_path};
  out << fmt::format(
      "{{\n  \"locks\": {},\n  \"ttl_ms\": {},\n  \"seconds\": {:.2f},\n  \"lost\": {},\n  \"failed\": {},\n"
      "  \"kib_per_lock\": {:.3f},\n  \"kib_per_lock_taken\": {:.3f},\n  \"cpu_us_per_lock_second\": {:.4f},\n  "
      "\"cpu_us_per_extension\": {:.2f},\n  \"sys_us_per_extension\": {:.2f},\n"
      "  \"extensions\": {},\n  \"extend_commands_per_s\": {:.1f},\n  \"window\": {},\n"
      "  \"loop_lag_max_ms\": {},\n  \"loop_lag_p99_ms\": {}\n}}\n",
      acquired, ttl_ms, wall, lost, failed, per_lock_kib, taken_kib, cpu_us_per_lock_s, cpu_us_per_extension,
      sys_us_per_extension, extensions, commands_per_s, window, lag_json(lag_max), lag_json(lag_p99));
  fmt::print("wrote {}\n", json_path);

  for (auto& l : held) l = redlock::lock{};  // released in the background
  ioc.run_for(2s);
  client.close();
  ioc.run_for(200ms);
  return lost == 0 && failed == 0 ? 0 : 1;
}
