// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The library's error codes (category "redlock") and the coarse conditions they map to.

#include <redlock/export.hpp>

#include <boost/system/error_code.hpp>

#include <string_view>
#include <type_traits>

/// Redlock distributed locks over N independent Redis masters, for Boost.Asio: the client, lock
/// handles, configuration, errors and observability (`#include <redlock/redlock.hpp>`).
namespace redlock {

/// Errors raised by this library. Asio and operating-system errors pass through unchanged.
enum class error {
  // RESP (wire protocol)
  /// The node sent bytes that are not valid RESP.
  protocol_error = 1,
  /// A reply nests aggregates deeper than `resp::parser_limits::max_depth`.
  nesting_too_deep,
  /// A reply declares a length or element count above `resp::parser_limits`, or a line is too long.
  reply_too_large,

  // One node connection
  /// The connection to the node is down (reconnecting, or closed): the request was not sent.
  not_connected,
  /// The connection broke after the request was written: whether the node executed it is unknown.
  connection_lost,
  /// The request's deadline passed before the node replied (the reply, if it comes, is discarded).
  master_timeout,
  /// Establishing the TCP connection or the handshake took longer than the connect timeout.
  connect_timeout,
  /// The node rejected the credentials (`WRONGPASS`, `NOAUTH`, or a disabled ACL user).
  auth_failed,
  /// The handshake failed for another reason (`SELECT` of an absent database, unexpected reply).
  handshake_failed,
  /// The node answered with an error reply; the server's text is in the response.
  server_error,
  /// The reply has a type or shape the operation cannot use.
  unexpected_reply,

  // Caller input
  /// A configuration value is out of range or inconsistent.
  invalid_config,
  /// An argument is invalid (for example an empty request or resource name, or a ttl too short).
  invalid_argument,

  // Locks
  /// The lock was not acquired: at least one master holds it for someone else (contention).
  not_acquired,
  /// Too few masters answered (down, timed out, or replying errors) for a quorum to be possible.
  quorum_unavailable,
  /// A quorum was reached, but it took so long that no validity was left; nothing is held.
  validity_expired,
  /// The lock is no longer ours on a majority of masters (it expired or changed hands).
  not_owner,
  /// The operation needs a held lock, and this handle holds none.
  not_locked,
  /// The lock was lost while held: it could not be extended before its validity ran out (the
  /// lock's `loss_reason()` says why).
  lock_lost,
  /// Auto-extension stopped at its cap (`keep_alive_options::max_extensions` or `max_hold`).
  extension_limit,

  // One node connection (appended, so that the values above stay as they were)
  /// A written request stayed unanswered well past its deadline (see
  /// `connection_config::stall_grace`): the connection was closed and is reconnecting. Requests
  /// that were written on it complete with `connection_lost`; this code is the connection's
  /// `last_error`.
  connection_stalled,
  /// The connection cannot carry this request: a pub/sub subscription on a connection that fell
  /// back to RESP2 (the node refused `HELLO 3`). Nothing was sent.
  not_supported,

  // readiness (appended)
  /// `client::async_wait_ready` gave up: its timeout passed before a quorum of masters was
  /// connected (the report says what each of the others last did).
  not_ready,
  // TLS (appended). Each is a connection's `last_error` after a failed TLS connect, and
  // the connection's `last_error_text` holds OpenSSL's words (the verify result or the alert).
  /// TLS was used, but the master answered in plain RESP: the port does not speak TLS.
  tls_not_offered,
  /// A plain connection was refused at the handshake the way a TLS port refuses one (it reset the
  /// connection or sent a TLS record): the master expects TLS (`rediss://`, `tls.enabled`).
  tls_expected,
  /// The master's certificate does not chain to a trusted CA (`tls.ca_file`, `tls.ca_dir`, or the
  /// system store), or is self-signed.
  tls_certificate_untrusted,
  /// The master's certificate (or one in its chain) has expired or is not valid yet.
  tls_certificate_expired,
  /// The master's certificate is not for the expected name (`tls.server_name`, else the host).
  tls_name_mismatch,
  /// The master refused the TLS session with an alert, e.g. it requires a client certificate
  /// (`tls.cert_file`) or does not trust the one sent.
  tls_refused,
  /// The TLS handshake failed for another reason (no common protocol version or cipher, a
  /// truncated handshake).
  tls_handshake_failed,

  // Scripts (appended)
  /// The master answered `SCRIPT LOAD` with a digest other than the SHA-1 of the script sent: its
  /// scripts cannot be trusted to be ours (a proxy that rewrites them, say), so the lock client
  /// stops using that master.
  script_mismatch,
  /// The master restarted (and may have forgotten its keys) or its wall clock jumped forward, less
  /// than the hazard guard's quarantine ago: its grants and extensions do not count until then
  /// (`client::hazards()` says until when and why).
  master_quarantined,
  /// The master refused `INFO`, which the restart guard (`restart_detection::run_id`) needs: its
  /// votes do not count. Allow `INFO` to the client's ACL user, or choose
  /// `restart_detection::reconnect` (or `off`) for such masters.
  restart_guard_refused,

  // Cluster masters (appended)
  /// A request names keys in more than one hash slot of a cluster master (`async_lock_all` over
  /// resources without a common hash tag, say): no node of the cluster can run it.
  cross_slot,
  /// A request cut by slot over a cluster master (`async_lock_all`) ended differently on its
  /// parts, some set and some not: the cluster's vote is an unknown outcome, and what was set is
  /// released.
  partial_outcome,
};

/// Coarse groups of errors, for tests such as `ec == redlock::condition::timeout`.
enum class condition {
  /// A deadline passed (a node's request or the connect).
  timeout = 1,
  /// A node failed or could not be reached: the request's outcome on that node is not a clean answer.
  master_failure,
  /// The input (configuration or argument) is invalid; retrying cannot help.
  invalid_input,
  /// Another client holds the lock.
  contention,
};

/// The enumerator's identifier: "protocol_error", "master_timeout", "not_owner", ... (the CLI's
/// JSON uses these names); "unknown" for a value that is not an enumerator. For the message, use
/// `make_error_code(e).message()`.
REDLOCK_API std::string_view to_string(error e) noexcept;

/// The category of `redlock::error` codes, named "redlock".
REDLOCK_API const boost::system::error_category& error_category() noexcept;
/// The category of `redlock::condition`, named "redlock.condition".
REDLOCK_API const boost::system::error_category& condition_category() noexcept;

/// `e` as an error code of `error_category()`; found by argument-dependent lookup, so that an
/// `error` converts implicitly wherever a `boost::system::error_code` is expected.
inline boost::system::error_code make_error_code(error e) noexcept { return {static_cast<int>(e), error_category()}; }
/// `c` as an error condition of `condition_category()`, for comparisons such as
/// `ec == condition::timeout` (also found by argument-dependent lookup).
inline boost::system::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

}  // namespace redlock

/// @cond
// Boost.System's opt-in: `error` converts to error_code, `condition` to error_condition.
template <>
struct boost::system::is_error_code_enum<redlock::error> : std::true_type {};
template <>
struct boost::system::is_error_condition_enum<redlock::condition> : std::true_type {};
/// @endcond
