// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The events of one held lock waiting for their reader, as a sans-I/O bounded queue: what is kept
/// when the reader is slow, and what a wait gets.

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

namespace redlock::core {

/// @brief A bounded queue of events ending with at most one final event.
///
/// `Event` has `bool is_final() const` and a `std::size_t missed` member. When the queue is full,
/// the oldest event goes, and the event after it counts it in `missed` (with those it had counted
/// itself): a slow reader learns how many it missed, and memory stays bounded. A final event is
/// never dropped (the queue only drops the oldest, and nothing is added after a final event) and
/// stays once read: every later `next()` returns it again.
template <class Event>
class event_queue {
 public:
  /// @param cap most events kept (at least 2: room for a final event behind another).
  explicit event_queue(std::size_t cap = 16) : cap_(cap < 2 ? 2 : cap) {}

  /// Adds `e`; ignored after a final event. Returns how many events were dropped for room (0 or 1).
  std::size_t push(Event e) {
    if (closed_) return 0;
    std::size_t dropped = 0;
    if (events_.size() >= cap_) {
      const auto gone = events_.front().missed + 1;
      events_.pop_front();
      if (events_.empty()) {
        e.missed += gone;
      } else {
        events_.front().missed += gone;
      }
      dropped = 1;
    }
    closed_ = e.is_final();
    events_.push_back(std::move(e));
    return dropped;
  }

  /// The next event for a reader: taken out of the queue, but for a final event, which is copied
  /// and stays. Empty when nothing is queued.
  std::optional<Event> next() {
    if (events_.empty()) return std::nullopt;
    if (events_.front().is_final()) {
      Event copy = events_.front();
      copy.missed = 0;  // counted for the first reader only
      std::swap(copy, events_.front());
      return copy;
    }
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

  /// No event waiting.
  bool empty() const noexcept { return events_.empty(); }
  /// Events waiting (at most the queue's capacity, plus a final one).
  std::size_t size() const noexcept { return events_.size(); }
  /// True once a final event was queued: nothing more can be added.
  bool closed() const noexcept { return closed_; }

 private:
  std::deque<Event> events_;
  std::size_t cap_;
  bool closed_ = false;
};

}  // namespace redlock::core
