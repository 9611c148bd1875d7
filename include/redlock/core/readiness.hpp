// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Which failures no retry can mend, and whether a quorum of masters is (or can still become)
/// usable: the decisions behind `client::async_wait_ready` and behind an `async_lock` that stops
/// retrying early. Pure: the shell reports connects and failures, these classes decide.

#include <redlock/core/compact_results.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/error.hpp>
#include <redlock/master_result.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <vector>

namespace redlock::core {

/// Whether a connection failure is one that no retry can mend without a change on the caller's or
/// the operator's side: the node refused the credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`), the
/// configuration is unusable, or the host name does not exist (the resolver's "no such name", not
/// its temporary failure). Refused connections, timeouts, resets, a handshake refused for another
/// reason (a server still `LOADING`, say) and temporary resolver failures may pass: not hopeless.
/// TLS: a certificate that is untrusted, expired or for another name, and TLS spoken to a plain
/// port or plain to a TLS port, are configuration on one side or the other: hopeless. A refused
/// session (`tls_refused`, partly inferred from a reset) and other handshake failures are not.
/// A master whose script digests are not ours (`script_mismatch`) is not used again: hopeless.
inline bool is_hopeless(const boost::system::error_code& ec) noexcept {
  return ec == error::auth_failed || ec == error::invalid_config || ec == boost::asio::error::host_not_found ||
         ec == error::tls_certificate_untrusted || ec == error::tls_certificate_expired ||
         ec == error::tls_name_mismatch || ec == error::tls_not_offered || ec == error::tls_expected ||
         ec == error::script_mismatch;
}

/// After a round that failed for want of a quorum (`round` holds each master's answer), whether a
/// later round could still reach one: false when the masters found unreachable for a hopeless
/// cause (`master_result::error`) leave fewer than `needed` others, so that even if every other
/// master granted, the quorum would be missed.
template <class Round = std::vector<master_result>>
bool quorum_possible(const Round& round, std::size_t needed) noexcept {
  std::size_t hopeless = 0;
  for (std::size_t i = 0; i < round.size(); ++i) {
    if (status_at(round, i) == master_status::unreachable && is_hopeless(error_at(round, i))) ++hopeless;
  }
  return round.size() - hopeless >= needed;
}

/// The masters' connections as the client last heard of them: which are up (connected and
/// handshaken), and why each of the others last failed.
class readiness {
 public:
  /// `masters` masters, of which `needed` must be up (0: a majority).
  explicit readiness(std::size_t masters = 0, std::size_t needed = 0)
      : needed_(needed ? needed : majority(masters)), up_(masters, false), causes_(masters) {}

  /// Master `i`'s connection came up: its last cause is forgotten.
  void up(std::size_t i) noexcept {
    if (i >= up_.size()) return;
    up_[i] = true;
    causes_[i].clear();
  }
  /// Master `i`'s connection attempt failed, or its live connection broke, with `cause`.
  void failed(std::size_t i, boost::system::error_code cause) noexcept {
    if (i >= up_.size()) return;
    up_[i] = false;
    causes_[i] = cause;
  }

  /// Masters in all.
  std::size_t size() const noexcept { return up_.size(); }
  /// Masters that must be up for a quorum.
  std::size_t needed() const noexcept { return needed_; }
  /// Master `i` is connected and handshaken.
  bool is_up(std::size_t i) const noexcept { return i < up_.size() && up_[i]; }
  /// Why master `i` last failed (empty while up, or before its first attempt ended).
  boost::system::error_code cause(std::size_t i) const noexcept {
    return i < causes_.size() ? causes_[i] : boost::system::error_code{};
  }
  /// Masters up now.
  std::size_t up_count() const noexcept {
    std::size_t n = 0;
    for (const bool u : up_) n += u ? 1 : 0;
    return n;
  }
  /// Masters down whose last failure is hopeless (`is_hopeless`).
  std::size_t hopeless_count() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < up_.size(); ++i) n += !up_[i] && is_hopeless(causes_[i]) ? 1 : 0;
    return n;
  }
  /// A quorum of masters is up.
  bool ready() const noexcept { return up_count() >= needed_; }
  /// Not ready, and it cannot become ready without a change of configuration: too many masters
  /// failed for hopeless causes. (Masters that failed for other causes may still come up.)
  bool impossible() const noexcept { return !ready() && size() - hopeless_count() < needed_; }

 private:
  std::size_t needed_;
  std::vector<bool> up_;
  std::vector<boost::system::error_code> causes_;
};

}  // namespace redlock::core
