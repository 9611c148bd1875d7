// SPDX-License-Identifier: BSL-1.0
// The `redlock` tool as a real binary against real masters: exit statuses, mutual exclusion,
// contention, unavailable masters, lock loss, signal forwarding, `status`, `nodes`, credentials
// and command-line errors. Every run has a deadline: a bug fails a test instead of hanging it.

#include "local_nodes.hpp"
#include <redlock_test/master_set.hpp>

#include <gtest/gtest.h>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <signal.h>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using redlock::test::master_set;

constexpr const char* tool = REDLOCK_CLI_PATH;
using env_map = std::map<std::string, std::string>;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::size_t count_of(std::string_view haystack, std::string_view needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string_view::npos; at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

std::string masters_of(master_set& c) {
  std::string out;
  for (std::size_t i = 0; i < c.size(); ++i) out += fmt::format("{}127.0.0.1:{}", i ? "," : "", c[i].port());
  return out;
}

/// True when `key` exists on no master that is running.
bool key_gone_everywhere(master_set& c, const std::string& key) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i].running() && c[i].command({"EXISTS", key}) != ":0\r\n") return false;
  }
  return true;
}

/// How a tool run ended.
struct outcome {
  int status = -1;  ///< exit status, or 128 + signal when it was killed
  std::string out;
  std::string err;
  std::string describe() const { return fmt::format("status {}\n--- stdout:\n{}--- stderr:\n{}", status, out, err); }
};

/// One running `redlock` process: own process group, default signal dispositions, a controlled
/// environment, stdout and stderr captured to files, stdin from /dev/null.
class tool_process {
 public:
  tool_process(const std::vector<std::string>& args, const env_map& env, const fs::path& dir,
               const char* program = tool) {
    static int serial = 0;
    const int n = ++serial;
    out_ = dir / fmt::format("out-{}.txt", n);
    err_ = dir / fmt::format("err-{}.txt", n);
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);  // whatever the test runner ignores
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const int rc = posix_spawn(&pid_, program, &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw std::runtime_error(fmt::format("cannot start {}: {}", program, std::strerror(rc)));
  }
  tool_process(const tool_process&) = delete;
  tool_process& operator=(const tool_process&) = delete;
  ~tool_process() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const noexcept { return pid_; }
  /// True once the process has exited (it is not reaped: `wait` still reports how).
  bool exited() const {
    siginfo_t info{};
    return pid_ <= 0 ||
           (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_);
  }
  void signal(int sig) const { ::kill(pid_, sig); }

  /// Waits for the exit; after `timeout` kills the process (its command dies with it) and fails.
  outcome wait(std::chrono::milliseconds timeout = 60s) {
    outcome o;
    const auto deadline = clock_type::now() + timeout;
    int st = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (clock_type::now() >= deadline) {
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        o.out = read_file(out_);
        o.err = read_file(err_);
        ADD_FAILURE() << "redlock did not exit within " << timeout.count() << " ms; killed it\n" << o.describe();
        return o;
      }
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    o.out = read_file(out_);
    o.err = read_file(err_);
    return o;
  }

 private:
  pid_t pid_ = -1;
  fs::path out_;
  fs::path err_;
};

/// Polls for a file (written by a command under the lock) until it exists, the time is up, or
/// (when given) the process that should make it write it has exited.
bool wait_for_file(const fs::path& p, const tool_process* writer = nullptr, std::chrono::milliseconds timeout = 60s) {
  const auto deadline = clock_type::now() + timeout;
  while (clock_type::now() < deadline) {
    std::error_code ec;
    if (fs::exists(p, ec)) return true;
    if (writer != nullptr && writer->exited()) return fs::exists(p, ec);
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("redlock-cli-test-{}-{}", ::getpid(), ++runs_);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "state");
    fs::permissions(dir_ / "state", fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// The environment every run gets: PATH, HOME, an isolated (empty) state directory, D (a
  /// scratch directory for the commands), the redis-server to use, the restart guard off, and
  /// `extra`.
  env_map env(const env_map& extra = {}) const {
    env_map e;
    for (const char* name : {"PATH", "HOME", "REDLOCK_REDIS_SERVER"}) {
      if (const char* v = std::getenv(name)) e[name] = v;
    }
    if (!e.count("PATH")) e["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    e["REDLOCK_STATE_DIR"] = (dir_ / "state").string();
    e["D"] = dir_.string();
    // The test bed's masters were just started: without this the first locks would wait out the
    // restart quarantine (about a minute). A test of the guard overrides it.
    e["REDLOCK_RESTART_GUARD"] = "off";
    for (const auto& [k, v] : extra) e[k] = v;
    return e;
  }

  std::unique_ptr<tool_process> start(const std::vector<std::string>& args, const env_map& extra = {}) {
    return std::make_unique<tool_process>(args, env(extra), dir_);
  }
  outcome run(const std::vector<std::string>& args, const env_map& extra = {},
              std::chrono::milliseconds timeout = 60s) {
    return tool_process(args, env(extra), dir_).wait(timeout);
  }

  outcome run_program(const char* program, const std::vector<std::string>& args) {
    return tool_process(args, env(), dir_, program).wait();
  }

  const fs::path& dir() const { return dir_; }

 private:
  static inline int runs_ = 0;
  fs::path dir_;
};

// ---- run: exit statuses ------------------------------------------------------------------------

TEST_F(cli, run_passes_the_exit_status_through) {
  master_set c{3};
  const auto nodes = masters_of(c);
  const std::vector<std::string> base{"run", "--nodes", nodes, "--resource", "cli:status", "--wait", "10s", "--"};
  const auto with = [&](std::vector<std::string> cmd) {
    auto a = base;
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  };
  auto r = run(with({"true"}));
  EXPECT_EQ(r.status, 0) << r.describe();
  r = run(with({"sh", "-c", "exit 3"}));
  EXPECT_EQ(r.status, 3) << r.describe();
  r = run(with({"sh", "-c", "kill -TERM $$"}));
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.describe();
  r = run(with({"sh", "-c", "kill -KILL $$"}));
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.describe();
  // The command sees the lock in its environment.
  r = run(with({"sh", "-c",
                "test \"$REDLOCK_RESOURCE\" = cli:status && test \"$REDLOCK_KEY\" = cli:status && "
                "test \"$REDLOCK_TTL_MS\" = 30000 && test \"$REDLOCK_VALIDITY_MS\" -gt 0"}));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(key_gone_everywhere(c, "cli:status"));

  // Not found (PATH search, before locking) and not executable / missing path (after: reported
  // through the exec pipe, the lock released).
  r = run(with({"no-such-command-for-redlock"}));
  EXPECT_EQ(r.status, 127) << r.describe();
  EXPECT_TRUE(contains(r.err, "no-such-command-for-redlock: command not found")) << r.describe();
  r = run(with({(dir() / "missing" / "cmd").string()}));
  EXPECT_EQ(r.status, 127) << r.describe();
  EXPECT_TRUE(contains(r.err, "No such file or directory")) << r.describe();
  const auto plain = dir() / "not-executable";
  std::ofstream(plain) << "echo hi\n";
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  r = run(with({plain.string()}));
  EXPECT_EQ(r.status, 126) << r.describe();
  EXPECT_TRUE(contains(r.err, "Permission denied")) << r.describe();
  EXPECT_TRUE(key_gone_everywhere(c, "cli:status"));
}

// ---- run: mutual exclusion -----------------------------------------------------------------------

TEST_F(cli, concurrent_runs_exclude_each_other) {
  master_set c{5};
  const auto nodes = masters_of(c);
  // mkdir is atomic: it fails when another critical section is inside.
  const std::string section =
      "mkdir \"$D/in\" 2>/dev/null || echo overlap >> \"$D/bad\"; echo ran >> \"$D/ran\"; sleep 0.05; "
      "rmdir \"$D/in\"";
  constexpr int processes = 6;
  std::vector<std::unique_ptr<tool_process>> ps;
  for (int i = 0; i < processes; ++i) {
    ps.push_back(start({"run", "--nodes", nodes, "--resource", "cli:excl", "--ttl", "10s", "--wait", "20s", "--", "sh",
                        "-c", section}));
  }
  for (auto& p : ps) {
    const auto r = p->wait(90s);
    EXPECT_EQ(r.status, 0) << r.describe();
  }
  EXPECT_FALSE(fs::exists(dir() / "bad")) << read_file(dir() / "bad");
  const auto ran = read_file(dir() / "ran");
  EXPECT_EQ(std::count(ran.begin(), ran.end(), '\n'), processes) << ran;
  EXPECT_TRUE(key_gone_everywhere(c, "cli:excl"));
}

// ---- run: the lock cannot be had -----------------------------------------------------------------

TEST_F(cli, contention_exits_75_naming_the_holder_situation) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto holder = start({"run", "--nodes", nodes, "--resource", "cli:busy", "--ttl", "10s", "--wait", "20s", "--", "sh",
                       "-c", "touch \"$D/held\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "held", holder.get())) << holder->wait(5s).describe();

  auto r = run({"run", "--nodes", nodes, "--resource", "cli:busy", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "'cli:busy' is held by someone else")) << r.describe();
  EXPECT_TRUE(contains(r.err, "--wait")) << r.describe();
  r = run({"run", "--nodes", nodes, "--resource", "cli:busy", "--wait", "500ms", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "gave up after waiting 500ms")) << r.describe();

  holder->signal(SIGTERM);
  const auto h = holder->wait();
  EXPECT_EQ(h.status, 128 + SIGTERM) << h.describe();  // sleep died of the forwarded SIGTERM
  EXPECT_TRUE(key_gone_everywhere(c, "cli:busy"));
  r = run({"run", "--nodes", nodes, "--resource", "cli:busy", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.describe();
}

TEST_F(cli, masters_down_exit_75_with_a_different_message) {
  master_set c{3};
  const auto nodes = masters_of(c);
  for (std::size_t i = 0; i < c.size(); ++i) c[i].kill();
  auto r = run({"run", "--nodes", nodes, "--resource", "cli:down", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  // Killed masters refuse at once; a third may still be pending when two refusals decided.
  EXPECT_TRUE(contains(r.err,
                       "cannot lock 'cli:down': masters unavailable: only 0 of 3 masters usable, 2 needed (0 "
                       "answered, 0 still pending, 3 failed: master 1 (") ||
              contains(r.err,
                       "cannot lock 'cli:down': masters unavailable: at most 1 of 3 masters usable, 2 needed (0 "
                       "answered, 1 still pending, 2 failed: master "))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "held by someone else")) << r.describe();
  EXPECT_FALSE(fs::exists(dir() / "ran"));
  r = run({"status", "--nodes", nodes, "cli:down"});
  EXPECT_EQ(r.status, 69) << r.describe();
  // The documented word (docs/cli.md), in the text as in the JSON.
  EXPECT_TRUE(contains(r.out, "'cli:down' is unavailable: only 0 of 3 masters answered, 2 needed")) << r.describe();
  EXPECT_FALSE(contains(r.out, "unknown")) << r.describe();
  r = run({"status", "--nodes", nodes, "--json", "cli:down"});
  EXPECT_EQ(r.status, 69) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("state":"unavailable","holder":null,"holders":0,"answered":0)")) << r.describe();
}

// ---- run: losing the lock -----------------------------------------------------------------------

TEST_F(cli, lost_lock_stops_the_command_and_exits_76) {
  master_set c{5};
  const auto nodes = masters_of(c);
  // Grace far above the time the loss takes: the command exits on SIGTERM, no SIGKILL needed.
  auto p = start({"run", "--nodes", nodes, "--resource", "cli:lost", "--ttl", "1s", "--wait", "20s", "--grace", "60s",
                  "--", "sh", "-c",
                  "trap 'echo TERM > \"$D/term\"; exit 0' TERM; touch \"$D/started\"; while :; do sleep 0.1; done"});
  ASSERT_TRUE(wait_for_file(dir() / "started", p.get())) << p->wait(5s).describe();
  for (std::size_t i : {0u, 1u, 2u}) c[i].pause();  // no majority answers the extension any more
  const auto paused_at = clock_type::now();
  const auto r = p->wait(50s);  // would take 60 s (the grace) if SIGTERM were not delivered
  const auto took = clock_type::now() - paused_at;
  for (std::size_t i : {0u, 1u, 2u}) c[i].resume();
  EXPECT_EQ(r.status, 76) << r.describe();
  EXPECT_EQ(read_file(dir() / "term"), "TERM\n");
  EXPECT_TRUE(contains(r.err, "lost the lock on 'cli:lost'")) << r.describe();
  EXPECT_FALSE(contains(r.err, "SIGKILL")) << r.describe();
  EXPECT_LT(took, 50s);
}

TEST_F(cli, command_ignoring_sigterm_is_killed_after_the_grace) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto p = start({"run", "--nodes", nodes, "--resource", "cli:stubborn", "--ttl", "3s", "--wait", "20s", "--grace",
                  "1s", "--json", "--", "sh", "-c", "trap '' TERM; touch \"$D/started\"; while :; do sleep 0.1; done"});
  ASSERT_TRUE(wait_for_file(dir() / "started", p.get())) << p->wait(5s).describe();
  // Someone deletes the keys: the next extension finds the lock is not ours.
  for (std::size_t i = 0; i < c.size(); ++i) c[i].command({"DEL", "cli:stubborn"});
  const auto r = p->wait();
  EXPECT_EQ(r.status, 76) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("event":"lost")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("reason":"not_owner")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("event":"killed")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("signal":"SIGKILL")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"({"event":"done")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("exit_status":76})")) << r.describe();
}

TEST_F(cli, max_hold_ends_the_lock_and_stops_the_command) {
  master_set c{3};
  const auto r = run({"run", "--nodes", masters_of(c), "--resource", "cli:maxhold", "--ttl", "1s", "--max-hold", "1s",
                      "--", "sleep", "60"});
  EXPECT_EQ(r.status, 76) << r.describe();
  EXPECT_TRUE(contains(r.err, "lost the lock on 'cli:maxhold' (--max-hold 1s reached)")) << r.describe();
}

// Failed extensions are reported as they happen (a warning while the lock still holds), the loss
// with its reason in words, and the release says what each master did.
TEST_F(cli, json_reports_failed_extensions_the_loss_reason_and_the_release_counts) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto ok = run({"run", "--nodes", nodes, "--resource", "cli:ev-ok", "--json", "--", "true"});
  EXPECT_EQ(ok.status, 0) << ok.describe();
  EXPECT_TRUE(contains(ok.err, R"("held":3,"not_held":0,"unreachable":0)")) << ok.describe();

  // A ttl long enough that a failed extension can be retried before the loss.
  auto p = start({"run", "--nodes", nodes, "--resource", "cli:ev", "--ttl", "3s", "--wait", "20s", "--grace", "60s",
                  "--json", "--", "sh", "-c", "trap 'exit 0' TERM; touch \"$D/started\"; while :; do sleep 0.1; done"});
  ASSERT_TRUE(wait_for_file(dir() / "started", p.get())) << p->wait(5s).describe();
  c[1].pause();  // no majority answers the extension any more
  c[2].pause();
  const auto r = p->wait(50s);
  c[1].resume();
  c[2].resume();
  EXPECT_EQ(r.status, 76) << r.describe();
  EXPECT_TRUE(contains(r.err, R"({"event":"extend_failed")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("error":"quorum_unavailable")")) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("reason":"quorum_unavailable","detail":"no extension reached a majority)"))
      << r.describe();
  // Master 1 still had the key (its extensions went through); the paused two did not answer.
  EXPECT_TRUE(contains(r.err, R"("held":1,"not_held":0,"unreachable":2)")) << r.describe();
}

