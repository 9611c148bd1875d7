// SPDX-License-Identifier: BSL-1.0
// Liveness under real packet loss: the test process moves itself into a private network namespace
// (before any thread exists), so the redis-server masters and the worker processes it starts live
// there, and drops their packets with iptables rules that touch nothing outside it.
//
// A cut drops every packet to and from a master's port in the INPUT chain. On loopback each packet
// passes INPUT once, on the receiving side, so the sender believes it sent and retransmits, as
// with a lost packet on a real network (a DROP in OUTPUT would instead fail the send with EPERM).
// Each change of the rules (heal one pair, cut the next) is one iptables-restore transaction.
//
// rotating_minority_partitions: two of five masters cut at a time, the pair rotating without a
// healthy pause; after each heal exactly three masters are reachable, two of them just healed, so
// the holder-less time after a heal measures how fast the healed masters become usable again.
// random_loss_20_percent: 20 % of the packets of every master dropped, both ways, for 30 s.
//
// Needs root (CAP_SYS_ADMIN for the namespace, CAP_NET_ADMIN in it) and iptables; without them
// every scenario is skipped, saying why. REDLOCK_PARTITION_SS=1 prints `ss -tin` of the healed
// masters' connections at each heal; REDLOCK_PARTITION_KEEP=1 keeps the workers' records.

#include "../safety/checker.hpp"
#include "analysis.hpp"
#include <redlock/connection.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <net/if.h>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <random>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using clock_type = redlock::clock;
using redlock::test::section;
namespace pa = redlock::test::partition;

std::int64_t ns(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
double ms(std::int64_t nanoseconds) { return static_cast<double>(nanoseconds) / 1e6; }

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view{v} != "0";
}

// ---- child processes -------------------------------------------------------------------------

struct command_output {
  int status = -1;   // the exit code; -1 when it could not run or died by a signal
  std::string text;  // stdout and stderr
};

