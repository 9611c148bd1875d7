// SPDX-License-Identifier: BSL-1.0
// The lock benchmark: scenarios a-e and g of docs/benchmarks.md against five local masters (two
// of them reachable through delaying proxies, each a process of its own, for the slow-minority
// scenario), next to the round-trip floor and the masters' ceiling measured in the same run.
// Peers are run by bench/run.sh against the same masters (this program runs them after each of
// its scenarios when asked to).
//
// Usage: redlock_bench [--json FILE] [--cycles N] [--seconds S] [--contention-runs R]
//                      [--only a,b,c,c_wake_only,c_no_fair,c_poll_2ms,d,e,g,floor,ceiling]
//                      [--hold-for-peers CMD]
//                      [--floor-bench BIN] [--worker BIN] [--g-seconds S=40] [--g-no-fair-seconds S=20]
//                      [--c-hold-ms H=0] [--delay-proxy BIN] [--ceiling-runs R=3]
// --json FILE: where the results go; by default bench/results/local/redlock_bench.json, relative
// to the working directory (run it from the repository's root). Missing directories are created.
// Git ignores bench/results/local/: the committed results are the ones bench/run.sh writes.
// --only c runs (c) in its four configurations (c: the library's defaults, fair hand-over on;
// c_wake_only: the same without `fairness.hand_over`, so releases wake the first waiter instead of
// handing it the lock; c_no_fair: default retry, fairness off; c_poll_2ms: fairness off, 0-2 ms
// retry, the setting of this benchmark before fair hand-over), each also selectable alone. The configurations take
// turns run by run (run 1 of each, then run 2 of each, ...), so that a busy moment of the machine
// does not fall on one configuration only. Right before each run, the floor's quorum round trip
// (PING to all five until three answered) is measured again, 2,000 times: the unit in which that
// run's hand-over latency is also reported.
// --c-hold-ms H: (c)'s contenders hold the lock H ms before releasing (a diagnosis: with a hold,
// the releaser's next attempt and the masters' work of the last hand-over are off the path of the
// next one). The JSON records it; the default, 0, is what docs/benchmarks.md reports.
// --worker BIN: the safety suite's worker (test/safety/worker.cpp), which (g) runs as four
// processes; the default is the one CMake builds (REDLOCK_WORKER_PATH). (g) runs for --g-seconds
// with fair hand-over, then --g-no-fair-seconds without (0 skips either); the workers' records go
// to a directory g/ next to the JSON.
// --floor-bench BIN: right before (a), runs the independent floor (bench/floor_bench.cpp, no
// redlock code) against the same five masters, writes its JSON next to ours (floor_bench.json)
// and reports (a) as a ratio to it. The "floor" scenario below is different: PING through our
// own connection class, so it includes the connection's own cost.
// --delay-proxy BIN: the delaying proxy (bench/delay_proxy.cpp) that (d) and the peers' slow
// masters go through: one process per slow master (masters 0 and 1), each holding every chunk
// 25 ms each way, started for (d) and again for the peers, stopped and reaped after each. The
// default is the one CMake builds (REDLOCK_DELAY_PROXY_PATH).
// --ceiling-runs R: the ceiling (redis-benchmark against all five masters at once, see
// ceiling_settings) is measured R times at each setting; the best of all runs is taken.
// --hold-for-peers CMD: runs the shell command CMD right after each of our scenarios a, b, c and
// d, with REDLOCK_BENCH_SCENARIO set to that scenario and REDLOCK_BENCH_MASTERS (and, for d,
// REDLOCK_BENCH_SLOW_MASTERS, through the same delaying proxies as ours) set to host:port lists,
// so other programs measure the same scenario against the very same masters right after ours.

#include "bench_util.hpp"
#include <redlock/client.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/timer.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <poll.h>
#include <set>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

using redlock::bench::cpu_seconds;
using redlock::bench::stats;
using redlock::bench::summarize;

double us_since(clock_type::time_point s) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - s).count();
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string json_stats(const stats& s) {
  return fmt::format("{{\"p50\": {:.1f}, \"p90\": {:.1f}, \"p99\": {:.1f}, \"p99_9\": {:.1f}, \"max\": {:.1f}}}", s.p50,
                     s.p90, s.p99, s.p999, s.max);
}

// One step of the event loop. An io_context that ran out of work between scenarios is stopped
// and would return at once forever: restart it first.
void pump(asio::io_context& ioc) {
  if (ioc.stopped()) ioc.restart();
  ioc.run_one_for(50ms);
}

void pump_for(asio::io_context& ioc, clock_type::duration d) {
  if (ioc.stopped()) ioc.restart();
  ioc.run_for(d);
}

template <class F>
void run(asio::io_context& ioc, F f) {
  bool done = false;
  asio::co_spawn(ioc, f(), [&](std::exception_ptr e) {
    done = true;
    if (e) std::rethrow_exception(e);
  });
  while (!done) pump(ioc);
}

struct setup {
  redlock::test::master_set servers{5};
  // The ports of the delaying proxies in front of masters 0 and 1 while they run (slow_minority).
  std::vector<std::uint16_t> slow_ports;
  redlock::client_config config(bool slow_minority) {
    if (slow_minority && slow_ports.empty()) throw std::logic_error{"the slow masters' proxies are not running"};
    redlock::client_config cfg;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      redlock::connection_config m;
      m.host = "127.0.0.1";
      m.port = (slow_minority && i < slow_ports.size()) ? slow_ports[i] : servers[i].port();
      cfg.masters.push_back(m);
    }
    cfg.guard.restarts = redlock::restart_detection::off;  // masters this run just started: no restart to guard
    // REDLOCK_BENCH_NO_CLOCK_CHECK=1: without TIME behind each vote, to measure what it costs.
    if (const char* v = std::getenv("REDLOCK_BENCH_NO_CLOCK_CHECK"); v && *v == '1') cfg.guard.clock_jumps = false;
    return cfg;
  }
  std::string list(bool slow_minority) {
    std::string s;
    for (const auto& m : config(slow_minority).masters)
      s += fmt::format("{}{}:{}", s.empty() ? "" : ",", m.host, m.port);
    return s;
  }
};