// ---- run: signals --------------------------------------------------------------------------------

TEST_F(cli, signals_to_the_tool_reach_the_command_and_the_lock_is_released) {
  master_set c{3};
  const auto nodes = masters_of(c);
  int round = 0;
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    for (const bool foreground : {false, true}) {
      if (foreground && sig != SIGTERM) continue;  // --foreground forwards SIGTERM only (the terminal sends the rest)
      SCOPED_TRACE(fmt::format("signal {}{}", sig, foreground ? ", --foreground" : ""));
      const auto started = dir() / fmt::format("started-{}", ++round);
      const auto got = dir() / fmt::format("got-{}", round);
      std::vector<std::string> a{"run", "--nodes", nodes, "--resource", "cli:signal", "--ttl", "10s", "--wait", "20s"};
      if (foreground) a.push_back("--foreground");
      a.insert(a.end(), {"--", "sh", "-c",
                         fmt::format("trap 'echo got > \"{}\"; exit 7' TERM INT HUP; touch \"{}\"; "
                                     "while :; do sleep 0.1; done",
                                     got.string(), started.string())});
      auto p = start(a);
      ASSERT_TRUE(wait_for_file(started, p.get())) << p->wait(5s).describe();
      p->signal(sig);
      const auto r = p->wait();
      EXPECT_EQ(r.status, 7) << r.describe();
      EXPECT_EQ(read_file(got), "got\n");
      EXPECT_TRUE(key_gone_everywhere(c, "cli:signal"));
    }
  }
  // A command that does not handle the signal dies of it: 128 + N.
  auto p = start({"run", "--nodes", nodes, "--resource", "cli:signal", "--wait", "20s", "--", "sh", "-c",
                  "touch \"$D/plain\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "plain", p.get())) << p->wait(5s).describe();
  p->signal(SIGINT);
  const auto r = p->wait();
  EXPECT_EQ(r.status, 128 + SIGINT) << r.describe();
  EXPECT_TRUE(key_gone_everywhere(c, "cli:signal"));
}

TEST_F(cli, a_signal_while_waiting_for_the_lock_ends_the_wait) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto holder = start({"run", "--nodes", nodes, "--resource", "cli:queue", "--wait", "20s", "--", "sh", "-c",
                       "touch \"$D/held\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "held", holder.get())) << holder->wait(5s).describe();
  auto waiter = start({"run", "--nodes", nodes, "--resource", "cli:queue", "--wait", "60s", "--", "touch",
                       (dir() / "waiter-ran").string()});
  std::this_thread::sleep_for(300ms);  // let it start waiting (an earlier signal ends it as well)
  waiter->signal(SIGTERM);
  const auto r = waiter->wait(30s);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.describe();
  EXPECT_FALSE(fs::exists(dir() / "waiter-ran"));
  holder->signal(SIGTERM);
  holder->wait();
}

// ---- run: kinds of lock ------------------------------------------------------------------------

/// Writes an executable shell script into `dir` (kept out of the command lines: no quoting).
std::string script(const fs::path& dir, const std::string& name, const std::string& body) {
  const auto p = dir / name;
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all, fs::perm_options::replace);
  return p.string();
}

/// True when `key` exists on at least `n` masters.
bool key_on(master_set& c, const std::string& key, std::size_t n) {
  std::size_t have = 0;
  for (std::size_t i = 0; i < c.size(); ++i) have += c[i].running() && c[i].command({"EXISTS", key}) == ":1\r\n";
  return have >= n;
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(cli, shared_readers_overlap_and_a_writer_waits_for_them_without_being_starved) {
  master_set c{3};
  const auto nodes = masters_of(c);
  const std::vector<std::string> base{"run", "--nodes", nodes, "--resource", "cli:rw", "--ttl", "10s"};
  // Each reader enters, waits (at most 20 s) until the other is inside too, and stays until told.
  const auto reader = script(dir(), "reader",
                             "touch \"$D/r-$1\"; i=0\n"
                             "while [ ! -e \"$D/r-1\" ] || [ ! -e \"$D/r-2\" ]; do\n"
                             "  [ $i -ge 400 ] && exit 9; sleep 0.05; i=$((i+1)); done\n"
                             "echo both > \"$D/overlap-$1\"; i=0\n"
                             "while [ ! -e \"$D/release\" ]; do [ $i -ge 1200 ] && exit 10; sleep 0.05; i=$((i+1)); "
                             "done\n"
                             "rm \"$D/r-$1\"\n");
  // Whoever excludes readers must find none inside.
  const auto excluder = script(dir(), "excluder",
                               "for f in \"$D\"/r-*; do [ -e \"$f\" ] && echo \"$1 with $f\" >> \"$D/bad\"; done\n"
                               "echo \"$1\" >> \"$D/order\"\n");
  auto r1 = start(cat(base, {"--shared", "--wait", "20s", "--", reader, "1"}));
  auto r2 = start(cat(base, {"--shared", "--wait", "20s", "--", reader, "2"}));
  // Both readers inside at once: each saw the other's file.
  ASSERT_TRUE(wait_for_file(dir() / "overlap-1", r1.get())) << r1->wait(5s).describe();
  ASSERT_TRUE(wait_for_file(dir() / "overlap-2", r2.get())) << r2->wait(5s).describe();

  // While readers hold it, neither a plain lock nor a writer gets in at once.
  auto r = run(cat(base, {"--", "true"}));
  EXPECT_EQ(r.status, 75) << r.describe();
  r = run(cat(base, {"--write", "--", "true"}));
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "'cli:rw' is held by readers (3 masters: ")) << r.describe();
  // A third reader still joins (no writer waits yet).
  r = run(cat(base, {"--shared", "--", "true"}));
  EXPECT_EQ(r.status, 0) << r.describe();

  // A waiting writer claims its place on the masters: from then on no new reader enters.
  auto writer = start(cat(base, {"--write", "--wait", "30s", "--", excluder, "writer"}));
  const auto deadline = clock_type::now() + 20s;
  while (!key_on(c, "cli:rw:redlock-writer", 2) && clock_type::now() < deadline && !writer->exited()) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(key_on(c, "cli:rw:redlock-writer", 2)) << writer->wait(5s).describe();
  r = run(cat(base, {"--shared", "--", "true"}));
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "'cli:rw' is held by a writer, or a writer waits for it")) << r.describe();
  // A plain lock waits for the readers too.
  auto plain = start(cat(base, {"--wait", "30s", "--", excluder, "plain"}));
  std::this_thread::sleep_for(200ms);  // not proof, but a broken exclusion usually shows here
  EXPECT_FALSE(fs::exists(dir() / "order")) << read_file(dir() / "order");

  std::ofstream(dir() / "release") << "";
  for (auto* p : {r1.get(), r2.get()}) {
    const auto o = p->wait();
    EXPECT_EQ(o.status, 0) << o.describe();
  }
  const auto w = writer->wait();
  EXPECT_EQ(w.status, 0) << w.describe();
  const auto pl = plain->wait();
  EXPECT_EQ(pl.status, 0) << pl.describe();
  EXPECT_FALSE(fs::exists(dir() / "bad")) << read_file(dir() / "bad");
  const auto order = read_file(dir() / "order");
  EXPECT_TRUE(contains(order, "writer\n") && contains(order, "plain\n")) << order;
  EXPECT_TRUE(key_gone_everywhere(c, "cli:rw"));
  EXPECT_TRUE(key_gone_everywhere(c, "cli:rw:redlock-readers"));
}

