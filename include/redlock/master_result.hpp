#pragma once
/// @file
/// What one master answered to one request of a lock operation (acquire, extend, release).

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace redlock {

/// What one master answered in the last operation on a lock.
enum class master_status : std::uint8_t {
  pending,       ///< no answer when the quorum decided (the request still runs)
  granted,       ///< `SET NX` succeeded, or the extend/release script found our token
  taken,         ///< the key is held by someone else (or, for a script, no longer ours)
  server_error,  ///< an error reply (`server_text` holds it); the command did not run
  timeout,       ///< no answer before the deadline; whether the command ran is unknown
  unreachable,   ///< the connection to the master is down; nothing was sent
  failed,        ///< the connection broke or a reply was malformed after sending; outcome unknown
  /// Fair acquisition: the key was free, but another client's waiter is ahead in this master's
  /// queue (see `client_config::fairness`); this client is queued behind it.
  queued,
};

/// One master's answer with its detail.
struct master_result {
  master_status status = master_status::pending;
  /// The error behind a status other than granted/taken (empty for those).
  boost::system::error_code error;
  /// The master's own text for `server_error` (untrusted; for logs).
  std::string server_text;
  /// From sending the request to this answer (zero while `pending`).
  std::chrono::microseconds latency{0};
  /// The number a script-based acquisition answered with its status (docs/api.md, "Lock kinds"):
  /// the fencing counter, the waiter's ticket, the holders or holds counted there; 0 otherwise.
  std::int64_t value = 0;
};

/// The status's name as the docs and the CLI's JSON use it: "pending", "granted", "taken",
/// "server_error", "timeout", "unreachable", "failed", "queued".
std::string_view to_string(master_status s) noexcept;

}  // namespace redlock
