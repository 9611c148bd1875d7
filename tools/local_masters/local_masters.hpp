// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Local `redis-server` masters on free loopback ports, each in a private directory, without
/// persistence, with process-level supervision (stop, kill -9, pause, resume, restart on the same
/// port). One library for everything that starts servers of its own: the tests, the benchmarks and
/// the demonstration (through `node_set`, aliased as `redlock::test::master_set`) and the
/// `redlock nodes` command, whose detached sets (tools/redlock/local_nodes.hpp) are built on `node`.
///
/// Internal: a static library of the build (`redlock_local_masters`), never installed. Linux only
/// (prctl, close_range, /proc). Talking to a server goes through the project's own RESP encoder and
/// parser (redlock/resp/), over a short-lived blocking connection.
///
/// Thread-safety: none. Create, use and destroy a set and its nodes from one thread, and keep that
/// thread alive while owned servers run: they are started with a parent-death signal, which Linux
/// ties to the thread that forked them.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::local {

/// An extra ACL user, created with full rights (`+@all ~* &*`).
struct acl_user {
  std::string name;
  std::string password;
};

/// A TLS listener next to the plain one (`--tls-port`). The plain port stays: the library's own
/// readiness probe and `command()` use it.
struct tls_options {
  /// The server's certificate and private key (PEM).
  std::filesystem::path cert_file;
  std::filesystem::path key_file;
  /// CA certificates that client certificates are checked against (`--tls-ca-cert-file`); empty:
  /// not passed (then clients cannot be required to present a certificate).
  std::filesystem::path ca_file;
  /// `--tls-auth-clients yes`: a client without a certificate signed by `ca_file` is refused.
  bool require_client_cert = false;
};

/// How servers are started.
struct server_options {
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
  /// Set: each server also listens for TLS on a second port of its own (`node::tls_port()`).
  std::optional<tls_options> tls;
  /// Not empty: the path of a shared library preloaded into each server (`LD_PRELOAD`) that reads
  /// the wall clock from `node::clock_file()`, so that a test can shift or stop a server's clock
  /// (the test bed's clock shim, redlock_test/master_clock.hpp).
  std::string clock_shim;
  /// Set: each server runs in cluster mode (`--cluster-enabled yes`, its `nodes.conf` in its
  /// directory, kept across restarts) with a cluster bus port of its own (`node::bus_port()`),
  /// and this `--cluster-node-timeout`. A `cluster_set` joins such servers into clusters.
  std::optional<std::chrono::milliseconds> cluster_node_timeout;
};

/// The server executable `options` designate, as a path; throws `std::runtime_error` when none is found.
std::string find_server_binary(const server_options& options);

class session;

/// The ports a node is to listen on; 0: a free loopback port of the system's choosing.
struct port_request {
  std::uint16_t port = 0;      ///< the plain port
  std::uint16_t tls_port = 0;  ///< the TLS port (with `server_options::tls`)
};

/// A requested port (`port_request`) that cannot be had: another process listens on it, or
/// binding it needs privileges.
struct port_unavailable : std::runtime_error {
  port_unavailable(std::uint16_t port, int error);
  std::uint16_t port;  ///< the port asked for
  int error;           ///< the bind's errno: EADDRINUSE, EACCES, ...
};

/// Whether a server dies with the program.
enum class lifetime {
  /// Killed with the program (parent-death signal) and by the destructor; own process group, so
  /// that a terminal's Ctrl-C reaches only the program, which then stops its servers itself.
  owned,
  /// Own session, no tie to the program: after `release()` it runs on (`redlock nodes up`).
  detached,
};

/// One `redis-server` process. The node keeps its loopback port(s) for its whole life, also while
/// the server is down (a bound, never-listening socket holds each), so `restart()` cannot lose the
/// port to another process and connects in between are refused.
class node {
 public:
  /// A server of `options` with `dir` (created if missing) as its directory, not started yet: its
  /// port (and TLS port) are reserved now, those of `ports` that are not 0 as given. Throws
  /// `std::runtime_error` when no binary is found, `port_unavailable` when a requested port is taken.
  node(std::shared_ptr<const server_options> options, std::filesystem::path dir, lifetime kind = lifetime::owned,
       port_request ports = {});
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  /// Kills the server (unless released) and gives up the ports; the directory stays. Never throws.
  ~node();