TEST_F(cli, permits_admit_exactly_that_many_holders_at_once) {
  master_set c{5};
  const auto nodes = masters_of(c);
  const std::vector<std::string> base{"run",   "--nodes", nodes,       "--resource", "cli:sem",
                                      "--ttl", "10s",     "--permits", "2"};
  // Three concurrent runs. Inside, each counts the holders (the last to enter sees all that are
  // inside); the first two to enter wait (at most 20 s) until two are inside at once.
  const auto holder = script(dir(), "holder",
                             "touch \"$D/in-$$\"; n=$(ls \"$D\" | grep -c '^in-')\n"
                             "[ \"$n\" -gt 2 ] && echo \"$n inside\" >> \"$D/bad\"\n"
                             "if mkdir \"$D/first\" 2>/dev/null || mkdir \"$D/second\" 2>/dev/null; then\n"
                             "  i=0; while [ \"$(ls \"$D\" | grep -c '^in-')\" -lt 2 ] && [ $i -lt 400 ]; do\n"
                             "    sleep 0.05; i=$((i+1)); done\n"
                             "  ls \"$D\" | grep -c '^in-' >> \"$D/pair\"\n"
                             "fi\n"
                             "sleep 0.2; n=$(ls \"$D\" | grep -c '^in-')\n"
                             "[ \"$n\" -gt 2 ] && echo \"$n inside\" >> \"$D/bad\"\n"
                             "rm \"$D/in-$$\"; echo ran >> \"$D/ran\"\n");
  std::vector<std::unique_ptr<tool_process>> ps;
  for (int i = 0; i < 3; ++i) ps.push_back(start(cat(base, {"--wait", "40s", "--", holder})));
  for (auto& p : ps) {
    const auto o = p->wait(90s);
    EXPECT_EQ(o.status, 0) << o.describe();
  }
  EXPECT_FALSE(fs::exists(dir() / "bad")) << read_file(dir() / "bad");
  EXPECT_EQ(read_file(dir() / "pair"), "2\n2\n");  // the first two were inside together
  EXPECT_EQ(read_file(dir() / "ran"), "ran\nran\nran\n");

  // Two holders sit: a third is refused at once, and --verbose says the semaphore's quorum.
  auto h1 = start(cat(base, {"--", "sh", "-c", "touch \"$D/h1\"; exec sleep 60"}));
  auto h2 = start(cat(base, {"--", "sh", "-c", "touch \"$D/h2\"; exec sleep 60"}));
  ASSERT_TRUE(wait_for_file(dir() / "h1", h1.get())) << h1->wait(5s).describe();
  ASSERT_TRUE(wait_for_file(dir() / "h2", h2.get())) << h2->wait(5s).describe();
  auto r = run(cat(base, {"--verbose", "--", "true"}));
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "all 2 permits of 'cli:sem' are taken")) << r.describe();
  EXPECT_TRUE(contains(r.err, "a semaphore of 2 permits needs 4 of the 5 masters")) << r.describe();
  // Another number of permits on the same semaphore: the masters refuse it, saying why.
  r = run({"run", "--nodes", nodes, "--resource", "cli:sem", "--permits", "3", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "semaphore has 2 permits, not 3")) << r.describe();
  // One leaves: the third gets in.
  h1->signal(SIGTERM);
  EXPECT_EQ(h1->wait().status, 128 + SIGTERM);
  r = run(cat(base, {"--json", "--", "true"}));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("kind":"semaphore","quorum":4,"permits":2)")) << r.describe();
  h2->signal(SIGTERM);
  EXPECT_EQ(h2->wait().status, 128 + SIGTERM);
  EXPECT_TRUE(key_gone_everywhere(c, "cli:sem"));
}

TEST_F(cli, fence_exports_a_token_that_grows_from_holder_to_holder) {
  master_set c{3};
  const auto nodes = masters_of(c);
  const auto fenced = [&](const std::string& file) {
    return std::vector<std::string>{"run",
                                    "--nodes",
                                    nodes,
                                    "--resource",
                                    "cli:fence",
                                    "--fence",
                                    "--json",
                                    "--wait",
                                    "10s",
                                    "--",
                                    "sh",
                                    "-c",
                                    fmt::format("echo \"$REDLOCK_FENCE\" > \"$D/{}\"", file)};
  };
  auto r = run(fenced("f1"), {{"REDLOCK_FENCE", "1"}});  // an outer value is replaced
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto f1 = read_file(dir() / "f1");
  ASSERT_FALSE(f1.empty());
  const auto first = std::stoull(f1);
  EXPECT_GT(first, 1u);
  EXPECT_TRUE(contains(r.err, fmt::format(R"("fence":{})", first))) << r.describe();
  r = run(fenced("f2"));
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto second = std::stoull(read_file(dir() / "f2"));
  EXPECT_GT(second, first);

  // Without --fence the command gets no token, not even an enclosing run's.
  r = run({"run", "--nodes", nodes, "--resource", "cli:fence", "--", "sh", "-c", "test -z \"${REDLOCK_FENCE+set}\""},
          {{"REDLOCK_FENCE", "12"}});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(key_gone_everywhere(c, "cli:fence"));
}

