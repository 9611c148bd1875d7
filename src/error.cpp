// SPDX-License-Identifier: BSL-1.0
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>

#include <string>

namespace redlock {
namespace {

class error_category_impl final : public boost::system::error_category {
 public:
  // A fixed id makes categories compare equal across shared-library boundaries.
  constexpr error_category_impl() noexcept : error_category(0x8a3c'2f51'9d07'e4b6ULL) {}

  const char* name() const noexcept override { return "redlock"; }

  std::string message(int ev) const override {
    switch (static_cast<error>(ev)) {
      case error::protocol_error:
        return "the node sent bytes that are not valid RESP";
      case error::nesting_too_deep:
        return "the reply nests aggregates deeper than the parser allows";
      case error::reply_too_large:
        return "the reply declares a length, element count or line longer than the parser allows";
      case error::not_connected:
        return "the connection to the node is down; the request was not sent";
      case error::connection_lost:
        return "the connection broke after the request was sent; its outcome is unknown";
      case error::master_timeout:
        return "the node did not reply before the request's deadline";
      case error::connect_timeout:
        return "connecting to the node took longer than the connect timeout";
      case error::auth_failed:
        return "the node rejected the credentials";
      case error::handshake_failed:
        return "the connection handshake with the node failed";
      case error::server_error:
        return "the node replied with an error";
      case error::unexpected_reply:
        return "the node's reply has an unexpected type or shape";
      case error::invalid_config:
        return "invalid configuration";
      case error::invalid_argument:
        return "invalid argument";
      case error::not_acquired:
        return "the lock is held by another client";
      case error::quorum_unavailable:
        return "too few masters answered for a quorum";
      case error::validity_expired:
        return "the quorum was reached too late: no validity was left";
      case error::not_owner:
        return "the lock is no longer ours on a majority of masters";
      case error::not_locked:
        return "the handle holds no lock";
      case error::lock_lost:
        return "the lock was lost before the work finished";
      case error::extension_limit:
        return "the lock reached its extension cap";
      case error::connection_stalled:
        return "the node left a request unanswered well past its deadline: the connection was replaced";
      case error::not_supported:
        return "the connection cannot carry this request (a subscription needs RESP3); it was not sent";
      case error::not_ready:
        return "a quorum of masters was not connected before the timeout";
      // TLS
      case error::tls_not_offered:
        return "the master does not speak TLS on this port (it answered in plain RESP)";
      case error::tls_expected:
        return "the master expects TLS on this port (it refused a plain connection)";
      case error::tls_certificate_untrusted:
        return "the master's TLS certificate is not trusted: it failed verification against the trusted CAs";
      case error::tls_certificate_expired:
        return "the master's TLS certificate has expired or is not valid yet";
      case error::tls_name_mismatch:
        return "the master's TLS certificate does not match the expected server name";
      case error::tls_refused:
        return "the master refused the TLS session (e.g. a client certificate it requires or rejects)";
      case error::tls_handshake_failed:
        return "the TLS handshake with the master failed";
      case error::script_mismatch:
        return "the master's digest of a lock script is not the script's SHA-1: the master is not used";
      case error::master_quarantined:
        return "the master restarted or its clock jumped lately: its votes do not count until its quarantine ends";
      case error::restart_guard_refused:
        return "the master refused INFO, which the restart guard needs: its votes do not count (allow INFO, or "
               "choose restart_detection::reconnect or off)";
      case error::partial_outcome:
        return "the parts of a request over several hash slots of a cluster master ended differently (some set, "
               "some not): the master's vote counts as unknown, and what was set is released";
      case error::cross_slot:
        return "the request names keys in more than one hash slot of a cluster master (give the resources a common "
               "hash tag, e.g. '{acct}:42' and '{acct}:99')";
    }
    return "unknown redlock error " + std::to_string(ev);
  }

  boost::system::error_condition default_error_condition(int ev) const noexcept override {
    switch (static_cast<error>(ev)) {
      case error::master_timeout:
      case error::connect_timeout:
        return make_error_condition(condition::timeout);
      case error::protocol_error:
      case error::nesting_too_deep:
      case error::reply_too_large:
      case error::not_connected:
      case error::connection_lost:
      case error::auth_failed:
      case error::handshake_failed:
      case error::server_error:
      case error::unexpected_reply:
      case error::quorum_unavailable:
      case error::connection_stalled:
      // TLS
      case error::tls_not_offered:
      case error::tls_expected:
      case error::tls_certificate_untrusted:
      case error::tls_certificate_expired:
      case error::tls_name_mismatch:
      case error::tls_refused:
      case error::tls_handshake_failed:
      case error::script_mismatch:
      case error::master_quarantined:
      case error::restart_guard_refused:
      case error::partial_outcome:
        return make_error_condition(condition::master_failure);
      case error::invalid_config:
      case error::invalid_argument:
      case error::not_locked:
      case error::cross_slot:
        return make_error_condition(condition::invalid_input);
      case error::not_acquired:
      case error::not_owner:
        return make_error_condition(condition::contention);
      case error::lock_lost:
      case error::extension_limit:
      case error::not_supported:
        return {ev, *this};
      case error::validity_expired:
      case error::not_ready:
        return make_error_condition(condition::timeout);
    }
    return {ev, *this};
  }
};

class condition_category_impl final : public boost::system::error_category {
 public:
  constexpr condition_category_impl() noexcept : error_category(0x8a3c'2f51'9d07'e4b7ULL) {}
  const char* name() const noexcept override { return "redlock.condition"; }
  std::string message(int ev) const override {
    switch (static_cast<condition>(ev)) {
      case condition::timeout:
        return "a deadline passed";
      case condition::master_failure:
        return "a node failed or could not be reached";
      case condition::invalid_input:
        return "invalid input";
      case condition::contention:
        return "another client holds the lock";
    }
    return "unknown redlock condition " + std::to_string(ev);
  }
  bool equivalent(const boost::system::error_code& code, int cond) const noexcept override {
    if (code.category() == redlock::error_category()) {
      return default_error_condition_of(code) == cond;
    }
    // Asio's own timeouts and socket failures belong to the same coarse groups.
    switch (static_cast<condition>(cond)) {
      case condition::timeout:
        return code == boost::asio::error::timed_out;
      case condition::master_failure:
        return code == boost::asio::error::connection_refused || code == boost::asio::error::connection_reset ||
               code == boost::asio::error::eof || code == boost::asio::error::broken_pipe ||
               code == boost::asio::error::host_unreachable || code == boost::asio::error::network_unreachable;
      case condition::invalid_input:
      case condition::contention:
        return false;
    }
    return false;
  }

 private:
  static int default_error_condition_of(const boost::system::error_code& code) noexcept {
    auto c = code.category().default_error_condition(code.value());
    return c.category() == redlock::condition_category() ? c.value() : 0;
  }
};

}  // namespace

const boost::system::error_category& error_category() noexcept {
  static const error_category_impl instance;
  return instance;
}

const boost::system::error_category& condition_category() noexcept {
  static const condition_category_impl instance;
  return instance;
}

}  // namespace redlock