// Runs `args` (args[0] a path) with `input` on stdin and returns its exit code and output.
command_output run_command(const std::vector<std::string>& args, const std::string& input = {}) {
  command_output r;
  int out[2];
  int in[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (::pipe2(in, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("pipe failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (spawned == 0) {
    std::size_t done = 0;
    while (done < input.size()) {  // small inputs: well within the pipe's buffer
      const auto n = ::write(in[1], input.data() + done, input.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
  }
  ::close(in[1]);
  if (spawned != 0) {
    ::close(out[0]);
    r.text = fmt::format("cannot run {}: {}", args.at(0), std::strerror(spawned));
    return r;
  }
  char buf[4096];
  for (;;) {
    const auto n = ::read(out[0], buf, sizeof buf);
    if (n > 0) {
      r.text.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.status = WEXITSTATUS(status);
  return r;
}

// The tool's path: PATH first, then the sbin directories (often not in a user's PATH).
std::string find_tool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::istringstream ps{path};
    std::string d;
    while (std::getline(ps, d, ':')) dirs.push_back(d);
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    const auto p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

// ---- the private network namespace -----------------------------------------------------------

struct namespace_state {
  bool ready = false;
  std::string skip_reason = "the network namespace was not set up (main() did not run it)";
  std::string iptables, iptables_restore, ss;
};

namespace_state& netns() {
  static namespace_state s;
  return s;
}

bool loopback_up(std::string& error) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  if (ok) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    ok = ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  }
  if (!ok) error = std::strerror(errno);
  ::close(fd);
  return ok;
}

// Called from main() while the process has a single thread: unshare(CLONE_NEWNET) moves only the
// calling thread, and every thread and child created afterwards inherits its namespace.
void enter_private_network_namespace() {
  auto& s = netns();
  if (::unshare(CLONE_NEWNET) != 0) {
    s.skip_reason = fmt::format(
        "needs root and CAP_SYS_ADMIN to create a network namespace (unshare(CLONE_NEWNET): {})", std::strerror(errno));
    return;
  }
  if (std::string error; !loopback_up(error)) {
    s.skip_reason = fmt::format("cannot bring loopback up in the private network namespace: {}", error);
    return;
  }
  s.iptables = find_tool("iptables");
  s.iptables_restore = find_tool("iptables-restore");
  s.ss = find_tool("ss");
  if (s.iptables.empty() || s.iptables_restore.empty()) {
    s.skip_reason = "iptables not installed (iptables and iptables-restore; Debian package iptables)";
    return;
  }
  const auto listed = run_command({s.iptables, "-w", "-L", "-n"});
  if (listed.status != 0) {
    s.skip_reason =
        fmt::format("iptables does not work in the private network namespace (`iptables -w -L -n`: {})", listed.text);
    return;
  }
  s.ready = true;
}

// ---- packet drops ----------------------------------------------------------------------------

// One chain per master, `m<port>`, jumped to from INPUT; faults are rules in it.
class firewall {
 public:
  explicit firewall(std::vector<std::uint16_t> ports) : ports_(std::move(ports)) {
    std::string rules;
    for (const auto p : ports_) rules += fmt::format(":{0} - [0:0]\n-A INPUT -j {0}\n", chain(p));
    apply(rules);
  }
  ~firewall() {
    std::string rules;
    for (const auto p : ports_) rules += fmt::format("-D INPUT -j {0}\n-F {0}\n-X {0}\n", chain(p));
    const auto r = restore(rules);
    if (r.status != 0) std::fprintf(stderr, "removing the partition rules failed: %s\n", r.text.c_str());
  }
  firewall(const firewall&) = delete;
  firewall& operator=(const firewall&) = delete;

  // One atomic change (a single iptables-restore transaction): the masters of `heal` get their
  // chains flushed, the masters of `cut` lose every packet to and from their port.
  void change(const std::vector<std::size_t>& heal, const std::vector<std::size_t>& cut) {
    std::string rules;
    for (const auto m : heal) rules += fmt::format("-F {}\n", chain(ports_.at(m)));
    for (const auto m : cut) {
      const auto p = ports_.at(m);
      rules += fmt::format("-A {0} -p tcp --dport {1} -j DROP\n-A {0} -p tcp --sport {1} -j DROP\n", chain(p), p);
    }
    apply(rules);
  }
  void cut(std::size_t m) { change({}, {m}); }
  void heal(std::size_t m) { change({m}, {}); }

  // Drops each packet to or from every master with `probability`; 0 removes the loss.
  void set_loss(double probability) {
    std::string rules;
    for (const auto p : ports_) {
      rules += fmt::format("-F {}\n", chain(p));
      if (probability <= 0) continue;
      for (const char* dir : {"--dport", "--sport"}) {
        rules += fmt::format("-A {} -p tcp {} {} -m statistic --mode random --probability {} -j DROP\n", chain(p), dir,
                             p, probability);
      }
    }
    apply(rules);
  }

  // Packets the current rules of master `m` have dropped (counters restart when a chain is flushed).
  std::uint64_t dropped(std::size_t m) const {
    const auto r = run_command({netns().iptables, "-w", "-L", chain(ports_.at(m)), "-n", "-v", "-x"});
    if (r.status != 0) throw std::runtime_error("iptables -L failed: " + r.text);
    std::uint64_t sum = 0;
    std::istringstream in{r.text};
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls{line};
      std::uint64_t pkts = 0;
      if (ls >> pkts) sum += pkts;  // the header lines do not start with a number
    }
    return sum;
  }

  // The TCP connections to and from `masters`, from `ss -tin`: one line each with the
  // send queue and the retransmission state (rto, backoff, unacked, retrans, lastsnd, lastrcv).
  std::string sockets(const std::vector<std::size_t>& masters) const {
    if (netns().ss.empty()) return "  (ss not installed)\n";
    std::string filter = "(";
    for (std::size_t i = 0; i < masters.size(); ++i) {
      const auto p = ports_.at(masters[i]);
      filter += fmt::format("{}dport = :{} or sport = :{}", i ? " or " : " ", p, p);
    }
    filter += " )";
    const auto r = run_command({netns().ss, "-tin", filter});
    if (r.status != 0) return "  ss failed: " + r.text;
    std::istringstream in{r.text};
    std::string line, head, out;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] != ' ' && line[0] != '\t') {  // "State Recv-Q Send-Q Local Peer" or a socket
        head = line.rfind("State", 0) == 0 ? std::string{} : line;
        continue;
      }
      if (head.empty()) continue;
      std::istringstream hs{head};
      std::string state, recv_q, send_q, local, peer;
      hs >> state >> recv_q >> send_q >> local >> peer;
      const auto local_port = local.substr(local.rfind(':') + 1);
      const bool master_side =
          std::any_of(ports_.begin(), ports_.end(), [&](std::uint16_t p) { return std::to_string(p) == local_port; });
      std::string info;
      std::istringstream is{line};
      std::string tok;
      while (is >> tok) {
        for (const char* key : {"rto:", "backoff:", "unacked:", "retrans:", "lastsnd:", "lastrcv:"}) {
          if (tok.rfind(key, 0) == 0) info += " " + tok;
        }
      }
      out += fmt::format("  {} {} {} -> {} send-q:{}{}\n", master_side ? "master" : "client", state, local, peer,
                         send_q, info);
      head.clear();
    }
    return out;
  }

 private:
  static std::string chain(std::uint16_t port) { return fmt::format("m{}", port); }
  static command_output restore(const std::string& rules) {
    return run_command({netns().iptables_restore, "-w", "--noflush"}, "*filter\n" + rules + "COMMIT\n");
  }
  static void apply(const std::string& rules) {
    const auto r = restore(rules);
    if (r.status != 0) {
      ADD_FAILURE() << "iptables-restore failed (exit " << r.status << "): " << r.text << "\nrules:\n" << rules;
      throw std::runtime_error("cannot change the iptables rules");
    }
  }

  std::vector<std::uint16_t> ports_;
};

// ---- workers ---------------------------------------------------------------------------------

constexpr int workers = 4;
constexpr long ttl_ms = 2000;
const char* const resource = "partitioned";

struct run_result {
  std::vector<section> sections;
  std::vector<std::map<std::string, long>> counts;  // per worker: its summary line
};

// Worker processes (test/safety/worker.cpp) with the library's defaults, contending for one
// resource; each runs for `seconds` from its start.
class worker_pool {
 public:
  worker_pool(const std::vector<std::uint16_t>& ports, double seconds) {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("redlock-partition-{}-{}", ::getpid(), ++runs_);
    std::filesystem::create_directories(dir_);
    std::string masters;
    for (std::size_t i = 0; i < ports.size(); ++i) masters += fmt::format("{}127.0.0.1:{}", i ? "," : "", ports[i]);
    started_ = clock_type::now();
    for (int w = 0; w < workers; ++w) {
      const auto out = (dir_ / fmt::format("worker-{}.txt", w)).string();
      outputs_.push_back(out);
      std::vector<std::string> args{REDLOCK_WORKER_PATH, "--masters", masters, "--resources", resource, "--seconds",
                                    fmt::format("{}", seconds), "--ttl-ms", std::to_string(ttl_ms), "--out", out,
                                    "--seed", std::to_string(w + 1), "--defaults",
                                    // The masters were just started: the restart quarantine would
                                    // only delay the start. Clock checks stay on, under loss too.
                                    "--no-restart-guard"};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = -1;
      if (const int e = posix_spawn(&pid, REDLOCK_WORKER_PATH, nullptr, nullptr, argv.data(), environ); e != 0) {
        throw std::runtime_error(fmt::format("cannot start the worker: {}", std::strerror(e)));
      }
      pids_.push_back(pid);
    }
  }
  ~worker_pool() {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (env_flag("REDLOCK_PARTITION_KEEP")) {
      std::printf("worker records kept in %s\n", dir_.c_str());
    } else {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  // Before the first worker started: every worker runs at least until started() + seconds.
  clock_type::time_point started() const { return started_; }

  run_result wait() {
    for (pid_t p : pids_) {
      int status = 0;
      ::waitpid(p, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker failed, status " << status;
    }
    pids_.clear();
    run_result r;
    for (std::size_t w = 0; w < outputs_.size(); ++w) {
      auto s = redlock::test::read_sections(outputs_[w], static_cast<int>(w));
      r.sections.insert(r.sections.end(), s.begin(), s.end());
      std::map<std::string, long> counts;
      redlock::test::read_counts(outputs_[w], counts);
      r.counts.push_back(std::move(counts));
    }
    return r;
  }

 private:
  static inline int runs_ = 0;
  std::filesystem::path dir_;
  std::vector<std::string> outputs_;
  std::vector<pid_t> pids_;
  clock_type::time_point started_{};
};

// ---- reporting -------------------------------------------------------------------------------

std::string masks(std::uint32_t mask) {
  std::string s;
  for (int i = 0; i < 32; ++i) {
    if (mask & (std::uint32_t{1} << i)) s += fmt::format("{}{}", s.empty() ? "" : ",", i);
  }
  return "{" + s + "}";
}

std::string counts_json(const std::map<std::string, long>& counts) {
  std::string s = "{";
  for (const auto& [k, v] : counts) s += fmt::format("{}\"{}\": {}", s.size() > 1 ? ", " : "", k, v);
  return s + "}";
}

std::string counts_text(const std::map<std::string, long>& counts) {
  std::string s;
  for (const auto& [k, v] : counts) s += fmt::format(" {}={}", k, v);
  return s;
}

// One JSON object per line, one line per test run, appended (as safety_test appends to its report).
void report_json(const std::string& object) { std::ofstream{"partition_report.json", std::ios::app} << object << '\n'; }

std::uint32_t mask_of(const std::vector<std::size_t>& ms) {
  std::uint32_t m = 0;
  for (const auto i : ms) m |= std::uint32_t{1} << i;
  return m;
}

// ---- the scenarios ---------------------------------------------------------------------------

// The target for the holder-less time after a heal: 1 s plus one ttl.
constexpr std::int64_t gap_bound_ns = 3'000'000'000;

class partition : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!netns().ready) GTEST_SKIP() << netns().skip_reason;
  }
};

// The fault injection itself: a cut stalls an established connection without resetting it, and
// new connections cannot reach the master; the other masters are untouched; after the heal the
// request still in flight is answered (by TCP's retransmission, at the kernel's next try).
TEST_F(partition, cut_drops_packets_both_ways_and_heal_restores_them) {
  redlock::test::master_set servers{2};
  firewall fw{servers.ports()};

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(servers[0].port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  const auto reply_within = [fd](std::chrono::milliseconds limit) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return std::string{};
    char buf[64];
    const auto n = ::read(fd, buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string{"(closed)"};
  };
  const std::string ping = "PING\r\n";
  ASSERT_EQ(::write(fd, ping.data(), ping.size()), static_cast<ssize_t>(ping.size()));
  EXPECT_EQ(reply_within(1000ms), "+PONG\r\n");

  fw.cut(0);
  ASSERT_EQ(::write(fd, ping.data(), ping.size()),
            static_cast<ssize_t>(ping.size()));  // no error: dropped, not refused
  EXPECT_EQ(reply_within(1500ms), "") << "a reply came through the cut";
  EXPECT_THROW(servers[0].command({"PING"}, 300ms), std::runtime_error) << "a new connection got through the cut";
  EXPECT_EQ(servers[1].command({"PING"}), "+PONG\r\n") << "the cut hit another master";
  EXPECT_GT(fw.dropped(0), 0u);
  const auto stalled = fw.sockets({0});
  fw.heal(0);
  const auto healed = clock_type::now();
  EXPECT_EQ(servers[0].command({"PING"}, 1000ms), "+PONG\r\n") << "a new connection after the heal";
  EXPECT_EQ(reply_within(10000ms), "+PONG\r\n") << "the stalled request was never answered";
  const auto late = clock_type::now() - healed;
  ::close(fd);
  std::printf("stalled connection after a 1.5 s cut, answered %.0f ms after the heal; at the heal:\n%s",
              ms(std::chrono::duration_cast<std::chrono::nanoseconds>(late).count()), stalled.c_str());
}

// One connection, library defaults, through a real cut: the request into the cut times out, the
// connection is declared stalled and replaced, requests fail fast while the master stays cut, and
// after the heal it is up within one probe interval (200 ms) plus a round trip, not at the next
// SYN the kernel would retransmit (1 s after the last one). The heal is placed 100 ms after a
// connect attempt began, so without probes it would wait about 900 ms.
TEST_F(partition, a_cut_connection_is_replaced_and_back_within_a_probe_interval_of_the_heal) {
  namespace asio = boost::asio;
  using redlock::test::sleep_for;
  using redlock::test::use_tuple;
  redlock::test::master_set servers{1};
  firewall fw{servers.ports()};
  redlock::test::run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::connection_config cfg;
    cfg.host = servers[0].host();
    cfg.port = servers[0].port();
    redlock::connection conn{ioc.get_executor(), cfg};
    conn.async_run(asio::detached);
    const auto wait_for = [&](auto done, clock_type::duration limit) -> asio::awaitable<bool> {
      const auto until = clock_type::now() + limit;
      while (!done()) {
        if (clock_type::now() > until) co_return false;
        co_await sleep_for(1ms);
      }
      co_return true;
    };
    const auto ping = [] {
      redlock::resp::request r;
      r.push("PING");
      return r;
    };
    EXPECT_TRUE(co_await wait_for([&] { return conn.status().state == redlock::connection_state::up; }, 5s));
    fw.cut(0);
    auto [ec, r] = co_await conn.async_exec(ping(), 250ms, use_tuple);
    EXPECT_EQ(ec, redlock::error::master_timeout);
    EXPECT_TRUE(co_await wait_for([&] { return conn.stats().stalls == 1; }, 3s)) << "the stall was not detected";
    EXPECT_EQ(conn.status().last_error, redlock::error::connection_stalled);
    const auto t0 = clock_type::now();
    auto [ec2, r2] = co_await conn.async_exec(ping(), 30s, use_tuple);
    EXPECT_EQ(ec2, redlock::error::not_connected) << ec2.message();
    EXPECT_LT(clock_type::now() - t0, 100ms) << "a request to a suspect master must fail fast";
    const auto attempts = conn.stats().connect_attempts;
    EXPECT_TRUE(co_await wait_for([&] { return conn.stats().connect_attempts > attempts; }, 3s));
    co_await sleep_for(100ms);
    fw.heal(0);
    const auto healed = clock_type::now();
    EXPECT_TRUE(co_await wait_for([&] { return conn.status().state == redlock::connection_state::up; }, 5s));
    const auto back = clock_type::now() - healed;
    std::printf("connection up %.0f ms after the heal\n",
                ms(std::chrono::duration_cast<std::chrono::nanoseconds>(back).count()));
    EXPECT_LT(back, 600ms) << "waited for the kernel's SYN retransmission instead of probing";
    auto [ec3, r3] = co_await conn.async_exec(ping(), 1s, use_tuple);
    EXPECT_FALSE(ec3) << ec3.message();
    conn.close();
  });
}