TEST_F(cli, reentrant_runs_nest_instead_of_deadlocking) {
  master_set c{3};
  const auto nodes = masters_of(c);
  // The command of the outer run takes the same lock again: with the same owner it re-enters;
  // without it (or with another owner) it is refused, also after the inner run released its hold.
  const auto nested =
      script(dir(), "nested",
             "\"$TOOL\" run --resource cli:re $INNER -- sh -c 'echo \"$REDLOCK_OWNER\" > \"$D/inner-owner\"'\n"
             "echo $? > \"$D/inner\"\n"
             "\"$TOOL\" run --resource cli:re -- true\n"
             "echo $? > \"$D/plain\"\n"
             "\"$TOOL\" run --resource cli:re --owner someone-else -- true\n"
             "echo $? > \"$D/other\"\n"
             "echo \"$REDLOCK_OWNER\" > \"$D/outer-owner\"\n");
  const env_map env_of{{"TOOL", tool}, {"REDLOCK_NODES", nodes}, {"INNER", "--reentrant"}};
  auto r = run({"run", "--resource", "cli:re", "--reentrant", "--", nested}, env_of);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(read_file(dir() / "inner"), "0\n");
  EXPECT_EQ(read_file(dir() / "plain"), "75\n");
  EXPECT_EQ(read_file(dir() / "other"), "75\n");
  const auto owner = read_file(dir() / "outer-owner");
  EXPECT_EQ(owner.size(), 41u) << owner;  // 40 hex digits and the newline
  EXPECT_EQ(read_file(dir() / "inner-owner"), owner);
  EXPECT_TRUE(key_gone_everywhere(c, "cli:re"));

  // The same with an owner named on the command line.
  for (const char* f : {"inner", "plain", "other"}) fs::remove(dir() / f);
  auto named = env_of;
  named["INNER"] = "--owner=job-7";
  r = run({"run", "--resource", "cli:re", "--owner", "job-7", "--", nested}, named);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(read_file(dir() / "inner"), "0\n");
  EXPECT_EQ(read_file(dir() / "plain"), "75\n");
  EXPECT_EQ(read_file(dir() / "other"), "75\n");
  EXPECT_EQ(read_file(dir() / "outer-owner"), "job-7\n");
  EXPECT_TRUE(key_gone_everywhere(c, "cli:re"));

  // A bad inherited owner is a configuration error.
  r = run({"run", "--resource", "cli:re", "--reentrant", "--", "true"},
          {{"REDLOCK_NODES", nodes}, {"REDLOCK_OWNER", "has blank"}});
  EXPECT_EQ(r.status, 78) << r.describe();
  EXPECT_TRUE(contains(r.err, "REDLOCK_OWNER is not an owner id")) << r.describe();
}

