// SPDX-License-Identifier: BSL-1.0
// `redlock nodes up` with TLS and chosen ports, and the TLS messages of `run`, as a real binary
// (docs/tls.md, docs/cli.md "redlock nodes"): TLS masters with a private CA that a TLS `run`
// reaches with the printed flags and a plain one cannot; an untrusted certificate told with
// OpenSSL's verify result and the CA file in use; TLS setting mistakes told with the options'
// names; `--port BASE` and `--port FIRST-LAST`, with ports in use, out of range and too few.

#include "local_nodes.hpp"

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
#include <iterator>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr const char* tool = REDLOCK_CLI_PATH;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

/// How a tool run ended.
struct outcome {
  int status = -1;  ///< exit status, or 128 + signal when it was killed
  std::string out;
  std::string err;
  std::string describe() const { return fmt::format("status {}\n--- stdout:\n{}--- stderr:\n{}", status, out, err); }
};

/// Runs `redlock args...` with exactly `env`, stdin from /dev/null, and waits for it (killing it
/// after `timeout`).
outcome run_tool(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                 const fs::path& dir, std::chrono::milliseconds timeout = 60s) {
  static int serial = 0;
  const int n = ++serial;
  const auto out_file = dir / fmt::format("out-{}.txt", n);
  const auto err_file = dir / fmt::format("err-{}.txt", n);
  std::vector<std::string> argv_s{tool};
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
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);  // whatever the test runner ignores
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, tool, &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  outcome o;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << tool << ": " << std::strerror(rc);
    return o;
  }
  const auto deadline = clock_type::now() + timeout;
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) != pid) {
    if (clock_type::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      ADD_FAILURE() << "redlock did not exit within " << timeout.count() << " ms; killed it";
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  o.out = read_file(out_file);
  o.err = read_file(err_file);
  return o;
}

std::vector<pid_t> pids_in(const std::string& json) {
  std::vector<pid_t> pids;
  constexpr std::string_view key = R"("pid":)";
  for (auto at = json.find(key); at != std::string::npos; at = json.find(key, at + key.size())) {
    pids.push_back(std::stoi(json.substr(at + key.size())));
  }
  return pids;
}

std::vector<int> ports_in(const std::string& json) {
  std::vector<int> ports;
  constexpr std::string_view key = R"("port":)";
  for (auto at = json.find(key); at != std::string::npos; at = json.find(key, at + key.size())) {
    ports.push_back(std::stoi(json.substr(at + key.size())));
  }
  return ports;
}

bool process_gone(pid_t pid) {
  const auto stat = read_file(fmt::format("/proc/{}/stat", pid));
  if (stat.empty()) return true;
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';  // a zombie is gone too
}

/// A socket listening on 127.0.0.1:`port` for its lifetime (another program on that port).
class listener {
 public:
  explicit listener(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd_, 1) == 0;
  }
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  ~listener() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const noexcept { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

/// A base port with `count` consecutive loopback ports free right now (each bound and released).
std::uint16_t free_block(std::uint16_t count) {
  for (std::uint16_t base = 21000 + static_cast<std::uint16_t>(::getpid() % 200) * 40; base < 60000; base += 37) {
    bool all = true;
    for (std::uint16_t p = base; all && p < base + count; ++p) all = listener(p).ok();
    if (all) return base;
  }
  ADD_FAILURE() << "no block of " << count << " free ports";
  return 0;
}

class nodes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("redlock-nodes-test-{}-{}", ::getpid(), ++runs_);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "state");
    fs::permissions(dir_ / "state", fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    // Whatever a test left running goes (the record names the pids), then the files.
    const auto r = run({"nodes", "--json"});
    for (pid_t p : pids_in(r.out)) {
      if (!process_gone(p)) ::kill(p, SIGKILL);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// PATH, HOME, the redis-server to use, an isolated state directory, the restart guard off.
  std::map<std::string, std::string> env(const std::map<std::string, std::string>& extra = {}) const {
    std::map<std::string, std::string> e;
    for (const char* name : {"PATH", "HOME", "REDLOCK_REDIS_SERVER"}) {
      if (const char* v = std::getenv(name)) e[name] = v;
    }
    if (!e.count("PATH")) e["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    e["REDLOCK_STATE_DIR"] = state().string();
    e["REDLOCK_RESTART_GUARD"] = "off";
    for (const auto& [k, v] : extra) e[k] = v;
    return e;
  }
  outcome run(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra = {}) {
    return run_tool(args, env(extra), dir_);
  }
  /// `redlock args...`, expecting a usage error (64) whose message is exactly `message`.
  void expect_usage(const std::vector<std::string>& args, const std::string& message) {
    const auto r = run(args);
    EXPECT_EQ(r.status, 64) << r.describe();
    EXPECT_EQ(r.err, fmt::format("redlock: {} (see 'redlock --help')\n", message)) << r.describe();
  }

  const fs::path& dir() const { return dir_; }
  fs::path state() const { return dir_ / "state"; }

 private:
  static inline int runs_ = 0;
  fs::path dir_;
};

/// The flags `nodes up --tls` prints for `run` ("# Use them with: redlock run FLAGS --resource").
std::vector<std::string> printed_run_flags(const std::string& out) {
  constexpr std::string_view intro = "# Use them with: redlock run ";
  const auto at = out.find(intro);
  if (at == std::string::npos) return {};
  const auto end = out.find(" --resource NAME", at);
  std::istringstream words(out.substr(at + intro.size(), end - at - intro.size()));
  std::vector<std::string> flags;
  for (std::string w; words >> w;) flags.push_back(w);
  return flags;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- TLS -----------------------------------------------------------------------------------------

// The two-command quick start (docs/tls.md): `nodes up --tls`, then `run` with the flags it
// printed. A plain-TCP run against the same ports fails with the reason, and `nodes down` leaves
// neither servers nor certificates. Catches: no TLS in `nodes up`, flags that do not work, the
// plain-TCP failure hidden or crashing, certificates left behind.
TEST_F(nodes, up_tls_serves_a_tls_run_with_the_printed_flags_and_refuses_plain_tcp) {
  auto r = run({"nodes", "up", "3", "--tls"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto ca = (state() / "tls" / "ca.crt").string();
  EXPECT_TRUE(contains(r.out, "# 3 local redis-server masters over TLS")) << r.describe();
  EXPECT_TRUE(contains(r.out, "export REDLOCK_NODES=rediss://127.0.0.1:")) << r.describe();
  EXPECT_TRUE(contains(r.out, "export REDLOCK_TLS_CA_FILE=" + ca + "\n")) << r.describe();
  const auto flags = printed_run_flags(r.out);
  EXPECT_EQ(flags, (std::vector<std::string>{"--tls-ca-file", ca})) << r.describe();
  EXPECT_TRUE(fs::exists(ca));
  EXPECT_FALSE(fs::exists(state() / "tls" / "ca.key")) << "the CA's key is not kept";

  auto listed = run({"nodes", "--json"});
  ASSERT_EQ(listed.status, 0) << listed.describe();
  const auto pids = pids_in(listed.out);
  const auto ports = ports_in(listed.out);
  ASSERT_EQ(pids.size(), 3u) << listed.describe();
  ASSERT_EQ(ports.size(), 3u) << listed.describe();
  EXPECT_TRUE(contains(listed.out, fmt::format(R"("tls":{{"ca_file":"{}","auth_clients":false)", ca)))
      << listed.describe();

  // TLS, with the printed flags, against the recorded masters.
  r = run(concat({"run"}, concat(flags, {"--resource", "nodes:tls", "--", "sh", "-c", "echo inside"})));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(r.out, "inside\n") << r.describe();
  r = run(concat({"status"}, concat(flags, {"nodes:tls"})));
  EXPECT_EQ(r.status, 1) << r.describe();  // free again
  // Also with the exported settings instead of flags.
  r = run({"run", "--resource", "nodes:tls", "--", "true"}, {{"REDLOCK_TLS_CA_FILE", ca}});
  EXPECT_EQ(r.status, 0) << r.describe();

  // Plain TCP to the same ports: the lock cannot be had, and the reason is said.
  const auto plain = fmt::format("127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1], ports[2]);
  r = run({"run", "--nodes", plain, "--resource", "nodes:tls", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "the master expects TLS on this port")) << r.describe();
  EXPECT_FALSE(contains(r.err, "Success")) << r.describe();
  EXPECT_FALSE(contains(r.err, "internal error")) << r.describe();

  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "stopped 3 local nodes")) << r.describe();
  for (pid_t p : pids) EXPECT_TRUE(process_gone(p)) << p;
  EXPECT_FALSE(fs::exists(state() / "tls"));
  EXPECT_FALSE(fs::exists(state() / "nodes"));
}

// Mutual TLS: the masters refuse a client without the certificate, and take it with the printed
// flags. Catches: --tls-auth-clients not passed to the servers, client flags not printed.
TEST_F(nodes, up_tls_auth_clients_requires_the_printed_client_certificate) {
  auto r = run({"nodes", "up", "1", "--tls-auth-clients"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto tls = state() / "tls";
  const auto flags = printed_run_flags(r.out);
  EXPECT_EQ(flags,
            (std::vector<std::string>{"--tls-ca-file", (tls / "ca.crt").string(), "--tls-cert",
                                      (tls / "client.crt").string(), "--tls-key", (tls / "client.key").string()}))
      << r.describe();
  EXPECT_TRUE(contains(r.out, "export REDLOCK_TLS_CERT_FILE=" + (tls / "client.crt").string())) << r.describe();

  r = run({"run", "--tls-ca-file", (tls / "ca.crt").string(), "--resource", "nodes:mtls", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, "the master refused the TLS session")) << r.describe();
  EXPECT_FALSE(contains(r.err, "tls.cert_file")) << r.describe();  // the library's field, not the CLI's option
  r = run(concat({"run"}, concat(flags, {"--resource", "nodes:mtls", "--", "true"})));
  EXPECT_EQ(r.status, 0) << r.describe();
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(tls));
}

// A server whose certificate is signed by CA X (with X's self-signed root in the chain it sends),
// a client trusting CA Y, then the system store: the message says neither "unknown CA or
// self-signed" (the certificate is not self-signed), but OpenSSL's verify result and what was
// trusted. Catches: the old fixed guess, the CA file in use not named.
TEST_F(nodes, untrusted_certificate_names_the_verify_result_and_the_ca_in_use) {
  const auto x = redlock::local::make_certificates(dir() / "x", "redlock CA X");
  const auto y = redlock::local::make_certificates(dir() / "y", "redlock CA Y");
  redlock::local::server_options options;
  options.tls = redlock::local::tls_options{x.server_cert_file, x.server_key_file, x.ca_file, false};
  redlock::local::node_set server{1, options};
  const auto master = fmt::format("rediss://127.0.0.1:{}", server[0].tls_port());
  // (How `run` introduces the master is its own business: only the reason is checked.)
  const std::string untrusted =
      "unreachable: the master's TLS certificate is not trusted: it failed verification against the trusted CAs";

  auto r = run({"run", "--nodes", master, "--tls-ca-file", x.ca_file.string(), "--resource", "nodes:x", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.describe();  // the right CA
  r = run({"run", "--nodes", master, "--tls-ca-file", y.ca_file.string(), "--resource", "nodes:x", "--", "true"});
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, fmt::format("{} (self-signed certificate in certificate chain; trusting CA file {})",
                                          untrusted, y.ca_file.string())))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "unknown CA or self-signed")) << r.describe();

  r = run({"run", "--nodes", master, "--resource", "nodes:x", "--", "true"});  // no CA given: the system's
  EXPECT_EQ(r.status, 75) << r.describe();
  EXPECT_TRUE(contains(r.err, untrusted + " (self-signed certificate in certificate chain; trusting the system CA "
                                          "store)"))
      << r.describe();
}

// TLS setting mistakes are said with the names the user gave them by, not the library's fields.
// Catches: "tls.cert_file without tls.key_file" for --tls-cert without --tls-key.
TEST_F(nodes, tls_setting_errors_name_the_options) {
  const auto certs = redlock::local::make_certificates(dir() / "c");
  const std::vector<std::string> tail{"--resource", "x", "--", "true"};
  const auto config_error = [&](const std::vector<std::string>& args, const std::string& message,
                                const std::map<std::string, std::string>& extra = {}) {
    const auto r = run(args, extra);
    EXPECT_EQ(r.status, 78) << r.describe();
    EXPECT_EQ(r.err, "redlock: " + message + "\n") << r.describe();
  };
  config_error(concat({"run", "--nodes", "rediss://127.0.0.1:1", "--tls-cert", certs.client_cert_file.string()}, tail),
               "--tls-cert without --tls-key: a client certificate needs its private key (--tls-key FILE, "
               "REDLOCK_TLS_KEY_FILE or tls_key_file)");
  config_error(concat({"run", "--nodes", "rediss://127.0.0.1:1", "--tls-key", certs.client_key_file.string()}, tail),
               "--tls-key without --tls-cert: a private key needs its client certificate (--tls-cert FILE, "
               "REDLOCK_TLS_CERT_FILE or tls_cert_file)");
  config_error(concat({"run", "--nodes", "rediss://127.0.0.1:1"}, tail),
               "REDLOCK_TLS_CERT_FILE without --tls-key: a client certificate needs its private key (--tls-key FILE, "
               "REDLOCK_TLS_KEY_FILE or tls_key_file)",
               {{"REDLOCK_TLS_CERT_FILE", certs.client_cert_file.string()}});
  const auto conf = dir() / "tls.conf";
  std::ofstream(conf) << "nodes = rediss://127.0.0.1:1\ntls_cert_file = " << certs.client_cert_file.string() << "\n";
  config_error(concat({"run", "--config", conf.string()}, tail),
               fmt::format("tls_cert_file in {} without --tls-key: a client certificate needs its private key "
                           "(--tls-key FILE, REDLOCK_TLS_KEY_FILE or tls_key_file)",
                           conf.string()));
  // What the library finds wrong with a file is said with the option too.
  const auto missing = (dir() / "missing-ca.crt").string();
  config_error(concat({"run", "--nodes", "rediss://127.0.0.1:1", "--tls-ca-file", missing}, tail),
               fmt::format("invalid configuration: master 1: --tls-ca-file '{}': No such file or directory", missing));
  // (OpenSSL's own reason follows, in its words of the version at hand.)
  const auto r = run(concat({"run", "--nodes", "rediss://127.0.0.1:1", "--tls-cert", certs.client_cert_file.string(),
                             "--tls-key", certs.server_key_file.string()},
                            tail));
  EXPECT_EQ(r.status, 78) << r.describe();
  EXPECT_TRUE(r.err.starts_with(
      fmt::format("redlock: invalid configuration: master 1: --tls-key '{}'", certs.server_key_file.string())))
      << r.describe();
  EXPECT_FALSE(contains(r.err, "tls.")) << r.describe();
}

// ---- ports ---------------------------------------------------------------------------------------

// `--port BASE` takes BASE, BASE+1, ...; `--port FIRST-LAST` the lowest free ports of the range;
// a port in use, a range too small or beyond 65535 are refused with the option's words, and a
// refused start leaves nothing running. Catches: no way to choose ports, a silent move to other
// ports, servers left running after a refusal.
TEST_F(nodes, up_port_base_and_range) {
  const std::uint16_t base = free_block(3);
  ASSERT_NE(base, 0);
  auto r = run({"nodes", "up", "2", "--port", std::to_string(base)});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format("export REDLOCK_NODES=127.0.0.1:{},127.0.0.1:{}\n", base, base + 1)))
      << r.describe();
  r = run({"status", "nodes:port"});
  EXPECT_EQ(r.status, 1) << r.describe();
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();

  // TLS: the masters' (TLS) ports are the ones asked for.
  r = run({"nodes", "up", "1", "--tls", "--port", std::to_string(base)});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, fmt::format("export REDLOCK_NODES=rediss://127.0.0.1:{}\n", base))) << r.describe();
  r = run({"nodes", "down"});
  EXPECT_EQ(r.status, 0) << r.describe();

  {
    listener taken(static_cast<std::uint16_t>(base + 1));
    ASSERT_TRUE(taken.ok());
    r = run({"nodes", "up", "2", "--port", std::to_string(base)});
    EXPECT_EQ(r.status, 69) << r.describe();
    EXPECT_EQ(r.err, fmt::format("redlock: cannot start local nodes: port {1} is in use: --port {0} takes the ports "
                                 "{0}-{1} (choose another port, or a range such as --port {0}-{2} to skip ports in "
                                 "use)\n",
                                 base, base + 1, base + 100))
        << r.describe();
    r = run({"nodes"});
    EXPECT_EQ(r.status, 1) << r.describe();  // nothing left recorded (nor running)

    r = run({"nodes", "up", "2", "--port", fmt::format("{}-{}", base, base + 1)});
    EXPECT_EQ(r.status, 69) << r.describe();
    EXPECT_EQ(r.err, fmt::format("redlock: cannot start local nodes: --port {0}-{1}: 1 of its 2 ports can be used, 2 "
                                 "needed (port {1} is in use)\n",
                                 base, base + 1))
        << r.describe();

    // A range wide enough: the taken port is skipped.
    r = run({"nodes", "up", "2", "--port", fmt::format("{}-{}", base, base + 2), "--json"});
    ASSERT_EQ(r.status, 0) << r.describe();
    EXPECT_EQ(ports_in(r.out), (std::vector<int>{base, base + 2})) << r.describe();
    r = run({"nodes", "down"});
    EXPECT_EQ(r.status, 0) << r.describe();
  }

  expect_usage({"nodes", "up", "2", "--port", "65535"},
               "option --port 65535: 2 servers need the ports 65535-65536, beyond 65535");
  expect_usage({"nodes", "up", "3", "--port", "7000-7001"},
               "option --port 7000-7001: the range holds 2 ports, 3 servers need 3");
  expect_usage({"nodes", "up", "2", "--shards", "2", "--port", "7000-7002"},
               "option --port 7000-7002: the range holds 3 ports, 4 servers need 4");
  expect_usage({"nodes", "up", "1", "--port", "7001-7000"},
               "option --port 7001-7000: the range's first port is above its last");
  for (const char* bad : {"0", "65536", "x", "7000-", "-7000"}) {
    expect_usage({"nodes", "up", "1", "--port", bad},
                 fmt::format("option --port: '{}' is neither a port (1..65535) nor a range of ports FIRST-LAST", bad));
  }
  expect_usage({"nodes", "down", "--port", "7000"}, "--port is for 'nodes up'");
  expect_usage({"nodes", "list", "--tls"}, "--tls is for 'nodes up'");
  expect_usage({"nodes", "up", "2", "--tls", "--shards", "2"},
               "--tls cannot be combined with --shards: the local TLS masters are single servers");
}

TEST_F(nodes, help_tells_the_tls_and_port_options) {
  auto r = run({"nodes", "--help"});
  EXPECT_EQ(r.status, 0) << r.describe();
  for (const char* text : {"--tls", "--tls-auth-clients", "--port BASE", "--port FIRST-LAST", "docs/tls.md"}) {
    EXPECT_TRUE(contains(r.out, text)) << text << "\n" << r.describe();
  }
  r = run({"--help"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "'redlock nodes up 3\n--tls' prints the flags to pass (docs/tls.md)")) << r.describe();
}

}  // namespace
