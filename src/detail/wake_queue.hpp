// SPDX-License-Identifier: BSL-1.0
#pragma once
// The keep-alive queue (private to src/, no I/O): when each watched lock wants to be woken, behind
// a single timer. A min-heap of wake-ups with one live entry per item (the time the item records
// as `scheduled`); an entry whose time no longer matches is stale and skipped. It says when the
// one timer must fire; the caller owns the timer.

#include <redlock/clock.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace redlock::detail {

/// `T` has a member `redlock::boot_clock::time_point scheduled`, initially `max()`, which
/// only this queue writes, and is owned by a `std::shared_ptr` (`shared_from_this()`).
template <class T>
class wake_queue {
 public:
  using time_point = redlock::boot_clock::time_point;
  static constexpr time_point never = time_point::max();

  /// Moves `t`'s wake-up to `at` (`never`: none). Returns when the timer must now fire
  /// (`never`: cancel it), or nothing when it stays as it is.
  std::optional<time_point> schedule(T& t, time_point at) {
    if (at == t.scheduled) return std::nullopt;
    if (at != never) add_entry(t, at);
    if (t.scheduled == never) ++live_;
    if (at == never) --live_;
    t.scheduled = at;
    if (at == never) {
      if (live_ > 0) return std::nullopt;
      // Nothing left to wake: no timer stays armed behind the last item.
      clear();
      armed_ = never;
      return never;
    }
    if (heap_.size() > compact_at_) drop_stale();
    // The earliest entry, not `at`: after a `disarm`, an item scheduled earlier may be the one due.
    // Otherwise the timer is never later than an entry, and this is `at` or nothing.
    const auto earliest = heap_.front().at;
    if (earliest >= armed_) return std::nullopt;
    armed_ = earliest;
    return earliest;
  }

  /// The timer fired at `now`: calls `wake(T&)` for the items due, earliest first and at most
  /// `limit` of them (which may schedule again: that does not ask for the timer, this call's
  /// result says when it fires), and returns when the timer must fire next (`never`: not at all;
  /// `now` or earlier when items due were left for the next pass).
  template <class Wake>
  time_point fired(time_point now, Wake&& wake, std::size_t limit = static_cast<std::size_t>(-1)) {
    for (std::size_t woken = 0; woken < limit && !heap_.empty() && heap_.front().at <= now;) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      auto e = std::move(heap_.back());
      heap_.pop_back();
      auto t = e.item.lock();
      if (!t || t->scheduled != e.at) continue;  // stale
      t->scheduled = never;
      --live_;
      ++woken;
      wake(*t);
    }
    if (live_ == 0) clear();
    // A stale entry at the front may make the timer fire early; it is skipped then.
    armed_ = heap_.empty() ? never : heap_.front().at;
    return armed_;
  }

  /// The caller's timer could not be armed (its wait threw): the queue believes it unarmed, so
  /// that the next `schedule` asks for it again instead of trusting a wait that does not exist.
  void disarm() noexcept { armed_ = never; }
  /// When the timer must fire for the wake-ups held (`never`: none), which the queue then believes
  /// armed: what to arm after a pass of the timer, also when an arm in it failed (`disarm`), where
  /// `armed()` would say `never` with wake-ups still due.
  time_point rearm() noexcept {
    if (live_ == 0) clear();
    armed_ = heap_.empty() ? never : heap_.front().at;
    return armed_;
  }

  /// When the timer must fire now, after every `schedule` and `fired` so far (`never`: not at all).
  time_point armed() const noexcept { return armed_; }
  /// Items with a wake-up due.
  std::size_t live() const noexcept { return live_; }
  /// Entries held, stale ones included.
  std::size_t entries() const noexcept { return heap_.size(); }

 private:
  struct entry {
    time_point at;
    std::weak_ptr<T> item;
  };
  static bool later(const entry& a, const entry& b) noexcept { return a.at > b.at; }

  // A new entry for `t` at `at`. When its allocation fails, `t`'s live entry (if it has one) is
  // moved to `at` in place, which needs no memory: `t` is never left with a wake-up later than the
  // one it asked for (a lock whose deadline was just shortened would be woken past it). Without a
  // live entry the failure is the caller's: `t` is left unscheduled, as it was.
  void add_entry(T& t, time_point at) {
    auto item = std::static_pointer_cast<T>(t.shared_from_this());
    try {
      heap_.push_back({at, std::move(item)});
    } catch (...) {
      if (t.scheduled == never || !move_entry(t, at)) throw;
      return;
    }
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  bool move_entry(const T& t, time_point at) noexcept {
    for (auto& e : heap_) {
      if (e.at == t.scheduled && e.item.lock().get() == &t) {
        e.at = at;
        std::make_heap(heap_.begin(), heap_.end(), later);
        return true;
      }
    }
    return false;
  }

  // Every move of a wake-up leaves its old entry behind (a kept-alive lock moves to its loss point
  // while it extends, then back to its next renewal), stale until its time comes. Dropped once
  // they outnumber half the live ones, so that the heap holds about 1.5 entries per item rather
  // than one per move over the longest ttl; the limit grows with what is left, so duplicates that
  // survive (an item moved away and back) cannot make every call scan.
  void drop_stale() noexcept {
    std::erase_if(heap_, [](const entry& e) {
      const auto t = e.item.lock();
      return !t || t->scheduled != e.at;
    });
    std::make_heap(heap_.begin(), heap_.end(), later);
    compact_at_ = heap_.size() + std::max(heap_.size(), live_) / 2 + min_compact;
  }
  void clear() noexcept {
    heap_.clear();
    compact_at_ = min_compact;
  }

  static constexpr std::size_t min_compact = 64;
  std::vector<entry> heap_;
  std::size_t compact_at_ = min_compact;
  std::size_t live_ = 0;
  time_point armed_ = never;  // when the caller's timer fires
};

}  // namespace redlock::detail