TEST_F(cli, several_resources_are_locked_all_or_none) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto holder = start({"run", "--nodes", nodes, "-r", "cli:a", "-r", "cli:b", "--", "sh", "-c",
                       "printf '%s|%s|' \"$REDLOCK_RESOURCES\" \"$REDLOCK_RESOURCE\" > \"$D/res\"; "
                       "touch \"$D/held\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "held", holder.get())) << holder->wait(5s).describe();
  EXPECT_EQ(read_file(dir() / "res"), "cli:a\ncli:b|cli:a|");
  auto r = run({"run", "--nodes", nodes, "-r", "cli:b", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  r = run({"run", "--nodes", nodes, "-r", "cli:c", "-r", "cli:b", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "cannot lock 'cli:c', 'cli:b': 'cli:b' is held by someone else (3 masters: "))
      << r.describe();
  // None: the free one of that set was not kept.
  EXPECT_TRUE(key_gone_everywhere(c, "cli:c"));
  r = run({"run", "--nodes", nodes, "-r", "cli:c", "-r", "cli:d", "--json", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("resources":["cli:c","cli:d"])")) << r.describe();
  holder->signal(SIGTERM);
  EXPECT_EQ(holder->wait().status, 128 + SIGTERM);
  for (const char* k : {"cli:a", "cli:b", "cli:c", "cli:d"}) EXPECT_TRUE(key_gone_everywhere(c, k)) << k;
}

TEST_F(cli, every_kind_is_kept_alive_while_the_command_runs) {
  master_set c{3};
  const auto nodes = masters_of(c);
  // Runs of 2.5 s on a ttl of 1 s: without renewals each would be lost (status 76).
  const std::vector<std::vector<std::string>> kinds{
      {"-r", "cli:ka-read", "--shared"}, {"-r", "cli:ka-write", "--write"},     {"-r", "cli:ka-sem", "--permits", "2"},
      {"-r", "cli:ka-fence", "--fence"}, {"-r", "cli:ka-owner", "--reentrant"}, {"-r", "cli:ka-a", "-r", "cli:ka-b"}};
  std::vector<std::unique_ptr<tool_process>> ps;
  for (const auto& k : kinds) {
    ps.push_back(start(cat(cat({"run", "--nodes", nodes, "--ttl", "1s", "--json"}, k), {"--", "sleep", "2.5"})));
  }
  for (std::size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(fmt::format("{} {}", kinds[i][1], kinds[i][2]));
    const auto r = ps[i]->wait();
    EXPECT_EQ(r.status, 0) << r.describe();
    EXPECT_TRUE(contains(r.err, R"("event":"extended")")) << r.describe();
    EXPECT_FALSE(contains(r.err, R"("event":"lost")")) << r.describe();
  }
  for (const char* k : {"cli:ka-read", "cli:ka-write", "cli:ka-sem", "cli:ka-fence", "cli:ka-owner", "cli:ka-a"}) {
    EXPECT_TRUE(key_gone_everywhere(c, k)) << k;
  }
}

// ---- status ------------------------------------------------------------------------------------

TEST_F(cli, status_of_a_held_and_a_free_resource) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto holder = start({"run", "--nodes", nodes, "--resource", "cli:st", "--ttl", "20s", "--wait", "20s", "--", "sh",
                       "-c", "touch \"$D/held\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "held", holder.get())) << holder->wait(5s).describe();
  const auto get = c[0].command({"GET", "cli:st"});  // "$40\r\n<token>\r\n"
  ASSERT_TRUE(get.starts_with("$40\r\n")) << get;
  const auto token = get.substr(5, 40);
  const auto short_token = token.substr(0, 8);

  auto r = run({"status", "--nodes", nodes, "cli:st"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format("'cli:st' is held by {} on 3 of 3 masters (majority 2)", short_token)))
      << r.describe();
  EXPECT_FALSE(contains(r.out, token)) << r.describe();  // never the whole token without --verbose
  r = run({"status", "--nodes", nodes, "--verbose", "cli:st"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, token)) << r.describe();
  r = run({"status", "--nodes", nodes, "--json", "cli:st"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with(R"({"resource":"cli:st","key":"cli:st","state":"held",)")) << r.describe();
  EXPECT_TRUE(
      contains(r.out, fmt::format(R"("holder":"{}","holders":3,"answered":3,"total":3,"majority":2)", short_token)))
      << r.describe();
  EXPECT_TRUE(contains(r.out, R"("reachable":true,"exists":true)")) << r.describe();
  EXPECT_FALSE(contains(r.out, token)) << r.describe();

  // One master loses the key: still held by a majority. Then a split: only one keeps it.
  c[0].command({"DEL", "cli:st"});
  r = run({"status", "--nodes", nodes, "cli:st"});
  EXPECT_EQ(r.status, 0) << r.describe();
  c[1].command({"DEL", "cli:st"});
  r = run({"status", "--nodes", nodes, "--json", "cli:st"});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("state":"split")")) << r.describe();

  holder->signal(SIGTERM);
  holder->wait();
  r = run({"status", "--nodes", nodes, "cli:st"});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(contains(r.out, "'cli:st' is free")) << r.describe();
  r = run({"status", "--nodes", nodes, "--json", "--prefix", "app:", "cli:st"});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("key":"app:cli:st","state":"free","holder":null)")) << r.describe();

  // A key that is no lock: that master counts as not answering, the verdict from the others.
  c[0].command({"HSET", "cli:st", "a", "b"});
  r = run({"status", "--nodes", nodes, "--json", "cli:st"});
  EXPECT_EQ(r.status, 1) << r.describe();  // the two others answered: no key
  EXPECT_TRUE(contains(
      r.out, R"("reachable":true,"exists":null,"holder":null,"pttl_ms":null,"error":"the key is a hash, not a lock")"))
      << r.describe();
  c[0].command({"DEL", "cli:st"});

  // A master down: reported, the verdict from the others.
  c[2].kill();
  r = run({"status", "--nodes", nodes, "--json", "cli:st"});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("reachable":false)")) << r.describe();
}

// ---- nodes ---------------------------------------------------------------------------------------

std::vector<pid_t> pids_in(const std::string& json) {
  std::vector<pid_t> pids;
  // Plain scanning: GCC 12's std::regex trips -Wmaybe-uninitialized in the sanitizer builds.
  constexpr std::string_view key = R"("pid":)";
  for (auto at = json.find(key); at != std::string::npos; at = json.find(key, at + key.size())) {
    pids.push_back(std::stoi(json.substr(at + key.size())));
  }
  return pids;
}

bool process_gone(pid_t pid) {
  const auto stat = read_file(fmt::format("/proc/{}/stat", pid));
  if (stat.empty()) return true;
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';  // a zombie is gone too
}

TEST_F(cli, local_nodes_up_status_run_down) {
  auto r = run({"nodes"});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(contains(r.out, "no local nodes recorded")) << r.describe();
  // Without masters configured anywhere and nothing recorded: a configuration error.
  r = run({"status", "x"});
  EXPECT_EQ(r.status, 78) << r.describe();
  EXPECT_TRUE(contains(r.err, "no masters configured")) << r.describe();

  r = run({"nodes", "up", "3"});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "export REDLOCK_NODES=127.0.0.1:")) << r.describe();
  r = run({"nodes", "--json"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto pids = pids_in(r.out);
  ASSERT_EQ(pids.size(), 3u) << r.describe();
  struct cleanup {  // whatever happens below, the servers do not outlive the test
    std::vector<pid_t> pids;
    ~cleanup() {
      for (pid_t p : pids) {
        if (!process_gone(p)) ::kill(p, SIGKILL);
      }
    }
  } guard{pids};
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '{') - 1, 3) << r.describe();
  EXPECT_FALSE(contains(r.out, R"("running":false)")) << r.describe();

  r = run({"nodes", "up", "2"});
  EXPECT_EQ(r.status, 73) << r.describe();
  EXPECT_TRUE(contains(r.err, "already running")) << r.describe();

  // run and status use the recorded nodes when nothing else is configured.
  r = run({"status", "cli:local"});
  EXPECT_EQ(r.status, 1) << r.describe();
  r = run({"run", "--verbose", "--resource", "cli:local", "--", "sh", "-c", "echo inside"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(r.out, "inside\n");
  EXPECT_TRUE(contains(r.err, "3 masters from the local nodes of 'redlock nodes up'")) << r.describe();
  EXPECT_TRUE(contains(r.err, "granted")) << r.describe();

  // They outlive the command that started them, and go with `nodes down`.
  for (pid_t p : pids) EXPECT_FALSE(process_gone(p)) << p;
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "stopped 3 local nodes")) << r.describe();
  for (pid_t p : pids) EXPECT_TRUE(process_gone(p)) << p;
  EXPECT_FALSE(fs::exists(dir() / "state" / "nodes"));
  r = run({"nodes"});
  EXPECT_EQ(r.status, 1) << r.describe();
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();
}

// `nodes up N --shards S`: N masters, each a Redis Cluster of S shards; run and status reach the
// node that owns the key's slot.
TEST_F(cli, local_cluster_nodes_up_run_status_down) {
  auto r = run({"nodes", "up", "2", "--shards", "8"});
  EXPECT_EQ(r.status, 64) << r.describe();
  EXPECT_TRUE(contains(r.err, "would start 16 servers; at most 15")) << r.describe();
  r = run({"nodes", "down", "--shards", "2"});
  EXPECT_EQ(r.status, 64) << r.describe();
  r = run({"nodes", "up", "3", "--shards", "2"});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "3 local Redis Cluster masters of 2 shards each")) << r.describe();
  EXPECT_TRUE(contains(r.out, "export REDLOCK_NODES=redis-cluster://127.0.0.1:")) << r.describe();
  r = run({"nodes", "--json"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto pids = pids_in(r.out);
  struct cleanup {
    std::vector<pid_t> pids;
    ~cleanup() {
      for (pid_t p : pids) {
        if (!process_gone(p)) ::kill(p, SIGKILL);
      }
    }
  } guard{pids};
  ASSERT_EQ(pids.size(), 6u) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("shards":2)")) << r.describe();
  // Names on both shards of every cluster.
  for (const char* name : {"orders:1", "orders:2", "orders:3"}) {
    r = run({"run", "--resource", name, "--", "sh", "-c", "echo inside"});
    EXPECT_EQ(r.status, 0) << r.describe();
    EXPECT_EQ(r.out, "inside\n") << r.describe();
    r = run({"status", name});
    EXPECT_EQ(r.status, 1) << r.describe();
    EXPECT_TRUE(contains(r.out, "is free (no key on the 3 of 3 masters that answered)")) << r.describe();
  }
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "stopped 6 local nodes")) << r.describe();
}

TEST(cli_local_nodes, owned_set_kill_and_restart_on_the_same_port) {
  redlock::local::node_set set{2};
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set.masters(), fmt::format("127.0.0.1:{},127.0.0.1:{}", set[0].port(), set[1].port()));
  const auto port = set[1].port();
  const auto pid = set[1].pid();
  EXPECT_TRUE(set[1].running());
  set[1].kill();
  EXPECT_FALSE(set[1].running());
  set[1].restart();
  EXPECT_TRUE(set[1].running());
  EXPECT_EQ(set[1].port(), port);
  EXPECT_NE(set[1].pid(), pid);
}

// ---- credentials ---------------------------------------------------------------------------------

TEST_F(cli, passwords_and_acl_users_work_and_never_show) {
  const std::string password = "pw-Sekr1t-4242";
  const std::string user_password = "acl-Sekr1t-9797";
  const std::string wrong = "wrong-Sekr1t-1111";
  redlock::test::redis_options opts;
  opts.password = password;
  opts.user = redlock::test::acl_user{"locker", user_password};
  master_set c{3, opts};
  const auto nodes = masters_of(c);
  const auto no_secret = [&](const outcome& r) {
    for (const auto& s : {password, user_password, wrong}) {
      EXPECT_FALSE(contains(r.out, s)) << r.describe();
      EXPECT_FALSE(contains(r.err, s)) << r.describe();
    }
  };

  const env_map as_default{{"REDLOCK_PASSWORD", password}};
  auto r = run({"run", "--nodes", nodes, "--verbose", "--resource", "cli:auth", "--", "true"}, as_default);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "with the password from REDLOCK_PASSWORD")) << r.describe();
  no_secret(r);
  r = run({"run", "--nodes", nodes, "--json", "--resource", "cli:auth", "--", "true"}, as_default);
  EXPECT_EQ(r.status, 0) << r.describe();
  no_secret(r);
  r = run({"status", "--nodes", nodes, "--verbose", "--json", "cli:auth"}, as_default);
  EXPECT_EQ(r.status, 1) << r.describe();
  no_secret(r);

  const env_map as_user{{"REDLOCK_USERNAME", "locker"}, {"REDLOCK_PASSWORD", user_password}};
  r = run({"run", "--nodes", nodes, "--verbose", "--resource", "cli:auth", "--", "true"}, as_user);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "as user 'locker'")) << r.describe();
  no_secret(r);

  // Through a configuration file and a password file.
  const auto pw_file = dir() / "pw";
  std::ofstream(pw_file) << user_password << '\n';
  const auto conf = dir() / "redlock.conf";
  std::ofstream(conf) << "nodes = " << nodes << "\nusername = locker\npassword_file = " << pw_file.string() << "\n";
  r = run({"run", "--config", conf.string(), "--verbose", "--resource", "cli:auth", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.describe();
  no_secret(r);

  // Rejected credentials: a clear message, and still no secret.
  const env_map bad{{"REDLOCK_USERNAME", "locker"}, {"REDLOCK_PASSWORD", wrong}};
  r = run({"run", "--nodes", nodes, "--verbose", "--resource", "cli:auth", "--", "true"}, bad);
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "masters unavailable")) << r.describe();
  EXPECT_TRUE(contains(r.err, "rejected the credentials")) << r.describe();
  no_secret(r);
  r = run({"run", "--nodes", nodes, "--json", "--resource", "cli:auth", "--", "true"}, bad);
  EXPECT_EQ(r.status, 75) << r.describe();
  no_secret(r);
  r = run({"status", "--nodes", nodes, "--verbose", "cli:auth"}, bad);
  EXPECT_EQ(r.status, 69) << r.describe();
  EXPECT_TRUE(contains(r.out, "rejected the credentials")) << r.describe();
  no_secret(r);
  r = run({"status", "--nodes", nodes, "--json", "cli:auth"}, bad);
  EXPECT_EQ(r.status, 69) << r.describe();
  no_secret(r);

  // A password in the configuration file is refused without repeating it.
  std::ofstream(conf) << "nodes = " << nodes << "\npassword = " << password << "\n";
  r = run({"status", "--config", conf.string(), "cli:auth"});
  EXPECT_EQ(r.status, 78) << r.describe();
  EXPECT_TRUE(contains(r.err, "passwords are not accepted")) << r.describe();
  no_secret(r);
}

// A wrong password with --wait: the run gives up after one or two attempts instead of waiting
// out --wait (it would take a minute), and the message names every master with its cause and the
// server's refusal, never the password. An unknown host name is named the same way. Catches the
// old "masters unavailable" after the whole wait, with "not connected" as the only cause.
TEST_F(cli, wrong_password_and_unknown_host_fail_at_once_naming_each_master) {
  const std::string password = "pw-Sekr1t-5151";
  const std::string wrong = "wrong-Sekr1t-2222";
  redlock::test::redis_options opts;
  opts.password = password;
  master_set c{3, opts};
  const auto nodes = masters_of(c);
  auto r = run({"run", "--nodes", nodes, "--json", "--wait", "1m", "--resource", "cli:pw", "--", "true"},
               {{"REDLOCK_PASSWORD", wrong}});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "masters unavailable")) << r.describe();
  EXPECT_TRUE(contains(r.err, "\"attempts\":1") || contains(r.err, "\"attempts\":2")) << r.describe();
  // The quorum is decided by the first two refusals: the third master may still be pending.
  std::size_t named = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    named += contains(r.err,
                      fmt::format("master {} ({}:{}) unreachable: the node rejected", i + 1, c[i].host(), c[i].port()));
  }
  EXPECT_GE(named, 2u) << r.describe();
  EXPECT_TRUE(contains(r.err, "WRONGPASS")) << r.describe();
  EXPECT_FALSE(contains(r.err, wrong)) << r.describe();
  EXPECT_FALSE(fs::exists(dir() / "ran"));

  const auto unknown = "a.nohost.invalid:6379,b.nohost.invalid:6379," + c[0].host() + ":" + std::to_string(c[0].port());
  r = run({"run", "--nodes", unknown, "--wait", "1m", "--resource", "cli:host", "--", "true"},
          {{"REDLOCK_PASSWORD", password}});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "master 1 (a.nohost.invalid:6379) unreachable: Host not found")) << r.describe();
  EXPECT_TRUE(contains(r.err, "master 2 (b.nohost.invalid:6379) unreachable: Host not found")) << r.describe();
}

