// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// What one master answered to one request of a lock operation (acquire, extend, release).

#include <redlock/export.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redlock {

/// What one master answered in the last operation on a lock.
enum class master_status : std::uint8_t {
  pending,       ///< no answer when the quorum decided (the request still runs)
  granted,       ///< `SET NX` succeeded, or the extend/release script found our token
  taken,         ///< the key is held by someone else (or, for a script, no longer ours)
  server_error,  ///< an error reply (`server_text` holds it); the command did not run
  timeout,       ///< no answer before the deadline; whether the command ran is unknown
  /// the connection to the master is down; nothing was sent. `error` holds why the connection
  /// last failed (`auth_failed`, `host_not_found`, `connection_refused`, `connect_timeout`...),
  /// or `not_connected` when no attempt has failed yet (still connecting)
  unreachable,
  failed,  ///< the connection broke or a reply was malformed after sending; outcome unknown
  /// Fair acquisition: the key was free, but another client's waiter is ahead in this master's
  /// queue (see `client_config::fairness`); this client is queued behind it.
  queued,
};

/// One master's answer with its detail.
struct master_result {
  /// What the master answered (`pending` until it has).
  master_status status = master_status::pending;
  /// The error behind a status other than granted/taken (empty for those). For `unreachable`,
  /// the connection's own cause of failure (see `master_status::unreachable`).
  boost::system::error_code error;
  /// The master's own text for `server_error` (untrusted; for logs).
  std::string server_text;
  /// From sending the request to this answer (zero while `pending`).
  std::chrono::microseconds latency{0};
  /// The number a script-based acquisition answered with its status (docs/api.md, "Lock kinds"):
  /// the fencing counter, the waiter's ticket, the holders or holds counted there; 0 otherwise. A
  /// fenced grant by a master without a counter answers that master's clock in microseconds,
  /// negated (docs/safety.md, "Fencing tokens").
  std::int64_t value = 0;
};

/// Why a quorum of masters could not be had (or, for `client::async_wait_ready`, is not had yet),
/// master by master: what a caller prints after `error::quorum_unavailable` without reading
/// `client::masters()`. Made by `client::report(const lock&)` and by `client::async_wait_ready`;
/// `to_string` (and fmt, with redlock/format.hpp) gives one line such as
/// "too few masters answered for a quorum: 2 of 3 masters could not be used (2 needed):
/// 127.0.0.1:7001 unreachable: the node rejected the credentials (WRONGPASS ...); x.invalid:6379
/// unreachable: Host not found (authoritative)".
struct quorum_report {
  /// One master that could not be used.
  struct master {
    std::size_t index = 0;  ///< in `client_config::masters`
    std::string address;    ///< as `address_of` writes it
    /// What it answered (`unreachable`: its connection is down, `error` says why); `pending` in
    /// a readiness report: still connecting, no attempt failed yet.
    master_status status = master_status::pending;
    /// Why it could not be used: for `unreachable`, why its connection last failed.
    boost::system::error_code error;
    /// The master's own words: its error reply, or its refusal of the credentials (untrusted).
    std::string server_text;
  };
  /// The operation's outcome (empty: `async_wait_ready` succeeded; `failing` may still list the
  /// masters that are not up).
  boost::system::error_code error;
  std::size_t masters = 0;  ///< masters in all
  std::size_t needed = 0;   ///< masters a quorum needs
  /// The masters that could not be used (or are not up yet), in configuration order.
  std::vector<master> failing;
};

/// The report on one line (see `quorum_report`); the masters' texts are made printable and cut.
REDLOCK_API std::string to_string(const quorum_report& r);

/// The status's name as the docs and the CLI's JSON use it: "pending", "granted", "taken",
/// "server_error", "timeout", "unreachable", "failed", "queued".
REDLOCK_API std::string_view to_string(master_status s) noexcept;

}  // namespace redlock
