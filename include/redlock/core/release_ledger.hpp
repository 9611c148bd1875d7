// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Releases whose outcome on one master is unknown, kept to be sent again on the master's next
/// connection (sans-I/O: the caller passes the time). Used by the lock client, one per master.

#include <redlock/clock.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
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
    /// Gives way to the others when the ledger is full: a fair waiter's leaving of its queues. It
    /// frees a lock key only where a release handed the waiter one that it does not keep (a
    /// hand-over that raced its leaving); otherwise it frees queue places, which expire on their
    /// own (`fairness_options::entry_timeout`). A release's key is there whenever the release
    /// is, so releases are kept first.
    bool yields = false;
  };

  /// @param cap most entries kept (the oldest go first once expired ones are gone; of those, the
  /// ones that yield go before the others).
  explicit release_ledger(std::size_t cap = 4096) : cap_(cap < 1 ? 1 : cap) {}

  /// Records `payload`, whose key lives at most `lifetime` from `now` (the last request that could
  /// set or extend it has run by now, or is still on a connection: see `connection_lost`), or
  /// until `until` when given (a release taken from here, sent, and left in doubt again: nothing
  /// has extended its key since). `yields`: see `entry::yields`. The same payload deferred twice in
  /// a row (in its lane: releases, or entries that yield) is kept once. Returns how many entries
  /// were dropped: to make room, or this one, when it yields and finds no room.
  std::size_t defer(std::string_view payload, clock::duration lifetime, clock::time_point now,
                    clock::time_point until = clock::time_point::min(), bool yields = false) {
    const auto bound = until == clock::time_point::min() ? now + lifetime : until;
    if (bound <= now) return 0;
    auto& lane = lanes_[yields ? 1 : 0];
    if (!lane.empty() && lane.back().e.payload == payload) {
      lane.back().e.until = std::max(lane.back().e.until, bound);
      return 0;
    }
    std::size_t dropped = 0;
    if (size() >= cap_) {
      // A full ledger is looked through only when an entry may have expired (`earliest_` is at or
      // before the earliest bound kept), and its oldest goes in constant time: a burst of releases
      // to a master that is down costs each one the same, however many are kept.
      const auto before = size();
      if (now >= earliest_) {
        earliest_ = clock::time_point::max();
        for (auto& l : lanes_) {
          std::erase_if(l, [&](const kept& k) { return k.e.until <= now; });
          for (const auto& k : l) earliest_ = std::min(earliest_, k.e.until);
        }
      }
      if (size() >= cap_) {
        // The oldest that yields, if any; a yielding entry pushes out no other kind.
        if (!lanes_[1].empty()) {
          lanes_[1].pop_front();
        } else if (!yields) {
          lanes_[0].pop_front();
        }
      }
      dropped = before - size();
      if (size() >= cap_) return dropped + 1;  // a yielding entry, with no room left for it
    }
    lane.push_back({entry{std::string{payload}, lifetime, bound, yields}, next_++});
    earliest_ = std::min(earliest_, bound);
    return dropped;
  }

  /// The master's connection broke at `now`: requests still queued on it (a `SET`, an extension)
  /// could have run until then, so every key lives at most its lifetime from now.
  void connection_lost(clock::time_point now) {
    for (auto& l : lanes_)
      for (auto& k : l) k.e.until = std::max(k.e.until, now + k.e.lifetime);
  }

  /// The master's connection is up at `now`: hands over the entries still worth sending (in the
  /// order they were deferred) and forgets them all; `expired` gets how many were dropped instead.
  std::deque<entry> take(clock::time_point now, std::size_t& expired) {
    std::deque<entry> out;
    expired = 0;
    auto& a = lanes_[0];
    auto& b = lanes_[1];
    std::size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
      auto& k = (j == b.size() || (i < a.size() && a[i].seq < b[j].seq)) ? a[i++] : b[j++];
      if (k.e.until <= now) {
        ++expired;
      } else {
        out.push_back(std::move(k.e));
      }
    }
    a.clear();
    b.clear();
    earliest_ = clock::time_point::max();
    return out;
  }

  /// Whether no release is kept.
  bool empty() const noexcept { return size() == 0; }
  /// Releases kept (expired ones included until `take` or `defer` drops them).
  std::size_t size() const noexcept { return lanes_[0].size() + lanes_[1].size(); }

 private:
  struct kept {
    entry e;
    std::uint64_t seq;  // the order of deferral, across both lanes
  };
  std::deque<kept> lanes_[2];  // [0]: the releases; [1]: the entries that yield
  std::size_t cap_;
  std::uint64_t next_ = 0;
  // At or before every entry's bound (bounds only move later once kept).
  clock::time_point earliest_ = clock::time_point::max();
};

}  // namespace redlock::core