TEST_F(partition, rotating_minority_partitions) {
  // The schedule: 1.5 s healthy, then six cuts of a pair of masters, 2-4 s each (seeded), each heal
  // at the moment the next pair is cut; then everything healed for 2 s.
  constexpr unsigned seed = 20240611;
  constexpr int cuts = 6;
  const auto healthy = 1500ms;
  const auto tail = 2000ms;
  std::mt19937 rng{seed};
  std::vector<std::chrono::milliseconds> cut_at;
  std::vector<std::vector<std::size_t>> pair;
  auto t = healthy;
  for (int k = 0; k < cuts; ++k) {
    cut_at.push_back(t);
    pair.push_back({static_cast<std::size_t>((2 * k) % 5), static_cast<std::size_t>((2 * k + 1) % 5)});
    t += std::chrono::milliseconds{std::uniform_int_distribution<int>{2000, 4000}(rng)};
  }
  const auto final_heal_at = t;
  const auto end_at = final_heal_at + tail;

  redlock::test::master_set servers{5};
  firewall fw{servers.ports()};
  const bool show_sockets = env_flag("REDLOCK_PARTITION_SS");
  worker_pool pool{servers.ports(), std::chrono::duration<double>(end_at + 500ms).count()};
  const auto t0 = pool.started();

  std::vector<pa::heal> heals;
  std::vector<std::string> heal_names, cut_names;
  std::vector<std::size_t> reachable;  // masters reachable after each heal
  std::vector<std::uint64_t> dropped;
  std::int64_t first_cut_ns = 0;
  for (int k = 0; k <= cuts; ++k) {
    std::this_thread::sleep_until(t0 + (k < cuts ? cut_at[static_cast<std::size_t>(k)] : final_heal_at));
    const std::vector<std::size_t> heal = k > 0 ? pair[static_cast<std::size_t>(k - 1)] : std::vector<std::size_t>{};
    const std::vector<std::size_t> cut = k < cuts ? pair[static_cast<std::size_t>(k)] : std::vector<std::size_t>{};
    std::uint64_t d = 0;
    for (const auto m : heal) d += fw.dropped(m);
    fw.change(heal, cut);
    const auto now = ns(clock_type::now());
    if (k == 0) {
      first_cut_ns = now;
      continue;
    }
    heals.push_back({now, mask_of(heal)});
    heal_names.push_back(masks(mask_of(heal)));
    cut_names.push_back(cut.empty() ? "-" : masks(mask_of(cut)));
    reachable.push_back(servers.size() - cut.size());
    dropped.push_back(d);
    if (show_sockets) {
      std::printf("--- ss -tin, masters %s, at the heal (t=%.0f ms):\n%s", heal_names.back().c_str(), ms(now - ns(t0)),
                  fw.sockets(heal).c_str());
      std::this_thread::sleep_until(clock_type::time_point{std::chrono::nanoseconds{now}} + 1000ms);
      std::printf("--- ss -tin, masters %s, 1 s after the heal:\n%s", heal_names.back().c_str(),
                  fw.sockets(heal).c_str());
    }
  }
  std::this_thread::sleep_until(t0 + end_at);
  const auto end_ns = ns(clock_type::now());
  auto run = pool.wait();

  const auto checked = redlock::test::check(run.sections);
  const auto results = pa::analyse_heals(run.sections, heals, end_ns);
  const auto busy = pa::busy_intervals(run.sections);
  const auto overall_gap = pa::longest_gap(busy, first_cut_ns, end_ns);  // three or more masters reachable throughout
  const auto healthy_sections = pa::sections_in(run.sections, ns(t0), first_cut_ns);

  std::printf("rotating minority partitions, seed %u: 5 masters, %d workers, ttl %ld ms, library defaults\n", seed,
              workers, ttl_ms);
  // recovery: to the first section a just-healed master helped grant, inside the window; next
  // section: to the first section at all, even after the window; dropped: by the healed pair's cut.
  std::printf(
      "| heal | at ms | healed | cut now | window ms | sections | longest gap ms | recovery ms | next section ms "
      "| dropped |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  const auto opt_ms = [](const std::optional<std::int64_t>& v, const char* none) {
    return v ? fmt::format("{:.0f}", ms(*v)) : std::string{none};
  };
  std::string heal_json;
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    worst = std::max(worst, r.longest_gap_ns);
    std::printf("| %zu | %.0f | %s | %s | %.0f | %zu | %.0f | %s | %s | %llu |\n", i + 1, ms(r.at - ns(t0)),
                heal_names[i].c_str(), cut_names[i].c_str(), ms(r.window_end - r.at), r.sections, ms(r.longest_gap_ns),
                opt_ms(r.recovery_ns, "-").c_str(), opt_ms(r.next_section_ns, "-").c_str(),
                static_cast<unsigned long long>(dropped[i]));
    heal_json += fmt::format(
        "{}{{\"at_ms\": {:.0f}, \"healed\": \"{}\", \"cut\": \"{}\", \"window_ms\": {:.0f}, \"sections\": {}, "
        "\"longest_gap_ms\": {:.0f}, \"recovery_ms\": {}, \"next_section_ms\": {}, \"packets_dropped\": {}}}",
        i ? ", " : "", ms(r.at - ns(t0)), heal_names[i], cut_names[i], ms(r.window_end - r.at), r.sections,
        ms(r.longest_gap_ns), opt_ms(r.recovery_ns, "null"), opt_ms(r.next_section_ns, "null"), dropped[i]);
  }
  std::string errors_json;
  for (std::size_t w = 0; w < run.counts.size(); ++w) {
    std::printf("worker %zu:%s\n", w, counts_text(run.counts[w]).c_str());
    errors_json += (w ? ", " : "") + counts_json(run.counts[w]);
  }
  std::printf(
      "sections %zu (%zu before the first cut), overlaps %zu, past validity %zu, longest gap after a heal %.0f ms, "
      "longest gap from the first cut on %.0f ms\n",
      checked.sections, healthy_sections, checked.overlaps, checked.past_validity, ms(worst), ms(overall_gap));
  for (const auto& e : checked.examples) std::printf("  overlap: %s\n", e.c_str());
  report_json(fmt::format(
      "{{\"test\": \"rotating_minority_partitions\", \"seed\": {}, \"masters\": 5, \"workers\": {}, \"ttl_ms\": {}, "
      "\"sections\": {}, \"sections_before_first_cut\": {}, \"overlaps\": {}, \"past_validity\": {}, "
      "\"longest_gap_after_heal_ms\": {:.0f}, \"longest_gap_since_first_cut_ms\": {:.0f}, \"gap_bound_ms\": {}, "
      "\"heals\": [{}], \"workers_counts\": [{}]}}",
      seed, workers, ttl_ms, checked.sections, healthy_sections, checked.overlaps, checked.past_validity, ms(worst),
      ms(overall_gap), gap_bound_ns / 1'000'000, heal_json, errors_json));

  EXPECT_GT(healthy_sections, 0u) << "the workers never held the lock before the first cut: setup broken";
  EXPECT_EQ(checked.overlaps, 0u);
  EXPECT_EQ(checked.past_validity, 0u);
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_LE(results[i].longest_gap_ns, gap_bound_ns) << fmt::format(
        "heal {} of masters {} at {:.0f} ms: the lock had no holder for {:.0f} ms although {} masters were reachable",
        i + 1, heal_names[i], ms(results[i].at - ns(t0)), ms(results[i].longest_gap_ns), reachable[i]);
  }
  // A heal's gap is clipped at the next heal, so a window shorter than the bound cannot fail on its
  // own even when no section ran in it; but at every moment from the first cut on at least three
  // masters were reachable, so no stretch anywhere may exceed the bound either.
  EXPECT_LE(overall_gap, gap_bound_ns) << fmt::format(
      "the lock had no holder for {:.0f} ms at a stretch although three masters were always reachable",
      ms(overall_gap));
}