  /// The address the server listens on: "127.0.0.1".
  const std::string& host() const noexcept { return host_; }
  /// The server's TCP port; unchanged by `restart()`.
  std::uint16_t port() const noexcept { return port_; }
  /// The TLS port, 0 without `server_options::tls`; unchanged by `restart()`.
  std::uint16_t tls_port() const noexcept { return tls_port_; }
  /// The cluster bus port, 0 without `server_options::cluster_node_timeout`; unchanged by `restart()`.
  std::uint16_t bus_port() const noexcept { return bus_port_; }
  /// "127.0.0.1:PORT".
  std::string address() const;
  /// The server's process id, or -1 when not running.
  pid_t pid() const;
  /// True when started and not stopped or killed (a server that exited on its own, e.g. after
  /// `SHUTDOWN`, is reaped and reported as not running). A paused server is running.
  bool running() const;
  /// True between `pause()` and `resume()` (or stop, kill, restart).
  bool paused() const noexcept { return paused_; }
  /// The node's private directory (holds `redis.log`, and `console.log`: the server's output).
  const std::filesystem::path& directory() const noexcept { return dir_; }
  /// The file the server's wall clock is read from when `server_options::clock_shim` is set
  /// (created with the real clock before the first start; kept across restarts).
  std::filesystem::path clock_file() const { return dir_ / "clock"; }
  const server_options& options() const noexcept { return *options_; }

  /// Starts the server and waits until it answers `PING`: `spawn()` then `wait_started()`.
  void start();
  /// Starts the server without waiting (to start several in parallel). Throws
  /// `std::runtime_error` when the binary cannot be executed.
  void spawn();
  /// Waits until the spawned server answers `PING` (after `AUTH`) and is the process spawned;
  /// when its port was taken before it could listen (only possible on the first start), moves to
  /// fresh ports and tries again (a requested port is tried again, and `port_unavailable` thrown
  /// when another process listens on it). Throws `std::runtime_error` with the server's output
  /// when it exits or does not answer within `start_timeout`.
  void wait_started();

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
  /// Lets the server run on without this object: forgets it and gives up the held ports (the
  /// server listens on them itself). For detached servers, once they answer.
  void release() noexcept;

  /// Sends one command over a short-lived blocking connection to the plain port (with `AUTH`
  /// first when the options set a password or a user) and returns the raw RESP reply bytes, e.g.
  /// "+PONG\r\n". An error reply is returned, not thrown. Throws `std::runtime_error` when the
  /// connection fails, the reply does not arrive within `timeout` or is malformed, or `AUTH` is
  /// rejected.
  std::string command(std::initializer_list<std::string_view> args,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds{5000});
  /// The same, with the command and its arguments in a vector (built at run time).
  std::string command(const std::vector<std::string>& args,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds{5000});
  /// A connection kept open for many commands (see `session`); throws as `command` does.
  session open(std::chrono::milliseconds timeout = std::chrono::milliseconds{5000});

 private:
  enum class start_result { ready, address_in_use };

  std::string command(std::span<const std::string_view> args, std::chrono::milliseconds timeout);
  void reserve_ports();
  start_result await_ready(std::chrono::steady_clock::time_point deadline);
  void send_kill() noexcept;
  void reap() noexcept;
  bool reap_if_exited() const;
  std::string run_output() const;  // the server's output and log since the last spawn
  std::string output_tail() const;

  friend class node_set;

  std::shared_ptr<const server_options> options_;
  lifetime kind_;
  std::string binary_;
  std::string host_ = "127.0.0.1";
  std::filesystem::path dir_;
  port_request requested_;
  std::uint16_t port_ = 0;
  std::uint16_t tls_port_ = 0;
  int port_holder_ = -1;  // bound, never listening: keeps the port ours between runs
  int tls_port_holder_ = -1;
  std::uint16_t bus_port_ = 0;
  int bus_port_holder_ = -1;
  // Mutable: `running()` and `pid()` reap a server that exited by itself.
  mutable pid_t pid_ = -1;
  mutable bool paused_ = false;
  mutable std::string exit_status_;    // how the last run ended, for error messages
  std::uintmax_t log_offset_ = 0;      // where the current run's log lines begin
  std::uintmax_t console_offset_ = 0;  // same, for the server's own output
};

/// A blocking connection to one node kept open for many commands (`node::open`), for tests that
/// send thousands: one command at a time, each bounded by the session's timeout. Move-only.
class session {
 public:
  ~session();
  session(session&&) noexcept;
  session& operator=(session&&) noexcept;
  /// Sends one command; returns the raw RESP reply (an error reply is returned, not thrown).
  std::string command(const std::vector<std::string>& args);
  /// Sends one command already encoded as RESP (`payload`); returns its raw reply.
  std::string raw(std::string_view payload);

 private:
  friend class node;
  class impl;
  explicit session(std::unique_ptr<impl> i) noexcept;
  std::unique_ptr<impl> impl_;
};

/// A set of independent owned servers, started in parallel, in one private temporary directory
/// (`$TMPDIR/redlock-local-XXXXXX`, one `node-I/` per server). The destructor kills every server
/// and removes the directory; directories left by a program that was killed (its servers died
/// with it) are removed by the next set created.
class node_set {
 public:
  /// Starts `count` servers and waits until each answers `PING` (after `AUTH` when a password
  /// is set). Throws `std::runtime_error` (with the server's output) when one cannot start.
  explicit node_set(std::size_t count, server_options options = {});
  /// Kills every server (SIGKILL, after SIGCONT), reaps them and removes the directory. Never throws.
  ~node_set();

