// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Which masters a lock's releases go to, and which lost releases are worth sending again: the
/// rules behind every release the client sends (docs/design.md, "Releases in doubt"). Pure.

#include <redlock/core/compact_results.hpp>
#include <redlock/error.hpp>
#include <redlock/master_result.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace redlock::core {

/// Whether a round's acquire request may have set our key on a master that answered `s`: granted,
/// timed out, failed, or not answered yet. Not where it answered "taken" or "queued" or an error
/// reply (the command did not set the key, and no other request carries the round's token), nor
/// where it was refused before it left (`unreachable`). A failed or cancelled round's release goes
/// only to the masters where this holds.
constexpr bool may_have_set(master_status s) noexcept {
  return !(s == master_status::taken || s == master_status::queued || s == master_status::server_error ||
           s == master_status::unreachable);
}

/// Whether any master of `round` may hold a key of it (so that its release is worth encoding).
/// (`Round`: a `std::vector<master_result>` or a `compact_results`.)
template <class Round = std::vector<master_result>>
bool any_may_have_set(const Round& round, std::size_t masters) noexcept {
  for (std::size_t i = 0; i < masters; ++i) {
    if (i >= round.size() || may_have_set(status_at(round, i))) return true;
  }
  return false;
}

/// Whether a release that completed with `ec` may not have run on its master: any failure but an
/// answer, an error reply (the script did not run) or the client closing (`operation_aborted`).
/// Such a release is sent again on the master's next connection while a key could still be there.
inline bool release_in_doubt(const boost::system::error_code& ec) noexcept {
  return ec && ec != error::server_error && ec != boost::asio::error::operation_aborted;
}

/// @brief Where a held lock's key can be, fixed by the round that granted it: every master but
/// those whose answer to that round proves our key was not set there (see `may_have_set`). A
/// release of the held lock still goes to every master, but one lost where no key can be is not
/// worth sending again.
class key_holders {
 public:
  /// The granting round's answers. `offers`: the acquisition queued fairly, so a master that
  /// answered "taken" or "queued" may still have been handed the key, with the lock's token, by
  /// a holder's release after the answer (docs/design.md, "Fair hand-over").
  template <class Round = std::vector<master_result>>
  void granted(const Round& round, bool offers = false) {
    ruled_out_.clear();
    for (std::size_t i = 0; i < round.size(); ++i) {
      const auto s = status_at(round, i);
      if (offers && (s == master_status::taken || s == master_status::queued)) continue;
      if (!may_have_set(s)) ruled_out_.push_back(static_cast<std::uint16_t>(i));
    }
  }
  /// Whether master `i` may hold a key of the lock (true for a master the round did not cover).
  bool may_hold(std::size_t i) const noexcept {
    return std::find(ruled_out_.begin(), ruled_out_.end(), i) == ruled_out_.end();
  }
  /// Whether a release that completed with `ec` on master `i` must be sent again.
  bool resend(std::size_t i, const boost::system::error_code& ec) const noexcept {
    return release_in_doubt(ec) && may_hold(i);
  }

 private:
  // The masters whose answer proves no key was set there (at most 65535 masters: client_config's
  // check), in master order. Usually none: a granted lock keeps no storage for this.
  std::vector<std::uint16_t> ruled_out_;
};

}  // namespace redlock::core
