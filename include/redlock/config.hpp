// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Configuration of a Redlock client.

#include <redlock/connection.hpp>
#include <redlock/core/keep_alive_fsm.hpp>
#include <redlock/core/retry.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/export.hpp>
#include <redlock/hazard.hpp>
#include <redlock/lock_options.hpp>
#include <redlock/observe.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace redlock {

/// Fair hand-over of contended locks (docs/design.md, "Fair hand-over").
struct fairness_options {
  /// On: an `async_lock` whose first attempt finds the lock taken queues on every master (a sorted
  /// set beside the key), the next holder is the first of the queued waiters, and the release wakes
  /// it by a pub/sub message on its client's connection, so it retries within a round trip instead
  /// of at its next retry tick. Mutual exclusion still rests on the `SET NX PX` key alone. Off:
  /// every attempt is a plain `SET NX PX`, and waiters only retry on `retry`'s schedule.
  bool enabled = true;
  /// How long a waiter's place in a master's queue lives unless one of its attempts renews it: the
  /// longest that a waiter which died, stopped or lost its network can hold up the waiters behind
  /// it. Zero: 2 × (retry.base_delay + retry.jitter) + request_timeout, at least 500 ms (550 ms
  /// with the defaults). Must exceed retry.base_delay + retry.jitter + request_timeout, the
  /// longest gap between two attempts of a waiter that hears no wake-up.
  std::chrono::milliseconds entry_timeout{0};
  /// On: each fair round leaves an offer beside its queue entry (its token, ttl and round), and a
  /// holder's release sets the key for the first waiter at once, with that offer, if the waiter's
  /// client is connected to receive the message. The waiter holds the lock when a majority of
  /// masters has handed it over, without a round of its own: about one round trip from release
  /// to grant instead of two. The price: a waiter whose process stops (not dies: a dead process
  /// has no connection left, and is only woken) in the moments between its last round and the
  /// release holds the lock up until the key's ttl, as a stopped holder does, rather than only
  /// until its queue entry expires (docs/design.md, "Fair hand-over"). Off: releases only wake the
  /// first waiter, which then acquires with a round of its own.
  bool hand_over = true;
};

/// The masters and the rules of a Redlock client.
struct client_config {
  /// The independent masters (no replication between them); typically 5. Each gets one
  /// multiplexed connection.
  std::vector<connection_config> masters;
  /// Prepended to every resource name to make the key. Empty by default, so that clients of other
  /// Redlock libraries that lock the same resource names exclude ours and vice versa.
  std::string key_prefix;
  /// Deadline of one master's answer to `SET NX PX` or the extend script. The quorum decides as
  /// soon as it can, so a slow or dead minority does not cost this; it is longer than Linux's
  /// minimum TCP retransmission timeout (200 ms) so that one lost packet does not lose a vote.
  /// Must be smaller than every ttl used.
  std::chrono::milliseconds request_timeout{250};
  /// Deadline of one master's answer to the release script.
  std::chrono::milliseconds release_timeout{1000};
  /// Clock-drift allowance subtracted from every validity.
  core::drift_policy drift{};
  /// Retries of `async_lock` (`async_try_lock` makes one attempt).
  core::retry_policy retry{};
  /// Fair hand-over to waiters, woken on release (on by default).
  fairness_options fairness{};
  /// Longest resource name accepted (Redis allows 512 MiB keys; lock names that long are a bug).
  std::size_t max_resource_length = 64 * 1024;
  /// Most resources one `async_lock_all` takes (each is a key in one script call per master).
  std::size_t max_resources = 1024;
  /// Longest ttl of one request (acquire or extension; at most 366 days). It bounds how long a
  /// restarted master stays quarantined (`guard.quarantine`), so keep it short: a lock meant to
  /// last longer is kept alive with `lock::keep_alive`. Every client of a fleet should use the
  /// same value (or a larger quarantine). 60 s by default (24 h before 0.9.0).
  std::chrono::milliseconds max_ttl = std::chrono::seconds{60};
  /// The hazard guards: restarted masters and wall-clock jumps (docs/safety.md).
  hazard_guard_options guard{};
  /// Log sink and level for the client's messages (lock acquired, failed, extended, lost,
  /// released; off by default). Each master whose own `connection_config::logging` has no sink
  /// logs through this one too, its messages prefixed "master N (address)".
  log_options logging{};
};

/// Checks `cfg` (masters present, distinct and valid; timeouts positive; drift and retry sane).
/// Returns `error::invalid_config`, with `what` naming the problem, or success.
REDLOCK_API boost::system::error_code validate(const client_config& cfg, std::string* what = nullptr);

/// @brief Checks a lock request against `cfg` before anything is sent: what `client::async_lock`
/// (with `opts`) would refuse with `error::invalid_argument`, with `what` saying which argument and
/// why ("resource is empty", "ttl 100 ms leaves no validity: drift 3 ms + request_timeout 250 ms",
/// "permits other than 1 without the semaphore kind", ...). `error::invalid_config` (and the
/// problem) for an invalid `cfg`; success otherwise. `async_lock` logs the same reason at debug.
REDLOCK_API boost::system::error_code validate_lock(const client_config& cfg, std::string_view resource,
                                                    std::chrono::milliseconds ttl, const lock_options& opts = {},
                                                    std::string* what = nullptr);

/// Reads `run_id`, `reconnect` or `off` into `out`; false (and `out` unchanged) for anything else.
REDLOCK_API bool parse_restart_detection(std::string_view text, restart_detection& out) noexcept;

/// How long a restarted (or jumped) master's votes do not count under `cfg`
/// (`hazard_guard_options::quarantine`, or the value derived from `max_ttl` when that is zero).
REDLOCK_API std::chrono::milliseconds restart_quarantine(const client_config& cfg) noexcept;

/// The lifetime of a waiter's queue entry under `cfg` (`fairness_options::entry_timeout`, or the
/// value derived from the retry schedule when that is zero).
REDLOCK_API std::chrono::milliseconds queue_entry_timeout(const client_config& cfg) noexcept;

/// @brief Parses a list of masters such as `"10.0.0.1:7001,10.0.0.2:7001,[::1]:7003,unix:/run/r.sock"`.
///
/// Entries are separated by commas (blanks around them are ignored); each is `host:port`, `host`
/// (port 6379), `[ipv6]:port`, `[ipv6]` or `unix:/path/of/socket`. A TCP entry may start with
/// `rediss://` (TLS: `tls.enabled` set) or `redis://` (plain, the same as no scheme). A master that
/// is a Redis Cluster is `redis-cluster://seed+seed+...` (`rediss-cluster://` with TLS), each seed
/// `host:port`, `host` or `[ipv6]:port` (`cluster_options`). Appends one
/// `connection_config` per entry to `out`, each otherwise default (credentials and the TLS files
/// are not part of the list: set `username`/`password` and `tls` afterwards, e.g. from the
/// environment). Returns `error::invalid_config`
/// with `what` naming the bad entry, leaving `out` unchanged, or success.
REDLOCK_API boost::system::error_code parse_masters(std::string_view list, std::vector<connection_config>& out,
                                                    std::string* what = nullptr);

}  // namespace redlock