TEST_F(partition, random_loss_20_percent) {
  constexpr double loss = 0.2;
  const auto healthy = 1000ms;
  const auto lossy = 30000ms;
  const auto tail = 500ms;

  redlock::test::master_set servers{5};
  firewall fw{servers.ports()};
  worker_pool pool{servers.ports(), std::chrono::duration<double>(healthy + lossy + tail + 500ms).count()};
  const auto t0 = pool.started();
  std::this_thread::sleep_until(t0 + healthy);
  fw.set_loss(loss);
  const auto from = ns(clock_type::now());
  std::this_thread::sleep_until(t0 + healthy + lossy);
  std::uint64_t dropped = 0;
  for (std::size_t m = 0; m < servers.size(); ++m) dropped += fw.dropped(m);
  fw.set_loss(0);
  const auto to = ns(clock_type::now());
  std::this_thread::sleep_until(t0 + healthy + lossy + tail);
  auto run = pool.wait();

  const auto checked = redlock::test::check(run.sections);
  const auto in_window = pa::sections_in(run.sections, from, to);
  const auto stall = pa::longest_gap(pa::busy_intervals(run.sections), from, to);
  std::printf("random loss %.0f %% on all 5 masters, both ways, for %.1f s: %d workers, ttl %ld ms, library defaults\n",
              loss * 100, ms(to - from) / 1000, workers, ttl_ms);
  std::printf("sections %zu (%.1f/s), longest stall %.0f ms, packets dropped %llu, overlaps %zu, past validity %zu\n",
              in_window, static_cast<double>(in_window) / (ms(to - from) / 1000), ms(stall),
              static_cast<unsigned long long>(dropped), checked.overlaps, checked.past_validity);
  std::string errors_json;
  for (std::size_t w = 0; w < run.counts.size(); ++w) {
    std::printf("worker %zu:%s\n", w, counts_text(run.counts[w]).c_str());
    errors_json += (w ? ", " : "") + counts_json(run.counts[w]);
  }
  for (const auto& e : checked.examples) std::printf("  overlap: %s\n", e.c_str());
  report_json(fmt::format(
      "{{\"test\": \"random_loss_20_percent\", \"loss\": {}, \"masters\": 5, \"workers\": {}, \"ttl_ms\": {}, "
      "\"window_ms\": {:.0f}, \"sections_in_window\": {}, \"longest_stall_ms\": {:.0f}, \"packets_dropped\": {}, "
      "\"overlaps\": {}, \"past_validity\": {}, \"workers_counts\": [{}]}}",
      loss, workers, ttl_ms, ms(to - from), in_window, ms(stall), dropped, checked.overlaps, checked.past_validity,
      errors_json));

  EXPECT_GT(dropped, 0u) << "the loss rules dropped nothing";
  EXPECT_EQ(checked.overlaps, 0u);
  EXPECT_EQ(checked.past_validity, 0u);
  EXPECT_GT(in_window, 0u) << "no critical section at all under 20 % loss";
}

