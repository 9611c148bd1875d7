#pragma once
/// @file
/// Local `redis-server` masters on free loopback ports, for trying things out: the demonstration
/// starts a set it owns (and may kill -9 and restart one of them), `redlock nodes up` starts a
/// detached set that outlives it and records it in a state directory.
///
/// Servers run without persistence (`--save "" --appendonly no`), bound to 127.0.0.1, from the
/// binary in `server_options::server_binary`, else `REDLOCK_REDIS_SERVER`, else `redis-server`
/// found in `PATH`. Linux only (uses /proc and prctl). Not thread-safe: use one object from one
/// thread (the thread that started an owned set must live as long as it: the servers die with it).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace redlock::local {

/// How servers are started.
struct server_options {
  /// The `redis-server` executable; empty: `REDLOCK_REDIS_SERVER` if set, else `redis-server` in `PATH`.
  std::string server_binary;
  /// How long one start may take until the server answers.
  std::chrono::milliseconds start_timeout{10000};
  /// Extra arguments for the server, appended last.
  std::vector<std::string> extra_args;
};

/// The server executable `options` designate, as a path; throws `std::runtime_error` when none is found.
std::string find_server_binary(const server_options& options);

class node_set;

/// One `redis-server` owned by a `node_set`. It keeps its port for its whole life (a bound,
/// never-listening socket holds it while the server is down), so `restart()` comes back on it.
class node {
 public:
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  ~node();

  const std::string& host() const noexcept { return host_; }
  std::uint16_t port() const noexcept { return port_; }
  /// "127.0.0.1:PORT".
  std::string address() const;
  /// The server's process id, -1 when it is not running.
  pid_t pid() const;
  bool running() const;
  const std::filesystem::path& directory() const noexcept { return dir_; }

  /// SIGKILL (kill -9) and reap: connections are cut, the data is gone. No-op when not running.
  void kill();
  /// SIGTERM, wait (SIGKILL after 5 s). No-op when not running.
  void stop();
  /// Stops the server if it runs and starts it again, empty, on the same port; returns once it
  /// answers. Throws `std::runtime_error` when it cannot start.
  void restart();

 private:
  friend class node_set;
  node(std::shared_ptr<const server_options> options, std::filesystem::path dir);
  void spawn();
  void await_ready();

  std::shared_ptr<const server_options> options_;
  std::string binary_;
  std::string host_ = "127.0.0.1";
  std::uint16_t port_ = 0;
  int port_holder_ = -1;
  std::filesystem::path dir_;
  mutable pid_t pid_ = -1;
};

/// A set of local masters, started in parallel; the destructor kills them and removes their files.
class node_set {
 public:
  /// Starts `count` servers and waits until each answers. Throws `std::runtime_error` (with the
  /// server's output) when one cannot start.
  explicit node_set(std::size_t count, server_options options = {});
  ~node_set();
  node_set(const node_set&) = delete;
  node_set& operator=(const node_set&) = delete;

  std::size_t size() const noexcept { return nodes_.size(); }
  node& operator[](std::size_t i) { return *nodes_[i]; }
  const node& operator[](std::size_t i) const { return *nodes_[i]; }
  /// "127.0.0.1:P1,127.0.0.1:P2,...": the list `redlock::parse_masters` reads.
  std::string masters() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<node>> nodes_;
};

// ---- detached sets, recorded in a state directory (`redlock nodes`) ----------------------------

/// One server of a detached set as recorded.
struct recorded_node {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  pid_t pid = -1;
  /// The process's start time (clock ticks after boot, /proc/PID/stat field 22): tells our server
  /// from another process that got the same pid later.
  unsigned long long start_time = 0;
  std::string address() const;
};

/// A detached set as recorded in its state directory.
struct recorded_set {
  std::filesystem::path dir;
  std::vector<recorded_node> nodes;
  std::string masters() const;
};

/// Thrown by `start_detached` when a recorded set still runs.
struct already_running : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The state directory: `state_dir` (REDLOCK_STATE_DIR) if set, else `runtime_dir`/redlock
/// (XDG_RUNTIME_DIR), else /tmp/redlock-UID. Pure.
std::filesystem::path state_dir_from(const std::optional<std::string>& state_dir,
                                     const std::optional<std::string>& runtime_dir, unsigned uid);
/// `state_dir_from` with the process's environment and user id.
std::filesystem::path default_state_dir();

/// The set recorded in `dir`, or nothing when none is. Throws `std::runtime_error` when the
/// record is unreadable or malformed.
std::optional<recorded_set> read_state(const std::filesystem::path& dir);
/// True when the recorded process still runs (and is the one recorded, not a reused pid).
bool is_running(const recorded_node& n);

/// Starts `count` detached servers (own session, stdin/stdout on /dev/null, logs in `dir`),
/// waits until each answers, and records them in `dir` (created 0700 if needed). A stale record
/// (no server running) is replaced. Throws `already_running` when a recorded set still runs and
/// `std::runtime_error` for other failures (then nothing stays running).
recorded_set start_detached(const std::filesystem::path& dir, std::size_t count, const server_options& options = {});

/// What `stop_detached` did.
struct stop_report {
  std::size_t recorded = 0;  ///< servers in the record
  std::size_t stopped = 0;   ///< of which were running and were stopped
  std::size_t killed = 0;    ///< of which needed SIGKILL after `grace`
};

/// Stops the set recorded in `dir` (SIGTERM, then SIGKILL after `grace`), waits until the
/// processes are gone and removes the record and the servers' files. Nothing recorded: a no-op.
stop_report stop_detached(const std::filesystem::path& dir,
                          std::chrono::milliseconds grace = std::chrono::milliseconds{5000});

}  // namespace redlock::local