// One delay_proxy process (bench/delay_proxy.cpp) in front of one master. Its stdin is a pipe
// from this process and its stdout another, from which the constructor reads the port it listens
// on. Closing its stdin tells it to stop; the kernel closes it too when this process dies, however
// it dies, so a proxy never outlives the benchmark. The destructor closes it and reaps the
// process, sending SIGTERM and then SIGKILL if it has not exited 2 s after each.
class delay_proxy_process {
 public:
  delay_proxy_process(const std::string& bin, const std::string& host, std::uint16_t port,
                      std::chrono::milliseconds one_way) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) throw std::system_error{errno, std::generic_category(), "pipe2"};
    if (pipe2(out, O_CLOEXEC) != 0) {
      const int e = errno;
      close(in[0]);
      close(in[1]);
      throw std::system_error{e, std::generic_category(), "pipe2"};
    }
    stdin_ = in[1];
    // O_CLOEXEC keeps the pipes out of every other child (workers, redis-benchmark, the peers); in
    // this one, dup2 onto 0 and 1 clears it.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    std::vector<std::string> args{bin, "--upstream", fmt::format("{}:{}", host, port), "--delay-ms",
                                  std::to_string(one_way.count())};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
      pid_ = -1;
      close(out[0]);
      stop();
      throw std::system_error{rc, std::generic_category(), "cannot start " + bin};
    }
    const std::string line = read_line(out[0], 5s);
    close(out[0]);  // it writes nothing more
    char* end = nullptr;
    const long p = std::strtol(line.c_str(), &end, 10);
    if (line.empty() || *end != '\0' || p <= 0 || p > 65535) {
      stop();
      throw std::runtime_error{fmt::format("{} did not report its port (it printed \"{}\")", bin, line)};
    }
    port_ = static_cast<std::uint16_t>(p);
  }
  ~delay_proxy_process() { stop(); }
  delay_proxy_process(const delay_proxy_process&) = delete;
  delay_proxy_process& operator=(const delay_proxy_process&) = delete;

  std::uint16_t port() const noexcept { return port_; }

 private:
  // The first line `fd` gives within `limit`, without its newline; what came before EOF or the
  // limit otherwise.
  static std::string read_line(int fd, std::chrono::milliseconds limit) {
    std::string line;
    const auto until = clock_type::now() + limit;
    while (clock_type::now() < until) {
      pollfd p{fd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now());
      const int ready = poll(&p, 1, static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;
      char c = 0;
      const ssize_t n = read(fd, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || c == '\n') break;
      line += c;
    }
    return line;
  }

  void stop() noexcept {
    if (stdin_ >= 0) close(stdin_);  // end of file: its signal to exit
    stdin_ = -1;
    if (pid_ <= 0) return;
    for (const int sig : {0, SIGTERM, SIGKILL}) {
      if (sig != 0) kill(pid_, sig);
      for (int i = 0; i < 200; ++i) {
        int status = 0;
        const pid_t r = waitpid(pid_, &status, WNOHANG);
        if (r == pid_ || (r < 0 && errno != EINTR)) {
          pid_ = -1;
          return;
        }
        std::this_thread::sleep_for(10ms);
      }
    }
    waitpid(pid_, nullptr, 0);  // after SIGKILL, it cannot take long
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  std::uint16_t port_ = 0;
};

// The slow minority of (d) and of the peers' (d): a delay_proxy process in front of masters 0
// and 1, each holding every chunk `one_way` in each direction; s.config(true) and s.list(true)
// go through them while this object lives.
class slow_minority {
 public:
  static constexpr std::chrono::milliseconds one_way{25};  // +50 ms per round trip
  slow_minority(setup& s, const std::string& bin) : s_(s) {
    // A proxy that fails to start throws; those already started are then stopped with procs_.
    for (std::size_t i = 0; i < 2; ++i) {
      procs_.push_back(std::make_unique<delay_proxy_process>(bin, s.servers[i].host(), s.servers[i].port(), one_way));
    }
    for (const auto& p : procs_) s_.slow_ports.push_back(p->port());
  }
  ~slow_minority() { s_.slow_ports.clear(); }  // then procs_ stop and are reaped
  slow_minority(const slow_minority&) = delete;
  slow_minority& operator=(const slow_minority&) = delete;

 private:
  setup& s_;
  std::vector<std::unique_ptr<delay_proxy_process>> procs_;
};

void wait_up(asio::io_context& ioc, redlock::client& c, std::size_t want) {
  const auto until = clock_type::now() + 5s;
  while (clock_type::now() < until) {
    std::size_t up = 0;
    for (const auto& s : c.masters()) up += s.state == redlock::connection_state::up;
    if (up >= want) return;
    pump(ioc);
  }
}

// (a), (d), (e): sequential lock+unlock.
struct sequential_result {
  stats lock_unlock, lock_only;
  double mean_us = 0, cycles_per_s = 0, cpu_us_per_cycle = 0;
  long failures = 0;
};

sequential_result sequential(asio::io_context& ioc, redlock::client& c, int cycles, const std::string& prefix) {
  sequential_result r;
  std::vector<double> lu, lo;
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  run(ioc, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < cycles + 500; ++i) {
      const auto s = clock_type::now();
      auto [ec, l] = co_await c.async_lock(prefix, 10s, use_tuple);
      const double locked = us_since(s);
      if (ec) {
        ++r.failures;
        continue;
      }
      co_await l.async_unlock(use_tuple);
      if (i >= 500) {
        lu.push_back(us_since(s));
        lo.push_back(locked);
      }
    }
  });
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.cycles_per_s = (cycles + 500) / wall;
  r.cpu_us_per_cycle = (cpu_seconds() - cpu0) / (cycles + 500) * 1e6;
  for (double v : lu) r.mean_us += v;
  if (!lu.empty()) r.mean_us /= static_cast<double>(lu.size());
  r.lock_unlock = summarize(lu);
  r.lock_only = summarize(lo);
  return r;
}

// PING floor through our connection class (library code, so not independent; floor_bench is):
// one PING to one master, and one PING to all five at once until a majority answered.
std::pair<stats, stats> floor_rtt(asio::io_context& ioc, const redlock::client_config& cfg, int cycles,
                                  bool one_master = true) {
  std::vector<std::unique_ptr<redlock::connection>> conns;
  for (const auto& m : cfg.masters) {
    conns.push_back(std::make_unique<redlock::connection>(ioc.get_executor(), m));
    conns.back()->async_run(asio::detached);
  }
  for (auto& c : conns) {
    while (c->status().state != redlock::connection_state::up) pump(ioc);
  }
  std::vector<double> one, quorum;
  run(ioc, [&]() -> asio::awaitable<void> {
    for (int i = 0; one_master && i < cycles + 500; ++i) {
      redlock::resp::request r;
      r.push("PING");
      const auto s = clock_type::now();
      co_await conns[0]->async_exec(std::move(r), 1s, use_tuple);
      if (i >= 500) one.push_back(us_since(s));
    }
    for (int i = 0; i < cycles + 500; ++i) {
      int answered = 0;
      double at_majority = 0;
      const auto s = clock_type::now();
      redlock::timer done{co_await asio::this_coro::executor, clock_type::time_point::max()};
      for (auto& c : conns) {
        redlock::resp::request r;
        r.push("PING");
        c->async_exec(std::move(r), 1s, [&](boost::system::error_code, redlock::resp::response) {
          if (++answered == 3) at_majority = us_since(s);
          if (answered == 5) done.cancel();
        });
      }
      co_await done.async_wait(use_tuple);
      if (i >= 500) quorum.push_back(at_majority);
    }
  });
  for (auto& c : conns) c->close();
  pump(ioc);
  return {summarize(one), summarize(quorum)};
}

