// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The quorum collector: counts the masters' votes and says as soon as the outcome is known.

#include <cstddef>

namespace redlock::core {

/// Where a quorum vote stands.
enum class quorum_state {
  pending,     ///< neither outcome is certain yet
  reached,     ///< at least a majority said yes
  impossible,  ///< so many said no that a majority cannot say yes any more
};

/// Majority of `n` masters: `n / 2 + 1`.
constexpr std::size_t majority(std::size_t n) noexcept { return n / 2 + 1; }

/// The quorum of a counting semaphore with `permits` permits on `n` masters: the fewest masters q
/// such that any `permits + 1` holders, each on q masters, must share one (q·(P+1) > P·N), so that
/// no master admitting at most P holders lets P+1 be valid at once. Equals `majority(n)` for one
/// permit; equals `n` (no master may fail) once `permits >= n - 1`. See docs/safety.md,
/// "Counting semaphore".
constexpr std::size_t semaphore_quorum(std::size_t n, std::size_t permits) noexcept {
  return permits == 0 ? majority(n) : permits * n / (permits + 1) + 1;
}

/// Counts yes/no votes of `n` masters, of which `needed` must say yes (a majority unless told
/// otherwise). A vote is "no" for every answer that is not a yes (taken, error, timeout,
/// unreachable): for deciding, only whether enough can still say yes matters. Pure value type;
/// record each master once.
class quorum {
 public:
  /// `n` masters, a majority of which must say yes.
  explicit constexpr quorum(std::size_t n) noexcept : n_(n), needed_(majority(n)) {}
  /// `needed` is clamped to [majority(n), n]: fewer would not exclude anyone.
  constexpr quorum(std::size_t n, std::size_t needed) noexcept
      : n_(n), needed_(needed < majority(n) ? majority(n) : (needed > n ? n : needed)) {}

  /// Records one master's yes (it granted).
  constexpr void yes() noexcept { ++yes_; }
  /// Records one master's no (any answer that is not a yes).
  constexpr void no() noexcept { ++no_; }

  /// Number of masters voting (`n`).
  constexpr std::size_t size() const noexcept { return n_; }
  /// Yes votes required, in [majority(n), n].
  constexpr std::size_t needed() const noexcept { return needed_; }
  /// Yes votes recorded so far.
  constexpr std::size_t yes_votes() const noexcept { return yes_; }
  /// No votes recorded so far.
  constexpr std::size_t no_votes() const noexcept { return no_; }
  /// Masters that have not voted yet.
  constexpr std::size_t pending_votes() const noexcept { return n_ - yes_ - no_; }

  /// Reached as soon as `needed` said yes; impossible as soon as more than `n - needed` said
  /// no. Neither waits for the remaining (slow or dead) masters.
  constexpr quorum_state state() const noexcept {
    if (yes_ >= needed()) return quorum_state::reached;
    if (no_ > n_ - needed()) return quorum_state::impossible;
    return quorum_state::pending;
  }

 private:
  std::size_t n_;
  std::size_t needed_;
  std::size_t yes_ = 0;
  std::size_t no_ = 0;
};

}  // namespace redlock::core
