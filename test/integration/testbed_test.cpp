// SPDX-License-Identifier: BSL-1.0
// The test bed itself, against real redis-server processes: if these fail, every other
// integration test's verdict is suspect.

#include <redlock/clock.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <netinet/in.h>
#include <optional>
#include <set>
#include <signal.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using redlock::test::acl_user;
using redlock::test::fault_proxy;
using redlock::test::master_set;
using redlock::test::redis_options;

std::string encode(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto arg : args) {
    out += "$" + std::to_string(arg.size()) + "\r\n";
    out.append(arg);
    out += "\r\n";
  }
  return out;
}

/// Length of the first complete reply in `buf` (simple types and bulk strings only), or 0.
std::size_t complete_reply_length(std::string_view buf) {
  const auto eol = buf.find("\r\n");
  if (eol == std::string_view::npos) return 0;
  if (buf[0] != '$') return eol + 2;
  long long n = 0;
  std::from_chars(buf.data() + 1, buf.data() + eol, n);
  if (n < 0) return eol + 2;
  const auto total = eol + 2 + static_cast<std::size_t>(n) + 2;
  return buf.size() >= total ? total : 0;
}

struct read_result {
  std::string reply;  // one complete reply, when one arrived
  bool timed_out = false;
  bool eof = false;
  int error = 0;  // errno of a failed recv
};

/// A blocking loopback client with a receive timeout: the probe the tests look through.
class client {
 public:
  explicit client(std::uint16_t port, std::chrono::milliseconds receive_timeout = 5s) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      connect_error_ = errno;
      ::close(fd_);
      fd_ = -1;
      return;
    }
    set_receive_timeout(receive_timeout);
  }
  ~client() {
    if (fd_ >= 0) ::close(fd_);
  }
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  bool connected() const { return fd_ >= 0; }
  int connect_error() const { return connect_error_; }

  void set_receive_timeout(std::chrono::milliseconds timeout) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
    timeval tv{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  bool send(std::string_view data) {
    while (!data.empty()) {
      const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  read_result read() {
    read_result result;
    for (;;) {
      if (const auto len = complete_reply_length(buffer_); len > 0) {
        result.reply = buffer_.substr(0, len);
        buffer_.erase(0, len);
        return result;
      }
      char chunk[65536];
      const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(n));
      } else if (n == 0) {
        result.eof = true;
        return result;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        result.timed_out = true;
        return result;
      } else if (errno != EINTR) {
        result.error = errno;
        return result;
      }
    }
  }

  /// Sends one command and returns its reply, or a description of what happened instead.
  std::string request(std::initializer_list<std::string_view> args) {
    if (!connected()) return "<not connected: " + std::string(std::strerror(connect_error_)) + ">";
    if (!send(encode(args))) return "<send failed>";
    const auto r = read();
    if (r.timed_out) return "<timeout>";
    if (r.eof) return "<eof>";
    if (r.error != 0) return "<error: " + std::string(std::strerror(r.error)) + ">";
    return r.reply;
  }

 private:
  int fd_ = -1;
  int connect_error_ = 0;
  std::string buffer_;
};

bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

/// Polls `condition` until it holds or `timeout` passes (for effects that are asynchronous).
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = redlock::clock::now() + timeout;
  while (!condition()) {
    if (redlock::clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.starts_with(prefix); }

// ---- master_set ---------------------------------------------------------------------------

TEST(master_set, starts_nodes_that_answer_ping_on_distinct_ports) {
  master_set servers(3);
  ASSERT_EQ(servers.size(), 3u);
  std::set<std::uint16_t> ports;
  std::set<pid_t> pids;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    auto& node = servers[i];
    EXPECT_EQ(node.host(), "127.0.0.1");
    EXPECT_TRUE(node.running());
    EXPECT_FALSE(node.paused());
    EXPECT_GT(node.pid(), 0);
    ports.insert(node.port());
    pids.insert(node.pid());
    client c(node.port());
    EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
    EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
  }
  EXPECT_EQ(ports.size(), 3u);
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(&servers.node(2), &servers[2]);
  EXPECT_THROW(servers.node(3), std::out_of_range);
  EXPECT_EQ(servers.ports(), (std::vector<std::uint16_t>{servers[0].port(), servers[1].port(), servers[2].port()}));
}

