// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The kinds of lock beyond plain Redlock, and how to ask for them (docs/api.md, "Lock kinds";
/// the safety argument of each is in docs/safety.md, "Lock kinds").

#include <redlock/export.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace redlock {

/// What a lock excludes. Every kind runs on the same N masters, with the same validity, release,
/// extension and keep-alive as the plain lock; only the script on each master and the quorum differ.
enum class lock_kind : std::uint8_t {
  /// One holder at a time: plain Redlock (`SET NX PX`), interoperable with other Redlock clients.
  exclusive,
  /// Reader of a read/write lock: shared with other readers, excluded by a writer (and by an
  /// exclusive lock of any Redlock client on the same name).
  read,
  /// Writer of a read/write lock: excludes readers and writers. A waiting writer stops new readers
  /// from entering, so a stream of readers cannot starve it.
  write,
  /// Counting semaphore: at most `lock_options::permits` holders at any moment. Needs more than a
  /// majority: `semaphore_quorum(N, permits)` masters (docs/safety.md, "Counting semaphore").
  semaphore,
};

/// "exclusive", "read", "write", "semaphore".
REDLOCK_API std::string_view to_string(lock_kind k) noexcept;

/// How `client::async_lock` (with options) locks a resource. The default is the plain lock.
struct lock_options {
  /// What the lock excludes: one holder (the default), readers/writer, or up to `permits` holders.
  lock_kind kind = lock_kind::exclusive;
  /// `semaphore` only: how many holders at most (at least 1). Every client of a semaphore must use
  /// the same number; a master that holds it with another number answers an error.
  std::size_t permits = 1;
  /// `exclusive` only: the lock carries a fencing token (`lock::fence()`), a number that strictly
  /// increases from one holder of the resource to the next, for a guarded resource to reject a
  /// holder that paused past its validity (docs/safety.md, "Fencing tokens"). Costs a second round
  /// trip when the masters' counters disagree (after a master was down or a failed attempt). Fair
  /// as the plain lock (`client_config::fairness`): each hand-over grants the next fence.
  bool fence = false;
  /// `exclusive` only, opt-in reentrancy: when not empty, locks taken with the same owner share
  /// the resource. A second `async_lock` by the same owner succeeds at once while the first is
  /// held; each acquisition is its own handle with its own release, and the resource stays locked
  /// until the last of them is released (or expires). The owner is the lock's identity on the
  /// masters, so it must be unique to the logical owner (say, "<host>/<pid>/<task>") and as secret
  /// as a token: whoever knows it can enter. 1 to 256 bytes, no spaces or control characters, not
  /// beginning with `redlock:` (the library's own values, such as the readers' marker).
  std::string owner;
};

}  // namespace redlock