  node_set(const node_set&) = delete;
  node_set& operator=(const node_set&) = delete;
  node_set(node_set&& other) noexcept;
  node_set& operator=(node_set&& other) noexcept;

  std::size_t size() const noexcept { return nodes_.size(); }
  /// The node at `i` (unchecked).
  local::node& operator[](std::size_t i) { return *nodes_[i]; }
  const local::node& operator[](std::size_t i) const { return *nodes_[i]; }
  /// The node at `i`; throws `std::out_of_range`.
  local::node& at(std::size_t i);
  /// Same as `at(i)`.
  local::node& node(std::size_t i) { return at(i); }
  /// The ports of all nodes, in order.
  std::vector<std::uint16_t> ports() const;
  /// "127.0.0.1:P1,127.0.0.1:P2,...": the list `redlock::parse_masters` reads.
  std::string masters() const;
  const server_options& options() const noexcept { return *options_; }
  /// The set's directory.
  const std::filesystem::path& directory() const noexcept { return dir_; }

 private:
  void destroy() noexcept;

  std::shared_ptr<const server_options> options_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<local::node>> nodes_;
};

/// Joins running `nodes` (started with `server_options::cluster_node_timeout`) into clusters of
/// `shards` primaries with `replicas` replicas each: cluster `c`'s shard `s` member `r` (0: the
/// primary) is `nodes[(c * shards + s) * (1 + replicas) + r]`. Spreads the slots evenly, meets
/// the nodes, makes the replicas follow, and returns once every cluster is stable. Throws
/// `std::runtime_error` when a cluster does not form within 20 s.
void form_clusters(std::span<node* const> nodes, std::size_t shards, std::size_t replicas = 0);
/// Waits until every member of one cluster reports `cluster_state:ok`, knows every member and
/// every slot, and agrees with the others on the owners; throws after `timeout`.
void wait_cluster_stable(std::span<node* const> members, std::chrono::milliseconds timeout);

/// @brief Redis Clusters on loopback: `clusters` independent clusters of `shards` primaries each
/// (and `replicas` replicas per primary), each one Redlock master (`masters()`).
///
/// The servers are a `node_set` started with `server_options::cluster_node_timeout`; the slots
/// are spread evenly over each cluster's primaries (`CLUSTER ADDSLOTSRANGE`), the nodes meet
/// (`CLUSTER MEET`), replicas follow their primary (`CLUSTER REPLICATE`), and the constructor
/// returns once every node of every cluster reports `cluster_state:ok` and knows every slot.
class cluster_set {
 public:
  /// Throws `std::runtime_error` when a server cannot start or a cluster does not form in time.
  cluster_set(std::size_t clusters, std::size_t shards, server_options options = {}, std::size_t replicas = 0);

  std::size_t size() const noexcept { return clusters_; }
  std::size_t shards() const noexcept { return shards_; }
  /// Primary `shard` of cluster `c` (as started: a failover does not renumber).
  local::node& primary(std::size_t c, std::size_t shard) { return nodes_[index(c, shard, 0)]; }
  /// Replica `r` of primary `shard` of cluster `c`.
  local::node& replica(std::size_t c, std::size_t shard, std::size_t r = 0) { return nodes_[index(c, shard, 1 + r)]; }
  /// Every server, primaries and replicas.
  node_set& servers() noexcept { return nodes_; }
  /// Cluster `c` as a master list entry: "redis-cluster://127.0.0.1:P1+127.0.0.1:P2...".
  std::string master(std::size_t c) const;
  /// Every cluster, comma-separated: the list `redlock::parse_masters` reads.
  std::string masters() const;
  /// Waits until every node of cluster `c` reports `cluster_state:ok` and the same owner for
  /// every slot; throws `std::runtime_error` after `timeout`.
  void wait_stable(std::size_t c, std::chrono::milliseconds timeout = std::chrono::milliseconds{20000});
  /// The node id of `n` (`CLUSTER MYID`).
  static std::string id_of(local::node& n);
  /// Moves slot `slot` of cluster `c` from the primary that owns it to `to` with its keys
  /// (`CLUSTER SETSLOT ... IMPORTING/MIGRATING`, `MIGRATE` of every key, `SETSLOT ... NODE`).
  void move_slot(std::size_t c, std::uint16_t slot, local::node& to);

 private:
  std::size_t index(std::size_t c, std::size_t shard, std::size_t member) const noexcept {
    return (c * shards_ + shard) * (1 + replicas_) + member;
  }
  std::size_t clusters_;
  std::size_t shards_;
  std::size_t replicas_;
  node_set nodes_;
};

}  // namespace redlock::local
