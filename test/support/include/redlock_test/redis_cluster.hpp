#pragma once
/// @file
/// Real `redis-server` processes for integration tests, benchmarks and the demonstration: each on
/// a free loopback port, in a private temporary directory, with no persistence, and with
/// process-level fault injection (stop, kill, pause, resume, restart on the same port).
///
/// Thread-safety: none. Create, use and destroy a cluster and its nodes from one thread, and keep
/// that thread alive while the servers run: the servers are started with a parent-death signal,
/// which Linux ties to the thread that forked them (normally the test's main thread).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::test {

/// An extra ACL user, created with full rights (`+@all ~* &*`).
struct acl_user {
  std::string name;
  std::string password;
};

/// How the servers of a `redis_cluster` are started.
struct redis_options {
  /// Non-empty: `requirepass` (the password of the `default` user).
  std::string password;
  /// An extra ACL user with its own password and full rights.
  std::optional<acl_user> user;
  /// Extra `redis-server` arguments, appended last, e.g. `{"--maxmemory", "1mb"}`.
  std::vector<std::string> extra_args;
  /// The server executable. Empty: the environment variable `REDLOCK_REDIS_SERVER` if set and
  /// non-empty, else `redis-server` looked up in `PATH`.
  std::string server_binary;
  /// How long one start (or restart) may take until the server answers `PING`.
  std::chrono::milliseconds start_timeout{10000};
};

/// One `redis-server` process, owned by a `redis_cluster`. The node keeps its loopback port for
/// its whole life, also while the server is down (a bound, non-listening socket holds it), so
/// `restart()` cannot lose the port to another process and connects in between are refused.
class redis_node {
 public:
  redis_node(const redis_node&) = delete;
  redis_node& operator=(const redis_node&) = delete;
  /// Kills the server (if any) and removes its directory. Never throws.
  ~redis_node();

  /// The address the server listens on: "127.0.0.1".
  const std::string& host() const noexcept { return host_; }
  /// The server's TCP port; unchanged by `restart()`.
  std::uint16_t port() const noexcept { return port_; }
  /// The server's process id, or -1 when not running.
  pid_t pid() const;
  /// True when started and not stopped or killed (a server that exited on its own, e.g. after
  /// `SHUTDOWN`, is reaped and reported as not running). A paused server is running.
  bool running() const;
  /// True between `pause()` and `resume()` (or stop, kill, restart).
  bool paused() const noexcept { return paused_; }
  /// The node's private directory (holds `redis.log`).
  const std::filesystem::path& directory() const noexcept { return dir_; }

  /// Graceful stop: SIGTERM (after SIGCONT if paused), wait for the exit, SIGKILL after ~5 s.
  /// No-op when not running.
  void stop();
  /// SIGKILL and reap. Connected clients see their connections reset or closed. No-op when not
  /// running.
  void kill();
  /// SIGSTOP, returning once the process is stopped. The kernel still completes TCP handshakes
  /// on its listening socket, so connects succeed but nothing is ever answered: a hung node.
  /// Throws `std::logic_error` when not running; no-op when already paused.
  void pause();
  /// SIGCONT, returning once the process runs again; the requests sent meanwhile are then
  /// served. No-op when not paused.
  void resume();
  /// Stops the server if it runs, then starts it again on the same port with the same options
  /// and an empty dataset, and waits until it answers `PING`. Throws `std::runtime_error` when
  /// it cannot start.
  void restart();

  /// Sends one command over a short-lived blocking connection (with `AUTH` first when the
  /// options set a password) and returns the raw RESP reply bytes, e.g. "+PONG\r\n". An error
  /// reply is returned, not thrown. Throws `std::runtime_error` when the connection fails, the
  /// reply does not arrive within `timeout`, or `AUTH` is rejected.
  std::string command(std::initializer_list<std::string_view> args,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds{5000});

 private:
  friend class redis_cluster;

  enum class start_result { ready, address_in_use };

  explicit redis_node(std::shared_ptr<const redis_options> options);

  void reserve_new_port();
  void spawn();
  start_result await_ready(std::chrono::steady_clock::time_point deadline);
  void await_started();
  void send_kill() noexcept;
  void reap() noexcept;
  bool reap_if_exited() const;
  std::string run_output() const;  // the server's stdout/stderr and log since the last spawn
  std::string log_tail() const;

  std::shared_ptr<const redis_options> options_;
  std::string host_ = "127.0.0.1";
  std::filesystem::path dir_;
  std::uint16_t port_ = 0;
  int port_holder_fd_ = -1;  // bound, never listening: keeps the port ours between runs
  // Mutable: `running()` and `pid()` reap a server that exited by itself.
  mutable pid_t pid_ = -1;
  mutable bool paused_ = false;
  mutable std::string exit_status_;    // how the last run ended, for error messages
  std::uintmax_t log_offset_ = 0;      // where the current run's log lines begin
  std::uintmax_t console_offset_ = 0;  // same, for the stdout/stderr capture
};

/// A set of independent `redis-server` masters on loopback, started in parallel. The destructor
/// kills every server and removes their directories.
class redis_cluster {
 public:
  /// Starts `count` servers and waits until each answers `PING` (after `AUTH` when a password
  /// is set). Throws `std::runtime_error` (with the server's log tail) when one cannot start.
  explicit redis_cluster(std::size_t count, redis_options options = {});
  /// Kills every server (SIGKILL, after SIGCONT), reaps them and removes their directories.
  /// Never throws.
  ~redis_cluster();

  redis_cluster(const redis_cluster&) = delete;
  redis_cluster& operator=(const redis_cluster&) = delete;
  redis_cluster(redis_cluster&&) noexcept = default;
  redis_cluster& operator=(redis_cluster&&) noexcept = default;

  std::size_t size() const noexcept { return nodes_.size(); }
  /// The node at `i` (unchecked).
  redis_node& operator[](std::size_t i) { return *nodes_[i]; }
  /// The node at `i`; throws `std::out_of_range`.
  redis_node& node(std::size_t i);
  /// The ports of all nodes, in order.
  std::vector<std::uint16_t> ports() const;
  const redis_options& options() const noexcept { return *options_; }

 private:
  std::shared_ptr<const redis_options> options_;
  std::vector<std::unique_ptr<redis_node>> nodes_;
};

}  // namespace redlock::test