// ---- configuration sources ----------------------------------------------------------------------

TEST_F(cli, masters_from_environment_and_config_file_with_flag_first) {
  master_set c{3};
  const auto nodes = masters_of(c);
  auto r = run({"run", "-v", "-r", "cli:src", "--", "true"}, {{"REDLOCK_NODES", nodes}});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "3 masters from REDLOCK_NODES")) << r.describe();

  const auto conf = dir() / "c.conf";
  std::ofstream(conf) << "# test\nnodes = " << nodes << "\nkey_prefix = conf:\n";
  r = run({"run", "-v", "-r", "cli:src", "--", "sh", "-c", "test \"$REDLOCK_KEY\" = conf:cli:src"},
          {{"REDLOCK_CONFIG", conf.string()}});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "from the configuration file " + conf.string())) << r.describe();

  // The flag beats a useless environment.
  r = run({"status", "-v", "--nodes", nodes, "cli:src"}, {{"REDLOCK_NODES", "127.0.0.1:1"}});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(contains(r.err, "from --nodes")) << r.describe();
}

// ---- command-line and configuration errors -------------------------------------------------------

TEST_F(cli, usage_and_configuration_errors) {
  const auto usage = [&](const std::vector<std::string>& a, std::string_view message) {
    const auto r = run(a);
    EXPECT_EQ(r.status, 64) << r.describe();
    EXPECT_TRUE(contains(r.err, message)) << r.describe();
    // One message, one hint where to look (without a command: the whole usage instead).
    if (!a.empty()) {
      EXPECT_EQ(count_of(r.err, "redlock: "), 1u) << r.describe();
      EXPECT_EQ(count_of(r.err, "(see 'redlock"), 1u) << r.describe();
    }
  };
  const auto config = [&](const std::vector<std::string>& a, std::string_view message) {
    const auto r = run(a);
    EXPECT_EQ(r.status, 78) << r.describe();
    EXPECT_TRUE(contains(r.err, message)) << r.describe();
  };
  usage({}, "usage: redlock COMMAND");
  usage({"frobnicate"}, "unknown command 'frobnicate'");
  usage({"--nodes", "x", "status", "r"}, "options go after the command");
  usage({"run", "-r", "x", "--bogus", "--", "true"},
        "unknown option '--bogus' for 'redlock run' (see 'redlock run --help')\n");
  usage({"status", "--bogus", "x"}, "unknown option '--bogus' for 'redlock status' (see 'redlock status --help')\n");
  usage({"nodes", "--bogus"}, "unknown option '--bogus' for 'redlock nodes' (see 'redlock nodes --help')\n");
  usage({"run", "--", "true"}, "missing --resource");
  usage({"run", "-r", "x"}, "missing the command");
  usage({"run", "-r", "x", "--ttl", "5x", "--", "true"}, "'5x' is not a duration: unknown unit 'x'");
  usage({"run", "-r", "x", "--wait", "-1s", "--", "true"}, "'-1s' is not a duration");
  usage({"run", "-r", "x", "--nodes", "127.0.0.1:1", "--ttl", "100ms", "--", "true"}, "--ttl 100ms is too short");
  usage({"run", "-r", "x", "--nodes", "127.0.0.1:1", "--json-fd", "97", "--", "true"}, "--json-fd 97");
  usage({"status"}, "missing the resource name");
  usage({"nodes", "up", "0"}, "not a number of masters");
  usage({"run", "-r", "x", "--shared", "--permits", "2", "--", "true"}, "--shared and --permits cannot be combined");
  usage({"run", "-r", "x", "--fence", "--shared", "--", "true"}, "--fence cannot be combined with --shared");
  usage({"run", "-r", "x", "--permits", "0", "--", "true"}, "'0' is not a number of permits");
  usage({"run", "-r", "x", "-r", "y", "--write", "--", "true"}, "several --resource cannot be combined with --write");
  config({"run", "-r", "x", "--nodes", "127.0.0.1:notaport", "--", "true"},
         "bad list of masters from --nodes: master 1 ('127.0.0.1:notaport'): port is not a number");
  config({"status", "--nodes", "[::1", "x"}, "missing ']'");
  config({"run", "-r", "x", "--", "true"}, "no masters configured");
  config({"status", "--config", (dir() / "nope.conf").string(), "x"}, "cannot read the configuration file");

  auto r = run({"--help"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "usage: redlock COMMAND")) << r.describe();
  for (const char* command : {"run", "status", "nodes"}) {
    r = run({command, "--help"});
    EXPECT_EQ(r.status, 0) << r.describe();
    EXPECT_TRUE(contains(r.out, fmt::format("usage: redlock {}", command))) << r.describe();
  }
  r = run({"help", "run"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "Exit status")) << r.describe();
  r = run({"--version"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("redlock ")) << r.describe();
}

TEST_F(cli, json_events_on_a_chosen_descriptor_and_descriptors_passed_on) {
  master_set c{3};
  const auto nodes = masters_of(c);
  // A shell opens descriptors 3 (for the events) and 4 (for the command) and execs the tool, as a
  // script would. The command gets the caller's descriptor 4 (as with flock), not the tool's own.
  const auto events = dir() / "events.jsonl";
  const auto r = run_program(
      "/bin/sh", {"-c", fmt::format("exec 3>\"{}\" 4>/dev/null; exec \"{}\" run --nodes {} --resource cli:fd "
                                    "--json-fd 3 -- sh -c 'test -e /proc/self/fd/3 && echo fd3-leaked; "
                                    "test -e /proc/self/fd/4 && echo fd4-kept; true'",
                                    events.string(), tool, nodes)});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(r.out, "fd4-kept\n") << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
  const auto lines = read_file(events);
  EXPECT_TRUE(lines.starts_with(R"({"event":"acquired")")) << lines;
  EXPECT_TRUE(contains(lines, R"({"event":"started")")) << lines;
  EXPECT_TRUE(contains(lines, R"({"event":"exited")")) << lines;
  EXPECT_TRUE(contains(lines, R"({"event":"released")")) << lines;
  EXPECT_TRUE(contains(lines, R"("exit_status":0})")) << lines;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 5) << lines;
}

// ---- what the messages count and name ----------------------------------------------------------------

/// How `redlock` names master `i` (from 0) of `c` in its human output: numbered from 1.
std::string label_of(master_set& c, std::size_t i) {
  return fmt::format("master {} (127.0.0.1:{})", i + 1, c[i].port());
}

/// The bulk strings of a raw RESP reply ("*2\r\n$3\r\nabc\r\n..."), in order.
std::vector<std::string> bulks_of(const std::string& raw) {
  std::vector<std::string> out;
  for (std::size_t at = raw.find('$'); at != std::string::npos; at = raw.find('$', at)) {
    const auto eol = raw.find("\r\n", at);
    if (eol == std::string::npos) break;
    const auto len = std::stoll(raw.substr(at + 1, eol - at - 1));
    if (len < 0) {
      at = eol;
      continue;
    }
    out.push_back(raw.substr(eol + 2, static_cast<std::size_t>(len)));
    at = eol + 2 + static_cast<std::size_t>(len);
  }
  return out;
}

/// A loopback port that accepts connections (the kernel completes them) but never answers: a
/// master whose connection stays on its first attempt. Closed with the object.
struct silent_port {
  int fd = -1;
  std::uint16_t port = 0;
  silent_port() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error(fmt::format("silent port: {}", std::strerror(errno)));
    }
    port = ntohs(a.sin_port);
  }
  silent_port(const silent_port&) = delete;
  silent_port& operator=(const silent_port&) = delete;
  ~silent_port() { ::close(fd); }
};

