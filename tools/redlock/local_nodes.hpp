// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Detached sets of local `redis-server` masters for `redlock nodes`: `redlock nodes up` starts a
/// set that outlives the command and records it in a state directory, `down` stops it. Built on the
/// local-masters library (tools/local_masters/local_masters.hpp), which it re-exports: the
/// demonstration starts a set it owns (`node_set`) through this header.
///
/// Linux only (uses /proc). Not thread-safe.

#include <sys/types.h>

#include <certificates.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <local_masters.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace redlock::local {

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
  /// Each node's port is the one clients use: its TLS port when `tls`.
  std::vector<recorded_node> nodes;
  /// 0: every node is a master; else the nodes are clusters of this many shards, each a master.
  std::size_t shards = 0;
  /// The nodes speak TLS only, with certificates of a private CA in `tls_dir()`.
  bool tls = false;
  /// With `tls`: the nodes require a client certificate signed by that CA.
  bool tls_auth_clients = false;
  /// The master list: "127.0.0.1:P,..." ("rediss://127.0.0.1:P,..." with TLS).
  std::string masters() const;
  /// Where the TLS certificates are: `dir`/tls.
  std::filesystem::path tls_dir() const { return dir / "tls"; }
  /// The certificate files in `tls_dir()`.
  certificate_files tls_files() const { return certificate_paths(tls_dir()); }
};

/// Thrown by `start_detached` when a recorded set still runs.
struct already_running : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Thrown by `start_detached` when the ports asked for (`detached_options::first_port`..
/// `last_port`) do not hold enough free ones.
struct ports_unavailable : std::runtime_error {
  ports_unavailable(std::uint16_t first, std::uint16_t last, std::size_t needed, std::vector<port_unavailable> taken);
  std::uint16_t first = 0;  ///< the range asked for
  std::uint16_t last = 0;
  std::size_t needed = 0;  ///< the servers to start
  /// The ports of the range found unusable, in order, each with its reason.
  std::vector<port_unavailable> taken;
};

/// What `start_detached` starts.
struct detached_options {
  std::size_t count = 1;   ///< masters
  std::size_t shards = 0;  ///< 0: plain masters; else each master a Redis Cluster of this many shards
  /// Each server speaks TLS only (its plain port is closed once it answers), with a certificate
  /// for 127.0.0.1 and localhost signed by a new private CA (`recorded_set::tls_files()`). Not
  /// with `shards`.
  bool tls = false;
  /// With `tls`: clients must present a certificate of that CA (`--tls-auth-clients yes`).
  bool tls_auth_clients = false;
  /// Not 0: the servers' ports (the TLS ports with `tls`) are taken from `first_port`..`last_port`,
  /// the lowest free ones first; else any free ports.
  std::uint16_t first_port = 0;
  std::uint16_t last_port = 0;
  /// How the servers are started (the TLS and cluster settings are added).
  server_options server;
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

/// Starts the servers of `options` detached (own session, stdin/stdout on /dev/null, logs in
/// `dir`), waits until each answers, and records them in `dir` (created 0700 if needed). A stale
/// record (no server running) is replaced. Throws `already_running` when a recorded set still
/// runs, `ports_unavailable` when the range of ports asked for holds too few free ones, and
/// `std::runtime_error` for other failures (then nothing stays running).
recorded_set start_detached(const std::filesystem::path& dir, const detached_options& options);

/// What `stop_detached` did.
struct stop_report {
  std::size_t recorded = 0;  ///< servers in the record
  std::size_t stopped = 0;   ///< of which were running and were stopped
  std::size_t killed = 0;    ///< of which needed SIGKILL after `grace`
};

/// Stops the set recorded in `dir` (SIGTERM, then SIGKILL after `grace`), waits until the
/// processes are gone and removes the record, the servers' files and the TLS certificates.
/// Nothing recorded: a no-op.
stop_report stop_detached(const std::filesystem::path& dir,
                          std::chrono::milliseconds grace = std::chrono::milliseconds{5000});

}  // namespace redlock::local
