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

/// Counts yes/no votes of `n` masters. A vote is "no" for every answer that is not a yes (taken,
/// error, timeout, unreachable): for deciding, only whether a majority can still say yes matters.
/// Pure value type; record each master once.
class quorum {
 public:
  explicit constexpr quorum(std::size_t n) noexcept : n_(n) {}

  constexpr void yes() noexcept { ++yes_; }
  constexpr void no() noexcept { ++no_; }

  constexpr std::size_t size() const noexcept { return n_; }
  constexpr std::size_t needed() const noexcept { return majority(n_); }
  constexpr std::size_t yes_votes() const noexcept { return yes_; }
  constexpr std::size_t no_votes() const noexcept { return no_; }
  constexpr std::size_t pending_votes() const noexcept { return n_ - yes_ - no_; }

  /// Reached as soon as a majority said yes; impossible as soon as more than `n - majority` said
  /// no. Neither waits for the remaining (slow or dead) masters.
  constexpr quorum_state state() const noexcept {
    if (yes_ >= needed()) return quorum_state::reached;
    if (no_ > n_ - needed()) return quorum_state::impossible;
    return quorum_state::pending;
  }

 private:
  std::size_t n_;
  std::size_t yes_ = 0;
  std::size_t no_ = 0;
};

}  // namespace redlock::core
