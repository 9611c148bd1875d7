// SPDX-License-Identifier: BSL-1.0
// The names of the public enumerations, as the docs and the CLI's JSON spell them. Each switch
// lists every enumerator without a default, so that -Wswitch (an error with REDLOCK_WERROR)
// catches an enumerator added without a name.

#include <redlock/error.hpp>
#include <redlock/lock_options.hpp>
#include <redlock/master_result.hpp>

namespace redlock {

std::string_view to_string(lock_kind k) noexcept {
  switch (k) {
    case lock_kind::exclusive:
      return "exclusive";
    case lock_kind::read:
      return "read";
    case lock_kind::write:
      return "write";
    case lock_kind::semaphore:
      return "semaphore";
  }
  return "unknown";
}

std::string_view to_string(master_status s) noexcept {
  switch (s) {
    case master_status::pending:
      return "pending";
    case master_status::granted:
      return "granted";
    case master_status::taken:
      return "taken";
    case master_status::server_error:
      return "server_error";
    case master_status::timeout:
      return "timeout";
    case master_status::unreachable:
      return "unreachable";
    case master_status::failed:
      return "failed";
    case master_status::queued:
      return "queued";
  }
  return "unknown";
}

std::string_view to_string(error e) noexcept {
  switch (e) {
    case error::protocol_error:
      return "protocol_error";
    case error::nesting_too_deep:
      return "nesting_too_deep";
    case error::reply_too_large:
      return "reply_too_large";
    case error::not_connected:
      return "not_connected";
    case error::connection_lost:
      return "connection_lost";
    case error::master_timeout:
      return "master_timeout";
    case error::connect_timeout:
      return "connect_timeout";
    case error::auth_failed:
      return "auth_failed";
    case error::handshake_failed:
      return "handshake_failed";
    case error::server_error:
      return "server_error";
    case error::unexpected_reply:
      return "unexpected_reply";
    case error::invalid_config:
      return "invalid_config";
    case error::invalid_argument:
      return "invalid_argument";
    case error::not_acquired:
      return "not_acquired";
    case error::quorum_unavailable:
      return "quorum_unavailable";
    case error::validity_expired:
      return "validity_expired";
    case error::not_owner:
      return "not_owner";
    case error::not_locked:
      return "not_locked";
    case error::lock_lost:
      return "lock_lost";
    case error::extension_limit:
      return "extension_limit";
    case error::connection_stalled:
      return "connection_stalled";
    case error::not_supported:
      return "not_supported";
    case error::not_ready:
      return "not_ready";
    // TLS
    case error::tls_not_offered:
      return "tls_not_offered";
    case error::tls_expected:
      return "tls_expected";
    case error::tls_certificate_untrusted:
      return "tls_certificate_untrusted";
    case error::tls_certificate_expired:
      return "tls_certificate_expired";
    case error::tls_name_mismatch:
      return "tls_name_mismatch";
    case error::tls_refused:
      return "tls_refused";
    case error::tls_handshake_failed:
      return "tls_handshake_failed";
    case error::script_mismatch:
      return "script_mismatch";
    case error::master_quarantined:
      return "master_quarantined";
    case error::restart_guard_refused:
      return "restart_guard_refused";
    case error::cross_slot:
      return "cross_slot";
    case error::partial_outcome:
      return "partial_outcome";
  }
  return "unknown";
}

}  // namespace redlock