// (d)'s check that the slow masters are slow: PING to each of `masters` over a connection of its
// own, `pings` times one after the other; the p50 of each, in ms.
std::vector<double> ping_p50_ms(asio::io_context& ioc, const std::vector<redlock::connection_config>& masters,
                                int pings) {
  std::vector<double> p50s;
  for (const auto& m : masters) {
    redlock::connection conn{ioc.get_executor(), m};
    conn.async_run(asio::detached);
    const auto until = clock_type::now() + 5s;
    while (conn.status().state != redlock::connection_state::up && clock_type::now() < until) pump(ioc);
    std::vector<double> ms;
    run(ioc, [&]() -> asio::awaitable<void> {
      for (int i = 0; i < pings; ++i) {
        redlock::resp::request r;
        r.push("PING");
        const auto s = clock_type::now();
        auto [ec, reply] = co_await conn.async_exec(std::move(r), 1s, use_tuple);
        if (!ec) ms.push_back(us_since(s) / 1000);
      }
    });
    conn.close();
    pump_for(ioc, 10ms);
    p50s.push_back(summarize(std::move(ms)).p50);
  }
  return p50s;
}

// (b): C coroutines, each locking its own resource back to back.
struct throughput_result {
  int concurrency = 0;
  double cycles_per_s = 0, cpu_us_per_cycle = 0;
  stats latency;
  long failures = 0;
};

throughput_result throughput(asio::io_context& ioc, redlock::client& c, int concurrency, double seconds) {
  throughput_result r;
  r.concurrency = concurrency;
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(concurrency));
  long cycles = 0;
  int running = concurrency;
  const auto until =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  for (int k = 0; k < concurrency; ++k) {
    asio::co_spawn(
        ioc,
        [&, k]() -> asio::awaitable<void> {
          const auto name = fmt::format("tp:{}:{}", concurrency, k);
          while (clock_type::now() < until) {
            const auto s = clock_type::now();
            auto [ec, l] = co_await c.async_lock(name, 10s, use_tuple);
            if (ec) {
              ++r.failures;
              continue;
            }
            co_await l.async_unlock(use_tuple);
            lat[static_cast<std::size_t>(k)].push_back(us_since(s));
            ++cycles;
          }
          --running;
        },
        asio::detached);
  }
  while (running > 0) pump(ioc);
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.cycles_per_s = static_cast<double>(cycles) / wall;
  r.cpu_us_per_cycle = cycles ? (cpu_seconds() - cpu0) / static_cast<double>(cycles) * 1e6 : 0;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  r.latency = summarize(std::move(all));
  return r;
}

// (c): 16 contenders on one resource, each releasing at once, with the client's retries (and fair
// hand-over, as configured); hand-overs per second, fairness, and the release -> next-grant
// latency: from a contender calling async_unlock to the next successful async_lock of any
// contender (itself included). Counted over the run's window only: grants that complete after
// the deadline (the contenders still waiting finish their acquisition) are left out of every
// figure but `handovers_after_deadline`.
// Where the time of a hand-over goes: CPU of this process and of the masters (utime + stime from
// /proc, 10 ms ticks) and the commands the masters ran (INFO commandstats, scripts' inner calls
// included), each per grant over the whole run, its tail after the deadline included.
struct master_load {
  double cpu_s = 0;
  std::map<std::string, double> calls;  // command -> calls, summed over the masters
  std::map<std::string, double> usec;   // command -> time spent in it (a script's includes its calls)
};

master_load read_masters(setup& s, bool reset) {
  master_load m;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (std::size_t i = 0; i < s.servers.size(); ++i) {
    std::ifstream stat{fmt::format("/proc/{}/stat", s.servers[i].pid())};
    std::string text{std::istreambuf_iterator<char>{stat}, std::istreambuf_iterator<char>{}};
    if (const auto paren = text.rfind(')'); paren != std::string::npos) {
      std::istringstream fields{text.substr(paren + 2)};
      std::string f;
      double utime = 0, stime = 0;
      for (int k = 3; k <= 15 && fields >> f; ++k) {  // field 14: utime, 15: stime (man 5 proc)
        if (k == 14) utime = std::stod(f);
        if (k == 15) stime = std::stod(f);
      }
      m.cpu_s += (utime + stime) / tick;
    }
    if (reset) {
      s.servers[i].command({"CONFIG", "RESETSTAT"});
      continue;
    }
    // "cmdstat_evalsha:calls=12,usec=..." lines.
    std::istringstream info{s.servers[i].command({"INFO", "commandstats"})};
    std::string line;
    while (std::getline(info, line)) {
      if (line.rfind("cmdstat_", 0) != 0) continue;
      const auto colon = line.find(':'), calls = line.find("calls="), usec = line.find(",usec=");
      if (colon == std::string::npos || calls == std::string::npos || usec == std::string::npos) continue;
      m.calls[line.substr(8, colon - 8)] += std::atof(line.c_str() + calls + 6);
      m.usec[line.substr(8, colon - 8)] += std::atof(line.c_str() + usec + 6);
    }
  }
  return m;
}

struct contention_result {
  double handovers_per_s = 0, fairness = 0, wall_s = 0;
  std::vector<long> shares;
  long failures = 0, after_deadline = 0, self_regrants = 0;
  std::vector<double> handover_us;  // release -> next grant
  std::vector<double> unlock_us;    // async_unlock call -> its completion
  std::uint64_t wakeups = 0, queued = 0, handed = 0;
  double client_cpu_us = 0, masters_cpu_us = 0;  // per grant
  std::map<std::string, double> master_calls;    // per grant, all masters together
  std::map<std::string, double> master_usec;     // per grant, all masters together
};