TEST(master_set, servers_run_without_persistence_and_with_extra_args) {
  redis_options options;
  options.extra_args = {"--maxmemory", "1mb"};
  master_set servers(1, options);
  auto& node = servers[0];
  EXPECT_EQ(node.command({"CONFIG", "GET", "maxmemory"}), "*2\r\n$9\r\nmaxmemory\r\n$7\r\n1048576\r\n");
  EXPECT_EQ(node.command({"CONFIG", "GET", "save"}), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(node.command({"CONFIG", "GET", "appendonly"}), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
  EXPECT_EQ(node.command({"CONFIG", "GET", "bind"}), "*2\r\n$4\r\nbind\r\n$9\r\n127.0.0.1\r\n");
  EXPECT_EQ(node.command({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(node.command({"GET", "k"}), "$1\r\nv\r\n");
  EXPECT_EQ(node.command({"DBSIZE"}), ":1\r\n");
  EXPECT_TRUE(starts_with(node.command({"NOSUCHCOMMAND"}), "-ERR"));  // returned, not thrown
  EXPECT_TRUE(std::filesystem::is_regular_file(node.directory() / "redis.log"));
}

TEST(master_set, password_is_required) {
  redis_options options;
  options.password = "s3cret with space";
  master_set servers(1, options);
  client c(servers[0].port());
  EXPECT_TRUE(starts_with(c.request({"PING"}), "-NOAUTH")) << c.request({"PING"});
  EXPECT_TRUE(starts_with(c.request({"AUTH", "wrong"}), "-WRONGPASS"));
  EXPECT_EQ(c.request({"AUTH", "s3cret with space"}), "+OK\r\n");
  EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
  EXPECT_EQ(servers[0].command({"PING"}), "+PONG\r\n");  // authenticates by itself
}

TEST(master_set, acl_user_has_full_rights) {
  redis_options options;
  options.password = "default-pass";
  options.user = acl_user{"locker", "user pass"};
  master_set servers(1, options);
  client c(servers[0].port());
  EXPECT_TRUE(starts_with(c.request({"AUTH", "locker", "wrong"}), "-WRONGPASS"));
  EXPECT_EQ(c.request({"AUTH", "locker", "user pass"}), "+OK\r\n");
  EXPECT_EQ(c.request({"ACL", "WHOAMI"}), "$6\r\nlocker\r\n");
  EXPECT_EQ(c.request({"SET", "k", "v", "NX", "PX", "10000"}), "+OK\r\n");
  EXPECT_EQ(c.request({"EVAL", "return redis.call('GET', KEYS[1])", "1", "k"}), "$1\r\nv\r\n");
}

TEST(master_set, acl_user_without_requirepass) {
  redis_options options;
  options.user = acl_user{"locker", "pw"};
  master_set servers(1, options);
  client c(servers[0].port());
  EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");  // the default user stays open
  EXPECT_EQ(c.request({"AUTH", "locker", "pw"}), "+OK\r\n");
  EXPECT_EQ(c.request({"ACL", "WHOAMI"}), "$6\r\nlocker\r\n");
}

TEST(master_set, acl_user_alone_when_the_default_user_is_off) {
  redis_options options;
  options.user = acl_user{"locker", "pw"};
  options.extra_args = {"--user", "default", "off"};
  master_set servers(1, options);  // readiness is checked as the ACL user
  EXPECT_EQ(servers[0].command({"ACL", "WHOAMI"}), "$6\r\nlocker\r\n");
  client c(servers[0].port());
  EXPECT_TRUE(starts_with(c.request({"PING"}), "-NOAUTH"));
}

TEST(master_set, paused_node_accepts_connections_but_never_answers) {
  master_set servers(1);
  auto& node = servers[0];
  node.pause();
  EXPECT_TRUE(node.paused());
  EXPECT_TRUE(node.running());

  client c(node.port(), 300ms);
  ASSERT_TRUE(c.connected()) << std::strerror(c.connect_error());
  ASSERT_TRUE(c.send(encode({"PING"})));
  EXPECT_TRUE(c.read().timed_out);
  EXPECT_THROW(node.command({"PING"}, 200ms), std::runtime_error);

  node.resume();
  EXPECT_FALSE(node.paused());
  c.set_receive_timeout(5s);
  EXPECT_EQ(c.read().reply, "+PONG\r\n");  // the request sent while paused is served now
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
}

TEST(master_set, killed_node_refuses_connections) {
  master_set servers(1);
  auto& node = servers[0];
  client open_before(node.port());
  ASSERT_EQ(open_before.request({"PING"}), "+PONG\r\n");
  const pid_t pid = node.pid();

  node.kill();
  EXPECT_FALSE(node.running());
  EXPECT_EQ(node.pid(), -1);
  EXPECT_TRUE(process_gone(pid));  // killed and reaped: not even a zombie
  const auto r = open_before.read();
  EXPECT_TRUE(r.eof || r.error == ECONNRESET);
  client c(node.port());
  EXPECT_FALSE(c.connected());
  EXPECT_EQ(c.connect_error(), ECONNREFUSED);
  EXPECT_THROW(node.command({"PING"}), std::runtime_error);
  EXPECT_THROW(node.pause(), std::logic_error);
  node.kill();  // idempotent
  node.stop();
}

TEST(master_set, restart_after_kill_keeps_the_port_and_empties_the_dataset) {
  master_set servers(1);
  auto& node = servers[0];
  const auto port = node.port();
  const pid_t old_pid = node.pid();
  ASSERT_EQ(node.command({"SET", "k", "v"}), "+OK\r\n");
  client open_at_kill(port);  // leaves the old server's side of a connection in TIME_WAIT
  ASSERT_EQ(open_at_kill.request({"PING"}), "+PONG\r\n");

  node.kill();
  node.restart();
  EXPECT_EQ(node.port(), port);
  EXPECT_TRUE(node.running());
  EXPECT_NE(node.pid(), old_pid);
  EXPECT_EQ(node.command({"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(node.command({"DBSIZE"}), ":0\r\n");
  client c(port);
  EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
}

TEST(master_set, restart_of_a_running_or_paused_node) {
  redis_options options;
  options.password = "pw";
  master_set servers(1, options);
  auto& node = servers[0];
  const auto port = node.port();
  ASSERT_EQ(node.command({"SET", "k", "v"}), "+OK\r\n");
  node.restart();
  EXPECT_EQ(node.port(), port);
  EXPECT_EQ(node.command({"DBSIZE"}), ":0\r\n");

  node.pause();
  node.restart();
  EXPECT_FALSE(node.paused());
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
  client c(port);
  EXPECT_TRUE(starts_with(c.request({"PING"}), "-NOAUTH"));  // same options after a restart
}

TEST(master_set, stop_shuts_down_and_closes_connections) {
  master_set servers(1);
  auto& node = servers[0];
  client open_before(node.port());
  ASSERT_EQ(open_before.request({"PING"}), "+PONG\r\n");
  const pid_t pid = node.pid();
  node.pause();
  node.stop();  // also from paused
  EXPECT_FALSE(node.running());
  EXPECT_FALSE(node.paused());
  EXPECT_TRUE(process_gone(pid));
  const auto r = open_before.read();
  EXPECT_TRUE(r.eof || r.error == ECONNRESET);
  EXPECT_EQ(client(node.port()).connect_error(), ECONNREFUSED);
  node.restart();
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
}

TEST(master_set, server_that_exits_by_itself_is_not_running) {
  master_set servers(1);
  auto& node = servers[0];
  const pid_t pid = node.pid();
  EXPECT_THROW(node.command({"SHUTDOWN", "NOSAVE"}), std::runtime_error);  // closes without a reply
  EXPECT_TRUE(eventually([&] { return !node.running(); }));
  EXPECT_TRUE(process_gone(pid));
  node.restart();
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
}

TEST(master_set, destructor_leaves_no_process_and_no_directory) {
  std::vector<pid_t> pids;
  std::vector<std::filesystem::path> dirs;
  {
    master_set servers(3);
    servers[1].pause();  // a stopped process must die too
    servers[2].kill();
    servers[2].restart();
    for (std::size_t i = 0; i < servers.size(); ++i) {
      pids.push_back(servers[i].pid());
      dirs.push_back(servers[i].directory());
      EXPECT_TRUE(std::filesystem::is_directory(dirs.back()));
    }
  }
  for (const pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
  for (const auto& dir : dirs) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(master_set, two_sets_at_once_get_distinct_ports) {
  master_set a(2);
  master_set b(2);
  std::set<std::uint16_t> ports;
  for (auto* servers : {&a, &b}) {
    for (std::size_t i = 0; i < servers->size(); ++i) {
      ports.insert((*servers)[i].port());
      EXPECT_EQ((*servers)[i].command({"PING"}), "+PONG\r\n");
    }
  }
  EXPECT_EQ(ports.size(), 4u);
}

TEST(master_set, moved_set_keeps_its_servers) {
  master_set a(1);
  const auto port = a[0].port();
  master_set b = std::move(a);
  EXPECT_EQ(b[0].port(), port);
  EXPECT_EQ(b[0].command({"PING"}), "+PONG\r\n");
}

// The clock shim: a server's wall clock shifted, stopped and moved by the test, while another
// server of the same set keeps the real one. Key expiry and TIME (what scripts read) follow it.
TEST(master_set, master_clock_shifts_stops_and_moves_a_servers_wall_clock) {
  redlock::test::master_set servers{2, redlock::test::with_clock_shim()};
  const auto time_ms = [&](std::size_t i) {
    const auto raw = servers[i].command({"TIME"});  // *2 $10 <s> $n <us>
    std::vector<std::string> parts;
    std::size_t pos = 0;
    while ((pos = raw.find('$', pos)) != std::string::npos) {
      const auto eol = raw.find("\r\n", pos);
      const auto len = std::stoul(raw.substr(pos + 1, eol - pos - 1));
      parts.push_back(raw.substr(eol + 2, len));
      pos = eol + 2 + len;
    }
    return std::stoll(parts.at(0)) * 1000 + std::stoll(parts.at(1)) / 1000;
  };
  const auto real_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  redlock::test::master_clock clock{servers[0]};
  EXPECT_NEAR(static_cast<double>(time_ms(0)), static_cast<double>(real_ms()), 1000.0) << "real until told";
  clock.shift(std::chrono::hours{1});
  EXPECT_NEAR(static_cast<double>(time_ms(0) - real_ms()), 3600000.0, 1000.0);
  EXPECT_NEAR(static_cast<double>(time_ms(1)), static_cast<double>(real_ms()), 1000.0) << "the other server";
  clock.stop();
  const auto stopped = time_ms(0);
  ASSERT_EQ(servers[0].command({"SET", "k", "v", "PX", "1000"}), "+OK\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds{1100});
  EXPECT_EQ(time_ms(0), stopped);
  EXPECT_EQ(servers[0].command({"PTTL", "k"}), ":1000\r\n") << "no time passes for a stopped clock";
  clock.advance(std::chrono::milliseconds{999});
  EXPECT_EQ(servers[0].command({"PTTL", "k"}), ":1\r\n");
  clock.advance(std::chrono::milliseconds{1});
  EXPECT_EQ(servers[0].command({"PTTL", "k"}), ":0\r\n") << "Redis expires a key once its time is past, not at it";
  clock.advance(std::chrono::milliseconds{1});
  EXPECT_EQ(servers[0].command({"PTTL", "k"}), ":-2\r\n");
  EXPECT_EQ(clock.now_ms(), stopped + 1001);
  // A restart keeps the clock (the file stays).
  servers[0].restart();
  EXPECT_EQ(time_ms(0), stopped + 1001);
}

TEST(master_set, startup_failure_reports_the_server_output) {
  redis_options bad_arg;
  bad_arg.extra_args = {"--no-such-directive", "x"};
  try {
    master_set servers(2, bad_arg);
    FAIL() << "started with a bad directive";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Bad directive"), std::string::npos) << e.what();
  }

  redis_options bad_binary;
  bad_binary.server_binary = "/nonexistent/redis-server";
  try {
    master_set servers(1, bad_binary);
    FAIL() << "started a missing binary";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/redis-server"), std::string::npos) << e.what();
  }
}

/// A private CA and a server certificate signed by it, made with the openssl CLI in a temporary
/// directory that goes with the object.
class test_certificates {
 public:
  test_certificates() {
    std::string pattern = (std::filesystem::temp_directory_path() / "redlock-certs-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const auto ec_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script = "cd '" + dir_.string() + "' && openssl req -x509 " + ec_key +
                               " -keyout ca.key -out ca.crt -days 1 -subj /CN=redlock-test-ca" + " && openssl req " +
                               ec_key + " -keyout server.key -out server.csr -subj /CN=localhost" +
                               " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial" +
                               " -out server.crt -days 1 >/dev/null 2>openssl.log";
    if (std::system(script.c_str()) != 0) throw std::runtime_error("openssl failed, see " + dir_.string());
  }
  ~test_certificates() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  test_certificates(const test_certificates&) = delete;
  test_certificates& operator=(const test_certificates&) = delete;

  redlock::test::tls_options server(bool require_client_cert) const {
    return {dir_ / "server.crt", dir_ / "server.key", dir_ / "ca.crt", require_client_cert};
  }

 private:
  std::filesystem::path dir_;
};

TEST(master_set, tls_node_listens_on_a_second_port_and_keeps_the_plain_one) {
  EXPECT_EQ(master_set(1)[0].tls_port(), 0);  // no TLS unless asked for

  const test_certificates certs;
  redis_options options;
  options.tls = certs.server(true);
  master_set servers(1, options);
  auto& node = servers[0];
  const auto tls_port = node.tls_port();
  ASSERT_NE(tls_port, 0);
  EXPECT_NE(tls_port, node.port());
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");  // the plain port still serves the harness
  EXPECT_EQ(node.command({"CONFIG", "GET", "tls-port"}), "*2\r\n$8\r\ntls-port\r\n$" +
                                                             std::to_string(std::to_string(tls_port).size()) + "\r\n" +
                                                             std::to_string(tls_port) + "\r\n");
  EXPECT_EQ(node.command({"CONFIG", "GET", "tls-auth-clients"}), "*2\r\n$16\r\ntls-auth-clients\r\n$3\r\nyes\r\n");

  // The TLS port accepts connections but speaks TLS only: plain RESP gets no PONG.
  const auto plain_on_tls = [&] {
    client c(tls_port, 2s);
    EXPECT_TRUE(c.connected()) << std::strerror(c.connect_error());
    return c.request({"PING"});
  };
  EXPECT_NE(plain_on_tls(), "+PONG\r\n");

  // A restart comes back with TLS on the same port.
  node.restart();
  EXPECT_EQ(node.tls_port(), tls_port);
  EXPECT_EQ(node.command({"PING"}), "+PONG\r\n");
  EXPECT_NE(plain_on_tls(), "+PONG\r\n");
}

// ---- fault_proxy -----------------------------------------------------------------------------

class fault_proxy_test : public ::testing::Test {
 protected:
  master_set servers_{1};
  fault_proxy proxy_{servers_[0].host(), servers_[0].port()};
};

TEST_F(fault_proxy_test, forwards_both_ways_and_counts_connections) {
  EXPECT_EQ(proxy_.host(), "127.0.0.1");
  EXPECT_NE(proxy_.port(), servers_[0].port());
  {
    client c(proxy_.port());
    EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
    // Larger than any socket buffer or read chunk: exercises partial reads and writes.
    const std::string big(3 * 1024 * 1024 + 17, 'x');
    EXPECT_EQ(c.request({"SET", "big", big}), "+OK\r\n");
    EXPECT_EQ(c.request({"GET", "big"}), "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n");
    EXPECT_EQ(proxy_.connections(), 1u);
    client second(proxy_.port());
    EXPECT_EQ(second.request({"PING"}), "+PONG\r\n");
    EXPECT_EQ(proxy_.connections(), 2u);
  }
  EXPECT_TRUE(eventually([&] { return proxy_.connections() == 0; }));
  EXPECT_EQ(proxy_.accepted_total(), 2u);
}

TEST_F(fault_proxy_test, latency_delays_each_direction_and_keeps_order) {
  client c(proxy_.port());
  ASSERT_EQ(c.request({"PING"}), "+PONG\r\n");
  proxy_.set_latency(100ms);
  const auto start = redlock::clock::now();
  EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
  // Only a lower bound: the injected delay, once per direction.
  EXPECT_GE(redlock::clock::now() - start, 200ms);

  // Separate writes become separate delayed chunks; their order must hold.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.send(encode({"INCR", "n"})));
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(c.read().reply, ":" + std::to_string(i) + "\r\n");

  proxy_.set_latency(0ms);
  EXPECT_EQ(c.request({"PING"}), "+PONG\r\n");
}

TEST_F(fault_proxy_test, blackhole_swallows_everything_until_switched_off) {
  client before(proxy_.port(), 300ms);
  ASSERT_EQ(before.request({"PING"}), "+PONG\r\n");
  proxy_.set_blackhole(true);

  ASSERT_TRUE(before.send(encode({"INCR", "swallowed"})));
  EXPECT_TRUE(before.read().timed_out);
  client during(proxy_.port(), 300ms);
  ASSERT_TRUE(during.connected());  // still accepting: a half-open peer, not a refusing one
  EXPECT_EQ(during.request({"PING"}), "<timeout>");
  EXPECT_EQ(proxy_.connections(), 2u);

  proxy_.set_blackhole(false);
  client after(proxy_.port());
  EXPECT_EQ(after.request({"PING"}), "+PONG\r\n");
  before.set_receive_timeout(5s);
  EXPECT_EQ(before.request({"PING"}), "+PONG\r\n");                 // new data flows again on old connections
  EXPECT_EQ(servers_[0].command({"GET", "swallowed"}), "$-1\r\n");  // never reached the server
}

TEST_F(fault_proxy_test, blackhole_hides_the_upstream_closing) {
  client c(proxy_.port(), 300ms);
  ASSERT_EQ(c.request({"PING"}), "+PONG\r\n");
  proxy_.set_blackhole(true);
  servers_[0].kill();
  EXPECT_TRUE(c.read().timed_out);  // no EOF reaches the client
  proxy_.set_blackhole(false);
  c.set_receive_timeout(5s);
  const auto r = c.read();
  EXPECT_TRUE(r.eof || r.error == ECONNRESET);
}

TEST_F(fault_proxy_test, reset_all_aborts_connections_with_rst) {
  client c(proxy_.port());
  ASSERT_EQ(c.request({"PING"}), "+PONG\r\n");
  proxy_.reset_all();
  EXPECT_EQ(proxy_.connections(), 0u);
  const auto r = c.read();
  EXPECT_EQ(r.error, ECONNRESET) << "eof=" << r.eof << " timed_out=" << r.timed_out;
  client again(proxy_.port());
  EXPECT_EQ(again.request({"PING"}), "+PONG\r\n");
}

TEST_F(fault_proxy_test, refuse_closes_the_listener_and_reopens_on_the_same_port) {
  client established(proxy_.port());
  ASSERT_EQ(established.request({"PING"}), "+PONG\r\n");
  const auto port = proxy_.port();

  proxy_.set_refuse(true);
  client refused(port);
  EXPECT_FALSE(refused.connected());
  EXPECT_EQ(refused.connect_error(), ECONNREFUSED);
  EXPECT_EQ(established.request({"PING"}), "+PONG\r\n");

  proxy_.set_refuse(false);
  EXPECT_EQ(proxy_.port(), port);
  client again(port);
  EXPECT_EQ(again.request({"PING"}), "+PONG\r\n");
  proxy_.set_refuse(false);  // idempotent
  EXPECT_EQ(proxy_.accepted_total(), 2u);
}

TEST_F(fault_proxy_test, upstream_down_closes_the_client_and_recovers) {
  servers_[0].kill();
  client c(proxy_.port());
  ASSERT_TRUE(c.connected());
  const auto r = c.read();
  EXPECT_TRUE(r.eof || r.error == ECONNRESET);
  EXPECT_TRUE(eventually([&] { return proxy_.connections() == 0; }));
  servers_[0].restart();
  client again(proxy_.port());
  EXPECT_EQ(again.request({"PING"}), "+PONG\r\n");
}

TEST_F(fault_proxy_test, destructor_closes_busy_connections) {
  auto proxy = std::make_unique<fault_proxy>(servers_[0].host(), servers_[0].port());
  client idle(proxy->port());
  ASSERT_EQ(idle.request({"PING"}), "+PONG\r\n");
  client delayed(proxy->port());
  proxy->set_latency(10s);  // leaves chunks waiting in the queues
  ASSERT_TRUE(delayed.send(encode({"PING"})));
  client swallowed(proxy->port());
  proxy->set_blackhole(true);
  ASSERT_TRUE(swallowed.send(encode({"PING"})));
  EXPECT_TRUE(eventually([&] { return proxy->connections() == 3; }));
  proxy.reset();
  for (auto* c : {&idle, &delayed, &swallowed}) {
    const auto r = c->read();
    EXPECT_TRUE(r.eof || r.error == ECONNRESET);
  }
}

}  // namespace