// Two masters up, three down: the message counts what each did when the outcome was decided
// (answered, still pending, failed), says how many are usable against how many are needed, and
// numbers the masters from 1 as everywhere else. Catches the old "0 of 5 answered" while `status`
// said two answered, and the readiness line's "3 of 5 masters could not be used (3 needed)".
TEST_F(cli, unavailable_masters_are_counted_as_answered_pending_or_failed) {
  master_set c{5};
  const auto nodes = masters_of(c);
  for (std::size_t i : {2u, 3u, 4u}) c[i].kill();
  std::string failed;
  for (std::size_t i : {2u, 3u, 4u}) {
    failed += fmt::format("{}{} unreachable: Connection refused", failed.empty() ? "" : "; ", label_of(c, i));
  }
  auto r = run({"run", "--nodes", nodes, "--verbose", "--resource", "k9d", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  // The refusals decide at once: the two healthy masters are still pending then (or, on a slow
  // machine, have answered).
  const auto pending = fmt::format(
      "redlock: cannot lock 'k9d': masters unavailable: at most 2 of 5 masters usable, 3 needed (0 answered, 2 still "
      "pending, 3 failed: {})\n",
      failed);
  const auto answered = fmt::format(
      "redlock: cannot lock 'k9d': masters unavailable: only 2 of 5 masters usable, 3 needed (2 answered, 0 still "
      "pending, 3 failed: {})\n",
      failed);
  EXPECT_TRUE(contains(r.err, pending) || contains(r.err, answered)) << r.describe();
  EXPECT_TRUE(contains(r.err, fmt::format("2 of 5 masters connected, 3 needed (3 failed: {})\n", failed)))
      << r.describe();
  for (std::size_t i : {0u, 1u}) {
    EXPECT_TRUE(
        contains(r.err, fmt::format("redlock:   {:<32} still pending (the outcome was decided before it answered)\n",
                                    label_of(c, i))) ||
        contains(r.err, fmt::format("redlock:   {:<32} granted ", label_of(c, i))))
        << r.describe();
  }
  EXPECT_FALSE(contains(r.err, "could not be used")) << r.describe();
  EXPECT_FALSE(contains(r.err, "Success")) << r.describe();
  // status at the same moment counts the same two.
  r = run({"status", "--nodes", nodes, "k9d"});
  EXPECT_EQ(r.status, 69) << r.describe();
  EXPECT_TRUE(r.out.starts_with("'k9d' is unavailable: only 2 of 5 masters answered, 3 needed\n")) << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format("  {:<32} unreachable: Connection refused\n", label_of(c, 4))))
      << r.describe();

  // Host names that do not resolve: the healthy master is pending (or answered), not "0 of 3".
  const auto hosts = "a.nohost.invalid:6379,b.nohost.invalid:6379," + c[0].host() + ":" + std::to_string(c[0].port());
  r = run({"run", "--nodes", hosts, "--json", "--resource", "k9h", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err,
                       "masters unavailable: at most 1 of 3 masters usable, 2 needed (0 answered, 1 still "
                       "pending, 2 failed: master 1 (a.nohost.invalid:6379) unreachable: Host not found") ||
              contains(r.err,
                       "masters unavailable: only 1 of 3 masters usable, 2 needed (1 answered, 0 still "
                       "pending, 2 failed: master 1 (a.nohost.invalid:6379) unreachable: Host not found"))
      << r.describe();
  EXPECT_TRUE(contains(r.err, R"("answers":{"granted":0,"taken":0,"queued":0,"pending":1,"failed":2})") ||
              contains(r.err, R"("answers":{"granted":1,"taken":0,"queued":0,"pending":0,"failed":2})"))
      << r.describe();
}

// A master still on its first connection attempt is "still connecting" or "still pending", never
// an empty reason or "Success", in the readiness line, the failure and the per-master lines.
TEST_F(cli, a_master_still_connecting_is_said_so) {
  silent_port silent;
  const auto nodes = fmt::format("a.nohost.invalid:6379,b.nohost.invalid:6379,127.0.0.1:{}", silent.port);
  const auto third = fmt::format("master 3 (127.0.0.1:{})", silent.port);
  auto r = run({"run", "--nodes", nodes, "--verbose", "--resource", "k9c", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err,
                       "0 of 3 masters connected, 2 needed (2 failed: master 1 (a.nohost.invalid:6379) "
                       "unreachable: Host not found"))
      << r.describe();
  EXPECT_TRUE(contains(r.err, fmt::format("; 1 still connecting: {})\n", third))) << r.describe();
  EXPECT_TRUE(contains(r.err,
                       "redlock: cannot lock 'k9c': masters unavailable: at most 1 of 3 masters usable, 2 "
                       "needed (0 answered, 1 still pending, 2 failed: master 1 (a.nohost.invalid:6379) "
                       "unreachable: Host not found"))
      << r.describe();
  EXPECT_TRUE(contains(r.err, fmt::format("redlock:   {:<32} still pending (the outcome was decided before it "
                                          "answered)\n",
                                          third)))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "Success")) << r.describe();
  r = run({"run", "--nodes", nodes, "--json", "--resource", "k9c", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(
      r.err, fmt::format(R"({{"address":"127.0.0.1:{}","status":"pending","latency_ms":0.000}})", silent.port)))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "Success")) << r.describe();
}

