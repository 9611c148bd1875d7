// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Releases whose outcome on one master is unknown, kept to be sent again on the master's next
/// connection (sans-I/O: the caller passes the time). Used by the lock client, one per master.

#include <redlock/clock.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <utility>

namespace redlock::core {

/// @brief The releases of one master that may not have run: the master was down when they were
/// due, or the connection broke, stalled or timed out before they were answered.
///
/// Each entry is bounded by the life of the key it targets: past `until`, no key it could delete
/// can exist, and it is dropped. Sending a release late is safe because every acquisition round
/// signs its `SET` with a token of its own (see docs/design.md, "Releases in doubt").
class release_ledger {
 public:
  /// The clock of every time given and kept (monotonic).
  using clock = redlock::boot_clock;

  /// One release in doubt.
  struct entry {
    std::string payload;       ///< the release request, ready to send
    clock::duration lifetime;  ///< the longest a key of its token lives after a request ran (ttl + margin)
    clock::time_point until;   ///< no such key exists after this
  };

  /// @param cap most entries kept (the oldest go first once expired ones are gone).
  explicit release_ledger(std::size_t cap = 4096) : cap_(cap < 1 ? 1 : cap) {}

  /// Records `payload`, whose key lives at most `lifetime` from `now` (the last request that could
  /// set or extend it has run by now, or is still on a connection: see `connection_lost`), or
  /// until `until` when given (a release taken from here, sent, and left in doubt again: nothing
  /// has extended its key since). The same payload deferred twice in a row is kept once. Returns
  /// the entries dropped to make room.
  std::size_t defer(std::string_view payload, clock::duration lifetime, clock::time_point now,
                    clock::time_point until = clock::time_point::min()) {
    const auto bound = until == clock::time_point::min() ? now + lifetime : until;
    if (bound <= now) return 0;
    std::size_t dropped = 0;
    if (entries_.size() >= cap_) {
      // A full ledger is looked through only when an entry may have expired (`earliest_` is at or
      // before the earliest bound kept), and its oldest goes in constant time: a burst of releases
      // to a master that is down costs each one the same, however many are kept.
      const auto before = entries_.size();
      if (now >= earliest_) {
        std::erase_if(entries_, [&](const entry& e) { return e.until <= now; });
        earliest_ = clock::time_point::max();
        for (const auto& e : entries_) earliest_ = std::min(earliest_, e.until);
      }
      if (entries_.size() >= cap_) entries_.pop_front();
      dropped = before - entries_.size();
    }
    if (!entries_.empty() && entries_.back().payload == payload) {
      entries_.back().until = std::max(entries_.back().until, bound);
      return dropped;
    }
    entries_.push_back({std::string{payload}, lifetime, bound});
    earliest_ = std::min(earliest_, bound);
    return dropped;
  }

  /// The master's connection broke at `now`: requests still queued on it (a `SET`, an extension)
  /// could have run until then, so every key lives at most its lifetime from now.
  void connection_lost(clock::time_point now) {
    for (auto& e : entries_) e.until = std::max(e.until, now + e.lifetime);
  }

  /// The master's connection is up at `now`: hands over the entries still worth sending (in the
  /// order they were deferred) and forgets them all; `expired` gets how many were dropped instead.
  std::deque<entry> take(clock::time_point now, std::size_t& expired) {
    std::deque<entry> out;
    out.swap(entries_);
    earliest_ = clock::time_point::max();
    const auto before = out.size();
    std::erase_if(out, [&](const entry& e) { return e.until <= now; });
    expired = before - out.size();
    return out;
  }

  /// Whether no release is kept.
  bool empty() const noexcept { return entries_.empty(); }
  /// Releases kept (expired ones included until `take` or `defer` drops them).
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  std::deque<entry> entries_;
  std::size_t cap_;
  // At or before every entry's bound (bounds only move later once kept).
  clock::time_point earliest_ = clock::time_point::max();
};

}  // namespace redlock::core