contention_result contention(asio::io_context& ioc, redlock::client& c, setup& s, double seconds,
                             const std::string& name, clock_type::duration hold) {
  constexpr int contenders = 16;
  contention_result r;
  r.shares.assign(contenders, 0);
  int running = contenders;
  std::optional<clock_type::time_point> released;  // the last async_unlock call, until a grant follows
  int released_by = -1;
  const auto stats0 = c.stats();
  const auto masters0 = read_masters(s, true);
  const double cpu0 = cpu_seconds();
  const auto until =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  const auto t0 = clock_type::now();
  for (int k = 0; k < contenders; ++k) {
    asio::co_spawn(
        ioc,
        [&, k]() -> asio::awaitable<void> {
          while (clock_type::now() < until) {
            auto [ec, l] = co_await c.async_lock(name, 10s, use_tuple);
            const auto granted = clock_type::now();
            if (ec) {
              ++r.failures;
              continue;
            }
            if (granted < until) {
              ++r.shares[static_cast<std::size_t>(k)];
              if (released) {
                r.handover_us.push_back(std::chrono::duration<double, std::micro>(granted - *released).count());
                r.self_regrants += released_by == k;
              }
            } else {
              ++r.after_deadline;
            }
            if (hold > clock_type::duration::zero()) {
              redlock::timer t{co_await asio::this_coro::executor, hold};
              co_await t.async_wait(use_tuple);
            }
            released = clock_type::now();
            released_by = k;
            const auto unlock_start = *released;
            co_await l.async_unlock(use_tuple);
            if (unlock_start < until) r.unlock_us.push_back(us_since(unlock_start));
          }
          --running;
        },
        asio::detached);
  }
  while (running > 0) pump(ioc);
  r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double cpu1 = cpu_seconds();
  const auto masters1 = read_masters(s, false);
  long total = 0, least = r.shares.front();
  for (long v : r.shares) {
    total += v;
    least = std::min(least, v);
  }
  r.handovers_per_s = static_cast<double>(total) / seconds;
  r.fairness = total ? static_cast<double>(least) / (static_cast<double>(total) / contenders) : 0;
  if (const double grants = static_cast<double>(total + r.after_deadline); grants > 0) {
    r.client_cpu_us = (cpu1 - cpu0) / grants * 1e6;
    r.masters_cpu_us = (masters1.cpu_s - masters0.cpu_s) / grants * 1e6;
    for (const auto& [cmd, n] : masters1.calls) {
      if (cmd != "info" && cmd != "config|resetstat" && cmd != "config") r.master_calls[cmd] = n / grants;
    }
    for (const auto& [cmd, us] : masters1.usec) {
      if (cmd == "eval" || cmd == "evalsha" || cmd == "set" || cmd == "zrem" || cmd == "publish")
        r.master_usec[cmd] = us / grants;
    }
  }
  const auto stats1 = c.stats();
  r.wakeups = stats1.lock_wakeups - stats0.lock_wakeups;
  r.handed = stats1.lock_handovers - stats0.lock_handovers;
  r.queued = stats1.locks_queued - stats0.locks_queued;
  return r;
}

// (g): 4 processes, each its own default-configured client (test/safety/worker.cpp with
// --defaults), contending for one resource and holding it 20-300 ms; per-process shares, the
// longest single async_lock wait each reported, and the longest time each went without the lock
// (from its start to its first critical section, between two of its sections, from its last one
// to its end), read from the section records. Also checks that no two sections overlapped.
struct process_result {
  long sections = 0, longest_wait_ms = 0, queued = 0, wakeups = 0, not_acquired = 0, attempted = 0;
  double longest_gap_ms = 0;
  int exit_code = 0;
};

struct processes_result {
  std::vector<process_result> procs;
  double fairness = 0, seconds = 0;
  long overlaps = 0;
};

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

