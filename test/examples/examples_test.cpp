// SPDX-License-Identifier: BSL-1.0
// The examples, run as a user runs them: real processes, masters from REDLOCK_NODES, output read
// back and checked. Each run has a generous time limit: an example that hangs fails its test.

#include <redlock/error.hpp>
#include <redlock_test/master_set.hpp>

#include <gtest/gtest.h>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as the examples print

// Limits for one example run: far above what they need on an idle machine, so that a loaded
// machine does not fail them, yet a hang is caught.
constexpr auto run_limit = 90s;

std::string masters_of(redlock::test::master_set& servers) {
  std::string list;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    list += fmt::format("{}{}:{}", i ? "," : "", servers[i].host(), servers[i].port());
  }
  return list;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// One example process. Its stdout and stderr go to files, read back at any time. The environment
// is the test's, without any REDLOCK_NODES/REDLOCK_PASSWORD of its own, with the restart guard
// off, plus `env`.
class example_process {
 public:
  example_process(std::string binary, const std::vector<std::string>& args, const std::vector<std::string>& env = {})
      : binary_(std::move(binary)) {
    static int serial = 0;
    dir_ = std::filesystem::temp_directory_path() / fmt::format("redlock-examples-{}-{}", ::getpid(), ++serial);
    std::filesystem::create_directories(dir_);
    const auto out = (dir_ / "stdout").string();
    const auto err = (dir_ / "stderr").string();

    std::vector<std::string> argv_s{binary_};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string_view entry = *e;
      if (entry.starts_with("REDLOCK_NODES=") || entry.starts_with("REDLOCK_PASSWORD=") ||
          entry.starts_with("REDLOCK_RESTART_GUARD="))
        continue;
      env_s.emplace_back(entry);
    }
    // The test bed's masters were just started: without this the first locks would wait out the
    // restart quarantine (about a minute).
    env_s.emplace_back("REDLOCK_RESTART_GUARD=off");
    env_s.insert(env_s.end(), env.begin(), env.end());
    std::vector<char*> argv_p, env_p;
    for (auto& a : argv_s) argv_p.push_back(a.data());
    argv_p.push_back(nullptr);
    for (auto& e : env_s) env_p.push_back(e.data());
    env_p.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, binary_.c_str(), &actions, nullptr, argv_p.data(), env_p.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error(fmt::format("cannot start {}: {}", binary_, std::strerror(rc)));
  }
  example_process(const example_process&) = delete;
  example_process& operator=(const example_process&) = delete;
  ~example_process() {
    kill();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string out() const { return read_file(dir_ / "stdout"); }
  std::string err() const { return read_file(dir_ / "stderr"); }
  std::string transcript() const { return fmt::format("--- stdout:\n{}--- stderr:\n{}", out(), err()); }

  // Waits for the process to exit and returns its exit code; -1 after a signal or when it did
  // not exit within `limit` (it is killed then, and the test fails).
  int wait(clock_type::duration limit = run_limit) {
    const auto deadline = clock_type::now() + limit;
    while (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (clock_type::now() > deadline) {
        ADD_FAILURE() << binary_ << " did not exit in time\n" << transcript();
        kill();
        return -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

  // Waits until `text` appears in the output; false when the process exits first or after `limit`.
  bool wait_for_output(std::string_view text, clock_type::duration limit = run_limit) {
    const auto deadline = clock_type::now() + limit;
    while (clock_type::now() < deadline) {
      if (out().find(text) != std::string::npos) return true;
      if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return out().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Sends `sig` (the process keeps running until it reacts; `wait` reaps it).
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // kill -9, and reap.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string binary_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

std::string nodes_env(redlock::test::master_set& servers) { return "REDLOCK_NODES=" + masters_of(servers); }

// The number after `prefix` in `text` (at its first occurrence), or nullopt.
std::optional<long long> number_after(const std::string& text, std::string_view prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) return std::nullopt;
  return std::strtoll(text.c_str() + at + prefix.size(), nullptr, 10);
}

// A blocking HTTP/1.1 GET of `target` on 127.0.0.1:`port`: the whole response (the server closes).
std::string http_get(int port, std::string_view target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const auto req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", target);
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

// ---------------------------------------------------------------------------------------------

TEST(examples, bad_input_gets_usage_and_exit_status_2) {
  for (const char* binary : {REDLOCK_EXAMPLE_LOCK_SERVER, REDLOCK_EXAMPLE_LONG_JOB, REDLOCK_EXAMPLE_LEADER_ELECTION,
                             REDLOCK_EXAMPLE_CALLBACKS_AND_FUTURES}) {
    SCOPED_TRACE(binary);
    const std::string name = std::filesystem::path{binary}.filename().string();
    const std::vector<std::string> named =
        name == "leader_election" ? std::vector<std::string>{"--name", "A"} : std::vector<std::string>{};
    {
      example_process p{binary, named};  // no masters anywhere
      EXPECT_EQ(p.wait(), 2) << p.transcript();
      EXPECT_NE(p.err().find("usage:"), std::string::npos) << p.transcript();
      EXPECT_NE(p.err().find("REDLOCK_NODES"), std::string::npos) << p.transcript();
    }
    {
      auto args = named;
      args.push_back("--no-such-option");
      example_process p{binary, args, {"REDLOCK_NODES=127.0.0.1:1"}};
      EXPECT_EQ(p.wait(), 2) << p.transcript();
      EXPECT_NE(p.err().find("--no-such-option"), std::string::npos) << p.transcript();
    }
    {
      auto args = named;
      args.push_back("127.0.0.1:7001,127.0.0.1:notaport");
      example_process p{binary, args};
      EXPECT_EQ(p.wait(), 2) << p.transcript();
      EXPECT_NE(p.err().find("notaport"), std::string::npos) << p.transcript();
    }
  }
  example_process p{REDLOCK_EXAMPLE_LONG_JOB, {"--ttl", "soon", "127.0.0.1:7001"}};
  EXPECT_EQ(p.wait(), 2) << p.transcript();
  EXPECT_NE(p.err().find("soon"), std::string::npos) << p.transcript();
}

TEST(examples, lock_server_self_test_loses_no_update) {
  redlock::test::master_set servers{3};
  example_process p{REDLOCK_EXAMPLE_LOCK_SERVER, {"--self-test", "6", "--requests", "10"}, {nodes_env(servers)}};
  ASSERT_EQ(p.wait(), 0) << p.transcript();
  const auto out = p.out();
  EXPECT_NE(out.find("final value 60, expected 60: no lost update"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("[server 1] INCR"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("[server 2] INCR"), std::string::npos) << p.transcript();  // both instances served
}

TEST(examples, long_job_completes_under_a_lock_it_extends) {
  redlock::test::master_set servers{3};
  // The job (3 s) outlasts the ttl (1 s) three times over: only extensions keep it covered.
  example_process p{REDLOCK_EXAMPLE_LONG_JOB, {"--ttl", "1s", "--job", "3s"}, {nodes_env(servers)}};
  ASSERT_EQ(p.wait(), 0) << p.transcript();
  const auto out = p.out();
  const auto extensions = number_after(out, "the lock was extended ");
  ASSERT_TRUE(extensions) << p.transcript();
  EXPECT_GE(*extensions, 1) << p.transcript();
  EXPECT_NE(out.find("completed: 12 steps under the lock"), std::string::npos) << p.transcript();
}

TEST(examples, long_job_is_cancelled_when_its_key_is_overwritten) {
  redlock::test::master_set servers{3};
  example_process p{
      REDLOCK_EXAMPLE_LONG_JOB, {"--ttl", "1s", "--job", "20s", "--steal-after", "1500ms"}, {nodes_env(servers)}};
  ASSERT_EQ(p.wait(), 3) << p.transcript();  // 3: lost and cancelled
  const auto out = p.out();
  const auto not_owner = make_error_code(redlock::error::not_owner).message();
  const auto lock_lost = make_error_code(redlock::error::lock_lost).message();
  EXPECT_NE(out.find("*** thief: overwrote"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("cancelled, "), std::string::npos) << p.transcript();
  EXPECT_NE(out.find(fmt::format("with_lock: {}; reason: {}", lock_lost, not_owner)), std::string::npos)
      << p.transcript();
  EXPECT_EQ(out.find("job done"), std::string::npos) << p.transcript();
}

// A leader's line: "[<monotonic seconds>] <name> is leader: heartbeat ... valid for <ms> ms more)".
struct heartbeat {
  double at = 0;
  double valid_until = 0;  // the lock's validity deadline as of that line
};

std::vector<heartbeat> heartbeats_of(const std::string& out, std::string_view name) {
  std::vector<heartbeat> beats;
  const std::string marker = fmt::format("] {} is leader: heartbeat", name);
  for (const auto& line : lines_of(out)) {
    if (line.find(marker) == std::string::npos) continue;
    heartbeat b;
    b.at = std::strtod(line.c_str() + 1, nullptr);
    const auto valid = number_after(line, "valid for ");
    if (!valid) continue;
    b.valid_until = b.at + static_cast<double>(*valid) / 1000.0;
    beats.push_back(b);
  }
  return beats;
}

double seconds(clock_type::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

TEST(examples, leader_election_fails_over_when_the_leader_dies) {
  redlock::test::master_set servers{3};
  const auto env = nodes_env(servers);
  example_process a{REDLOCK_EXAMPLE_LEADER_ELECTION, {"--name", "A", "--for", "60s", "--ttl", "1s"}, {env}};
  ASSERT_TRUE(a.wait_for_output("A becomes leader")) << a.transcript();

  example_process b{REDLOCK_EXAMPLE_LEADER_ELECTION, {"--name", "B", "--for", "10s", "--ttl", "1s"}, {env}};
  ASSERT_TRUE(b.wait_for_output("B is standby")) << b.transcript();
  // Let A lead through a few extensions while B keeps trying.
  const auto enough = heartbeats_of(a.out(), "A").size() + 6;
  for (auto until = clock_type::now() + 30s; heartbeats_of(a.out(), "A").size() < enough;) {
    ASSERT_LT(clock_type::now(), until) << a.transcript();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(b.out().find("becomes leader"), std::string::npos) << b.transcript();

  a.kill();  // kill -9: no release, its lock must expire
  const auto killed = clock_type::now();
  ASSERT_TRUE(b.wait_for_output("B becomes leader", 30s)) << b.transcript();
  EXPECT_EQ(b.wait(), 0) << b.transcript();

  const auto a_beats = heartbeats_of(a.out(), "A");
  const auto b_beats = heartbeats_of(b.out(), "B");
  ASSERT_FALSE(a_beats.empty()) << a.transcript();
  ASSERT_FALSE(b_beats.empty()) << b.transcript();
  // B took over after A died, within a few ttl (generous: the machine may be loaded).
  EXPECT_GT(b_beats.front().at, seconds(killed));
  EXPECT_LT(b_beats.front().at, seconds(killed) + 10.0) << b.transcript();
  // Never two leaders: B's first heartbeat comes after the end of every validity A relied on
  // (1 ms of slack for the printed rounding).
  for (const auto& beat : a_beats) {
    EXPECT_LT(beat.valid_until, b_beats.front().at + 0.001) << a.transcript() << b.transcript();
  }
  EXPECT_NE(b.out().find("B steps down: time is up"), std::string::npos) << b.transcript();
}

TEST(examples, leader_election_steps_down_when_its_lock_is_lost_and_campaigns_again) {
  redlock::test::master_set servers{3};
  example_process a{
      REDLOCK_EXAMPLE_LEADER_ELECTION, {"--name", "A", "--for", "8s", "--ttl", "1s"}, {nodes_env(servers)}};
  ASSERT_TRUE(a.wait_for_output("A becomes leader (term 1)")) << a.transcript();
  // Someone else takes the key on every master, for 1.5 s: A's next extension finds it is not ours.
  for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"SET", "example:leader", "other", "PX", "1500"});
  ASSERT_TRUE(a.wait_for_output("A becomes leader (term 2)")) << a.transcript();
  EXPECT_EQ(a.wait(), 0) << a.transcript();
  const auto out = a.out();
  const auto stepped_down =
      out.find(fmt::format("A steps down: lock lost ({})", make_error_code(redlock::error::not_owner).message()));
  ASSERT_NE(stepped_down, std::string::npos) << a.transcript();
  EXPECT_LT(stepped_down, out.find("A becomes leader (term 2)")) << a.transcript();
  EXPECT_NE(out.find("A steps down: time is up"), std::string::npos) << a.transcript();
}

TEST(examples, callbacks_and_futures_runs_every_step) {
  redlock::test::master_set servers{3};
  example_process p{REDLOCK_EXAMPLE_CALLBACKS_AND_FUTURES, {masters_of(servers)}};  // masters as the argument
  ASSERT_EQ(p.wait(), 0) << p.transcript();
  const auto out = p.out();
  EXPECT_NE(out.find("callbacks: a second try_lock is refused, as expected"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("futures: extended to 5 s"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("futures: the loss wait ended: released first"), std::string::npos) << p.transcript();
  EXPECT_NE(out.find("all steps went as expected"), std::string::npos) << p.transcript();
}

TEST(examples, password_comes_from_the_environment_and_is_never_printed) {
  const std::string password = "example-secret-7c1f";
  redlock::test::redis_options opts;
  opts.password = password;
  redlock::test::master_set servers{3, opts};
  {
    example_process p{REDLOCK_EXAMPLE_CALLBACKS_AND_FUTURES, {}, {nodes_env(servers), "REDLOCK_PASSWORD=" + password}};
    ASSERT_EQ(p.wait(), 0) << p.transcript();
    EXPECT_EQ(p.transcript().find(password), std::string::npos);
  }
  {
    // Without it, the masters refuse the connection: the example fails, clearly and in time.
    example_process p{REDLOCK_EXAMPLE_CALLBACKS_AND_FUTURES, {}, {nodes_env(servers)}};
    EXPECT_EQ(p.wait(), 1) << p.transcript();
  }
}

TEST(examples, metrics_endpoint_serves_the_counters_in_prometheus_format) {
  redlock::test::master_set servers{3};
  example_process p{REDLOCK_EXAMPLE_METRICS_ENDPOINT, {"--listen", "127.0.0.1:0"}, {nodes_env(servers)}};
  ASSERT_TRUE(p.wait_for_output("listening on 127.0.0.1:")) << p.transcript();
  const auto port = number_after(p.out(), "listening on 127.0.0.1:");
  ASSERT_TRUE(port && *port > 0) << p.transcript();
  const auto up = [&](std::size_t i) {
    return fmt::format("redlock_master_up{{master=\"127.0.0.1:{}\"}} ", servers[i].port());
  };

  // The worker's locks show up as acquisitions; every master is up (a lock needs only a majority,
  // so the last master may still be connecting at the first acquisition: wait for it too).
  std::string page;
  const auto deadline = clock_type::now() + 30s;
  while (clock_type::now() < deadline) {
    page = http_get(static_cast<int>(*port), "/metrics");
    const auto acquired = number_after(page, "redlock_lock_outcomes_total{outcome=\"acquired\"} ");
    const auto released = number_after(page, "\nredlock_releases_total ");
    bool all_up = true;
    for (std::size_t i = 0; i < servers.size(); ++i) all_up = all_up && number_after(page, up(i)) == 1;
    if (acquired.value_or(0) > 0 && released.value_or(0) > 0 && all_up) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(page.starts_with("HTTP/1.1 200 OK\r\n")) << page;
  EXPECT_NE(page.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << page;
  ASSERT_GT(number_after(page, "redlock_lock_outcomes_total{outcome=\"acquired\"} ").value_or(0), 0) << page;
  EXPECT_GT(number_after(page, "\nredlock_releases_total ").value_or(0), 0) << page;
  for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(number_after(page, up(i)), 1) << page;
  EXPECT_NE(page.find("# TYPE redlock_acquire_duration_seconds histogram"), std::string::npos);

  // A master that dies is seen as down on a later scrape.
  servers[2].kill();
  const auto down_by = clock_type::now() + 30s;
  while (clock_type::now() < down_by &&
         number_after(page = http_get(static_cast<int>(*port), "/metrics"), up(2)) != 0) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(number_after(page, up(2)), 0) << page;
  EXPECT_EQ(number_after(page, up(0)), 1) << page;

  EXPECT_TRUE(http_get(static_cast<int>(*port), "/other").starts_with("HTTP/1.1 404"));
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.transcript();
}

}  // namespace