// The analysis on synthetic records: gaps clipped to the windows, recovery from the grant masks.
TEST(partition_analysis, gaps_and_recovery_in_synthetic_records) {
  const std::vector<section> s{
      {"r", "a", 0, 10, 100, 0, 0b00111},    {"r", "b", 12, 20, 100, 1, 0b11100},
      {"r", "c", 18, 25, 100, 2, 0b11100},  // overlapping b: merged, not a gap
      {"r", "d", 60, 70, 200, 3, 0b11100},  // after heal 1 ({0,1}) but granted without them
      {"r", "e", 80, 90, 200, 0, 0b00111},  // the first one {0,1} helped grant
      {"r", "f", 150, 160, 300, 1, 0b11001},
  };
  const auto busy = pa::busy_intervals(s);
  ASSERT_EQ(busy.size(), 5u);
  EXPECT_EQ(busy[1].from, 12);
  EXPECT_EQ(busy[1].to, 25);
  EXPECT_EQ(pa::longest_gap(busy, 0, 200), 60);  // 90 -> 150
  EXPECT_EQ(pa::longest_gap(busy, 30, 65), 30);  // clipped at the window's start: 30 -> 60
  EXPECT_EQ(pa::longest_gap(busy, 5, 8), 0);     // held throughout
  EXPECT_EQ(pa::longest_gap(busy, 200, 260), 60);
  EXPECT_EQ(pa::longest_gap({}, 0, 40), 40);

  const auto r = pa::analyse_heals(s, {{100, 0b10000}, {30, 0b00011}}, 170);  // out of order on purpose
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].at, 30);
  EXPECT_EQ(r[0].window_end, 100);
  EXPECT_EQ(r[0].longest_gap_ns, 30);  // 30 -> 60
  EXPECT_EQ(r[0].sections, 2u);        // d and e
  ASSERT_TRUE(r[0].recovery_ns.has_value());
  EXPECT_EQ(*r[0].recovery_ns, 50);      // e at 80, not d at 60
  EXPECT_EQ(*r[0].next_section_ns, 30);  // d at 60
  EXPECT_EQ(r[1].window_end, 170);
  EXPECT_EQ(r[1].longest_gap_ns, 50);  // 100 -> 150
  EXPECT_EQ(*r[1].recovery_ns, 50);    // f has master 4
  const auto none = pa::analyse_heals(s, {{95, 0b00100}}, 140)[0];
  EXPECT_EQ(none.recovery_ns, std::nullopt);  // no section in the window
  EXPECT_EQ(none.next_section_ns, 55);        // f at 150, after the window
  EXPECT_EQ(pa::analyse_heals(s, {{165, 0b00100}}, 170)[0].next_section_ns, std::nullopt);
  EXPECT_EQ(pa::sections_in(s, 12, 80), 3u);  // b, c, d
}

}  // namespace

// The namespace must be entered while this is the only thread; listing the tests (which
// gtest_discover_tests does at build time, perhaps without privileges) needs none.
int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view{argv[i]}.starts_with("--gtest_list_tests")) listing = true;
  }
  if (!listing) enter_private_network_namespace();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