processes_result processes(const std::string& worker, const std::string& masters, const std::string& dir,
                           const std::string& tag, double seconds, bool fair) {
  constexpr int count = 4;
  processes_result r;
  r.seconds = seconds;
  std::filesystem::create_directories(dir);
  const auto resource = fmt::format("g:{}:{}", tag, ::getpid());
  std::vector<pid_t> pids;
  std::vector<std::string> files;
  const auto start = clock_type::now();
  for (int i = 0; i < count; ++i) {
    files.push_back(fmt::format("{}/{}_{}.txt", dir, tag, i));
    std::vector<std::string> args{
        worker,     "--masters", masters, "--resources", resource, "--seconds",           fmt::format("{}", seconds),
        "--ttl-ms", "10000",     "--out", files.back(),  "--seed", std::to_string(i + 1), "--hold-ms",
        "20-300",   "--defaults"};
    if (!fair) args.push_back("--no-fair");
    pids.push_back(spawn(args));
  }
  r.procs.resize(count);
  for (int i = 0; i < count; ++i) {
    int status = 0;
    if (pids[static_cast<std::size_t>(i)] <= 0 || waitpid(pids[static_cast<std::size_t>(i)], &status, 0) < 0) {
      r.procs[static_cast<std::size_t>(i)].exit_code = -1;
    } else {
      r.procs[static_cast<std::size_t>(i)].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  const auto start_ns = std::chrono::duration<double, std::nano>(start.time_since_epoch()).count();
  const double end_ns = start_ns + seconds * 1e9;
  std::vector<std::pair<double, double>> all;  // (enter, exit) of every section, in ns
  for (int i = 0; i < count; ++i) {
    auto& p = r.procs[static_cast<std::size_t>(i)];
    std::ifstream in{files[static_cast<std::size_t>(i)]};
    std::string line;
    std::vector<std::pair<double, double>> own;
    while (std::getline(in, line)) {
      std::istringstream ls{line};
      if (line.rfind('#', 0) == 0) {
        std::string kv;
        ls >> kv;  // '#'
        while (ls >> kv) {
          const auto eq = kv.find('=');
          if (eq == std::string::npos) continue;
          const auto k = kv.substr(0, eq);
          const long v = std::stol(kv.substr(eq + 1));
          if (k == "sections") p.sections = v;
          if (k == "longest_wait_ms") p.longest_wait_ms = v;
          if (k == "queued") p.queued = v;
          if (k == "wakeups") p.wakeups = v;
          if (k == "not_acquired") p.not_acquired = v;
          if (k == "attempted") p.attempted = v;
        }
        continue;
      }
      std::string res, token;
      double enter = 0, exit = 0;
      if (ls >> res >> token >> enter >> exit) own.emplace_back(enter, exit);
    }
    std::sort(own.begin(), own.end());
    double last = start_ns;
    for (const auto& [enter, exit] : own) {
      p.longest_gap_ms = std::max(p.longest_gap_ms, (enter - last) / 1e6);
      last = exit;
    }
    p.longest_gap_ms = std::max(p.longest_gap_ms, (end_ns - last) / 1e6);
    all.insert(all.end(), own.begin(), own.end());
  }
  std::sort(all.begin(), all.end());
  double latest_exit = 0;
  for (const auto& [enter, exit] : all) {
    r.overlaps += enter < latest_exit;
    latest_exit = std::max(latest_exit, exit);
  }
  long total = 0, least = r.procs.front().sections;
  for (const auto& p : r.procs) {
    total += p.sections;
    least = std::min(least, p.sections);
  }
  r.fairness = total ? static_cast<double>(least) / (static_cast<double>(total) / count) : 0;
  return r;
}

// The independent floor's lock+unlock p50 and mean (µs) from its JSON; 0 when missing.
std::pair<double, double> floor_bench_p50_mean(const std::string& path) {
  std::ifstream in{path};
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  const auto at = text.find("\"lock_unlock_us\"");
  if (at == std::string::npos) return {0, 0};
  auto field = [&](const char* name) {
    const auto f = text.find(name, at);
    return f == std::string::npos ? 0.0 : std::atof(text.c_str() + f + std::strlen(name));
  };
  return {field("\"p50\": "), field("\"mean\": ")};
}

// Ceiling: what the five masters can serve. One redis-benchmark process per master, all five at
// once, each with `clients` connections (-c) of `pipeline` requests in flight (-P); the ops/s of
// the five summed. Measured for SET NX PX and for the release's EVALSHA, at each setting below,
// --ceiling-runs times (runs interleaved over the settings, the load of the machine drifts); the
// best SET and the best release rate of all runs are taken. One lock cycle costs every master one
// SET and one release, so the masters could serve 1 / (5/SET ops + 5/release ops) lock cycles/s.
// Deeper pipelines than the client's make the masters' cost per command the smallest it gets
// (fewer reads, writes and wake-ups per command): the ceiling is then above what any client of
// the same masters reaches.
struct ceiling_setting {
  int clients, pipeline;
};
constexpr ceiling_setting ceiling_settings[] = {{4, 64}, {8, 128}, {16, 32}};
constexpr int ceiling_requests = 300000;  // per master and run (-n)

double redis_benchmark_all(setup& s, const std::vector<std::string>& command, const ceiling_setting& setting) {
  std::vector<FILE*> pipes;
  for (std::size_t i = 0; i < s.servers.size(); ++i) {
    std::string cmd = fmt::format("redis-benchmark -h 127.0.0.1 -p {} -n {} -P {} -c {} -r 100000 --csv",
                                  s.servers[i].port(), ceiling_requests, setting.pipeline, setting.clients);
    for (const auto& a : command) cmd += " " + a;
    cmd += " 2>/dev/null";
    pipes.push_back(popen(cmd.c_str(), "r"));
  }
  double total = 0;
  for (FILE* p : pipes) {
    if (!p) continue;
    std::array<char, 512> line{};
    while (fgets(line.data(), static_cast<int>(line.size()), p)) {
      std::string l{line.data()};
      if (l.rfind("\"test\"", 0) == 0 || l.size() < 5) continue;
      const auto a = l.find(",\"") + 2;
      total += std::stod(l.substr(a, l.find('"', a) - a));
    }
    pclose(p);
  }
  return total;
}

int run_bench(int argc, char** argv) {
  std::string json_path = "bench/results/local/redlock_bench.json", peers_cmd, floor_bin;
#ifdef REDLOCK_WORKER_PATH
  std::string worker_bin = REDLOCK_WORKER_PATH;
#else
  std::string worker_bin;
#endif
#ifdef REDLOCK_DELAY_PROXY_PATH
  std::string proxy_bin = REDLOCK_DELAY_PROXY_PATH;
#else
  std::string proxy_bin;
#endif
  int cycles = 5000, contention_runs = 10, ceiling_runs = 3;
  double seconds = 3, g_seconds = 40, g_no_fair_seconds = 20;
  clock_type::duration c_hold{};
  std::set<std::string> only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--json") json_path = v;
    if (a == "--cycles") cycles = std::stoi(v);
    if (a == "--seconds") seconds = std::stod(v);
    if (a == "--contention-runs") contention_runs = std::stoi(v);
    if (a == "--hold-for-peers") peers_cmd = v;
    if (a == "--floor-bench") floor_bin = v;
    if (a == "--worker") worker_bin = v;
    if (a == "--delay-proxy") proxy_bin = v;
    if (a == "--ceiling-runs") ceiling_runs = std::max(1, std::stoi(v));
    if (a == "--c-hold-ms")
      c_hold =
          std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(std::stod(v)));
    if (a == "--g-seconds") g_seconds = std::stod(v);
    if (a == "--g-no-fair-seconds") g_no_fair_seconds = std::stod(v);
    if (a == "--only") {
      std::stringstream ss{v};
      std::string item;
      while (std::getline(ss, item, ',')) only.insert(item);
    }
  }
  // floor_bench.json and the g/ records go next to the JSON, so its directory must exist first.
  if (const auto dir = std::filesystem::path{json_path}.parent_path(); !dir.empty()) {
    std::filesystem::create_directories(dir);
  }
  auto want = [&](const char* s) { return only.empty() || only.count(s); };
  if (want("g") && worker_bin.empty()) {
    fmt::print(stderr, "(g) needs the worker: --worker PATH (test/safety/worker.cpp)\n");
    return 2;
  }
  if (want("d") && proxy_bin.empty()) {
    fmt::print(stderr, "(d) and the peers' (d) need the delaying proxy: --delay-proxy PATH (bench/delay_proxy.cpp)\n");
    return 2;
  }

  setup s;
  asio::io_context ioc{1};
  std::vector<std::string> json;
  fmt::print("redlock-asio benchmark: 5 local masters, one client thread\n\n");
  setenv("REDLOCK_BENCH_MASTERS", s.list(false).c_str(), 1);
  // The peers measure each scenario right after ours, so that a ratio of ours to theirs is not
  // taken across minutes of a shared machine's drift.
  auto run_peers = [&](const char* scenario) {
    if (peers_cmd.empty()) return;
    setenv("REDLOCK_BENCH_SCENARIO", scenario, 1);
    if (!s.slow_ports.empty()) setenv("REDLOCK_BENCH_SLOW_MASTERS", s.list(true).c_str(), 1);
    fmt::print("\nthe peers' ({}) against the same masters: {}\n", scenario, peers_cmd);
    std::fflush(stdout);
    const int rc = std::system(peers_cmd.c_str());
    if (rc != 0) fmt::print("peers command exited with {}\n", rc);
    unsetenv("REDLOCK_BENCH_SCENARIO");
    unsetenv("REDLOCK_BENCH_SLOW_MASTERS");
    fmt::print("\n");
  };

  if (want("floor")) {
    auto [one, quorum] = floor_rtt(ioc, s.config(false), cycles);
    fmt::print(
        "floor     PING via our connection class: one master p50 {:.1f} us p99 {:.1f} us; PING all 5 to a majority p50 "
        "{:.1f} us p99 {:.1f} us\n",
        one.p50, one.p99, quorum.p50, quorum.p99);
    json.push_back(
        fmt::format("\"floor\": {{\"ping_one_us\": {}, \"ping_quorum_us\": {}}}", json_stats(one), json_stats(quorum)));
  }
  if (want("ceiling")) {
    for (std::size_t i = 0; i < 5; ++i) s.servers[i].command({"SCRIPT", "LOAD", redlock::detail::release_script.body});
    const std::vector<std::string> set_cmd{"SET", "key:__rand_int__", "token", "NX", "PX", "10000"};
    const std::vector<std::string> rel_cmd{"EVALSHA",
                                           std::string{redlock::detail::release_script.sha1},
                                           "3",
                                           "key:__rand_int__",
                                           "key:__rand_int__:redlock-queue",
                                           "key:__rand_int__:redlock-expiry",
                                           "token"};
    constexpr std::size_t n_settings = std::size(ceiling_settings);
    std::array<double, n_settings> best_set{}, best_rel{};
    std::array<std::string, n_settings> runs_json;
    for (int run_no = 0; run_no < ceiling_runs; ++run_no) {
      for (std::size_t k = 0; k < n_settings; ++k) {
        const auto& st = ceiling_settings[k];
        const double set_ops = redis_benchmark_all(s, set_cmd, st);
        const double rel_ops = redis_benchmark_all(s, rel_cmd, st);
        best_set[k] = std::max(best_set[k], set_ops);
        best_rel[k] = std::max(best_rel[k], rel_ops);
        fmt::print("ceiling   run {} -c {:<2} -P {:<3}: SET NX PX {:.0f}/s, EVALSHA release {:.0f}/s\n", run_no,
                   st.clients, st.pipeline, set_ops, rel_ops);
        runs_json[k] += fmt::format("{}{{\"set_ops\": {:.0f}, \"release_ops\": {:.0f}}}",
                                    runs_json[k].empty() ? "" : ", ", set_ops, rel_ops);
      }
    }
    const double set_ops = *std::max_element(best_set.begin(), best_set.end());
    const double rel_ops = *std::max_element(best_rel.begin(), best_rel.end());
    // One lock cycle costs each master one SET and one release.
    const double ceiling = 1.0 / (5.0 / set_ops + 5.0 / rel_ops);
    fmt::print(
        "ceiling   redis-benchmark on all 5 at once, best of {} runs x {} settings: SET NX PX {:.0f}/s, EVALSHA "
        "release {:.0f}/s -> {:.0f} lock cycles/s\n",
        ceiling_runs, n_settings, set_ops, rel_ops, ceiling);
    std::string settings;
    for (std::size_t k = 0; k < n_settings; ++k) {
      settings += fmt::format("{}{{\"c\": {}, \"P\": {}, \"runs\": [{}]}}", settings.empty() ? "" : ", ",
                              ceiling_settings[k].clients, ceiling_settings[k].pipeline, runs_json[k]);
    }
    json.push_back(fmt::format(
        "\"ceiling\": {{\"set_ops\": {:.0f}, \"release_ops\": {:.0f}, \"lock_cycles_per_s\": {:.0f}, "
        "\"method\": {{\"tool\": \"redis-benchmark\", \"processes\": {}, \"requests_per_process\": {}, "
        "\"keyspace\": 100000, \"runs\": {}, \"taken\": \"best SET and best release ops/s (summed over the masters) "
        "of all runs and settings; lock cycles/s = 1 / (5/set_ops + 5/release_ops)\", \"settings\": [{}]}}}}",
        set_ops, rel_ops, ceiling, s.servers.size(), ceiling_requests, ceiling_runs, settings));
  }
  double floor_p50 = 0, floor_mean = 0;
  if (!floor_bin.empty() && want("a")) {
    // Before our client connects, so that nothing of ours runs meanwhile.
    const auto slash = json_path.rfind('/');
    const std::string floor_json =
        (slash == std::string::npos ? std::string{} : json_path.substr(0, slash + 1)) + "floor_bench.json";
    const std::string cmd =
        fmt::format("{} --masters {} --cycles 20000 --warmup 1000 --json {}", floor_bin, s.list(false), floor_json);
    std::fflush(stdout);
    if (const int rc = std::system(cmd.c_str()); rc != 0) fmt::print("floor_bench exited with {}\n", rc);
    std::tie(floor_p50, floor_mean) = floor_bench_p50_mean(floor_json);
  }
  if (want("a")) {
    redlock::client c{ioc.get_executor(), s.config(false)};
    wait_up(ioc, c, 5);
    auto r = sequential(ioc, c, cycles, "bench:a");
    fmt::print(
        "(a)       lock+unlock p50 {:.1f} p90 {:.1f} p99 {:.1f} p99.9 {:.1f} max {:.1f} us; {:.0f} cycles/s; CPU "
        "{:.1f} us/cycle\n",
        r.lock_unlock.p50, r.lock_unlock.p90, r.lock_unlock.p99, r.lock_unlock.p999, r.lock_unlock.max, r.cycles_per_s,
        r.cpu_us_per_cycle);
    json.push_back(fmt::format(
        "\"a\": {{\"lock_unlock_us\": {}, \"lock_us\": {}, \"mean_us\": {:.1f}, \"cycles_per_s\": "
        "{:.0f}, \"cpu_us_per_cycle\": {:.2f}, \"failures\": {}}}",
        json_stats(r.lock_unlock), json_stats(r.lock_only), r.mean_us, r.cycles_per_s, r.cpu_us_per_cycle, r.failures));
    if (floor_p50 > 0) {
      fmt::print("(a)/floor ours ÷ independent floor: p50 {:.1f} / {:.1f} = {:.2f}; mean {:.1f} / {:.1f} = {:.2f}\n",
                 r.lock_unlock.p50, floor_p50, r.lock_unlock.p50 / floor_p50, r.mean_us, floor_mean,
                 r.mean_us / floor_mean);
      json.push_back(
          fmt::format("\"a_vs_floor_bench\": {{\"floor_p50_us\": {:.1f}, \"floor_mean_us\": {:.1f}, \"ratio_p50\": "
                      "{:.3f}, \"ratio_mean\": {:.3f}}}",
                      floor_p50, floor_mean, r.lock_unlock.p50 / floor_p50, r.mean_us / floor_mean));
    }
    c.close();
    pump_for(ioc, 50ms);
    run_peers("a");
  }
  if (want("b")) {
    redlock::client c{ioc.get_executor(), s.config(false)};
    wait_up(ioc, c, 5);
    std::vector<std::string> rows;
    for (int conc : {1, 16, 64, 256, 1024}) {
      auto r = throughput(ioc, c, conc, seconds);
      fmt::print("(b) C={:<5} {:>8.0f} cycles/s  p50 {:>8.1f} us  p99 {:>8.1f} us  CPU {:.1f} us/cycle  failures {}\n",
                 conc, r.cycles_per_s, r.latency.p50, r.latency.p99, r.cpu_us_per_cycle, r.failures);
      rows.push_back(
          fmt::format("{{\"concurrency\": {}, \"cycles_per_s\": {:.0f}, \"latency_us\": {}, \"cpu_us_per_cycle\": "
                      "{:.2f}, \"failures\": {}}}",
                      conc, r.cycles_per_s, json_stats(r.latency), r.cpu_us_per_cycle, r.failures));
    }
    std::string arr;
    for (const auto& row : rows) arr += (arr.empty() ? "" : ", ") + row;
    json.push_back("\"b\": [" + arr + "]");
    c.close();
    pump_for(ioc, 50ms);
    run_peers("b");
  }
  // (c) in four configurations, each with its own client: the library's defaults (fair
  // hand-over on, retry 50-150 ms), the same with wake-ups instead of hand-overs, fairness off
  // with the default retry, and the 0-2 ms polling this benchmark used before fair hand-over
  // (fairness off, as there was none then).
  struct c_config {
    const char* key;
    bool fair;
    bool hand_over;
    std::chrono::milliseconds base, jitter, max_wait;
  };
  const redlock::core::retry_policy defaults{};
  const c_config c_configs[] = {
      {"c", true, true, defaults.base_delay, defaults.jitter, defaults.max_wait},
      {"c_wake_only", true, false, defaults.base_delay, defaults.jitter, defaults.max_wait},
      {"c_no_fair", false, false, defaults.base_delay, defaults.jitter, defaults.max_wait},
      {"c_poll_2ms", false, false, 0ms, 2ms, 10s},
  };
  // What each configuration gathered over its runs.
  struct c_runs {
    std::vector<std::string> rows;
    std::vector<double> pooled, rates, fairness, rtts;
  };
  std::map<std::string, c_runs> c_done;
  bool any_c = false;
  // Run by run, each configuration in turn, with a client of its own for the run.
  for (int run_no = 0; run_no < contention_runs; ++run_no) {
    for (const auto& cc : c_configs) {
      if (!want("c") && !want(cc.key)) continue;
      any_c = true;
      auto cfg = s.config(false);
      cfg.fairness.enabled = cc.fair;
      cfg.fairness.hand_over = cc.hand_over;
      cfg.retry.base_delay = cc.base;
      cfg.retry.jitter = cc.jitter;
      cfg.retry.max_wait = cc.max_wait;
      // The quorum round trip again right before this run (the machine's load drifts): the unit
      // of its hand-over latency.
      const double rtt = floor_rtt(ioc, cfg, 2000, false).second.p50;
      redlock::client c{ioc.get_executor(), cfg};
      wait_up(ioc, c, 5);
      auto& done = c_done[cc.key];
      auto r = contention(ioc, c, s, std::min(seconds, 2.0), fmt::format("contended:{}:{}", cc.key, run_no), c_hold);
      const auto h = summarize(r.handover_us);
      const auto u = summarize(r.unlock_us);
      std::string calls, calls_json, usec, usec_json;
      for (const auto& [cmd, n] : r.master_calls) {
        if (n < 0.05) continue;
        calls += fmt::format(" {} {:.1f}", cmd, n);
        calls_json += fmt::format("{}\"{}\": {:.2f}", calls_json.empty() ? "" : ", ", cmd, n);
      }
      for (const auto& [cmd, us] : r.master_usec) {
        if (us < 0.05) continue;
        usec += fmt::format(" {} {:.1f}", cmd, us);
        usec_json += fmt::format("{}\"{}\": {:.2f}", usec_json.empty() ? "" : ", ", cmd, us);
      }
      fmt::print(
          "({}) run {:<2} {:>6.0f} hand-overs/s  fairness {:.2f}  release->grant p50 {:.0f} p99 {:.0f} us  "
          "(unlock p50 {:.0f} us, quorum RTT {:.0f} us)  wake-ups {} hand-overs {} queued {} self {} failures {}\n"
          "     per grant: CPU client {:.0f} us, masters {:.0f} us; master calls:{}; in-command us:{}\n",
          cc.key, run_no, r.handovers_per_s, r.fairness, h.p50, h.p99, u.p50, rtt, r.wakeups, r.handed, r.queued,
          r.self_regrants, r.failures, r.client_cpu_us, r.masters_cpu_us, calls, usec);
      std::string shares;
      for (long v : r.shares) shares += fmt::format("{}{}", shares.empty() ? "" : ", ", v);
      done.rows.push_back(fmt::format(
          "{{\"handovers_per_s\": {:.0f}, \"fairness\": {:.3f}, \"failures\": {}, \"handover_us\": {}, "
          "\"handover_mean_us\": {:.1f}, \"unlock_us\": {}, \"handovers\": {}, \"self_regrants\": {}, "
          "\"handovers_after_deadline\": {}, \"wall_s\": {:.3f}, \"lock_wakeups\": {}, \"lock_handovers\": {}, "
          "\"locks_queued\": {}, "
          "\"client_cpu_us_per_grant\": {:.1f}, \"masters_cpu_us_per_grant\": {:.1f}, \"quorum_rtt_p50_us\": {:.1f}, "
          "\"master_calls_per_grant\": {{{}}}, \"master_usec_per_grant\": {{{}}}, \"shares\": [{}]}}",
          r.handovers_per_s, r.fairness, r.failures, json_stats(h), mean_of(r.handover_us), json_stats(u),
          r.handover_us.size(), r.self_regrants, r.after_deadline, r.wall_s, r.wakeups, r.handed, r.queued,
          r.client_cpu_us, r.masters_cpu_us, rtt, calls_json, usec_json, shares));
      done.pooled.insert(done.pooled.end(), r.handover_us.begin(), r.handover_us.end());
      done.rates.push_back(r.handovers_per_s);
      done.fairness.push_back(r.fairness);
      done.rtts.push_back(rtt);
      c.close();
      pump_for(ioc, 50ms);
    }
  }
  for (const auto& cc : c_configs) {
    const auto it = c_done.find(cc.key);
    if (it == c_done.end()) continue;
    const auto& done = it->second;
    const auto all = summarize(done.pooled);
    const double rtt = median_of(done.rtts);
    fmt::print(
        "({}) median {:.0f} hand-overs/s, fairness {:.2f}; release->grant over all runs p50 {:.0f} p99 {:.0f} us{}\n",
        cc.key, median_of(done.rates), median_of(done.fairness), all.p50, all.p99,
        rtt > 0
            ? fmt::format(" = {:.2f} / {:.2f} quorum round trips (median {:.0f} us)", all.p50 / rtt, all.p99 / rtt, rtt)
            : std::string{});
    std::string arr;
    for (const auto& row : done.rows) arr += (arr.empty() ? "" : ", ") + row;
    json.push_back(fmt::format(
        "\"{}\": {{\"config\": {{\"fairness\": {}, \"hand_over\": {}, \"retry\": {{\"base_ms\": {}, \"jitter_ms\": {}, "
        "\"max_wait_ms\": {}}}}}, "
        "\"contenders\": 16, \"hold_ms\": {:.3f}, \"seconds\": {:.1f}, \"handover_us\": {}, "
        "\"quorum_rtt_p50_us\": {:.1f}, \"handover_p50_in_rtt\": {:.2f}, \"handover_p99_in_rtt\": {:.2f}, "
        "\"interleaved\": true, \"runs\": [{}]}}",
        cc.key, cc.fair, cc.hand_over, cc.base.count(), cc.jitter.count(), cc.max_wait.count(),
        std::chrono::duration<double, std::milli>(c_hold).count(), std::min(seconds, 2.0), json_stats(all), rtt,
        rtt > 0 ? all.p50 / rtt : 0, rtt > 0 ? all.p99 / rtt : 0, arr));
  }
  if (any_c) run_peers("c");
  // (g) four processes with default-configured clients, fair hand-over on, then off.
  if (want("g")) {
    const auto slash = json_path.rfind('/');
    const std::string dir = (slash == std::string::npos ? std::string{"."} : json_path.substr(0, slash)) + "/g";
    std::vector<std::string> parts;
    for (const auto& [tag, fair, secs] :
         {std::tuple<const char*, bool, double>{"g", true, g_seconds},
          std::tuple<const char*, bool, double>{"g_no_fair", false, g_no_fair_seconds}}) {
      if (secs <= 0) continue;
      std::fflush(stdout);
      auto r = processes(worker_bin, s.list(false), dir, tag, secs, fair);
      std::string shares, procs;
      long longest_wait = 0;
      double longest_gap = 0;
      for (const auto& p : r.procs) {
        shares += fmt::format("{}{}", shares.empty() ? "" : "/", p.sections);
        longest_wait = std::max(longest_wait, p.longest_wait_ms);
        longest_gap = std::max(longest_gap, p.longest_gap_ms);
        procs += fmt::format(
            "{}{{\"sections\": {}, \"longest_wait_ms\": {}, \"longest_gap_ms\": {:.0f}, \"queued\": {}, "
            "\"wakeups\": {}, \"not_acquired\": {}, \"attempted\": {}, \"exit_code\": {}}}",
            procs.empty() ? "" : ", ", p.sections, p.longest_wait_ms, p.longest_gap_ms, p.queued, p.wakeups,
            p.not_acquired, p.attempted, p.exit_code);
      }
      fmt::print(
          "({}) 4 processes, {:.0f} s, fairness {}: sections {}  min/mean {:.2f}  longest wait {} ms  longest gap "
          "{:.0f} ms  overlaps {}\n",
          tag, secs, fair ? "on" : "off", shares, r.fairness, longest_wait, longest_gap, r.overlaps);
      json.push_back(fmt::format(
          "\"{}\": {{\"processes\": 4, \"fairness_enabled\": {}, \"seconds\": {:.1f}, \"hold_ms\": [20, 300], "
          "\"ttl_ms\": 10000, \"fairness\": {:.3f}, \"longest_wait_ms\": {}, \"longest_gap_ms\": {:.0f}, "
          "\"overlaps\": {}, \"per_process\": [{}]}}",
          tag, fair, secs, r.fairness, longest_wait, longest_gap, r.overlaps, procs));
    }
  }
  if (want("d")) {
    // 2 of 5 behind delay_proxy processes: +50 ms round trip. Their work is not in this process's
    // CPU time and does not run on its thread.
    slow_minority slow{s, proxy_bin};
    const auto cfg = s.config(true);
    const auto slow_ping = ping_p50_ms(ioc, {cfg.masters[0], cfg.masters[1]}, 10);
    redlock::client c{ioc.get_executor(), cfg};
    wait_up(ioc, c, 5);
    auto r = sequential(ioc, c, std::min(cycles, 2000), "bench:d");
    fmt::print(
        "(d)       2 of 5 +50 ms (proxies out of process, PING through them p50 {:.1f} / {:.1f} ms): lock+unlock p50 "
        "{:.1f} p99 {:.1f} us; CPU {:.1f} us/cycle\n",
        slow_ping[0], slow_ping[1], r.lock_unlock.p50, r.lock_unlock.p99, r.cpu_us_per_cycle);
    json.push_back(fmt::format(
        "\"d\": {{\"lock_unlock_us\": {}, \"failures\": {}, \"proxy_out_of_process\": true, "
        "\"proxy_one_way_delay_ms\": {}, \"slow_master_ping_p50_ms\": [{:.1f}, {:.1f}], \"cpu_us_per_cycle\": {:.1f}}}",
        json_stats(r.lock_unlock), r.failures, slow_minority::one_way.count(), slow_ping[0], slow_ping[1],
        r.cpu_us_per_cycle));
    c.close();
    pump_for(ioc, 50ms);
    run_peers("d");  // through the same proxies
  }
  if (want("e")) {
    redlock::client c{ioc.get_executor(), s.config(false)};
    wait_up(ioc, c, 5);
    s.servers[4].kill();
    wait_up(ioc, c, 4);
    pump_for(ioc, 100ms);
    auto r = sequential(ioc, c, cycles, "bench:e");
    fmt::print("(e)       1 of 5 down: lock+unlock p50 {:.1f} p99 {:.1f} us\n", r.lock_unlock.p50, r.lock_unlock.p99);
    json.push_back(
        fmt::format("\"e\": {{\"lock_unlock_us\": {}, \"failures\": {}}}", json_stats(r.lock_unlock), r.failures));
    c.close();
    pump_for(ioc, 50ms);
    s.servers[4].restart();
  }

  std::ofstream out{json_path};
  out << "{\n";
  for (std::size_t i = 0; i < json.size(); ++i) out << "  " << json[i] << (i + 1 < json.size() ? ",\n" : "\n");
  out << "}\n";
  fmt::print("\nwrote {}\n", json_path);
  return 0;
}

}  // namespace

// Caught here so that an error unwinds the stack: the masters and the delaying proxies are then
// stopped and reaped by their destructors.
int main(int argc, char** argv) {
  try {
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "redlock_bench: {}\n", e.what());
    return 1;
  }
}