// A refusal counts every master as it was when the outcome was decided, says that a writer was
// queued behind readers, and names the held one of several resources. Catches "taken on 3 of 5"
// while all five held it, a writer told "held by someone else (taken on 0 of 5 masters)", and
// "one of 'acct:42', 'acct:99' is held by someone else".
TEST_F(cli, refusals_count_every_master_and_name_what_holds_it) {
  master_set c{5};
  const auto nodes = masters_of(c);
  // Each message as it may come: `decided` masters answered alike ("{}" in `pattern`), the rest
  // were still pending when that decided the outcome.
  const auto one_of = [](const std::string& err, const std::string& pattern, std::size_t from) {
    for (std::size_t decided = from; decided <= 5; ++decided) {
      auto text = fmt::format(fmt::runtime(pattern), decided);
      if (decided < 5)
        text.insert(text.find(')', text.find("5 masters: ")), fmt::format(", {} still pending", 5 - decided));
      if (contains(err, text)) return true;
    }
    return false;
  };
  auto holder = start(
      {"run", "--nodes", nodes, "-r", "k3", "-r", "acct:99", "--", "sh", "-c", "touch \"$D/held\"; exec sleep 60"});
  auto readers =
      start({"run", "--nodes", nodes, "-r", "rw2", "--shared", "--", "sh", "-c", "touch \"$D/read\"; exec sleep 60"});
  ASSERT_TRUE(wait_for_file(dir() / "held", holder.get())) << holder->wait(5s).describe();
  ASSERT_TRUE(wait_for_file(dir() / "read", readers.get())) << readers->wait(5s).describe();
  ASSERT_TRUE(key_on(c, "k3", 5) && key_on(c, "rw2", 5));

  auto r = run({"run", "--nodes", nodes, "-r", "k3", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(one_of(r.err,
                     "redlock: 'k3' is held by someone else (5 masters: {} taken); use --wait DURATION to wait "
                     "for it\n",
                     3))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "taken on")) << r.describe();

  r = run({"run", "--nodes", nodes, "-r", "rw2", "--write", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(one_of(r.err,
                     "redlock: 'rw2' is held by readers (5 masters: {} queued behind readers); use --wait "
                     "DURATION to wait for it\n",
                     3))
      << r.describe();
  r = run({"run", "--nodes", nodes, "-r", "rw2", "--write", "--json", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_GE(count_of(r.err, R"("status":"queued")"), 3u) << r.describe();
  EXPECT_TRUE(contains(r.err, R"("message":"'rw2' is held by readers (5 masters: )")) << r.describe();

  r = run({"run", "--nodes", nodes, "-r", "acct:42", "-r", "acct:99", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(one_of(r.err,
                     "redlock: cannot lock 'acct:42', 'acct:99': 'acct:99' is held by someone else (5 masters: "
                     "{} taken); use --wait DURATION to wait for it\n",
                     3))
      << r.describe();
  EXPECT_TRUE(key_gone_everywhere(c, "acct:42"));

  holder->signal(SIGTERM);
  readers->signal(SIGTERM);
  holder->wait();
  readers->wait();
}

// A release says what each master did with our key ("released", "not held"), an extension
// "extended", never the acquisition's "granted"; the masters numbered from 1. Catches every
// master listed as "granted" after the release.
TEST_F(cli, release_and_extension_say_what_each_master_did) {
  master_set c{3};
  const auto nodes = masters_of(c);
  // Runs 1.5 s on a ttl of 1 s (one extension at least); master 1 loses our key before the end.
  auto p = start({"run", "--nodes", nodes, "-r", "cli:rel", "--ttl", "1s", "--verbose", "--", "sh", "-c",
                  "touch \"$D/in\"; i=0; while [ ! -e \"$D/go\" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); "
                  "done; sleep 1"});
  ASSERT_TRUE(wait_for_file(dir() / "in", p.get())) << p->wait(5s).describe();
  c[0].command({"DEL", "cli:rel"});
  std::ofstream(dir() / "go") << "";
  auto r = p->wait();
  // The extension fails on master 1 but holds on the majority; the release finds master 1 empty.
  EXPECT_EQ(r.status, 0) << r.describe();
  const auto released = r.err.substr(std::min(r.err.size(), r.err.find("redlock: released 'cli:rel'")));
  EXPECT_TRUE(
      released.starts_with("redlock: released 'cli:rel' (2 of 3 masters held it, 1 did not, 0 could not be "
                           "reached)\n"))
      << r.describe();
  EXPECT_TRUE(contains(released, fmt::format("redlock:   {:<32} not held ", label_of(c, 0)))) << r.describe();
  for (std::size_t i : {1u, 2u}) {
    EXPECT_TRUE(contains(released, fmt::format("redlock:   {:<32} released ", label_of(c, i)))) << r.describe();
  }
  EXPECT_FALSE(contains(released, "granted")) << r.describe();
  EXPECT_TRUE(contains(r.err, fmt::format("redlock:   {:<32} extended ", label_of(c, 1)))) << r.describe();

  r = run({"run", "--nodes", nodes, "-r", "cli:rel", "--json", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.describe();
  const auto event = r.err.substr(std::min(r.err.size(), r.err.find(R"({"event":"released")")));
  EXPECT_EQ(count_of(event.substr(0, event.find('\n')), R"("status":"released")"), 3u) << r.describe();
}

// `status` reads every kind of lock: a semaphore's permits in use, readers with a queued writer,
// a fenced lock's token, a reentrant owner's holds, the waiters in a plain lock's fair queue.
// Catches a semaphore reported as WRONGTYPE everywhere ("unavailable", 69) and readers shown as
// the holder "redlock:".
TEST_F(cli, status_shows_every_kind_of_lock) {
  master_set c{3};
  const auto nodes = masters_of(c);
  const auto hold = [&](std::vector<std::string> flags, const std::string& file) {
    std::vector<std::string> a{"run", "--nodes", nodes, "--ttl", "20s"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(),
             {"--", "sh", "-c",
              fmt::format("echo \"$REDLOCK_FENCE\" > \"$D/{}.f\"; touch \"$D/{}\"; exec sleep 60", file, file)});
    return start(a);
  };
  std::vector<std::unique_ptr<tool_process>> holders;
  holders.push_back(hold({"-r", "cli:gpu2", "--permits", "3"}, "s1"));
  holders.push_back(hold({"-r", "cli:gpu2", "--permits", "3"}, "s2"));
  holders.push_back(hold({"-r", "cli:rw", "--shared"}, "r1"));
  holders.push_back(hold({"-r", "cli:rw", "--shared"}, "r2"));
  holders.push_back(hold({"-r", "cli:fz", "--fence"}, "f"));
  holders.push_back(hold({"-r", "cli:ow", "--owner", "job-7"}, "o"));
  holders.push_back(hold({"-r", "cli:fq"}, "q"));
  const char* files[] = {"s1", "s2", "r1", "r2", "f", "o", "q"};
  for (std::size_t i = 0; i < holders.size(); ++i) {
    ASSERT_TRUE(wait_for_file(dir() / files[i], holders[i].get())) << holders[i]->wait(5s).describe();
  }
  // A writer waits behind the readers, two waiters queue for the plain lock.
  std::vector<std::unique_ptr<tool_process>> waiting;
  waiting.push_back(start({"run", "--nodes", nodes, "-r", "cli:rw", "--write", "--wait", "40s", "--", "true"}));
  waiting.push_back(start({"run", "--nodes", nodes, "-r", "cli:fq", "--wait", "40s", "--", "true"}));
  waiting.push_back(start({"run", "--nodes", nodes, "-r", "cli:fq", "--wait", "40s", "--", "true"}));
  const auto queued_everywhere = [&] {
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (c[i].command({"ZCARD", "cli:fq:redlock-queue"}) != ":2\r\n") return false;
    }
    return key_on(c, "cli:rw:redlock-writer", 3);
  };
  const auto deadline = clock_type::now() + 20s;
  while (!queued_everywhere() && clock_type::now() < deadline) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(queued_everywhere());
  const auto status = [&](const std::string& name, bool json = false) {
    std::vector<std::string> a{"status", "--nodes", nodes, name};
    if (json) a.insert(a.begin() + 1, "--json");
    return run(a);
  };
  const auto each_master = [&](const outcome& r, const std::string& what) {
    for (std::size_t i = 0; i < c.size(); ++i) {
      EXPECT_TRUE(contains(r.out, fmt::format("  {:<32} {}", label_of(c, i), what))) << what << "\n" << r.describe();
    }
  };

  // The semaphore: its holders (as the first 8 characters of their tokens), the permits in use.
  auto sem = bulks_of(c[0].command({"ZRANGE", "cli:gpu2", "0", "-1"}));
  ASSERT_EQ(sem.size(), 2u);
  std::sort(sem.begin(), sem.end());
  auto r = status("cli:gpu2");
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(
      r.out.starts_with(fmt::format("'cli:gpu2' is held: 2 of 3 permits in use ({}, {}; semaphore quorum 3 of "
                                    "3 masters)\n",
                                    sem[0].substr(0, 8), sem[1].substr(0, 8))))
      << r.describe();
  each_master(r, "2 of 3 permits in use: ");
  EXPECT_FALSE(contains(r.out, "WRONGTYPE")) << r.describe();
  r = status("cli:gpu2", true);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("state":"held","holder":null,"holders":3,"answered":3,"total":3,"majority":2,)"
                              R"("expires_in_ms":null,"kind":"semaphore",)"))
      << r.describe();
  EXPECT_TRUE(contains(r.out, R"("permits":3,"permits_in_use":2,"semaphore_quorum":3,"waiters":0,)")) << r.describe();
  EXPECT_EQ(count_of(r.out, R"("type":"semaphore","fence":null,"holds":0,"readers":null,"writer":null,"permits":3,)"
                            R"("permit_holders":[{"token":")"),
            3u)
      << r.describe();

  // Readers, and the writer queued behind them.
  r = status("cli:rw");
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("'cli:rw' is held by 2 readers on 3 of 3 masters (majority 2), for ")) << r.describe();
  EXPECT_TRUE(contains(r.out, " more; a writer is queued (on 3 of 3 masters)\n")) << r.describe();
  each_master(r, "2 readers, ttl ");
  EXPECT_FALSE(contains(r.out, "redlock:")) << r.describe();  // the readers' marker is no holder
  r = status("cli:rw", true);
  EXPECT_TRUE(contains(r.out, R"("state":"held","holder":null,"holders":3,)")) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("kind":"read","fence":null,"holds":null,"readers":2,"writer_queued":true,)"))
      << r.describe();
  EXPECT_EQ(count_of(r.out, R"("exists":true,"holder":null,)"), 3u) << r.describe();
  EXPECT_EQ(count_of(r.out, R"("type":"readers",)"), 3u) << r.describe();

  // The fenced lock: its holder and fencing token (the one the command got).
  const auto fence = read_file(dir() / "f.f").substr(0, read_file(dir() / "f.f").find('\n'));
  const auto fz = bulks_of(c[0].command({"GET", "cli:fz"}));
  ASSERT_EQ(fz.size(), 1u);
  r = status("cli:fz");
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(
      r.out.starts_with(fmt::format("'cli:fz' is held by {} on 3 of 3 masters (majority 2), for ", fz[0].substr(0, 8))))
      << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format(" more; fencing token {}\n", fence))) << r.describe();
  each_master(r, fmt::format("{:<10} ttl ", fz[0].substr(0, 8)));
  r = status("cli:fz", true);
  EXPECT_TRUE(contains(r.out, fmt::format(R"("kind":"exclusive","fence":{},)", fence))) << r.describe();

  // The reentrant owner and its holds.
  r = status("cli:ow");
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("'cli:ow' is held by owner job-7 (1 hold) on 3 of 3 masters (majority 2), for "))
      << r.describe();
  each_master(r, "job-7      ttl ");
  r = status("cli:ow", true);
  EXPECT_TRUE(contains(r.out, R"("holder":"job-7","holders":3,)")) << r.describe();
  EXPECT_TRUE(contains(r.out, R"("kind":"exclusive","fence":null,"holds":1,)")) << r.describe();

  // The plain lock and the two waiters in its fair queue.
  r = status("cli:fq");
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, " more; 2 waiters in the fair queue\n")) << r.describe();
  EXPECT_EQ(count_of(r.out, ", 2 waiting\n"), 3u) << r.describe();
  r = status("cli:fq", true);
  EXPECT_TRUE(contains(r.out, R"("semaphore_quorum":null,"waiters":2,)")) << r.describe();
  EXPECT_EQ(count_of(r.out, R"("ticket":)"), 6u) << r.describe();

  for (auto& h : holders) h->signal(SIGTERM);
  for (auto& h : holders) h->wait();
  for (auto& w : waiting) {
    const auto o = w->wait();
    EXPECT_EQ(o.status, 0) << o.describe();
  }
  // Free again; the fencing counter stays behind.
  r = status("cli:fz");
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(r.out.starts_with(
      fmt::format("'cli:fz' is free (no key on the 3 of 3 masters that answered); fencing counter at {}\n", fence)))
      << r.describe();
  r = status("cli:gpu2");
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_TRUE(r.out.starts_with("'cli:gpu2' is free (no key on the 3 of 3 masters that answered)\n")) << r.describe();
}

// `status` says why a TLS master cannot be used with OpenSSL's own reason, as `run` does.
// Catches the bare "certificate is not trusted" without the reason.
TEST_F(cli, status_gives_the_tls_failure_in_openssls_words) {
  const auto key = dir() / "server.key";
  const auto crt = dir() / "server.crt";
  const auto cmd = fmt::format(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout '{}' -out '{}' -days 2 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
      key.string(), crt.string());
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "the openssl tool could not make a certificate";
  redlock::test::redis_options opts;
  opts.tls = redlock::test::tls_options{crt, key, crt, false};
  master_set c{1, opts};
  // Not told to trust the self-signed certificate: verification fails.
  const auto nodes = fmt::format("rediss://127.0.0.1:{}", c[0].tls_port());
  const auto reason = [](const std::string& text) {
    return contains(text, "self-signed certificate") || contains(text, "self signed certificate");
  };
  auto r = run({"status", "--nodes", nodes, "cli:tls"});
  EXPECT_EQ(r.status, 69) << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format("  {:<32} unreachable: the master's TLS certificate is not trusted",
                                          "master 1 (" + nodes + ")")))
      << r.describe();
  EXPECT_TRUE(reason(r.out)) << r.describe();
  r = run({"status", "--nodes", nodes, "--json", "cli:tls"});
  EXPECT_EQ(r.status, 69) << r.describe();
  EXPECT_TRUE(reason(r.out)) << r.describe();
  r = run({"run", "--nodes", nodes, "-r", "cli:tls", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(reason(r.err)) << r.describe();
  // Trusted, it answers.
  r = run({"status", "--nodes", nodes, "--tls-ca-file", crt.string(), "cli:tls"});
  EXPECT_EQ(r.status, 1) << r.describe();
}

}  // namespace
